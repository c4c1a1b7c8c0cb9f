"""Pooling, softmax, activation, batch-norm and dropout plans on the host, against ConvDims/PoolDims,
the reference backend and cuDNN's own read-back."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from childproc import run_python
from dnnbind.gen import cudnn
from dnnbind.highlevel import reference
from dnnbind.highlevel.cudnn.activation import CUDNN_MODES, ActivationPlan
from dnnbind.highlevel.cudnn.batchnorm import BatchNormPlan, epsilon
from dnnbind.highlevel.cudnn.pool import MAX, MEAN_EXCLUDE_PAD, MEAN_INCLUDE_PAD, PoolPlan, _mean_kind, plan_for
from dnnbind.highlevel.cudnn.softmax import SoftmaxPlan
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.gpu import layout
from dnnbind.highlevel.gpu.geometry import pad
from dnnbind.highlevel.gpu.views import axis_view


def pool_problems(rng, count):
    for _ in range(count):
        n = int(rng.integers(1, 4))
        window = tuple(int(k) for k in rng.integers(1, 5, n))
        stride = tuple(int(s) for s in rng.integers(1, 4, n))
        pads = tuple((int(rng.integers(0, k // 2 + 1)), int(rng.integers(0, k // 2 + 1))) for k in window)
        sizes = tuple(max(1, k - lo - hi) + int(rng.integers(0, 5)) for k, (lo, hi) in zip(window, pads))
        yield PoolDims((int(rng.integers(1, 3)), int(rng.integers(1, 4))) + sizes, window, stride=stride,
                       padding=pads, ceil_mode=bool(rng.integers(2)),
                       dtype=str(rng.choice(["float16", "float32", "float64"])))


@pytest.mark.parametrize("kind", [MAX, MEAN_INCLUDE_PAD, MEAN_EXCLUDE_PAD])
def test_pool_plans_match_pooldims_and_cudnn_output_shapes(kind, rng):
    modes = {MAX: (cudnn.CUDNN_POOLING_MAX, cudnn.CUDNN_POOLING_MAX_DETERMINISTIC),
             MEAN_INCLUDE_PAD: (cudnn.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,) * 2,
             MEAN_EXCLUDE_PAD: (cudnn.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,) * 2}[kind]
    for dims in pool_problems(rng, 150):
        deterministic = bool(rng.integers(2))
        lay = str(rng.choice(["NCHW", "NHWC"]))
        plan = PoolPlan(dims, kind, deterministic, lay)
        assert plan.pooling.output_shape(plan.x) == layout.lift(dims.y_shape)
        read = plan.pooling.read()
        assert read["mode"] == modes[deterministic] and read["nan"] == cudnn.CUDNN_PROPAGATE_NAN
        assert read["window"] == layout.lift_spatial(dims.window, 1)
        assert read["stride"] == layout.lift_spatial(dims.stride, 1)
        assert read["padding"] == layout.lift_spatial(tuple(map(min, dims.pad_low, dims.pad_high)), 0)
        assert plan.x.read()[2] == layout.strides(plan.x.shape, lay)
        if plan.rescale is not None:      # only where padding is explicit or ceil_mode pads, where a count differs
            assert kind != MAX and (plan.geometry.explicit_padding or any(dims.ceil_extra))
            assert not np.all(plan.rescale == 1)


@pytest.mark.parametrize("divisor_override", [None, 3, -5])
@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("padding, stride, ceil_mode", [(((1, 0), (0, 1)), (2, 1), False), (((2, 1), 1), (2, 1), False),
                                                        (((0, 2), (0, 1)), (2, 1), False), (1, (2, 2), True),
                                                        (((0, 1), 0), (3, 2), True), (0, (3, 3), True)])
def test_mean_rescale_gives_the_asymmetric_and_ceil_mode_mean(padding, stride, ceil_mode, include, divisor_override,
                                                              rng):
    """cuDNN's average of the explicitly padded x (the reference computes the same thing for symmetric
    padding without ceil_mode), times the plan's rescale factors, is the mean of x with asymmetric
    padding or ceil_mode's windows past the padding, and with a divisor_override (which cuDNN lacks: the
    plan runs the mean that includes padding, read back from cuDNN's descriptor)."""
    x = rng.standard_normal((2, 3, 7, 8))
    dims = PoolDims(x.shape, (4, 3), stride=stride, padding=padding, ceil_mode=ceil_mode)
    kind = _mean_kind(include, divisor_override)
    assert kind == (MEAN_INCLUDE_PAD if include or divisor_override is not None else MEAN_EXCLUDE_PAD)
    plan = PoolPlan(dims, kind, False, "NCHW", divisor_override)
    if divisor_override is not None:
        assert plan.pooling.read()["mode"] == cudnn.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
        assert plan.rescale is not None
    g = plan.geometry
    xp = pad(np, x, g.extra_low, g.extra_high, "NCHW")
    as_cudnn = PoolDims(xp.shape, dims.window, stride=dims.stride, padding=g.padding)
    assert as_cudnn.y_shape == dims.y_shape
    y, pullback = reference.meanpool(xp, as_cudnn, kind == MEAN_INCLUDE_PAD)
    y_ref, pullback_ref = reference.meanpool(x, dims, include, divisor_override)
    rescale = 1.0 if plan.rescale is None else plan.rescale
    assert plan.rescale is not None or not (include and any(dims.ceil_extra))
    np.testing.assert_allclose(y * rescale, y_ref, rtol=1e-13)
    dy = rng.standard_normal(y.shape)
    dxp = pullback(dy * rescale)
    np.testing.assert_allclose(dxp[(slice(None), slice(None)) + tuple(slice(a, a + s) for a, s in
                                                                        zip(g.extra_low, x.shape[2:]))],
                               pullback_ref(dy), rtol=1e-13)


