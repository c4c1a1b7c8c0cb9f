"""The MIOpen backend's residual form, on the CPU: every op exported in both forms with the edge policy, and
NAME_residuals, which a framework's fake kernel reports, describing on ArraySpecs what NAME_forward saves
(the forward itself is checked against it on a device: test_gpu_residuals.py).

Specs that need no library are computed in this process; the two that ask libMIOpen on the host (max
pooling's index workspace size, batch norm's parameter dtype) run in one child process under the real
library (tests/miopen_runner.py). The RNN's reserve-space size needs a handle, hence a device: only the
rest of its spec is checked here.
"""
from __future__ import annotations

import importlib
import inspect
import json

import numpy as np
import pytest

from dnnbind.highlevel.dims import ConvDims, PoolDims, RNNDims
from dnnbind.highlevel.gpu.geometry import padded_shape
from dnnbind.highlevel.miopen import rnn_layout
from dnnbind.highlevel.residual import ArraySpec
from dnnbind.highlevel.specs import SPECS

from .rnn_helpers import rnn_dims

miopen = importlib.import_module("dnnbind.highlevel.miopen")
rnn_module = importlib.import_module("dnnbind.highlevel.miopen.rnn")

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BOOL, U8 = np.dtype(bool), np.dtype(np.uint8)


def spec(shape, dtype=F32):
    return ArraySpec(tuple(shape), np.dtype(dtype))


# ------------------------------------------------------------------------------------------- exports


@pytest.mark.parametrize("op", list(SPECS))
def test_every_op_comes_in_both_forms_under_the_edge_policy(op):
    functions = [getattr(miopen, f"{op}{part}") for part in ("", "_forward", "_backward", "_residuals")]
    assert [getattr(f, "edge_policy", None) for f in functions] == [op] * 4
    assert all(f"{op}{part}" in miopen.__all__ for part in ("", "_forward", "_backward", "_residuals"))
    assert miopen.__dict__[op].__name__ == op and op in SPECS


def test_forward_and_residuals_take_the_same_parameters():
    for op, form in SPECS.items():
        names = form.array_names + form.static
        for part in ("forward", "residuals"):
            params = list(inspect.signature(getattr(miopen, f"{op}_{part}")).parameters)
            assert params[:len(names)] == list(names), (op, part, params)
        backward = list(inspect.signature(getattr(miopen, f"{op}_backward")).parameters)
        # the convolutions and the chains are composed above the backends, with the residual form's own names
        first = "residuals" if form.composed_from or form.chain else "saved"
        assert backward[:2 + len(form.static)] == [first, "cotangents", *form.static], (op, backward)


def test_convolutions_take_layout_and_settings_options():
    for op in ("conv", "conv_transpose"):
        for part in ("forward", "backward", "residuals"):
            params = inspect.signature(getattr(miopen, f"{op}_{part}")).parameters
            assert params["layout"].kind == params["settings"].kind == inspect.Parameter.KEYWORD_ONLY


# ---------------------------------------------------------------------------------- specs, no library


@pytest.mark.parametrize("op", ["softmax", "logsoftmax"])
@pytest.mark.parametrize("dtype", [F16, F32, F64])
def test_softmax_saves_y(op, dtype):
    assert getattr(miopen, f"{op}_residuals")(spec((2, 5, 3), dtype), 1) == (spec((2, 5, 3), dtype),)


@pytest.mark.parametrize("mode, alpha, count", [("identity", None, 0), ("swish", 1.0, 1), ("relu", None, 2),
                                                ("sigmoid", None, 2), ("tanh", None, 2), ("elu", 1.0, 2),
                                                ("leaky_relu", 0.1, 2), ("clipped_relu", 6.0, 2)])
def test_activation_saves_what_its_backward_reads(mode, alpha, count):
    """identity nothing; swish (a CuPy kernel) x; MIOpen's modes x and y, for miopenActivationBackward."""
    assert miopen.activation_residuals(spec((4, 6), F16), mode, alpha) == (spec((4, 6), F16),) * count


