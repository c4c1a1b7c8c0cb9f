"""Every op and pullback of the cuDNN backend against the reference backend, on a GPU.

Each test draws random inputs, runs the public op on CuPy arrays and on numpy copies, and compares
results and gradients with a relative error per dtype (max |gpu - reference| / max |reference|).
Outputs are poisoned (every pool allocation starts as NaN), pullbacks run twice and must agree
bitwise (convolution and pooling under ``settings(deterministic=True)``, the only way cuDNN promises
it; batch norm's second pullback is compared within tolerance, as cuDNN promises no bitwise-repeatable
batch norm), and neither the inputs nor the forward results may change. Needs CuPy, numpy and pytest only.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel import cudnn as backend
from dnnbind.highlevel import reference
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.gpu import layout

from ..miopen.gpu_cases import CASES, run_case

pytestmark = pytest.mark.gpu

DTYPES = ["float64", "float32", "float16"]
TOLERANCE = {"float64": 1e-12, "float32": 1e-4, "float16": 1e-2, "tf32": 2e-3}


def relative_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert not np.isnan(got).any(), "NaN in a GPU result: an output element was never written"
    scale = np.max(np.abs(want)) if want.size else 0.0
    return float(np.max(np.abs(got - want)) / scale) if scale else float(np.max(np.abs(got)))


def host(tree):
    """CuPy arrays (in nested tuples) -> numpy."""
    import cupy
    if isinstance(tree, (tuple, list)):
        return type(tree)(host(t) for t in tree)
    return None if tree is None else cupy.asnumpy(tree)


def assert_close(got, want, dtype: str, what: str) -> None:
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), what
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, dtype, f"{what}[{i}]")
        return
    err = relative_error(got, want)
    assert err <= TOLERANCE[dtype], f"{what}: relative error {err:.3g} > {TOLERANCE[dtype]:g} ({dtype})"


def assert_identical(a, b, what: str) -> None:
    if isinstance(a, (tuple, list)):
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{what}[{i}]")
        return
    np.testing.assert_array_equal(host(a), host(b), err_msg=f"{what}: a second pullback call differs")


def random(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def to_device(cp, a, lay="NCHW"):
    return None if a is None else layout.in_layout(cp, cp.asarray(a), lay)


def compare(cp, rng, dtype, run_gpu, run_ref, inputs, cotangent_shape, *, tolerance=None, deterministic=True):
    """Run both, compare results and gradients; call the pullback twice (bitwise equal when
    ``deterministic``) and check that nothing the caller passed or got changed."""
    tolerance = tolerance or dtype
    before = [None if a is None else host(a).copy() for a in inputs]
    with backend.settings(deterministic=deterministic):
        y, pullback = run_gpu()
        y_ref, pullback_ref = run_ref()
        assert_close(host(y), y_ref, tolerance, "result")
        y_before = host(y)
        dy = random(rng, cotangent_shape, dtype)
        grads = pullback(cp.asarray(dy))
        first = host(grads)
        for g in grads if isinstance(grads, tuple) else (grads,):
            g.fill(np.nan)                  # the caller owns what it got back
        again = pullback(cp.asarray(dy))
    if deterministic:
        assert_identical(again, first, "pullback")
    else:
        assert_close(host(again), first, tolerance, "second pullback")
    assert_close(host(again), pullback_ref(dy), tolerance, "gradient")
    for a, b in zip(inputs, before):
        if a is not None:
            np.testing.assert_array_equal(host(a), b, err_msg="an op or its pullback changed an input")
    np.testing.assert_array_equal(host(y), y_before, err_msg="the pullback changed the forward result")
    return y, again


# --------------------------------------------------------------------------------------------------------
# convolution

CONVS = [  # x shape, w shape, keyword arguments
    ((2, 3, 17), (4, 3, 5), dict(stride=2, padding=2)),
    ((2, 4, 9, 8), (6, 2, 3, 3), dict(padding=1, groups=2, dilation=(2, 1))),
    ((2, 3, 10, 9), (5, 3, 3, 2), dict(stride=(2, 1), padding=((1, 2), (0, 1)), flip=True)),
    ((3, 8, 7, 7), (8, 1, 3, 3), dict(padding=1, groups=8)),
    ((2, 2, 5, 6, 4), (3, 2, 2, 3, 1), dict(stride=(1, 2, 1), padding=((1, 0), 1, 0), dilation=(1, 1, 2))),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lay", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", range(len(CONVS)))
@pytest.mark.parametrize("bias", [False, True])
def test_conv(poisoned, dtype, lay, case, bias):
    cp, rng = poisoned, np.random.default_rng(case)
    xs, ws, kw = CONVS[case]
    x, w = random(rng, xs, dtype), random(rng, ws, dtype)
    b = random(rng, (ws[0],), dtype) if bias else None
    dx, dw, db = to_device(cp, x, lay), to_device(cp, w), to_device(cp, b)
    dims = ConvDims(xs, ws, dtype=dtype, **kw)
    y, _ = compare(cp, rng, dtype, lambda: dnnbind.conv(dx, dw, db, **kw),
                   lambda: dnnbind.conv(x, w, b, **kw), [dx, dw, db], dims.y_shape)
    assert layout.has_layout(y, lay)


TRANSPOSED = [
    ((2, 4, 6), (4, 3, 3), dict(stride=2, padding=((1, 0),), output_padding=1, groups=2)),
    ((2, 3, 4, 5), (3, 2, 3, 3), dict(stride=(2, 3), padding=((1, 2), 0), output_padding=(1, 2))),
    ((1, 2, 3, 4), (2, 3, 2, 2), dict(stride=2, dilation=3, output_padding=2, flip=True)),
    ((1, 2, 3, 3, 4), (2, 2, 2, 2, 1), dict(stride=(1, 2, 1), padding=(0, 1, 0))),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lay", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", range(len(TRANSPOSED)))
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(poisoned, dtype, lay, case, bias):
    cp, rng = poisoned, np.random.default_rng(10 + case)
    xs, ws, kw = TRANSPOSED[case]
    x, w = random(rng, xs, dtype), random(rng, ws, dtype)
    dims = ConvDims.transposed(xs, ws, dtype=dtype, **kw)
    b = random(rng, (dims.in_channels,), dtype) if bias else None
    dx, dw, db = to_device(cp, x, lay), to_device(cp, w), to_device(cp, b)
    compare(cp, rng, dtype, lambda: dnnbind.conv_transpose(dx, dw, db, **kw),
            lambda: dnnbind.conv_transpose(x, w, b, **kw), [dx, dw, db], dims.x_shape)


def test_conv_layout_keyword_runs_channels_last_on_nchw_arrays(poisoned):
    cp, rng = poisoned, np.random.default_rng(1)
    x, w = random(rng, (2, 8, 6, 6), "float32"), random(rng, (4, 8, 3, 3), "float32")
    dims = ConvDims(x.shape, w.shape, padding=1, dtype="float32")
    y, pullback = backend.conv(cp.asarray(x), cp.asarray(w), None, dims, layout="NHWC")
    assert layout.layout_of(y) == "NHWC"
    y_ref, pullback_ref = reference.conv(x, w, None, dims)
    assert_close(host(y), y_ref, "float32", "y")
    dy = random(rng, dims.y_shape, "float32")
    dx, dw, db = host(pullback(cp.asarray(dy)))          # the backend computes db even without b
    assert_close([dx, dw], pullback_ref(dy)[:2], "float32", "gradients")
    assert_close(db, dy.astype(np.float64).sum(axis=(0, 2, 3)), "float32", "db")


@pytest.mark.parametrize("algo", ["heuristic", "benchmark"])
def test_conv_settings(poisoned, algo):
    """benchmark and deterministic choose among cuDNN's algorithms; TF32 only when allowed."""
    cp, rng = poisoned, np.random.default_rng(2)
    x, w = random(rng, (8, 32, 16, 16), "float32"), random(rng, (32, 32, 3, 3), "float32")
    kw = dict(padding=1)
    compare(cp, rng, "float32", lambda: dnnbind.conv(cp.asarray(x), cp.asarray(w), **kw),
            lambda: dnnbind.conv(x, w, **kw), [], (8, 32, 16, 16))
    with backend.settings(algo=algo, allow_tf32=True):
        compare(cp, rng, "float32", lambda: dnnbind.conv(cp.asarray(x), cp.asarray(w), **kw),
                lambda: dnnbind.conv(x, w, **kw), [], (8, 32, 16, 16), tolerance="tf32")
    with backend.settings(algo=algo, deterministic=True):
        from dnnbind.highlevel.cudnn.conv_plan import plan_for
        dims = ConvDims(x.shape, w.shape, padding=1, dtype="float32")
        y, pullback = dnnbind.conv(cp.asarray(x), cp.asarray(w), **kw)
        pullback(y)
        plan = plan_for(dims, "NCHW", backend.settings.current(), cp.cuda.runtime.getDevice())
        assert all(plan.choices(d) for d in ("forward", "backward_data", "backward_filter"))
    info = backend.cache_info()["cudnn.conv"]
    assert info.hits > 0 and info.size > 0


