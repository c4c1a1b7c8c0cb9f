"""The MIOpen backend's plans built against the real libMIOpen 3.4, without a device.

One child process (under Debian's loader, see tests/miopen_runner.py) builds every plan below and
prints what MIOpen holds as JSON; the tests compare that with what the backend meant to describe.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from dnnbind.gen import miopen as lib
from dnnbind.highlevel.dims import ConvDims, PoolDims, RNNDims
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.geometry import ConvGeometry, PoolGeometry
from dnnbind.highlevel.gpu.rescale import mean_rescale_factor
from dnnbind.highlevel.gpu.views import axis_view
from dnnbind.highlevel.miopen import rnn_layout

from .rnn_helpers import labelled_weights, rnn_dims

pool_module = __import__("importlib").import_module("dnnbind.highlevel.miopen.pool")

# (x shape, w shape, ConvDims keywords, layout, settings keywords)
CONV = [
    ((2, 4, 9, 7), (6, 2, 3, 3), dict(stride=(2, 1), padding=((1, 2), (0, 0)), dilation=(1, 2), groups=2, flip=True),
     "NCHW", dict(deterministic=True, algo="benchmark")),
    ((2, 4, 9), (6, 4, 3), dict(padding=1), "NHWC", {}),
    ((1, 2, 5, 6, 7), (4, 1, 2, 3, 2), dict(stride=2, padding=1, groups=2), "NCHW", dict(immediate=True)),
    ((3, 8, 16, 16), (8, 1, 3, 3), dict(padding=1, groups=8, dtype="float16"), "NHWC", {}),
    ((2, 3, 6, 6), (5, 3, 2, 2), dict(dtype="float64"), "NCHW", {}),
]
# (x shape, window, PoolDims keywords, kind[, divisor_override])
POOL = [
    ((2, 3, 9, 8), (3, 2), dict(stride=(2, 2), padding=(1, (0, 1))), "max"),
    ((2, 3, 5, 6, 7), 2, {}, "max"),
    ((2, 3, 11), 3, dict(stride=2, padding=1), "max"),
    ((1, 2, 45, 45, 45), 3, dict(padding=1), "max"),
    ((2, 3, 8, 8), 3, dict(stride=1, padding=(1, (0, 1))), "mean_exclude_pad"),
    ((2, 3, 4, 6, 6), 2, dict(padding=1), "mean_include_pad"),
    ((2, 3, 8, 9), 3, dict(stride=2, padding=1, ceil_mode=True), "mean_include_pad", 4),    # divisor_override:
    ((2, 3, 7, 6, 5), 2, dict(padding=(1, (0, 1), 0)), "mean_include_pad", -3),               # the inclusive mean
]
# (shape, layout, dtype, axis)
SOFTMAX = [((2, 3, 4, 5), "NCHW", "float32", 1), ((2, 3, 4, 5), "NHWC", "float32", 1),
           ((2, 3, 4, 5), "NCHW", "float16", 3), ((7,), "NCHW", "float32", 0), ((6, 5), "NCHW", "float64", 0),
           ((2, 3, 4, 5, 6), "NHWC", "float32", 1),
           ((2, 3, 4, 5, 6), "NCHW", "float32", 2)]
ACTIVATIONS = [("relu", None), ("sigmoid", None), ("tanh", None), ("elu", 0.7), ("leaky_relu", 0.2),
               ("clipped_relu", 6.0)]
BATCHNORM = [((4, 3), "float32"), ((4, 3, 5), "float16"), ((2, 3, 4, 5), "float32"), ((2, 3, 2, 4, 5), "float64")]
DROPOUT = [(100, "float32"), (77, "float16"), (1000, "float64")]
# (mode, layers, bidirectional, bias, lengths)
RNN = [("lstm", 2, True, True, None), ("gru", 1, False, True, None), ("rnn_relu", 2, False, False, None),
       ("rnn_tanh", 1, True, True, (4, 2)), ("gru", 3, True, False, (1, 4)), ("lstm", 1, False, False, (3, 4))]
RNN_DTYPE = ["float32", "float16", "float32", "float32", "float16", "float32"]

CHILD = r"""
import importlib, json, sys
from ctypes import byref, c_size_t
import numpy as np
from dnnbind.gen import miopen as lib
from dnnbind.highlevel.dims import ConvDims, PoolDims, RNNDims
from dnnbind.runtime.errors import MiopenError

