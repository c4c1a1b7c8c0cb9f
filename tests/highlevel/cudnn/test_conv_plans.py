"""Convolution plans on the host: descriptors against ConvDims, cuDNN's own output shapes, cache keys.

cuDNN computes the output shape of a convolution from its descriptors without a GPU
(cudnnGetConvolutionNdForwardOutputDim); these tests hold ConvDims (the shape logic every backend
shares) against it on random problems.
"""
from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings as hsettings, strategies as st  # noqa: E402

from dnnbind import CudnnError  # noqa: E402
from dnnbind.gen import cudnn  # noqa: E402
from dnnbind.highlevel.cudnn import algos  # noqa: E402
from dnnbind.highlevel.cudnn._lib import DTYPES  # noqa: E402
from dnnbind.highlevel.cudnn.conv_plan import PLANS, ConvPlan, plan_for, plan_key  # noqa: E402
from dnnbind.highlevel.cudnn.descriptors import (ConvolutionDescriptor, FilterDescriptor,  # noqa: E402
                                                 TensorDescriptor, convolution_output_shape)
from dnnbind.highlevel.dims import ConvDims  # noqa: E402
from dnnbind.highlevel.gpu.layout import lift, lift_spatial, strides  # noqa: E402
from dnnbind.highlevel.gpu.settings import Settings  # noqa: E402


@st.composite
def conv_problems(draw):
    """A valid convolution: 1-3 spatial dims, groups, stride, dilation, (asymmetric) padding."""
    n = draw(st.integers(1, 3))
    groups = draw(st.integers(1, 3))
    cg, kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 4)) for _ in range(n)]
    stride = [draw(st.integers(1, 3)) for _ in range(n)]
    dilation = [draw(st.integers(1, 3)) for _ in range(n)]
    pads = [(draw(st.integers(0, 4)), draw(st.integers(0, 4))) for _ in range(n)]
    sizes = [max(1, d * (k - 1) + 1 - lo - hi) + draw(st.integers(0, 6))
             for d, k, (lo, hi) in zip(dilation, kernel, pads)]
    x_shape = (draw(st.integers(1, 3)), cg * groups, *sizes)
    w_shape = (kg * groups, cg, *kernel)
    return ConvDims(x_shape, w_shape, stride=stride, padding=pads, dilation=dilation, groups=groups,
                    flip=draw(st.booleans()), dtype=draw(st.sampled_from(["float16", "float32", "float64"])))


@hsettings(max_examples=300, deadline=None)
@given(conv_problems(), st.sampled_from(["NCHW", "NHWC"]), st.booleans())
def test_plans_match_convdims_and_cudnn_output_shapes(dims, layout, tf32):
    plan = ConvPlan(dims, layout, Settings(allow_tf32=tf32))
    g = plan.geometry
    # cuDNN's output shape for the (explicitly padded, lifted) problem is ConvDims' output shape
    assert convolution_output_shape(plan.conv, plan.x, plan.w) == lift(dims.y_shape)
    dtype = DTYPES[dims.dtype].library
    padded = tuple(s + a + b for s, a, b in zip(dims.x_shape[2:], g.extra_low, g.extra_high))
    assert plan.x.read() == (dtype, lift(dims.x_shape[:2] + padded), strides(lift(dims.x_shape[:2] + padded), layout))
    assert plan.y.read() == (dtype, lift(dims.y_shape), strides(lift(dims.y_shape), layout))
    assert plan.w.read() == (dtype, {"NCHW": 0, "NHWC": 1}[layout], lift(dims.w_shape))
    read = plan.conv.read()
    assert read["padding"] == lift_spatial(tuple(min(a, b) for a, b in zip(dims.pad_low, dims.pad_high)), 0)
    assert read["stride"] == lift_spatial(dims.stride, 1) and read["dilation"] == lift_spatial(dims.dilation, 1)
    assert read["mode"] == (cudnn.CUDNN_CONVOLUTION if dims.flip else cudnn.CUDNN_CROSS_CORRELATION)
    assert read["groups"] == dims.groups
    assert read["compute"] == (cudnn.CUDNN_DATA_DOUBLE if dims.dtype == "float64" else cudnn.CUDNN_DATA_FLOAT)
    expected_math = {"float64": cudnn.CUDNN_DEFAULT_MATH, "float16": cudnn.CUDNN_TENSOR_OP_MATH,
                     "float32": cudnn.CUDNN_TENSOR_OP_MATH if tf32 else cudnn.CUDNN_FMA_MATH}[dims.dtype]
    assert read["math"] == plan.requested_math == expected_math
    assert plan.bias.read()[1] == (1, dims.out_channels) + (1,) * (len(plan.x.shape) - 2)
    assert plan.bias_transposed.read()[1] == (1, dims.in_channels) + (1,) * (len(plan.x.shape) - 2)
    assert plan.x_user.read()[1] == lift(dims.x_shape)