def test_workspace_limit_zero_still_runs(poisoned):
    cp, rng = poisoned, np.random.default_rng(3)
    x, w = random(rng, (4, 16, 12, 12), "float32"), random(rng, (16, 16, 3, 3), "float32")
    with backend.settings(workspace_limit=0):
        compare(cp, rng, "float32", lambda: dnnbind.conv(cp.asarray(x), cp.asarray(w), padding=1),
                lambda: dnnbind.conv(x, w, padding=1), [], (4, 16, 12, 12), deterministic=False)


# --------------------------------------------------------------------------------------------------------
# pooling

#: max pooling only: dilated windows run on CuPy (dnnbind.highlevel.gpu.window_max)
DILATED = [
    ((2, 3, 13), 3, dict(stride=2, padding=1, dilation=3, ceil_mode=True)),
    ((2, 3, 9, 10), (3, 2), dict(stride=(2, 1), padding=((1, 0), (0, 1)), dilation=(2, 3))),
    ((1, 2, 6, 7, 8), 2, dict(stride=1, padding=1, dilation=(1, 2, 3), ceil_mode=True)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lay", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", range(len(DILATED)))
@pytest.mark.parametrize("ties", [False, True])
def test_dilated_maxpool_equals_the_reference(poisoned, dtype, lay, case, ties):
    cp, rng = poisoned, np.random.default_rng(40 + case)
    xs, window, kw = DILATED[case]
    x = np.round(rng.standard_normal(xs)).astype(dtype) if ties else \
        ((rng.permutation(int(np.prod(xs))).reshape(xs) - np.prod(xs) / 2).astype(dtype) / 16)
    dx = to_device(cp, x, lay)
    y_ref, _ = dnnbind.maxpool(x, window, **kw)
    y, _ = compare(cp, rng, dtype, lambda: dnnbind.maxpool(dx, window, **kw), lambda: dnnbind.maxpool(x, window, **kw),
                   [dx], y_ref.shape)
    assert layout.has_layout(y, lay)

POOLS = [
    ((2, 3, 11), 3, dict(stride=2, padding=1)),
    ((2, 3, 9, 10), (3, 2), dict(stride=(2, 1), padding=((1, 0), (0, 1)))),
    ((2, 4, 8, 8), 2, dict()),
    ((2, 3, 7, 7), 3, dict(stride=2, padding=1)),
    ((1, 2, 4, 5, 6), 2, dict(stride=1, padding=((1, 0), 0, (0, 1)))),
    ((2, 3, 8, 9), 3, dict(stride=2, padding=1, ceil_mode=True)),      # the last windows run past the padding
    ((2, 3, 10), 4, dict(stride=3, ceil_mode=True)),
    ((1, 2, 5, 6, 7), (3, 2, 3), dict(stride=(2, 3, 2), padding=(1, 1, 0), ceil_mode=True)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lay", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", range(len(POOLS)))
@pytest.mark.parametrize("op", ["max", "mean", "mean_exclude_pad"])
def test_pooling(poisoned, dtype, lay, case, op):
    cp, rng = poisoned, np.random.default_rng(20 + case)
    xs, window, kw = POOLS[case]
    # distinct values (exact in float16 too): ties in a max-pooling window are tested on their own
    x = (rng.permutation(int(np.prod(xs))).reshape(xs) - np.prod(xs) / 2).astype(dtype) / 16
    dx = to_device(cp, x, lay)
    if op == "max":
        def run(a):
            return dnnbind.maxpool(a, window, **kw)
    else:
        def run(a):
            return dnnbind.meanpool(a, window, count_include_pad=op == "mean", **kw)
    y_ref, _ = run(x)
    y, _ = compare(cp, rng, dtype, lambda: run(dx), lambda: run(x), [dx], y_ref.shape)
    assert layout.has_layout(y, lay)


#: mean pooling with divisor_override, which cuDNN lacks (AVERAGE_COUNT_INCLUDE_PADDING and a rescale)
DIVISOR = [
    ((2, 3, 11), 3, dict(stride=2, padding=1, divisor_override=2)),
    ((2, 3, 8, 9), 3, dict(stride=2, padding=1, ceil_mode=True, divisor_override=-4)),
    ((2, 3, 9, 10), (3, 2), dict(stride=(2, 1), padding=((1, 0), (0, 1)), count_include_pad=False,
                                 divisor_override=3)),
    ((1, 2, 5, 6, 7), (3, 2, 3), dict(stride=(2, 3, 2), padding=(1, 1, 0), ceil_mode=True, divisor_override=7)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lay", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", range(len(DIVISOR)))
def test_meanpool_divisor_override(poisoned, dtype, lay, case):
    cp, rng = poisoned, np.random.default_rng(70 + case)
    xs, window, kw = DIVISOR[case]
    x = (rng.permutation(int(np.prod(xs))).reshape(xs) - np.prod(xs) / 2).astype(dtype) / 16
    dx = to_device(cp, x, lay)
    y_ref, _ = dnnbind.meanpool(x, window, **kw)
    y, _ = compare(cp, rng, dtype, lambda: dnnbind.meanpool(dx, window, **kw), lambda: dnnbind.meanpool(x, window, **kw),
                   [dx], y_ref.shape)
    assert layout.has_layout(y, lay)


#: the backend-neutral cases (MIOpen runs them too) of divisor_override and of unbatched inputs, whose batch
#: axis the public ops add and drop around the backend
SHARED = [c for c in CASES if "divisor" in c.name or "unbatched" in c.name]


@pytest.mark.parametrize("case, dtype", [pytest.param(c, d, id=f"{c.name}-{d}") for c in SHARED for d in c.dtypes])
def test_divisor_override_and_unbatched_cases_equal_the_reference(poisoned, case, dtype):
    run_case(case, dtype, poisoned.asarray, poisoned.asnumpy)


@pytest.mark.parametrize("case", range(len(DILATED)))
def test_maxpool_return_indices_equal_the_reference(poisoned, case):
    cp, rng = poisoned, np.random.default_rng(60 + case)
    xs, window, kw = DILATED[case]
    x = np.round(rng.standard_normal(xs))                  # ties: the first maximum's index
    (y, indices), pullback = dnnbind.maxpool(cp.asarray(x), window, return_indices=True, **kw)
    (y_ref, indices_ref), pullback_ref = dnnbind.maxpool(x, window, return_indices=True, **kw)
    np.testing.assert_array_equal(cp.asnumpy(y), y_ref)
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(cp.asnumpy(indices), indices_ref)
    dy = rng.standard_normal(y_ref.shape)
    np.testing.assert_allclose(cp.asnumpy(pullback(cp.asarray(dy))), pullback_ref(dy), rtol=1e-13, atol=1e-13)
    (_, undilated), _ = dnnbind.maxpool(cp.asarray(x), 2, return_indices=True)     # cuDNN gives none: CuPy does
    np.testing.assert_array_equal(cp.asnumpy(undilated), dnnbind.maxpool(x, 2, return_indices=True)[0][1])


def test_maxpool_nondeterministic_mode(poisoned):
    """CUDNN_POOLING_MAX (the default; deterministic=True selects MAX_DETERMINISTIC) on overlapping windows."""
    cp, rng = poisoned, np.random.default_rng(25)
    x = (rng.permutation(2 * 3 * 9 * 9).reshape(2, 3, 9, 9) / 7.0).astype("float32")
    compare(cp, rng, "float32", lambda: dnnbind.maxpool(cp.asarray(x), 3, stride=1, padding=1),
            lambda: dnnbind.maxpool(x, 3, stride=1, padding=1), [], (2, 3, 9, 9), deterministic=False)


def test_maxpool_ties_go_to_the_first_maximum_like_the_reference(poisoned):
    cp = poisoned
    x = np.array([[[[1, 3, 3, 0], [3, 2, 0, 0], [5, 5, 1, 1], [5, 5, 1, 1]]]], np.float32)
    y, pullback = dnnbind.maxpool(cp.asarray(x), 2)
    y_ref, pullback_ref = dnnbind.maxpool(x, 2)
    np.testing.assert_array_equal(host(y), y_ref)
    dy = np.array([[[[1, 2], [3, 4]]]], np.float32)
    np.testing.assert_array_equal(host(pullback(cp.asarray(dy))), pullback_ref(dy))


def test_maxpool_nan_wins_like_the_reference(poisoned):
    cp = poisoned
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 1, 1] = np.nan
    y, _ = dnnbind.maxpool(cp.asarray(x), 2)
    y_ref, _ = dnnbind.maxpool(x, 2)
    np.testing.assert_array_equal(host(y), y_ref)


# --------------------------------------------------------------------------------------------------------
# softmax, activations


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["softmax", "logsoftmax"])
@pytest.mark.parametrize("shape, axis, lay", [((7,), 0, "NCHW"), ((16, 10), 1, "NCHW"), ((16, 10), 0, "NCHW"),
                                              ((2, 5, 3, 4), 1, "NCHW"), ((2, 5, 3, 4), -1, "NCHW"),
                                              ((2, 5, 3, 4), 2, "NHWC"), ((2, 5, 3, 4), 1, "NHWC"),
                                              ((2, 3, 2, 3, 4), 3, "NCHW")])
def test_softmax(poisoned, dtype, op, shape, axis, lay):
    cp, rng = poisoned, np.random.default_rng(30)
    x = 3 * random(rng, shape, dtype)
    dx = to_device(cp, x, lay)
    fn = getattr(dnnbind, op)
    compare(cp, rng, dtype, lambda: fn(dx, axis=axis), lambda: fn(x, axis=axis), [dx], shape)


MODES = [("relu", None), ("sigmoid", None), ("tanh", None), ("identity", None), ("elu", 0.7), ("elu", None),
         ("leaky_relu", 0.02), ("clipped_relu", 1.5), ("clipped_relu", None), ("swish", 1.3), ("swish", None)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode, alpha", MODES)
@pytest.mark.parametrize("order", ["C", "NHWC", "F"])
def test_activation(poisoned, dtype, mode, alpha, order):
    cp, rng = poisoned, np.random.default_rng(40)
    x = 2 * random(rng, (2, 3, 5, 7), dtype)
    dx = cp.asfortranarray(cp.asarray(x)) if order == "F" else to_device(cp, x, "NHWC" if order == "NHWC" else "NCHW")
    compare(cp, rng, dtype, lambda: dnnbind.activation(dx, mode, alpha=alpha),
            lambda: dnnbind.activation(x, mode, alpha=alpha), [dx], x.shape)


# --------------------------------------------------------------------------------------------------------
# batch norm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, lay", [((16, 5), "NCHW"), ((4, 3, 9), "NHWC"), ((4, 3, 5, 6), "NCHW"),
                                        ((4, 3, 5, 6), "NHWC"), ((2, 3, 3, 4, 5), "NCHW")])