@pytest.mark.parametrize("x_shape, window, kw", [
    ((2, 3, 9, 8), 3, dict(stride=2, padding=1)),
    ((2, 3, 7, 8), (3, 2), dict(padding=((1, 0), (0, 1)))),          # asymmetric: x padded explicitly
    ((2, 3, 10), 2, {}),
    ((1, 2, 4, 4, 6), 2, dict(padding=(1, (0, 1), 1))),
    ((2, 3, 8, 9), 3, dict(stride=2, padding=1, ceil_mode=True)),    # ceil_mode: x padded past the padding
])
@pytest.mark.parametrize("include", [True, False])
def test_meanpool_saves_padded_x_and_y(x_shape, window, kw, include):
    dims = PoolDims(x_shape, window, dtype="float16", **kw)
    lo = [min(a, b) for a, b in zip(dims.pad_low, dims.pad_high)]
    extra_low = tuple(a - s for a, s in zip(dims.pad_low, lo))
    extra_high = tuple(b - s for b, s in zip(dims.pad_high, lo))
    expected = (spec(padded_shape(dims.x_shape, extra_low, extra_high), F16), spec(dims.y_shape, F16))
    assert miopen.meanpool_residuals(spec(x_shape, F16), dims, include) == expected


def test_dilated_maxpool_saves_the_winners_as_the_reference():
    from dnnbind.highlevel import reference
    for dims in (PoolDims((2, 3, 9, 10), 3, stride=2, padding=1, dilation=(2, 1), dtype="float32"),
                 PoolDims((1, 2, 9, 8, 9), (3, 2, 3), padding=1, dilation=2, ceil_mode=True, dtype="float32")):
        assert miopen.maxpool_residuals(spec(dims.x_shape), dims) == reference.maxpool_residuals(
            spec(dims.x_shape), dims) == (spec(dims.y_shape, np.uint8),)


def test_asymmetric_padding_grows_the_saved_x():
    dims = PoolDims((2, 3, 7, 8), (3, 2), padding=((1, 0), (0, 1)), dtype="float32")
    assert miopen.meanpool_residuals(spec((2, 3, 7, 8)), dims)[0].shape == (2, 3, 8, 9)


@pytest.mark.parametrize("x_shape, w_shape, kw, saved_x", [
    ((2, 4, 9, 8), (6, 2, 3, 2), dict(stride=(2, 1), padding=((1, 2), (0, 1)), groups=2), (2, 4, 10, 9)),
    ((2, 3, 11), (4, 3, 3), dict(padding=2), (2, 3, 11)),
    ((1, 2, 5, 6, 5), (3, 2, 2, 3, 2), dict(padding=((0, 1), 1, 1), flip=True), (1, 2, 6, 6, 5)),
])
@pytest.mark.parametrize("dtype", [F16, F32, F64])
def test_conv_saves_x_as_miopen_saw_it_and_the_weights(x_shape, w_shape, kw, saved_x, dtype):
    dims = ConvDims(x_shape, w_shape, dtype=dtype, **kw)
    b = spec((w_shape[0],), dtype)
    for bias in (b, None):
        assert miopen.conv_residuals(spec(x_shape, dtype), spec(w_shape, dtype), bias, dims) == (
            spec(saved_x, dtype), spec(w_shape, dtype))
    assert miopen.conv_residuals(spec(x_shape, dtype), spec(w_shape, dtype), b, dims, layout="NHWC") == (
        spec(saved_x, dtype), spec(w_shape, dtype))


def test_conv_transpose_saves_x_extended_to_the_forward_convolution_s_output():
    # output_padding 1 >= stride 1 (allowed as it is below dilation 2): x grows by one position
    dims = ConvDims.transposed((2, 4, 5, 5), (4, 3, 3, 3), stride=1, dilation=2, output_padding=1, dtype="float32")
    assert dims.y_shape == (2, 4, 6, 6) and dims.transpose_input_shape == (2, 4, 5, 5)
    assert miopen.conv_transpose_residuals(spec((2, 4, 5, 5)), spec((4, 3, 3, 3)), None, dims) == (
        spec((2, 4, 6, 6)), spec((4, 3, 3, 3)))