def _cudnn_output_shape(x_shape, w_shape, padding, stride, dilation, groups):
    """cuDNN's verdict on raw values: its output shape, or None when it refuses them."""
    try:
        x = TensorDescriptor(lift(x_shape), "float32")
        w = FilterDescriptor(lift(w_shape), "float32")
        conv = ConvolutionDescriptor(lift_spatial(padding, 0), lift_spatial(stride, 1), lift_spatial(dilation, 1),
                                     flip=False, compute=cudnn.CUDNN_DATA_FLOAT, groups=groups,
                                     math=cudnn.CUDNN_FMA_MATH)
        out = convolution_output_shape(conv, x, w)
    except CudnnError:
        return None
    return None if min(out) < 1 else out


MUTATIONS = ["none", "zero batch", "zero channels", "zero size", "zero kernel", "stride 0", "stride -1",
             "dilation 0", "padding -1", "groups 0", "groups do not divide C", "groups do not divide K",
             "channel mismatch", "kernel larger than padded x"]


@hsettings(max_examples=400, deadline=None)
@given(st.data())
def test_what_convdims_rejects_cudnn_rejects(data):
    """A valid problem with symmetric padding, then (usually) one thing broken. Asymmetric padding is
    ConvDims' extension, which cuDNN cannot express: the backend pads x explicitly (tested above)."""
    n = data.draw(st.integers(1, 3))
    groups = data.draw(st.integers(1, 3))
    cg, kg = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(n)]
    stride = [data.draw(st.integers(1, 3)) for _ in range(n)]
    dilation = [data.draw(st.integers(1, 2)) for _ in range(n)]
    padding = [data.draw(st.integers(0, 2)) for _ in range(n)]
    sizes = [max(1, d * (k - 1) + 1 - 2 * p) + data.draw(st.integers(0, 4))
             for d, k, p in zip(dilation, kernel, padding)]
    x_shape = [data.draw(st.integers(1, 2)), cg * groups, *sizes]
    w_shape = [kg * groups, cg, *kernel]
    mutation = data.draw(st.sampled_from(MUTATIONS))
    i = data.draw(st.integers(0, n - 1))
    if mutation == "zero batch":
        x_shape[0] = 0
    elif mutation == "zero channels":
        x_shape[1] = w_shape[1] = 0
    elif mutation == "zero size":
        x_shape[2 + i] = 0
    elif mutation == "zero kernel":
        w_shape[2 + i] = 0
    elif mutation in ("stride 0", "stride -1"):
        stride[i] = int(mutation.split()[1])
    elif mutation == "dilation 0":
        dilation[i] = 0
    elif mutation == "padding -1":
        padding[i] = -1
    elif mutation == "groups 0":
        groups = 0
    elif mutation == "groups do not divide C":
        groups, x_shape[1], w_shape[1] = 2, 3, 1
    elif mutation == "groups do not divide K":
        groups, x_shape[1], w_shape[1], w_shape[0] = 2, 2, 1, 3
    elif mutation == "channel mismatch":
        x_shape[1] += 1
    elif mutation == "kernel larger than padded x":
        w_shape[2 + i] = x_shape[2 + i] + 2 * padding[i] + 1
    try:
        dims = ConvDims(x_shape, w_shape, stride=stride, padding=padding, dilation=dilation, groups=groups)
    except ValueError as exc:
        dims, reason = None, str(exc)
    theirs = _cudnn_output_shape(tuple(x_shape), tuple(w_shape), tuple(padding), tuple(stride), tuple(dilation),
                                 groups)
    hypothesis.event(f"{mutation}: " + ("valid" if dims is not None else "rejected by both" if theirs is None
                                        else "cuDNN accepts"))
    # an empty batch is valid (the zero-size policy: an empty result, computed without calling cuDNN)
    assert (dims is not None) == (mutation in ("none", "zero batch"))
    if mutation == "zero batch":
        assert dims is not None and dims.y_shape[0] == 0
    elif dims is not None:
        assert theirs == lift(dims.y_shape)
    elif theirs is not None:
        # The one difference: cuDNN's shape query does not check that groups divides the output channels
        # (w.shape[0]); its convolution calls would refuse it. ConvDims refuses it up front.
        assert mutation == "groups do not divide K" and "output channels" in reason, reason