@pytest.mark.parametrize("training, stats", [(True, None), (True, "same"), (True, "float64"), (False, "same"),
                                             (False, "float16")])
def test_batchnorm(poisoned, dtype, shape, lay, training, stats):
    cp, rng = poisoned, np.random.default_rng(50)
    c = shape[1]
    x, gamma, beta = 2 + 3 * random(rng, shape, dtype), random(rng, (c,), dtype), random(rng, (c,), dtype)
    stat_dtype = dtype if stats == "same" else stats
    mean = None if stats is None else random(rng, (c,), stat_dtype)
    var = None if stats is None else (rng.random(c) + 0.5).astype(stat_dtype)
    ref_mean, ref_var = (None, None) if stats is None else (mean.copy(), var.copy())
    gpu_mean, gpu_var = to_device(cp, mean), to_device(cp, var)
    dx, dg, db = to_device(cp, x, lay), to_device(cp, gamma), to_device(cp, beta)
    kw = dict(training=training, momentum=0.3, eps=1e-3)
    compare(cp, rng, dtype, lambda: dnnbind.batchnorm(dx, dg, db, running_mean=gpu_mean, running_var=gpu_var, **kw),
            lambda: dnnbind.batchnorm(x, gamma, beta, running_mean=ref_mean, running_var=ref_var, **kw),
            [dx, dg, db], shape, deterministic=False)   # cuDNN promises no bitwise-repeatable batch norm
    if stats is not None:
        # cuDNN's update (momentum, unbiased variance) equals the reference's; in the statistics' own dtype
        assert gpu_mean.dtype == stat_dtype and gpu_var.dtype == stat_dtype
        tol = "float16" if "float16" in (dtype, stat_dtype) else "float32" if "float32" in (dtype, stat_dtype) \
            else "float64"
        assert_close(host(gpu_mean), ref_mean, tol, "running_mean")
        assert_close(host(gpu_var), ref_var, tol, "running_var")