config = json.loads(CONFIG)
out = {}
import dnnbind.highlevel.miopen
out["import"] = {"loaded": lib._lib.loaded, "cupy": "cupy" in sys.modules}
mod = lambda name: importlib.import_module("dnnbind.highlevel.miopen." + name)
from dnnbind.highlevel.miopen.settings import MIOpenSettings

def conv(x, w, kw, layout, settings):
    p = mod("conv_plan").ConvPlan(ConvDims(x, w, **kw), layout, MIOpenSettings(**settings))
    return {"conv": p.conv.read(), "x": p.x.read(), "w": p.w.read(), "y": p.y.read(),
            "out": p.conv.output_shape(p.x, p.w)}
out["conv"] = [conv(*c) for c in config["conv"]]

def pool(x, window, kw, kind, divisor=None):
    dims = PoolDims(x, window, **kw)
    assert kind == mod("pool")._kind(kind == "mean_include_pad", divisor) or kind == "max"
    p = mod("pool").plan_for(dims, kind, divisor)
    return {"pooling": p.pooling.read(), "x": p.x.read(), "y": p.y.read(), "out": p.pooling.output_shape(p.x),
            "workspace": p.workspace, "rescale": None if p.rescale is None else p.rescale.shape,
            "rescale_values": None if p.rescale is None else p.rescale.ravel().tolist()}
out["pool"] = [pool(*c) for c in config["pool"]]

def softmax(shape, layout, dtype, axis):
    p = mod("softmax").SoftmaxPlan(tuple(shape), layout, dtype, axis)
    return {"desc": p.desc.read(), "mode": int(p.mode)}
out["softmax"] = [softmax(*c) for c in config["softmax"]]
out["activation"] = [mod("activation").ActivationPlan(m, a, 12, "float32").activation.read()
                     for m, a in config["activation"]]
def bn(shape, dtype):
    p = mod("batchnorm").BatchNormPlan(tuple(shape), dtype)
    return {"param": p.param.read(), "x": p.x.read(), "param_dtype": p.param_dtype}
out["batchnorm"] = [bn(*c) for c in config["batchnorm"]]
out["dropout"] = [mod("dropout").DropoutTensor(n, dtype).reserve_size for n, dtype in config["dropout"]]

def rnn(c, dtype):
    p = mod("rnn_plan").RNNPlan(RNNDims(*c["args"], **c["kwargs"], dtype=dtype))
    return {"desc": p.desc.read(), "slots": [[s.layer, s.param, s.bias, s.offset, list(s.shape)] for s in p.slots],
            "gather": p.gather.tolist(), "x": p.x.read(), "y": p.y.read(), "h": p.h.read()}
out["rnn"] = [rnn(c, d) for c, d in zip(config["rnn"], config["rnn_dtype"])]

c = config["rnn"][0]
try:
    mod("rnn_plan").RNNPlan(RNNDims(*c["args"], **c["kwargs"], dtype="float64"))
    out["rnn_float64_ours"] = None
except TypeError as exc:
    out["rnn_float64_ours"] = str(exc)
desc = lib.miopenRNNDescriptor_t(); lib.miopenCreateRNNDescriptor(byref(desc))
try:
    lib.miopenSetRNNDescriptor(desc, 4, 1, lib.miopenRNNlinear, lib.miopenRNNunidirection, lib.miopenLSTM,
                               lib.miopenRNNwithBias, lib.miopenRNNdefault, lib.miopenDouble)
    out["rnn_float64_miopen"] = None
except MiopenError as exc:
    out["rnn_float64_miopen"] = exc.status.name