def test_bfloat16_convolutions_have_specs_and_other_ops_refuse_them():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    dims = ConvDims((1, 2, 5, 5), (3, 2, 3, 3), dtype=bf16)
    assert miopen.conv_residuals(spec((1, 2, 5, 5), bf16), spec((3, 2, 3, 3), bf16), None, dims) == (
        spec((1, 2, 5, 5), bf16), spec((3, 2, 3, 3), bf16))
    with pytest.raises(TypeError, match="no bfloat16 kernel for softmax"):
        miopen.softmax_residuals(spec((2, 3), bf16), 1)
    with pytest.raises(TypeError, match="no bfloat16 kernel for dropout"):
        miopen.dropout_residuals(spec((2, 3), bf16), 0.5, None)


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_dropout_saves_a_boolean_mask_shaped_like_x(p):
    """MIOpen's reserve space is the mask, one byte per element: the forward hands it a bool array."""
    assert miopen.dropout_residuals(spec((3, 4, 5), F16), p, 7) == (spec((3, 4, 5), BOOL),)


# --------------------------------------------------------------------------------------- edge policy


def test_zero_size_and_0d_calls_follow_the_edge_policy():
    assert miopen.softmax_residuals(spec(()), 0) == (spec((1,)),)               # 0-d runs as shape (1,)
    assert miopen.dropout_residuals(spec(()), 0.5, 1) == (spec((1,), BOOL),)
    assert miopen.activation_residuals(spec((0, 3)), "relu", None) == (spec((0, 3)),)   # the zero gradients
    dims = ConvDims((0, 2, 5, 5), (3, 2, 3, 3))
    assert miopen.conv_residuals(spec((0, 2, 5, 5)), spec((3, 2, 3, 3)), None, dims) == (
        spec((0, 2, 5, 5)), spec((3, 2, 3, 3)))


# ----------------------------------------------------------------------------------------------- rnn


@pytest.mark.parametrize("mode, bias, has_h0, has_c0", [("lstm", True, True, True), ("lstm", False, False, True),
                                                        ("gru", True, True, False), ("rnn_tanh", False, False, False)])
def test_rnn_spec_keeps_one_order_whatever_states_were_given(mode, bias, has_h0, has_c0):
    dims = rnn_dims(mode, layers=2, bidirectional=True, bias=bias, inp=3, hidden=2, batch=2)
    got = rnn_module.residual_specs(dims, F16, 1234, has_h0, has_c0)
    weights = sum(int(np.prod(s)) for entry in rnn_layout.torch_shapes(dims) for s in entry if s is not None)
    state = spec(dims.h_shape, F16)
    assert got == (spec((4, 2, 3), F16), spec(dims.y_shape, F16), spec((weights,), F16), spec((1234,), U8),
                   state if has_h0 else spec((0,), F16), state if has_c0 else spec((0,), F16))
    assert rnn_layout.weight_space_size(dims) == weights


def test_rnn_residuals_refuse_float64_before_asking_for_a_device():
    shapes = rnn_layout.torch_shapes(rnn_dims("gru"))
    dims = RNNDims((4, 2, 3), shapes, mode="gru", hidden_size=2, num_layers=2, bidirectional=True, dtype="float64")
    weights = [[None if s is None else spec(s, F64) for s in entry] for entry in shapes]
    with pytest.raises(TypeError, match="runs RNNs in float16 and float32 only"):
        miopen.rnn_residuals(spec((4, 2, 3), F64), weights, None, None, dims)


def test_rnn_projection_is_refused_before_asking_for_a_device():
    """MIOpen has no LSTM projection: forward, residuals and plans say so, naming proj_size and MIOpen."""
    from dnnbind.highlevel.miopen.rnn_plan import RNNPlan
    shapes = [((16, 3), (16, 2), (16,), (16,), (2, 4))]
    dims = RNNDims((4, 2, 3), shapes, mode="lstm", hidden_size=4, proj_size=2, dtype="float32")
    weights = [[spec(s, np.dtype(np.float32)) for s in entry] for entry in shapes]
    match = r"MIOpen backend has no LSTM projection \(proj_size=2\)"
    with pytest.raises(NotImplementedError, match=match):
        miopen.rnn_residuals(spec((4, 2, 3), np.dtype(np.float32)), weights, None, None, dims)
    with pytest.raises(NotImplementedError, match=match):
        miopen.rnn_forward(np.zeros((4, 2, 3), np.float32), weights, None, None, dims)
    with pytest.raises(NotImplementedError, match=match):
        RNNPlan(dims)