@pytest.mark.parametrize("shape, lay", [(s, "NCHW") for s in [(7,), (3, 5), (2, 3, 4), (2, 3, 4, 5), (2, 1, 3, 1, 2)]]
                         + [(s, "NHWC") for s in [(2, 3, 4), (2, 3, 4, 5), (2, 1, 3, 1, 2), (1, 4, 1, 1)]])
def test_softmax_view_addresses_the_axis_as_cudnn_channels(shape, lay):
    """The 4-d (outer, C, inner, 1) view with the computed strides reads exactly the softmax groups."""
    a = layout.in_layout(np, np.arange(float(np.prod(shape))).reshape(shape), lay)
    elem = layout.strides(shape, lay)
    assert all(s * a.itemsize == t for s, t, n in zip(elem, a.strides, shape) if n > 1)
    for axis in range(len(shape)):
        view = axis_view(shape, elem, axis)
        if view is None:
            assert lay == "NHWC"        # the backend copies these to C order
            continue
        dims, strides = view
        got = np.lib.stride_tricks.as_strided(a, dims, [s * a.itemsize for s in strides])
        outer = int(np.prod(shape[:axis]))
        want = np.moveaxis(a, axis, -1).reshape(outer, -1, shape[axis])   # (outer, inner, C)
        np.testing.assert_array_equal(got[:, :, :, 0].transpose(0, 2, 1), want)
        plan = SoftmaxPlan(shape, lay, "float32", axis)
        assert plan.desc.read() == (cudnn.CUDNN_DATA_FLOAT, dims, strides)
        assert plan.mode == (cudnn.CUDNN_SOFTMAX_MODE_INSTANCE if dims[2] == 1 else cudnn.CUDNN_SOFTMAX_MODE_CHANNEL)


def test_channels_last_softmax_over_the_channel_axis_needs_no_copy():
    assert axis_view((2, 3, 4, 5), layout.strides((2, 3, 4, 5), "NHWC"), 1) == ((2, 3, 20, 1), (60, 1, 3, 1))
    assert axis_view((2, 3, 4, 5), layout.strides((2, 3, 4, 5), "NHWC"), 2) is None


@pytest.mark.parametrize("mode, alpha", [("relu", None), ("sigmoid", None), ("tanh", None), ("elu", 0.5),
                                         ("clipped_relu", 6.0), ("swish", 1.7)])
def test_activation_plans(mode, alpha):
    plan = ActivationPlan(mode, alpha, 120, "float16")
    read = plan.activation.read()
    assert read["mode"] == getattr(cudnn, CUDNN_MODES[mode][0]) and read["nan"] == cudnn.CUDNN_PROPAGATE_NAN
    if mode in ("elu", "clipped_relu"):
        assert read["coef"] == alpha
    if mode == "swish":
        assert read["swish_beta"] == pytest.approx(alpha)
    assert plan.tensor.read() == (cudnn.CUDNN_DATA_HALF, (1, 1, 1, 120), (120, 120, 120, 1))
    assert set(CUDNN_MODES) | {"identity", "leaky_relu"} == set(__import__("dnnbind.highlevel.ops", fromlist=["x"])
                                                               .ACTIVATION_DEFAULTS)


@pytest.mark.parametrize("shape, lay", [((8, 3), "NCHW"), ((4, 3, 5), "NHWC"), ((2, 3, 4, 5), "NCHW"),
                                        ((2, 3, 2, 3, 2), "NHWC")])
@pytest.mark.parametrize("dtype, param", [("float16", cudnn.CUDNN_DATA_FLOAT), ("float32", cudnn.CUDNN_DATA_FLOAT),
                                          ("float64", cudnn.CUDNN_DATA_DOUBLE)])