# what needs a handle (a device): each query with a null handle
plan = mod("rnn_plan").RNNPlan(RNNDims(*c["args"], **c["kwargs"], dtype="float32"))
cp = mod("conv_plan").ConvPlan(ConvDims((1, 2, 5, 5), (3, 2, 3, 3)), "NCHW", MIOpenSettings())
size, size2 = c_size_t(), c_size_t()
queries = {
    "miopenGetRNNParamsSize": lambda: lib.miopenGetRNNParamsSize(None, plan.desc.handle, plan.x_step.handle,
                                                                 byref(size), lib.miopenFloat),
    "miopenGetRNNTempSpaceSizes": lambda: lib.miopenGetRNNTempSpaceSizes(None, plan.desc.handle, plan.x.handle,
                                                                         lib.miopenRNNTraining, byref(size), byref(size2)),
    "miopenConvolutionForwardGetWorkSpaceSize": lambda: lib.miopenConvolutionForwardGetWorkSpaceSize(
        None, cp.w.handle, cp.x.handle, cp.conv.handle, cp.y.handle, byref(size)),
    "miopenDropoutGetStatesSize": lambda: lib.miopenDropoutGetStatesSize(None, byref(size)),
}
out["null_handle"] = {}
for name, query in queries.items():
    try:
        query(); out["null_handle"][name] = "ok"
    except MiopenError as exc:
        out["null_handle"][name] = exc.status.name
