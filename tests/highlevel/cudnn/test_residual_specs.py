"""The cuDNN backend's residual form on the host: every op's NAME_residuals (what a framework's fake
kernel reports) from ArraySpec inputs, against the plans and the real libcudnn's host-side answers;
the signatures of the three functions against the op specs (:data:`dnnbind.highlevel.specs.SPECS`)."""
from __future__ import annotations

import importlib.util
import inspect

import numpy as np
import pytest

from dnnbind.gen import cudnn as gen
from dnnbind.highlevel import cudnn as backend
from dnnbind.highlevel.cudnn.rnn import spec_of
from dnnbind.highlevel.cudnn.batchnorm import BatchNormPlan
from dnnbind.highlevel.cudnn.conv_plan import ConvPlan
from dnnbind.highlevel.cudnn.dropout import reserve_bytes
from dnnbind.highlevel.cudnn.pool import MAX, MEAN_EXCLUDE_PAD, PoolPlan
from dnnbind.highlevel.cudnn.rnn_weights import canonical_params
from dnnbind.highlevel.dims.checks import numpy_dtype
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.dims.rnn import RNNDims
from dnnbind.highlevel.gpu.chunks import CHUNK_ELEMENTS
from dnnbind.highlevel.gpu.layout import lift
from dnnbind.highlevel.gpu.settings import Settings
from dnnbind.highlevel.residual import ArraySpec
from dnnbind.highlevel.specs import SPECS

HAVE_CUPY = importlib.util.find_spec("cupy") is not None
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def spec(shape, dtype=F32):
    return ArraySpec(tuple(shape), np.dtype(dtype))


@pytest.mark.parametrize("op", list(SPECS))
def test_every_op_has_the_residual_form_of_its_forms_entry(op):
    form = SPECS[op]
    forward = list(inspect.signature(getattr(backend, f"{op}_forward")).parameters)
    backward = list(inspect.signature(getattr(backend, f"{op}_backward")).parameters)
    residuals = list(inspect.signature(getattr(backend, f"{op}_residuals")).parameters)
    assert forward[:len(form.array_names + form.static)] == list(form.array_names + form.static)
    assert residuals[:len(form.array_names + form.static)] == list(form.array_names + form.static)
    assert backward[:2 + len(form.static)] == ["residuals", "cotangents", *form.static]
    assert list(inspect.signature(getattr(backend, op)).parameters)[:len(forward)] == forward