def test_plan_cache_keys_separate_what_defines_a_plan():
    PLANS.clear()
    base = dict(stride=1, padding=1, dilation=1, groups=2, dtype="float32")
    dims = ConvDims((2, 4, 9, 9), (6, 2, 3, 3), **base)
    plain = plan_for(dims, "NCHW", Settings(), 0)
    assert plan_for(ConvDims((2, 4, 9, 9), (6, 2, 3, 3), **base), "NCHW", Settings(), 0) is plain
    variants = [
        (ConvDims((2, 4, 9, 9), (6, 2, 3, 3), **{**base, "dilation": 2}), "NCHW", Settings(), 0),
        (ConvDims((2, 4, 9, 9), (6, 4, 3, 3), **{**base, "groups": 1}), "NCHW", Settings(), 0),
        (dims, "NHWC", Settings(), 0),
        (ConvDims((2, 4, 9, 9), (6, 2, 3, 3), **{**base, "dtype": "float16"}), "NCHW", Settings(), 0),
        (dims, "NCHW", Settings(deterministic=True), 0),
        (dims, "NCHW", Settings(algo="benchmark"), 0),
        (dims, "NCHW", Settings(allow_tf32=True), 0),
        (dims, "NCHW", Settings(workspace_limit=0), 0),
        (dims, "NCHW", Settings(), 1),
        (ConvDims((2, 4, 9, 9), (6, 2, 3, 3), **{**base, "padding": ((1, 2), 1)}), "NCHW", Settings(), 0),
        (ConvDims((2, 4, 9, 9), (6, 2, 3, 3), **base, flip=True), "NCHW", Settings(), 0),
    ]
    plans = [plan_for(*v) for v in variants]
    assert len({id(p) for p in plans + [plain]}) == len(variants) + 1
    assert len({plan_key(*v) for v in variants} | {plan_key(dims, "NCHW", Settings(), 0)}) == len(variants) + 1
    assert plans[1].conv.read()["groups"] == 1 and plans[0].conv.read()["dilation"] == (2, 2)
    assert plans[2].w.read()[1] == 1 and plans[3].x.read()[0] == cudnn.CUDNN_DATA_HALF
    assert plans[4].settings.deterministic and not plain.settings.deterministic
    # TF32 changes nothing for float64 and float16: those share their plan
    f64 = ConvDims((2, 4, 9, 9), (6, 2, 3, 3), **{**base, "dtype": "float64"})
    assert plan_for(f64, "NCHW", Settings(allow_tf32=True), 0) is plan_for(f64, "NCHW", Settings(), 0)
    info = PLANS.info()
    assert info.size == len(variants) + 2 and info.misses == len(variants) + 2 and info.hits == 2


def test_plan_cache_stays_bounded_and_clears():
    PLANS.clear()
    PLANS.resize(4)
    try:
        kept = [plan_for(ConvDims((1, 1, 5 + i, 5), (1, 1, 3, 3)), "NCHW", Settings(), 0) for i in range(10)]
        info = PLANS.info()
        assert (info.size, info.evictions, info.misses) == (4, 6, 10)
        assert not kept[0].x.closed                 # an evicted plan stays usable while someone holds it
        from dnnbind.highlevel import cudnn as backend
        backend.clear_caches()
        assert backend.cache_info()["cudnn.conv"].size == 0
    finally:
        PLANS.resize(512)