print(json.dumps(out))
"""


def _rnn_config(mode, layers, bidirectional, bias, lengths):
    d = rnn_dims(mode, layers=layers, bidirectional=bidirectional, bias=bias, inp=3, hidden=2, batch=2)
    shapes = [[list(s) if s is not None else None for s in entry] for entry in rnn_layout.torch_shapes(d)]
    return {"args": [[4, 2, 3], shapes], "kwargs": dict(mode=mode, hidden_size=2, num_layers=layers,
                                                       bidirectional=bidirectional, lengths=lengths)}


def _rnn_dims(i):
    c = _rnn_config(*RNN[i])
    return RNNDims(c["args"][0], c["args"][1], **c["kwargs"], dtype=RNN_DTYPE[i])


@pytest.fixture(scope="module")
def facts(miopen_run):
    config = {"conv": CONV, "pool": POOL, "softmax": SOFTMAX, "activation": ACTIVATIONS, "batchnorm": BATCHNORM,
              "dropout": DROPOUT, "rnn": [_rnn_config(*r) for r in RNN], "rnn_dtype": RNN_DTYPE}
    result = miopen_run(f"CONFIG = {json.dumps(config)!r}\n" + CHILD)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _tensor(data_type, dims, strides):
    return [int(data_type), list(dims), list(strides)]


def test_the_backend_imports_without_loading_miopen_or_cupy(facts):
    assert facts["import"] == {"loaded": False, "cupy": False}


@pytest.mark.parametrize("i", range(len(CONV)))
def test_convolution_plans(facts, i):
    x, w, kw, layout, settings = CONV[i]
    dims = ConvDims(x, w, **kw)
    g = ConvGeometry.of(dims)
    got = facts["conv"][i]
    code = int(getattr(lib, {"float16": "miopenHalf", "float32": "miopenFloat", "float64": "miopenDouble"}[dims.dtype]))
    assert got["x"] == _tensor(code, g.x_shape, _layout.strides(g.x_shape, layout))
    assert got["w"] == _tensor(code, g.w_shape, _layout.strides(g.w_shape, layout))    # weights: a tensor descriptor
    assert got["y"] == _tensor(code, g.y_shape, _layout.strides(g.y_shape, layout))
    assert got["out"] == list(g.y_shape)
    find_mode = lib.miopenConvolutionFindModeNormal if settings.get("algo") == "benchmark" \
        else lib.miopenConvolutionFindModeDefault
    assert got["conv"] == {"padding": list(g.padding), "stride": list(g.stride), "dilation": list(g.dilation),
                           "mode": int(lib.miopenConvolution), "groups": dims.groups,
                           "deterministic": int(settings.get("deterministic", False)), "find_mode": int(find_mode)}


@pytest.mark.parametrize("i", range(len(POOL)))
def test_pooling_plans(facts, i):
    x, window, kw, kind, *divisor = POOL[i]
    divisor_override = divisor[0] if divisor else None
    dims = PoolDims(x, window, **kw)
    g = PoolGeometry.of(dims)
    got = facts["pool"][i]
    mode = {"max": lib.miopenPoolingMax, "mean_include_pad": lib.miopenPoolingAverageInclusive,
            "mean_exclude_pad": lib.miopenPoolingAverage}[kind]
    index_mode, index_type, index_bytes = pool_module.workspace_index(g.window, g.x_shape)
    assert got["pooling"] == {"mode": int(mode), "window": list(g.window), "padding": list(g.padding),
                              "stride": list(g.stride), "index_type": int(getattr(lib, index_type)),
                              "index_mode": int(getattr(lib, index_mode))}
    assert got["x"][1] == list(g.x_shape) and got["y"][1] == list(g.y_shape)
    assert got["out"] == list(g.y_shape)                   # MIOpen's output size is PoolDims'
    assert got["workspace"] == (int(np.prod(g.y_shape)) * index_bytes if kind == "max" else 0)
    assert (got["rescale"] is not None) == (kind == "mean_exclude_pad" and g.explicit_padding
                                            or divisor_override is not None)
    if kind != "max":         # the factor the plan holds is the rule's, for the divisor_override too
        factor = mean_rescale_factor(dims, g, kind == "mean_include_pad", divisor_override)
        assert got["rescale_values"] == (None if factor is None else factor.ravel().tolist())


def test_pooling_plans_cover_both_index_modes_and_widths(facts):
    seen = {(p["pooling"]["index_mode"], p["pooling"]["index_type"]) for p in facts["pool"]}
    assert (int(lib.miopenPoolingWorkspaceIndexImage), int(lib.miopenIndexUint32)) in seen   # 45**3 positions
    assert (int(lib.miopenPoolingWorkspaceIndexMask), int(lib.miopenIndexUint8)) in seen


@pytest.mark.parametrize("i", range(len(SOFTMAX)))
def test_softmax_plans(facts, i):
    shape, layout, dtype, axis = SOFTMAX[i]
    dims, strides = axis_view(shape, _layout.strides(shape, layout), axis)
    got = facts["softmax"][i]
    assert got["desc"][1:] == [list(dims), list(strides)]
    mode = lib.MIOPEN_SOFTMAX_MODE_INSTANCE if dims[2] == 1 else lib.MIOPEN_SOFTMAX_MODE_CHANNEL
    assert got["mode"] == int(mode)


def test_softmax_views_keep_the_data_where_it_is(facts):
    """An NHWC array normalised over C is (N, C, H*W, 1) with C unit-stride: no copy."""
    assert facts["softmax"][1]["desc"][1:] == [[2, 3, 20, 1], [60, 1, 3, 1]]


@pytest.mark.parametrize("i", range(len(ACTIVATIONS)))
def test_activation_descriptors(facts, i):
    mode, alpha = ACTIVATIONS[i]
    activation = __import__("importlib").import_module("dnnbind.highlevel.miopen.activation")
    a, b, g = activation.coefficients(mode, alpha)
    assert facts["activation"][i] == {"mode": int(getattr(lib, activation.MIOPEN_MODES[mode])), "alpha": a,
                                      "beta": b, "gamma": g}


def test_tanh_is_set_up_as_plain_tanh(facts):
    tanh = facts["activation"][2]
    assert tanh["mode"] == int(lib.miopenActivationTANH) and (tanh["alpha"], tanh["beta"]) == (1.0, 1.0)


@pytest.mark.parametrize("i", range(len(BATCHNORM)))
def test_batchnorm_plans(facts, i):
    shape, dtype = BATCHNORM[i]
    got = facts["batchnorm"][i]
    lifted = _layout.lift(shape)
    assert got["x"][1] == list(lifted) and got["x"][2] == list(_layout.strides(lifted, "NCHW"))
    # MIOpen 3.4 derives float32 parameters for every data type, float64 included; the plan follows it
    assert got["param"][:2] == [int(lib.miopenFloat), [1, shape[1]] + [1] * (len(lifted) - 2)]
    assert got["param_dtype"] == "float32"


def test_dropout_reserve_space_is_one_byte_per_element(facts):
    assert facts["dropout"] == [n for n, _ in DROPOUT]


@pytest.mark.parametrize("i", range(len(RNN)))
def test_rnn_plans(facts, i):
    mode, layers, bidirectional, bias, lengths = RNN[i]
    dims = _rnn_dims(i)
    got = facts["rnn"][i]
    assert got["desc"] == {"mode": int(getattr(lib, rnn_layout.MIOPEN_MODES[mode])), "algo": int(lib.miopenRNNdefault),
                           "input_mode": int(lib.miopenRNNlinear), "direction": int(bidirectional),
                           "bias": int(bias), "hidden": 2, "layers": layers}
    layout = lib.miopenRNNDataSeqMajorPadded if lengths else lib.miopenRNNDataSeqMajorNotPadded
    code = int(lib.miopenHalf if RNN_DTYPE[i] == "float16" else lib.miopenFloat)
    assert got["x"] == {"dtype": code, "layout": int(layout), "max_len": 4, "batch": 2, "vector": 3,
                        "lengths": list(lengths or (4, 4))}
    assert got["y"]["vector"] == 2 * dims.num_directions
    assert got["h"][1] == list(dims.h_shape)


@pytest.mark.parametrize("i", range(len(RNN)))
def test_rnn_weights_land_where_miopen_s_offsets_say(facts, i):
    """With MIOpen's own offsets (miopenGetRNNLayerParamOffset / BiasOffset, no device needed), the packed
    weight space holds PyTorch's gate blocks in MIOpen's gate order, and unpacks back exactly."""
    dims = _rnn_dims(i)
    got = facts["rnn"][i]
    slots = [rnn_layout.Slot(layer, param, b, offset, tuple(shape)) for layer, param, b, offset, shape in got["slots"]]
    assert len(slots) == len(rnn_layout.slot_ids(dims))
    gather = np.array(got["gather"])
    np.testing.assert_array_equal(gather, rnn_layout.gather_index(dims, slots))
    weights = labelled_weights(dims)
    space = rnn_layout.concat(np, weights)[gather]
    h = dims.hidden_size
    for s in slots:
        j = (0 if s.param < dims.gates else 1) + (2 if s.bias else 0)
        gate = rnn_layout.torch_gate(dims.mode, s.param % dims.gates)
        np.testing.assert_array_equal(space[s.offset:s.offset + s.size].reshape(s.shape),
                                      weights[s.layer][j][gate * h:(gate + 1) * h])
    back = rnn_layout.split(space[rnn_layout.scatter_index(gather)], dims)
    assert all(a is None and b is None or np.array_equal(a, b) for e1, e2 in zip(back, weights) for a, b in zip(e1, e2))


@pytest.mark.parametrize("i", range(len(RNN)))
def test_the_saved_weight_space_size_needs_no_library(facts, i):
    """rnn_residuals sizes the weight space without MIOpen: it is exactly what MIOpen's offsets tile."""
    assert len(facts["rnn"][i]["gather"]) == rnn_layout.weight_space_size(_rnn_dims(i))


def test_miopen_lays_out_matrices_before_biases(facts):
    """A fact about MIOpen 3.4 seen through the offsets: every bias lies after every matrix."""
    slots = facts["rnn"][0]["slots"]
    assert max(o for *_, b, o, _ in slots if not b) < min(o for *_, b, o, _ in slots if b)


def test_float64_rnns_are_refused_early_as_miopen_would(facts):
    assert "runs RNNs in float16 and float32 only" in facts["rnn_float64_ours"]
    assert facts["rnn_float64_miopen"] == "miopenStatusBadParm"


def test_what_needs_a_device(facts):
    """Host-only queries work (above); these need a handle, which needs a device."""
    assert facts["null_handle"] == {name: "miopenStatusBadParm" for name in facts["null_handle"]}
    assert len(facts["null_handle"]) == 4
