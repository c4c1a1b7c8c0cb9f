"""The residual form on the numpy backends (cpu and reference): NAME_residuals describes exactly what NAME_forward saves,
the backward leaves the residuals alone and equals the pullback form, on ordinary, half, 0-d and empty calls."""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind.highlevel.cpu as cpu
import dnnbind.highlevel.reference as reference
from dnnbind.highlevel.dims import ConvDims, PoolDims
from dnnbind.highlevel.residual import ArraySpec
from dnnbind.highlevel.specs import SPECS

rng = np.random.default_rng(0)


def _spec(a):
    if a is None:
        return None
    if isinstance(a, (list, tuple)):
        return type(a)(_spec(v) for v in a)
    return ArraySpec(tuple(a.shape), a.dtype)


def _conv_case(x_shape, w_shape, dtype=np.float32, transposed=False, **kw):
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[1] * kw.get("groups", 1) if transposed else w_shape[0]).astype(dtype)
    dims = (ConvDims.transposed if transposed else ConvDims)(x_shape, w_shape, dtype=np.dtype(dtype), **kw)
    return ("conv_transpose" if transposed else "conv"), (x, w, b), (dims,)


def _pool_case(op, x_shape, window, dtype=np.float32, return_indices=False, divisor_override=None, **kw):
    x = rng.standard_normal(x_shape).astype(dtype)
    static = (PoolDims(x_shape, window, dtype=np.dtype(dtype), **kw),)
    return op, (x,), static + ((False, divisor_override) if op == "meanpool" else (return_indices,))


def _cases():
    yield _conv_case((2, 6, 9, 9), (4, 3, 3, 3), groups=2, padding=1)                       # im2col, keeps columns
    yield _conv_case((8, 64, 40, 40), (16, 64, 3, 3), padding=1)                            # im2col, keeps x
    yield _conv_case((2, 8, 7, 7), (5, 8, 1, 1))                                            # 1x1 path
    yield _conv_case((2, 8, 7, 8), (6, 4, 1, 1), groups=2, stride=(2, 3))                   # 1x1 strided: keeps
    yield _conv_case((3, 4, 9), (5, 4, 1), np.float16, stride=2)                            # the sampled pixels
    yield _conv_case((2, 4, 4, 4), (4, 3, 1, 1), transposed=True, stride=2, output_padding=1)   # (transposed: x)
    yield _conv_case((2, 6, 7, 7), (6, 1, 3, 3), groups=6, padding=1, stride=2)             # depthwise path
    yield _conv_case((1, 2, 10), (3, 2, 4), dilation=2, flip=True)                          # 1-d, flipped
    yield _conv_case((1, 2, 5, 5, 5), (3, 2, 2, 2, 2), np.float16, padding=((0, 1),) * 3)   # 3-d, half
    yield _conv_case((2, 4, 5, 5), (4, 3, 3, 3), transposed=True, stride=2, padding=1, output_padding=1)
    yield _conv_case((2, 6, 5, 5), (6, 1, 3, 3), transposed=True, groups=6, padding=1)
    yield _conv_case((0, 4, 5, 5), (3, 4, 3, 3))                                            # empty batch
    yield _pool_case("maxpool", (2, 3, 7, 7), 3, stride=2, padding=1)
    yield _pool_case("maxpool", (2, 3, 8), 2, np.float16)
    yield _pool_case("meanpool", (2, 3, 6, 6, 6), 2, padding=1)
    yield _pool_case("maxpool", (2, 3, 9, 8), 3, stride=2, padding=1, dilation=(2, 1), ceil_mode=True)
    yield _pool_case("maxpool", (2, 3, 9), 2, np.float16, True, dilation=3, ceil_mode=True)     # (y, indices)
    yield _pool_case("meanpool", (2, 3, 8, 9), 3, stride=2, padding=1, ceil_mode=True)
    yield _pool_case("meanpool", (2, 3, 8, 9), 3, np.float16, divisor_override=-4, stride=2, padding=1,
                     ceil_mode=True)
    for op in ("softmax", "logsoftmax"):
        yield op, (rng.standard_normal((3, 4, 5)),), (1,)
        yield op, (np.array(0.5),), (0,)
    for mode, alpha in (("relu", None), ("identity", None), ("elu", 1.0), ("leaky_relu", 0.1),
                        ("clipped_relu", 6.0), ("swish", 1.0), ("tanh", None), ("sigmoid", None)):
        yield "activation", (rng.standard_normal((2, 5)).astype(np.float16),), (mode, alpha)
    yield "activation", (np.zeros((0, 3)),), ("relu", None)
    for training in (True, False):
        x = rng.standard_normal((4, 3, 2, 2))
        stats = (np.zeros(3), np.ones(3))
        yield "batchnorm", (x, np.ones(3), np.zeros(3)) + stats, (training, 0.1, 1e-5)
    yield "dropout", (rng.standard_normal((4, 5)),), (0.3, 7)
    yield "dropout", (np.array(1.5),), (0.3, 7)
    yield "dropout", (np.zeros((0, 5)),), (0.3, 7)


CASES = list(_cases())