def random_conv(rng, transposed=False):
    n = int(rng.integers(1, 4))
    groups = int(rng.integers(1, 3))
    kernel = tuple(int(k) for k in rng.integers(1, 4, n))
    stride = tuple(int(s) for s in rng.integers(1, 4, n))
    dilation = tuple(int(d) for d in rng.integers(1, 3, n))
    pads = tuple((int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(n))
    dtype = str(rng.choice(["float16", "float32", "float64"]))
    if transposed:
        x = (2, 2 * groups) + tuple(int(s) for s in rng.integers(2, 6, n))
        w = (2 * groups, int(rng.integers(1, 3))) + kernel
        out_pad = tuple(int(rng.integers(0, max(s, d))) for s, d in zip(stride, dilation))
        try:
            return x, w, ConvDims.transposed(x, w, stride=stride, padding=pads, output_padding=out_pad,
                                             dilation=dilation, groups=groups, dtype=dtype)
        except ValueError:          # an empty output: padding too large for this draw
            return None
    x = (2, 2 * groups) + tuple(d * (k - 1) + 1 + int(rng.integers(0, 5)) for d, k in zip(dilation, kernel))
    w = (3 * groups, 2) + kernel
    return x, w, ConvDims(x, w, stride=stride, padding=pads, dilation=dilation, groups=groups, dtype=dtype)


def test_conv_saves_x_as_cudnn_sees_it_and_w(rng):
    """The saved x has the shape of the plan's (explicitly padded) x descriptor, lifted as cuDNN sees it."""
    for _ in range(60):
        x, w, dims = random_conv(rng)
        dtype = numpy_dtype(dims.dtype)
        got = backend.conv_residuals(spec(x, dtype), spec(w, dtype), None, dims)
        plan = ConvPlan(dims, "NCHW", Settings())
        assert got == (ArraySpec(plan.padded_x_shape, dtype), ArraySpec(w, dtype))
        assert lift(got[0].shape) == plan.x.read()[1]
        assert backend.conv_residuals(spec(x, dtype), spec(w, dtype), spec((w[0],), dtype), dims,
                                      layout="NHWC") == got


def test_conv_transpose_saves_x_extended_to_the_convolutions_output(rng):
    """output_padding of a stride or more adds output positions: the saved x is x zero-extended to the
    forward convolution's output shape, and the backward crops dx back to dims.transpose_input_shape."""
    extended = 0
    for _ in range(200):
        problem = random_conv(rng, transposed=True)
        if problem is None:
            continue
        x, w, dims = problem
        assert dims.transpose_input_shape == x
        dtype = numpy_dtype(dims.dtype)
        got = backend.conv_transpose_residuals(spec(x, dtype), spec(w, dtype), None, dims)
        assert got == (ArraySpec(dims.y_shape, dtype), ArraySpec(w, dtype))
        assert lift(dims.y_shape) == ConvPlan(dims, "NHWC", Settings()).y.read()[1]
        extended += dims.y_shape != x
    assert extended > 10          # the case where saving x alone would not do


@pytest.mark.parametrize("kind", [MAX, MEAN_EXCLUDE_PAD])
def test_pooling_saves_padded_x_and_y(kind, rng):
    for _ in range(40):
        n = int(rng.integers(1, 4))
        window = tuple(int(k) for k in rng.integers(1, 4, n))
        pads = tuple((int(rng.integers(0, k // 2 + 1)), int(rng.integers(0, k // 2 + 1))) for k in window)
        x = (2, 3) + tuple(k + int(rng.integers(0, 4)) for k in window)
        dims = PoolDims(x, window, stride=1, padding=pads, dtype="float16")
        plan = PoolPlan(dims, kind, False, "NHWC")
        if kind == MAX:
            got = backend.maxpool_residuals(spec(x, F16), dims, layout="NHWC")
        else:
            got = backend.meanpool_residuals(spec(x, F16), dims, False)
        assert [lift(s.shape) for s in got] == [plan.x.read()[1], plan.y.read()[1]]
        assert [s.dtype for s in got] == [F16, F16]


def test_pooling_ceil_mode_saves_x_padded_past_the_padding_and_dilated_max_the_winners():
    dims = PoolDims((2, 3, 8, 9), 3, stride=2, padding=1, ceil_mode=True, dtype="float16")
    plan = PoolPlan(dims, MEAN_EXCLUDE_PAD, False, "NCHW")
    got = backend.meanpool_residuals(spec(dims.x_shape, F16), dims, True)
    assert [s.shape for s in got] == [plan.x.read()[1], plan.y.read()[1]] == [(2, 3, 9, 9), (2, 3, 5, 5)]
    dims = PoolDims((2, 3, 8, 9), 3, stride=2, padding=1, dilation=2, dtype="float16")
    assert backend.maxpool_residuals(spec(dims.x_shape, F16), dims) == (spec(dims.y_shape, np.uint8),)


def test_softmax_and_activation_residuals():
    x = spec((4, 5, 6), F16)
    assert backend.softmax_residuals(x, 2) == backend.logsoftmax_residuals(x, 0) == (x,)
    assert backend.activation_residuals(x, "identity", None) == ()
    assert backend.activation_residuals(x, "leaky_relu", 0.1) == (x,)
    for mode in ("relu", "sigmoid", "tanh", "elu", "clipped_relu", "swish"):
        assert backend.activation_residuals(x, mode, None) == (x, x)


def test_zero_d_and_empty_arrays_follow_the_edge_policy():
    assert backend.softmax_residuals(spec((), F32), 0) == (spec((1,), F32),)
    assert backend.dropout_residuals(spec((), F32), 0.5) == backend.dropout_residuals(spec((1,), F32), 0.5)
    dims = ConvDims((0, 3, 5, 5), (4, 3, 3, 3))
    assert backend.conv_residuals(spec((0, 3, 5, 5)), spec((4, 3, 3, 3)), spec((4,)), dims) == (
        spec((0, 3, 5, 5)), spec((4, 3, 3, 3)), spec((4,)))
    assert backend.dropout_residuals(spec((0, 7)), 0.5) == (spec((0, 7), bool),)


@pytest.mark.parametrize("dtype, param", [("float16", F32), ("float32", F32), ("float64", F64)])
@pytest.mark.parametrize("training", [True, False])
def test_batchnorm_saves_x_and_three_per_channel_arrays_in_cudnns_parameter_dtype(dtype, param, training):
    x = spec((4, 3, 5, 6), dtype)
    got = backend.batchnorm_residuals(x, spec((3,), dtype), spec((3,), dtype), None if training else spec((3,)),
                                      None if training else spec((3,)), training, 0.1, 1e-5)
    assert got == (x,) + (ArraySpec((3,), param),) * 3
    read = BatchNormPlan((4, 3, 5, 6), "NCHW", dtype, training).param.read()
    assert read[0] == {F32: gen.CUDNN_DATA_FLOAT, F64: gen.CUDNN_DATA_DOUBLE}[param]


def test_bfloat16_batchnorm_parameters_are_float32():
    bf16 = pytest.importorskip("ml_dtypes").bfloat16
    got = backend.batchnorm_residuals(spec((2, 3), bf16), spec((3,), bf16), spec((3,), bf16), None, None, True,
                                      0.1, 1e-5)
    assert [s.dtype for s in got] == [np.dtype(bf16), F32, F32, F32]


@pytest.mark.parametrize("dtype", [F16, F32, F64])
def test_dropout_saves_cudnns_reserve_space_per_chunk(dtype):
    """cudnnDropoutGetReserveSpaceSize answers on the host; arrays of 2**30 elements or more run in chunks,
    one reserve space each (sizes asked, nothing allocated)."""
    x = spec((8, 16, 32), dtype)
    (reserve,) = backend.dropout_residuals(x, 0.3)
    assert reserve.dtype == np.uint8 and reserve.shape == (reserve_bytes(x.shape[0] * 16 * 32, dtype),)
    assert reserve.shape[0] >= 8 * 16 * 32 // 8        # at least a bit per element
    assert backend.dropout_residuals(x, 0.0) == backend.dropout_residuals(x, 1.0) == ()
    big = backend.dropout_residuals(spec((2, CHUNK_ELEMENTS + 5), dtype), 0.5, 3)
    assert [s.shape for s in big] == [(reserve_bytes(CHUNK_ELEMENTS, dtype),), (reserve_bytes(CHUNK_ELEMENTS, dtype),),
                                      (reserve_bytes(10, dtype),)]


def rnn_problem(mode="lstm", layers=2, dirs=2, bias=True, dtype="float32"):
    """(dims, the weights as ArraySpecs) of a network with input 3, hidden 4, 5 steps, batch 2."""
    g = {"lstm": 4, "gru": 3, "rnn_tanh": 1}[mode] * 4
    shapes = [((g, 3 if i < dirs else 4 * dirs), (g, 4), (g,) if bias else None, (g,) if bias else None)
              for i in range(layers * dirs)]
    dims = RNNDims((5, 2, 3), shapes, mode=mode, hidden_size=4, num_layers=layers, bidirectional=dirs == 2,
                   dtype=dtype)
    return dims, [tuple(None if s is None else spec(s, dtype) for s in entry) for entry in shapes]


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_rnn_residual_specs_from_the_space_sizes(mode):
    """What a training forward saves, for the weight-space size canonical_params predicts (the GPU tests
    hold it against cuDNN's answer); inference mode saves nothing and needs no GPU to say so."""
    dims, weights = rnn_problem(mode, dtype="float16")
    _, size = canonical_params(dims)
    got = spec_of(dims, F16, size * 2, 1234)
    states = 2 if mode == "lstm" else 1
    assert [s.shape for s in got] == [(5, 2, 3)] + [(4, 2, 4)] * states + [(5, 2, 8), (size,), (1234,)]
    assert [s.dtype for s in got] == [F16] * (states + 3) + [np.dtype(np.uint8)]
    assert backend.rnn_residuals(spec((5, 2, 3), F16), weights, None, None, dims, training=False) == ()


@pytest.mark.skipif(HAVE_CUPY, reason="CuPy is installed here")
def test_rnn_residuals_of_a_training_forward_need_cupy():
    """cuDNN answers the weight and reserve space sizes only through a handle, hence a GPU."""
    dims, weights = rnn_problem()
    with pytest.raises(ImportError, match="need CuPy"):
        backend.rnn_residuals(spec((5, 2, 3)), weights, None, None, dims)