# ----------------------------------------------------------------------------- specs that ask MIOpen

CHILD = r"""
import importlib, json
import numpy as np
from dnnbind.highlevel.dims import PoolDims
from dnnbind.highlevel.residual import ArraySpec
miopen = importlib.import_module("dnnbind.highlevel.miopen")
pool = importlib.import_module("dnnbind.highlevel.miopen.pool")
dropout = importlib.import_module("dnnbind.highlevel.miopen.dropout")
config = json.loads(CONFIG)
out = {"maxpool": [], "batchnorm": [], "dropout": []}
for x, window, kw, dtype in config["maxpool"]:
    dims = PoolDims(x, window, dtype=dtype, **kw)
    got = miopen.maxpool_residuals(ArraySpec(tuple(x), np.dtype(dtype)), dims)
    out["maxpool"].append({"specs": [[list(s.shape), np.dtype(s.dtype).name] for s in got],
                           "workspace": pool.plan_for(dims, "max").workspace})
for x, dtype in config["batchnorm"]:
    c = x[1]
    got = miopen.batchnorm_residuals(ArraySpec(tuple(x), np.dtype(dtype)), ArraySpec((c,), np.dtype(dtype)),
                                     ArraySpec((c,), np.dtype(dtype)), None, None, True, 0.1, 1e-5)
    out["batchnorm"].append([[list(s.shape), np.dtype(s.dtype).name] for s in got])
for n, dtype in config["dropout"]:
    out["dropout"].append(dropout.tensor_for(n, dtype).reserve_size)
print(json.dumps(out))
"""

MAXPOOL = [((2, 3, 9, 8), (3, 2), dict(stride=2, padding=(1, (0, 1))), "float32"),
           ((2, 3, 11), 3, dict(stride=2, padding=1), "float16"),
           ((1, 2, 5, 6, 7), 2, {}, "float32")]
BATCHNORM = [((4, 3), "float32"), ((2, 3, 4, 5), "float16"), ((2, 3, 2, 4, 5), "float64")]
DROPOUT = [(100, "float32"), (77, "float16")]


@pytest.fixture(scope="module")
def library_specs(miopen_run):
    config = {"maxpool": MAXPOOL, "batchnorm": BATCHNORM, "dropout": DROPOUT}
    result = miopen_run(f"CONFIG = {json.dumps(config)!r}\n" + CHILD)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("i", range(len(MAXPOOL)))
def test_maxpool_saves_padded_x_y_and_miopen_s_index_workspace(library_specs, i):
    x, window, kw, dtype = MAXPOOL[i]
    dims = PoolDims(x, window, dtype=dtype, **kw)
    got = library_specs["maxpool"][i]
    mean = miopen.meanpool_residuals(spec(x, dtype), dims)
    assert got["specs"][:2] == [[list(s.shape), dtype] for s in mean]       # padded x and y, as for the mean
    assert got["specs"][2] == [[got["workspace"]], "uint8"] and got["workspace"] > 0


@pytest.mark.parametrize("i", range(len(BATCHNORM)))
def test_batchnorm_saves_x_and_float32_statistics(library_specs, i):
    """MIOpen 3.4 derives float32 parameters for every data type: gamma, mean and invstd are saved so."""
    x, dtype = BATCHNORM[i]
    assert library_specs["batchnorm"][i] == [[list(x), dtype]] + [[[x[1]], "float32"]] * 3


def test_dropout_masks_fit_miopen_s_reserve_space(library_specs):
    assert library_specs["dropout"] == [n for n, _ in DROPOUT]