# --------------------------------------------------------------------------------------------------------
# dropout: cuDNN's random numbers are not numpy's, so check statistics and consistency


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 0.9, 1.0])
def test_dropout(poisoned, dtype, p):
    cp, rng = poisoned, np.random.default_rng(60)
    x = random(rng, (8, 16, 32, 32), dtype)
    dx = cp.asarray(x)
    y, pullback = dnnbind.dropout(dx, p, seed=1234)
    mask = host(pullback.mask)
    assert mask.dtype == bool and mask.shape == x.shape
    dropped = 1 - mask.mean()
    assert abs(dropped - p) < 0.01, f"dropped {dropped:.4f} of the elements, p={p}"
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    expected = x.astype(np.float64) * mask * scale
    assert_close(host(y), expected, dtype, "y")
    dy = random(rng, x.shape, dtype)
    dx1 = host(pullback(cp.asarray(dy)))
    assert_close(dx1, dy.astype(np.float64) * mask * scale, dtype, "dx")
    np.testing.assert_array_equal(host(pullback(cp.asarray(dy))), dx1)
    np.testing.assert_array_equal(host(dx), x)
    y2, _ = dnnbind.dropout(dx, p, seed=1234)
    np.testing.assert_array_equal(host(y2), host(y), err_msg="the same seed must give the same mask")
    if 0 < p < 1:
        y3, _ = dnnbind.dropout(dx, p, seed=4321)
        assert not np.array_equal(host(y3), host(y))
        ya, _ = dnnbind.dropout(dx, p)
        yb, _ = dnnbind.dropout(dx, p)
        assert not np.array_equal(host(ya), host(yb)), "unseeded calls must draw new masks"