def test_math_types_and_usable_algorithms():
    f16, f32, f64 = DTYPES["float16"], DTYPES["float32"], DTYPES["float64"]
    fma, default, tensor = cudnn.CUDNN_FMA_MATH, cudnn.CUDNN_DEFAULT_MATH, cudnn.CUDNN_TENSOR_OP_MATH
    assert algos.math_types(f32, False) == (fma, {fma})
    assert algos.math_types(f32, True) == (tensor, {tensor, default, fma})
    assert algos.math_types(f16, False) == (tensor, {tensor, default, fma})
    assert algos.math_types(f64, True) == (default, {default, fma})

    perfs = (cudnn.cudnnConvolutionFwdAlgoPerf_t * 6)()
    rows = [  # algo, status, memory, determinism, math
        (1, cudnn.CUDNN_STATUS_SUCCESS, 10, cudnn.CUDNN_NON_DETERMINISTIC, tensor),
        (2, cudnn.CUDNN_STATUS_NOT_SUPPORTED, 0, cudnn.CUDNN_DETERMINISTIC, fma),
        (6, cudnn.CUDNN_STATUS_SUCCESS, 1 << 40, cudnn.CUDNN_DETERMINISTIC, fma),
        (0, cudnn.CUDNN_STATUS_SUCCESS, 0, cudnn.CUDNN_NON_DETERMINISTIC, fma),
        (1, cudnn.CUDNN_STATUS_SUCCESS, 100, cudnn.CUDNN_DETERMINISTIC, fma),
        (1, cudnn.CUDNN_STATUS_SUCCESS, 100, cudnn.CUDNN_DETERMINISTIC, fma),
    ]
    for perf, (algo, status, memory, determinism, math) in zip(perfs, rows):
        perf.algo, perf.status, perf.memory, perf.determinism, perf.mathType = algo, status, memory, determinism, math

    def usable(count, deterministic, allowed, limit):
        return algos.usable(perfs, count, deterministic=deterministic, allowed_math=frozenset(allowed),
                            workspace_limit=limit)

    assert usable(6, False, {fma}, 1 << 30) == [(0, fma), (1, fma)]          # status, math, memory, once
    assert usable(6, True, {fma}, 1 << 30) == [(1, fma)]
    assert usable(6, False, {fma, tensor}, 1 << 50) == [(1, tensor), (6, fma), (0, fma), (1, fma)]
    assert usable(6, True, {fma}, 50) == []
    assert usable(3, False, {fma, tensor}, 5) == []


def test_an_algorithm_that_is_not_supported_is_dropped_from_the_choices():
    """ConvPlan.run drops a candidate that answered NOT_SUPPORTED, so later calls never retry it."""
    plan = ConvPlan(ConvDims((1, 2, 5, 5), (3, 2, 3, 3)), "NCHW", Settings())
    plan._choices[algos.FORWARD] = chosen = [(1, 0), (2, 0), (6, 0)]
    plan.drop(algos.FORWARD, (2, 0))
    assert plan.choices(algos.FORWARD) == [(1, 0), (6, 0)]
    assert chosen == [(1, 0), (2, 0), (6, 0)]          # a run iterating over the old list is not disturbed
    plan.drop(algos.FORWARD, (9, 0))                    # not chosen: nothing to do
    plan.drop(algos.BACKWARD_DATA, (1, 0))              # direction not chosen yet: nothing to do
    assert plan.choices(algos.FORWARD) == [(1, 0), (6, 0)] and plan.choices(algos.BACKWARD_DATA) is None


def test_direction_table_is_filled_once_under_concurrent_first_use():
    """Concurrent first calls of algos.direction() all see a complete table (it once raised KeyError)."""
    import sys
    import threading

    errors: list[BaseException] = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)        # switch threads as often as possible: the race shows within a few rounds
    try:
        _race_rounds(errors, threading)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert sorted(algos._TABLE) == sorted(algos.DIRECTIONS)


def _race_rounds(errors, threading):
    for _ in range(200):
        algos._TABLE.clear()
        barrier = threading.Barrier(8)

        def first_use(name: str) -> None:
            barrier.wait()
            try:
                assert algos.direction(name).name == name
            except BaseException as exc:      # noqa: BLE001 - collected and reported below
                errors.append(exc)

        threads = [threading.Thread(target=first_use, args=(algos.DIRECTIONS[i % 3],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def test_float64_is_computed_in_nchw_memory():
    """cuDNN may offer no channels-last float64 algorithm (PyTorch never asks): float64 runs in NCHW memory,
    and its results are handed back in the caller's layout."""
    from dnnbind.highlevel.cudnn.conv import compute_layout
    assert compute_layout("float64", "NHWC") == "NCHW" and compute_layout("float64", "NCHW") == "NCHW"
    for dtype in ("float16", "bfloat16", "float32"):
        assert compute_layout(dtype, "NHWC") == "NHWC" and compute_layout(dtype, "NCHW") == "NCHW"