@pytest.mark.parametrize("training", [False, True])
def test_batchnorm_plans(shape, lay, dtype, param, training):
    plan = BatchNormPlan(shape, lay, dtype, training)
    lifted = layout.lift(shape)
    assert plan.x.read()[1:] == (lifted, layout.strides(lifted, lay))
    data_type, dims, _ = plan.param.read()
    assert data_type == param and dims == (1, shape[1]) + (1,) * (len(lifted) - 2)
    # the faster persistent kernels where PyTorch uses them: channels-last training
    persistent = training and lay == "NHWC"
    assert plan.mode == (cudnn.CUDNN_BATCHNORM_SPATIAL_PERSISTENT if persistent else cudnn.CUDNN_BATCHNORM_SPATIAL)


def test_epsilon_is_clamped_with_a_warning(monkeypatch):
    assert epsilon(1e-5) == 1e-5
    monkeypatch.setattr(cudnn, "CUDNN_BN_MIN_EPSILON", 1e-4)    # what older cuDNN releases had
    with pytest.warns(RuntimeWarning, match=r"eps=1e-06 is below cuDNN's minimum CUDNN_BN_MIN_EPSILON=0.0001"):
        assert epsilon(1e-6) == 1e-4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert epsilon(1e-3) == 1e-3


def test_building_plans_raises_no_deprecation_warning():
    """The backend binds cuDNN's deprecated legacy functions quietly (the warning is about its choice)."""
    result = run_python("""
        import warnings
        warnings.simplefilter("error")
        from dnnbind.highlevel.cudnn.conv_plan import plan_for
        from dnnbind.highlevel.cudnn.pool import PoolPlan, MAX
        from dnnbind.highlevel.cudnn.activation import ActivationPlan
        from dnnbind.highlevel.cudnn.batchnorm import BatchNormPlan
        from dnnbind.highlevel.cudnn.settings import settings
        from dnnbind.highlevel.dims.conv import ConvDims
        from dnnbind.highlevel.dims.pool import PoolDims
        plan = plan_for(ConvDims((2, 3, 8, 8), (4, 3, 3, 3)), "NCHW", settings.current(), 0)
        plan.conv.read(); plan.w.read()
        PoolPlan(PoolDims((2, 3, 8, 8), 2), MAX, True, "NCHW").pooling.read()
        ActivationPlan("swish", 1.0, 10, "float32").activation.read()
        BatchNormPlan((2, 3, 4), "NCHW", "float16")
        print("quiet")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "quiet"


def test_bfloat16_plans_build_with_float32_accumulation():
    """bfloat16 end to end on the host: ConvDims takes it, cuDNN accepts every plan's descriptors, and the
    per-channel parameters, the convolution's and the RNN's compute types are float32."""
    from dnnbind.highlevel.cudnn.conv_plan import ConvPlan
    from dnnbind.highlevel.cudnn.rnn import math_type
    from dnnbind.highlevel.cudnn.rnn_plan import NetworkPlan
    from dnnbind.highlevel.dims.conv import ConvDims
    from dnnbind.highlevel.dims.rnn import RNNDims
    from dnnbind.highlevel.gpu.settings import Settings
    conv = ConvPlan(ConvDims((2, 4, 6, 6), (3, 4, 3, 3), padding=1, dtype="bfloat16"), "NHWC", Settings())
    assert conv.x.read()[0] == cudnn.CUDNN_DATA_BFLOAT16 and conv.dtype.compute == cudnn.CUDNN_DATA_FLOAT
    assert conv.requested_math == cudnn.CUDNN_TENSOR_OP_MATH
    bn = BatchNormPlan((2, 3, 4, 4), "NCHW", "bfloat16", True)
    assert bn.param.read()[0] == cudnn.CUDNN_DATA_FLOAT
    dims = RNNDims((5, 2, 3), [((8, 3), (8, 2), (8,), (8,))], hidden_size=2, dtype="bfloat16")
    read, _ = NetworkPlan(dims, math_type(dims)).desc.read()
    assert read.data_type == cudnn.CUDNN_DATA_BFLOAT16 and read.math_prec == cudnn.CUDNN_DATA_FLOAT
    assert read.math_type == cudnn.CUDNN_TENSOR_OP_MATH


def test_pool_plans_are_cached_per_divisor_override():
    dims = PoolDims((1, 2, 6, 6), 2)
    plans = {d: plan_for(dims, _mean_kind(False, d), "NCHW", 0, d) for d in (None, 2, 3)}
    assert len({id(p) for p in plans.values()}) == 3
    assert plans[None].rescale is None and plans[2].rescale is not None
    np.testing.assert_array_equal(plans[3].rescale, np.full((1, 1, 3, 3), 4 / 3))
    assert plan_for(dims, _mean_kind(False, 2), "NCHW", 0, 2) is plans[2]