def test_dropout_masks_are_independent_of_the_layout_of_memory(poisoned):
    cp = poisoned
    x = cp.ones((4, 8, 16, 16), cp.float32)
    y, pullback = dnnbind.dropout(layout.in_layout(cp, x, "NHWC"), 0.5, seed=7)
    assert layout.layout_of(y) == "NHWC"
    np.testing.assert_array_equal(host(y) != 0, host(pullback.mask))


# --------------------------------------------------------------------------------------------------------
# errors and adaptation


def test_cotangents_are_checked(poisoned):
    cp = poisoned
    y, pullback = dnnbind.softmax(cp.zeros((3, 4), cp.float32))
    with pytest.raises(ValueError, match=r"dy has shape \(4, 3\) but must have shape \(3, 4\)"):
        pullback(cp.zeros((4, 3), cp.float32))
    with pytest.raises(TypeError, match=r"dy is a numpy.ndarray in host memory"):
        pullback(np.zeros((3, 4), np.float32))
    dx = pullback(cp.ones((3, 4), cp.float64))           # converted to the result's dtype
    assert dx.dtype == cp.float32


def test_all_ops_keep_shapes_and_dtypes(poisoned):
    cp = poisoned
    for dtype, (xs, ws) in itertools.product(DTYPES, [((1, 2, 5, 5), (3, 2, 3, 3))]):
        y, pullback = dnnbind.conv(cp.ones(xs, dtype), cp.ones(ws, dtype), cp.ones(3, dtype))
        assert y.dtype == dtype and [g.dtype for g in pullback(y)] == [np.dtype(dtype)] * 3


@pytest.mark.gpu
def test_seeded_dropout_reuses_its_mask_without_copying_states(poisoned):
    """The second call with a seed applies the kept mask (cudnnDropoutBackward with dy = x): no forward, no
    states restored or copied, and the same result as the first call."""
    cp = poisoned
    x = cp.asarray(np.random.default_rng(5).standard_normal((4, 1000)).astype(np.float32))
    first, _ = dnnbind.dropout(x, 0.3, seed=99)
    with dnnbind.trace(file=None) as records:
        again, pullback = dnnbind.dropout(x, 0.3, seed=99)
    names = [record.function for record in records]
    assert "cudnnDropoutBackward" in names
    assert not {"cudnnDropoutForward", "cudnnRestoreDropoutDescriptor", "cudnnSetDropoutDescriptor"} & set(names)
    cp.testing.assert_array_equal(again, first)
    dy = cp.ones_like(x)
    cp.testing.assert_array_equal(pullback(dy) != 0, first != 0)