@pytest.mark.parametrize("backend", [cpu, reference], ids=["cpu", "reference"])
@pytest.mark.parametrize("op,arrays,static", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_residuals_describe_what_forward_saves_and_backward_leaves_them(op, arrays, static, backend):
    forward = getattr(backend, f"{op}_forward")
    backward = getattr(backend, f"{op}_backward")
    spec = getattr(backend, f"{op}_residuals")(*_spec(arrays), *static)
    result, saved = forward(*arrays, *static)
    assert all(isinstance(r, np.ndarray) for r in saved)
    assert [(tuple(r.shape), np.dtype(r.dtype)) for r in saved] == [(s.shape, np.dtype(s.dtype)) for s in spec]

    if isinstance(result, tuple):             # maxpool's (y, indices): the indices take no cotangent
        assert op == "maxpool" and result[1].dtype == np.int64
        result = result[0]
    dy = rng.standard_normal(result.shape).astype(result.dtype)
    before = [r.copy() for r in saved]
    first = backward(saved, (dy,), *static)
    second = backward(saved, (dy,), *static)
    for r, b in zip(saved, before):
        np.testing.assert_array_equal(r, b)
    _, pullback = getattr(backend, op)(*arrays, *static)
    third = pullback(dy)
    flat = lambda g: [a for a in (g if isinstance(g, tuple) else (g,)) if a is not None]  # noqa: E731
    assert len(SPECS[op].gradients) == len(first if isinstance(first, tuple) else (first,))
    for a, b, c in zip(flat(first), flat(second), flat(third)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
        assert a.dtype == result.dtype


@pytest.mark.parametrize("backend", [cpu, reference], ids=["cpu", "reference"])
def test_dropout_pullback_still_shows_its_mask(backend):
    x = rng.standard_normal((3, 4))
    y, pullback = backend.dropout(x, 0.5, 3)
    np.testing.assert_array_equal(y != 0, pullback.mask)


@pytest.mark.parametrize("backend", [cpu, reference], ids=["cpu", "reference"])
def test_conv_without_bias_gives_two_gradients_in_the_pullback_form_and_three_in_the_residual_form(backend):
    op, (x, w, _), static = _conv_case((1, 2, 5, 5), (3, 2, 3, 3))
    y, saved = backend.conv_forward(x, w, None, *static)
    assert len(backend.conv_backward(saved, (y,), *static)) == 3
    assert len(backend.conv(x, w, None, *static)[1](y)) == 2


def test_a_strided_1x1_convolution_keeps_only_the_pixels_its_kernel_visits():
    """Its backward reads nothing else of x: a quarter of x at stride 2, by geometry on every path of the cpu
    backend."""
    x, w = rng.standard_normal((2, 8, 8, 8)).astype(np.float32), rng.standard_normal((4, 8, 1, 1)).astype(np.float32)
    dims = ConvDims(x.shape, w.shape, stride=2, dtype=x.dtype)
    _, (kept, wf) = cpu.conv_forward(x, w, None, dims)
    assert kept.shape == (2, 8, 4, 4) and cpu.conv_residuals(x, w, None, dims)[0].shape == (2, 8, 4, 4)
    np.testing.assert_array_equal(kept, x[:, :, ::2, ::2])
    x[:] = 0                                    # the kept pixels are the forward's own copy
    assert np.abs(kept).sum() > 0
    for shape in ((2, 3, 1, 1), (2, 3, 1, 5)):  # planes whose strided view is contiguous: still a copy
        x = rng.standard_normal(shape)
        _, (_, kept) = cpu.conv_forward(x, np.ones((4, 3, 1, 1)), None, ConvDims(shape, (4, 3, 1, 1), stride=2))
        assert not np.shares_memory(kept, x)


def _declaring_cases():
    """CASES and the ops they lack: layer norm, rnn (lengths, a projection), a chain."""
    yield from CASES
    x, w, b = rng.standard_normal((3, 4, 5)), rng.standard_normal(5), rng.standard_normal(5)
    yield "layer_norm", (x, w, b), SPECS["layer_norm"].check(x, w, b, normalized_shape=(5,))
    yield "layer_norm", (x.astype(np.float16), None, None), SPECS["layer_norm"].check(
        x.astype(np.float16), None, None, normalized_shape=(4, 5))
    for lengths, proj in ((None, 0), ([4, 2, 3], 0), (None, 2)):
        x = rng.standard_normal((4, 3, 3))
        shapes = ((12, 3), (12, proj or 3), (12,), (12,)) + (((proj, 3),) if proj else ())
        weights = [tuple(rng.standard_normal(s) for s in shapes) for _ in range(2)]     # (two directions)
        static = SPECS["rnn"].check(x, weights, hidden_size=3, bidirectional=True, lengths=lengths,
                                    proj_size=proj)
        yield "rnn", (x, weights, None, None), static
    x, w = rng.standard_normal((2, 3, 5, 5)), rng.standard_normal((4, 3, 3, 3))
    for mode in ("relu", "sigmoid", "elu"):
        yield "conv_bias_activation", (x, w, None), SPECS["conv_bias_activation"].check(x, w, None, padding=1,
                                                                                        mode=mode)


DECLARING = list(_declaring_cases())


def _source(op, arrays, result, key):
    """The array or result a residual declares itself the value of (ArraySpec.same_as)."""
    spec = SPECS[op]
    named = dict(zip(spec.array_names, arrays))
    named.update(zip(spec.output_names, result if isinstance(result, tuple) else (result,)))
    value = named[key[0]]
    for i in key[1:]:
        value = value[i]
    return value


@pytest.mark.parametrize("borrowed", [False, True], ids=["own", "lent"])
@pytest.mark.parametrize("backend", [cpu, reference], ids=["cpu", "reference"])
@pytest.mark.parametrize("op,arrays,static", DECLARING, ids=[f"{c[0]}-{i}" for i, c in enumerate(DECLARING)])
def test_a_residual_declared_the_value_of_an_array_or_a_result_is_that_value(op, arrays, static, backend, borrowed):
    """What a framework passes in place of a declared residual (dnnbind.torch's training ops leave them out)
    is what the forward saved there, in the residual's shape and dtype, whether it owns or borrows."""
    from dnnbind.highlevel.grad_mode import saving_residuals
    from dnnbind.highlevel.residual import declared
    with saving_residuals(True, borrowed):
        specs = getattr(backend, f"{op}_residuals")(*_spec(arrays), *static)
        result, saved = getattr(backend, f"{op}_forward")(*arrays, *static)
    assert [(tuple(r.shape), np.dtype(r.dtype)) for r in saved] == [(s.shape, np.dtype(s.dtype)) for s in specs]
    for place, key, s in declared(specs):
        source = np.asarray(_source(op, arrays, result, key))
        assert source.size == saved[place].size
        np.testing.assert_array_equal(saved[place], source.reshape(s.shape).astype(s.dtype))


@pytest.mark.parametrize("backend", [cpu, reference], ids=["cpu", "reference"])
def test_a_declared_residual_is_an_array_or_result_the_specs_backward_reads(backend):
    """A framework keeps for the backward x and the arrays and results the spec's backward_reads names
    (dnnbind.torch saves those, and no other: a conv's bias changed in place before the backward fails
    nothing, as with torch's own layers): a residual may be declared the value of one of those only."""
    from dnnbind.highlevel.grad_mode import saving_residuals
    from dnnbind.highlevel.residual import declared
    for op, arrays, static in DECLARING:
        spec = SPECS[op]
        # (the arguments backward_reads looks at: an activation's mode; none for the other ops' here)
        arguments = {"mode": static[-2], "alpha": static[-1]} if "mode" in spec.static else {}
        with saving_residuals(True, True):
            keys = [key for _, key, _ in declared(getattr(backend, f"{op}_residuals")(*_spec(arrays), *static))]
        for key in keys:
            assert key[0] == "x" or key[0] in spec.reads(arguments), (op, static, key)


def test_the_cpu_backend_declares_the_arrays_it_saves_as_given():
    """Without these declarations a training op returns copies of its inputs (twice the memory of torch's)."""
    from dnnbind.highlevel.grad_mode import saving_residuals
    from dnnbind.highlevel.residual import declared
    keys = {}
    for i, (op, arrays, static) in enumerate(DECLARING):
        with saving_residuals(True, True):
            keys[i] = [key for _, key, _ in declared(getattr(cpu, f"{op}_residuals")(*_spec(arrays), *static))]
    assert keys[1] == [("x",), ("w",)] and keys[2] == [("x",), ("w",)]     # im2col; 1x1 at stride 1
    assert keys[3] == [("w",)] and keys[7] == [("x",)]                    # strided 1x1: its sample; flipped
    assert keys[4] == [] and keys[8] == []                                # half: computed in float32
    assert [keys[i] for i, c in enumerate(DECLARING) if c[0] == "batchnorm"] == [[("x",)]] * 2
    modes = {c[2][0]: keys[i] for i, c in enumerate(DECLARING) if c[0] == "activation" and c[1][0].dtype != np.float16}
    assert modes == {"relu": []}                                          # (an empty call)
    assert [keys[i] for i, c in enumerate(DECLARING) if c[0] == "softmax"] == [[("y",)]] * 2
    rnn = [keys[i] for i, c in enumerate(DECLARING) if c[0] == "rnn"]
    assert rnn[0][0] == ("x",) and ("weights", 1, 1) in rnn[0] and ("x",) not in rnn[1]
    assert ("weights", 0, 4) in rnn[2]
    chain = [keys[i] for i, c in enumerate(DECLARING) if c[0] == "conv_bias_activation"]
    assert chain == [[("x",), ("w",), ("y",)], [("x",), ("w",), ("y",)], [("x",), ("w",)]]
    with saving_residuals(True, False):                  # owning, batch norm saves x normalised, relu a mask
        for i, (op, arrays, static) in enumerate(DECLARING):
            if op == "batchnorm" or (op == "activation" and static[0] == "relu"):
                assert declared(getattr(cpu, f"{op}_residuals")(*_spec(arrays), *static)) == ()
