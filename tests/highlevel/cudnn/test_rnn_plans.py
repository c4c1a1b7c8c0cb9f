"""The cuDNN RNN on the host: descriptors against the real libcudnn, what the weight-space queries do
without a GPU, pointer kinds of the sequence lengths, and the weight-packing map (cuDNN's linear-layer
order checked with cuDNN's documented cell equations against torch.nn's cells)."""
from __future__ import annotations

import ctypes

import itertools
import math
from ctypes import byref, c_size_t, c_void_p

import numpy as np
import pytest

from dnnbind.gen import cudnn
from dnnbind.highlevel import dispatch
from dnnbind.highlevel.cudnn.descriptors import TensorDescriptor
from dnnbind.highlevel.cudnn.rnn_descriptors import RNNDataDescriptor, RNNSettings
from dnnbind.highlevel.cudnn.rnn_packing import Located, math_type, packed_base
from dnnbind.highlevel.cudnn.rnn_plan import NetworkPlan, SequencePlan, network_key, sequence_key
from dnnbind.highlevel.cudnn.rnn_weights import (CUDNN_GATES, TORCH_GATES, LayoutError, LinearParams,
                                                 WeightLayout, canonical_params, linear_id, pack, region_view,
                                                 unpack)
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.dims.rnn import RNNDims
from dnnbind.runtime.errors import CudnnError

GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}
MODES = list(GATES)


def weight_shapes(mode, inp, hidden, layers, dirs, bias=True):
    g = GATES[mode] * hidden
    return [((g, inp if i < dirs else dirs * hidden), (g, hidden), (g,) if bias else None, (g,) if bias else None)
            for i in range(layers * dirs)]


def make_dims(mode="lstm", inp=3, hidden=4, layers=1, dirs=1, bias=True, seq=5, batch=2, lengths=None,
              dtype="float32"):
    return RNNDims((seq, batch, inp), weight_shapes(mode, inp, hidden, layers, dirs, bias), mode=mode,
                   hidden_size=hidden, num_layers=layers, bidirectional=dirs == 2, lengths=lengths, dtype=dtype)


def random_weights(rng, dims, xp=np):
    return [tuple(None if s is None else xp.asarray(rng.standard_normal(s).astype(dims.dtype)) for s in shapes)
            for shapes in weight_shapes(dims.mode, dims.input_size, dims.hidden_size, dims.num_layers,
                                        dims.num_directions, dims.has_bias)]


CONFIGS = [(mode, layers, dirs, bias) for mode in MODES for layers in (1, 2) for dirs in (1, 2) for bias in (True, False)]

# ---------------------------------------------------------------------------------------------- descriptors


@pytest.mark.parametrize("mode, layers, dirs, bias", CONFIGS)
def test_rnn_descriptor_reads_back_what_was_set(mode, layers, dirs, bias):
    c = cudnn
    for dtype in ("float16", "float32", "float64"):
        dims = make_dims(mode, inp=7, hidden=5, layers=layers, dirs=dirs, bias=bias, dtype=dtype)
        plan = NetworkPlan(dims, math_type(dims))
        read, has_dropout = plan.desc.read()
        assert read == RNNSettings.of(dims, math_type(dims)) and not has_dropout
        assert read.cell_mode == {"rnn_relu": c.CUDNN_RNN_RELU, "rnn_tanh": c.CUDNN_RNN_TANH, "lstm": c.CUDNN_LSTM,
                                  "gru": c.CUDNN_GRU}[mode]
        assert read.bias_mode == (c.CUDNN_RNN_DOUBLE_BIAS if bias else c.CUDNN_RNN_NO_BIAS)
        assert read.dir_mode == (c.CUDNN_BIDIRECTIONAL if dirs == 2 else c.CUDNN_UNIDIRECTIONAL)
        assert (read.input_size, read.hidden_size, read.proj_size, read.num_layers) == (7, 5, 5, layers)
        assert read.input_mode == c.CUDNN_LINEAR_INPUT and read.algo == c.CUDNN_RNN_ALGO_STANDARD
        assert read.aux_flags == c.CUDNN_RNN_PADDED_IO_ENABLED
        data = {"float16": c.CUDNN_DATA_HALF, "float32": c.CUDNN_DATA_FLOAT, "float64": c.CUDNN_DATA_DOUBLE}[dtype]
        assert read.data_type == data
        assert read.math_prec == (c.CUDNN_DATA_DOUBLE if dtype == "float64" else c.CUDNN_DATA_FLOAT)
        assert read.math_type == {"float16": c.CUDNN_TENSOR_OP_MATH, "float32": c.CUDNN_FMA_MATH,
                                  "float64": c.CUDNN_DEFAULT_MATH}[dtype]


def test_math_type_follows_allow_tf32():
    dims = make_dims(dtype="float32")
    assert math_type(dims) == cudnn.CUDNN_FMA_MATH
    with settings(allow_tf32=True):
        assert math_type(dims) == cudnn.CUDNN_DEFAULT_MATH            # permits TF32, as PyTorch's RNNs do
        assert math_type(make_dims(dtype="float16")) == cudnn.CUDNN_TENSOR_OP_MATH
        assert network_key(dims, math_type(dims), 0) != network_key(dims, cudnn.CUDNN_FMA_MATH, 0)
    assert math_type(make_dims(dtype="float64")) == cudnn.CUDNN_DEFAULT_MATH


@pytest.mark.parametrize("lengths", [None, (5, 2, 4), (1, 1, 1), (5, 5, 5)])
def test_sequence_plan_describes_the_padded_batch(lengths):
    dims = make_dims("gru", inp=6, hidden=3, layers=2, dirs=2, seq=5, batch=3, lengths=lengths, dtype="float64")
    plan = SequencePlan(dims)
    want = lengths or (5, 5, 5)
    for desc, vector in ((plan.x, 6), (plan.y, 6)):
        read = desc.read()
        assert read["data_type"] == cudnn.CUDNN_DATA_DOUBLE
        assert read["layout"] == cudnn.CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED
        assert read["shape"][:2] == (5, 3) and read["lengths"] == want and read["fill"] == 0.0
    assert plan.x.read()["shape"][2] == 6 and plan.y.read()["shape"][2] == 6    # 2 directions * 3
    assert plan.h.read()[1:] == ((4, 3, 3), (9, 3, 1))
    assert plan.lengths.dtype == np.int32 and tuple(plan.lengths) == want
    assert plan.variable == (lengths is not None and min(lengths) < 5)
    assert lengths in sequence_key(dims, 0) and sequence_key(dims, 0) != sequence_key(dims, 1)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_rnn_data_descriptor_fill_is_zero_of_the_data_type(dtype):
    desc = RNNDataDescriptor(dtype, 4, 2, 3, [4, 1])
    assert desc.read()["fill"] == 0.0 and desc.read()["lengths"] == (4, 1)


def test_rnn_data_descriptor_rejects_bad_lengths():
    with pytest.raises(CudnnError, match="cudnnSetRNNDataDescriptor failed: CUDNN_STATUS_BAD_PARAM"):
        RNNDataDescriptor("float32", 4, 2, 3, [5, 1])      # longer than maxSeqLength


# ---------------------------------------------------------------------------------------------- no GPU


def test_weight_space_queries_need_a_handle_hence_a_gpu():
    """What cuDNN 9.28 does on the host: no handle without a GPU, and a NULL handle is refused with
    CUDNN_STATUS_BAD_PARAM (its message names the NULL handle), so the weight layout is only known on a
    GPU; the host-side tests check the map against the predicted layout instead."""
    handle = cudnn.cudnnHandle_t()
    try:
        cudnn.cudnnCreate(byref(handle))
    except CudnnError as exc:
        assert exc.status == cudnn.CUDNN_STATUS_NOT_INITIALIZED
    else:
        cudnn.cudnnDestroy(handle)
        pytest.skip("a GPU is present: the GPU tests ask cuDNN itself")
    dims = make_dims("lstm", layers=2, dirs=2)
    plan = NetworkPlan(dims, math_type(dims))
    with pytest.raises(CudnnError, match=r"CUDNN_STATUS_BAD_PARAM .*!handle") as info:
        cudnn.cudnnGetRNNWeightSpaceSize(None, plan.desc.handle, byref(c_size_t()))
    assert info.value.status == cudnn.CUDNN_STATUS_BAD_PARAM
    with TensorDescriptor((1, 1, 1), "float32") as m, TensorDescriptor((1, 1, 1), "float32") as b:
        with pytest.raises(CudnnError, match=r"CUDNN_STATUS_BAD_PARAM .*!handle"):
            cudnn.cudnnGetRNNWeightParams(None, plan.desc.handle, 0, 1 << 16, 1 << 20, 0, m.handle,
                                          byref(c_void_p()), b.handle, byref(c_void_p()))
    seq = SequencePlan(dims)
    with pytest.raises(CudnnError, match="CUDNN_STATUS_BAD_PARAM"):
        cudnn.cudnnGetRNNTempSpaceSizes(None, plan.desc.handle, cudnn.CUDNN_FWD_MODE_TRAINING, seq.x.handle,
                                        byref(c_size_t()), byref(c_size_t()))


class DeviceInts:
    """A device array of some library (only __cuda_array_interface__)."""

    __cuda_array_interface__ = {"shape": (2,), "typestr": "<i4", "data": (1 << 32, False), "version": 3}


@pytest.mark.parametrize("function, position", [("cudnnRNNForward", 3), ("cudnnRNNBackwardData_v8", 2),
                                                ("cudnnRNNBackwardWeights_v8", 3)])
def test_dev_seq_lengths_must_be_device_memory(function, position):
    """devSeqLengths is classified device: the host copy passed there fails in Python, before cuDNN."""
    argtypes = getattr(cudnn, "_" + function).argtypes
    storage = (ctypes.c_char * 64)()          # non-NULL stand-ins for the descriptors: ctypes refuses the host
    args = [ctypes.cast(storage, t) if isinstance(t, type) and issubclass(t, ctypes._Pointer) else 0
            for t in argtypes]                # array while converting, so the call (and cuDNN) never happens
    args[0] = None
    args[position] = np.array([3, 2], np.int32)
    with pytest.raises(TypeError, match=rf"{function}: parameter 'devSeqLengths' needs device memory, "
                                        rf"got numpy.ndarray \(host memory\)"):
        getattr(cudnn, function)(*args)


def test_seq_length_array_must_be_host_memory():
    """seqLengthArray (cudnnSetRNNDataDescriptor) is host memory: a device array there is refused."""
    desc = cudnn.cudnnRNNDataDescriptor_t()
    cudnn.cudnnCreateRNNDataDescriptor(byref(desc))
    try:
        with pytest.raises(TypeError, match="'seqLengthArray' cannot take the host address"):
            cudnn.cudnnSetRNNDataDescriptor(desc, cudnn.CUDNN_DATA_FLOAT,
                                            cudnn.CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, 3, 2, 4, DeviceInts(),
                                            np.zeros(1, np.float32))
    finally:
        cudnn.cudnnDestroyRNNDataDescriptor(desc)


# ---------------------------------------------------------------------------------------------- the map


def test_linear_layer_ids_follow_cudnns_documented_gate_order():
    """LSTM: 0-3 input side, 4-7 recurrent; i, f, g (new memory), o. GRU: 0-2 and 3-5; r, z (update), n."""
    assert CUDNN_GATES["lstm"] == TORCH_GATES["lstm"] == ("i", "f", "g", "o")
    assert CUDNN_GATES["gru"] == TORCH_GATES["gru"] == ("r", "z", "n")
    assert [linear_id("lstm", slot, g) for slot in range(4) for g in range(4)] == \
        [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7]
    assert [linear_id("gru", slot, g) for slot in range(4) for g in range(3)] == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]
    assert linear_id("gru", 3, 2) == 5          # b_hn: the recurrent new-gate bias, inside r * (...)
    assert [linear_id("rnn_tanh", slot, 0) for slot in range(4)] == [0, 1, 0, 1]


@pytest.mark.parametrize("mode, layers, dirs, bias", CONFIGS)
def test_predicted_layout_holds_exactly_pytorchs_parameters(mode, layers, dirs, bias):
    """The predicted weight space: every linear layer once, nothing overlapping, nothing left over, as
    many elements as torch.nn's parameters."""
    dims = make_dims(mode, inp=7, hidden=5, layers=layers, dirs=dirs, bias=bias)
    params, size = canonical_params(dims)
    count = 2 * GATES[mode]
    assert set(params) == {(p, lin) for p in range(layers * dirs) for lin in range(count)}
    torch_count = sum(int(np.prod(s)) for e in weight_shapes(mode, 7, 5, layers, dirs, bias) for s in e if s)
    assert size == torch_count
    spans = sorted([(i.matrix_offset, i.matrix_offset + math.prod(i.matrix_shape)) for i in params.values()]
                   + [(i.bias_offset, i.bias_offset + i.bias_size) for i in params.values() if bias])
    assert spans[0][0] == 0 and spans[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    for (p, lin), info in params.items():
        layer_in = 7 if p < dirs else 5 * dirs
        assert info.matrix_shape == (5, layer_in if lin < count // 2 else 5)
        assert (info.bias_size == 5) if bias else (info.bias_offset is None and info.bias_size is None)
    layout = WeightLayout.from_params(dims, params, size)
    assert layout.whole and layout.dense and len(layout.regions) == layers * dirs * (4 if bias else 2)


@pytest.mark.parametrize("mode, layers, dirs, bias", CONFIGS)
def test_packing_puts_each_gate_where_cudnn_says(mode, layers, dirs, bias, rng):
    """Rows of gate g of PyTorch's array land on the linear layer cuDNN's gate order names, at the
    offset the (predicted) cudnnGetRNNWeightParams answer gives; unpacking gives the arrays back as views."""
    dims = make_dims(mode, inp=3, hidden=2, layers=layers, dirs=dirs, bias=bias, dtype="float64")
    params, size = canonical_params(dims)
    layout = WeightLayout.from_params(dims, params, size)
    weights = random_weights(rng, dims)
    space = np.full(size, np.nan)
    pack(layout, weights, space)
    assert not np.isnan(space).any()
    h = 2
    for p, entry in enumerate(weights):
        for slot, array in enumerate(entry):
            if array is None:
                continue
            for g in range(GATES[mode]):
                info = params[(p, linear_id(mode, slot, g))]
                if slot < 2:
                    start, n = info.matrix_offset, math.prod(info.matrix_shape)
                    np.testing.assert_array_equal(space[start:start + n].reshape(info.matrix_shape),
                                                  array[g * h:(g + 1) * h])
                else:
                    np.testing.assert_array_equal(space[info.bias_offset:info.bias_offset + h],
                                                  array[g * h:(g + 1) * h])
    back = unpack(layout, space, np)
    for entry, again in zip(weights, back):
        for a, b in zip(entry, again):
            assert (a is None and b is None) or (np.array_equal(a, b) and np.shares_memory(b, space))


def test_gates_kept_apart_are_packed_per_gate(rng):
    """A weight space whose linear layers run backwards: each gate is its own region, unpack copies."""
    dims = make_dims("lstm", inp=3, hidden=2, layers=1, dirs=2, dtype="float64")
    params, size = canonical_params(dims)
    count = 8
    swapped = {(p, lin): params[(p, count - 1 - lin)] for (p, lin) in params}
    swapped = {k: LinearParams(v.matrix_offset, (2, 3 if k[1] < 4 else 2), v.bias_offset, v.bias_size)
               for k, v in swapped.items()}
    # matrices of linLayerIDs 0-3 (3 columns) and 4-7 (2 columns) swapped places: rebuild offsets to fit
    offset, rebuilt = 0, {}
    for p in range(2):
        for lin in reversed(range(count)):
            rows, cols = swapped[(p, lin)].matrix_shape
            rebuilt[(p, lin)] = [offset, (rows, cols)]
            offset += rows * cols
        for lin in reversed(range(count)):
            rebuilt[(p, lin)].append(offset)
            offset += 2
    params = {k: LinearParams(v[0], v[1], v[2], 2) for k, v in rebuilt.items()}
    layout = WeightLayout.from_params(dims, params, offset)
    assert not layout.whole and layout.dense and len(layout.regions) == 2 * 4 * 4
    weights = random_weights(rng, dims)
    space = np.full(offset, np.nan)
    pack(layout, weights, space)
    info = params[(1, linear_id("lstm", 1, 3))]            # w_hh, gate o of the reverse direction
    np.testing.assert_array_equal(space[info.matrix_offset:info.matrix_offset + 4].reshape(2, 2),
                                  weights[1][1][6:8])
    for entry, again in zip(weights, unpack(layout, space, np)):
        for a, b in zip(entry, again):
            np.testing.assert_array_equal(a, b)
            assert not np.shares_memory(b, space)


def test_layout_errors_name_the_linear_layer():
    dims = make_dims("gru", inp=3, hidden=2, dirs=2)
    params, size = canonical_params(dims)
    bad = dict(params)
    bad[(1, 5)] = LinearParams(params[(1, 5)].matrix_offset, (2, 3), params[(1, 5)].bias_offset, 2)
    with pytest.raises(LayoutError, match=r"shape \(2, 3\) for the matrix of pseudo-layer 1, linLayerID 5 "
                                          r"\(w_hh gate n\), expected \(2, 2\)"):
        WeightLayout.from_params(dims, bad, size)
    bad = dict(params)
    bad[(0, 4)] = LinearParams(params[(0, 4)].matrix_offset, (2, 2), None, None)
    with pytest.raises(LayoutError, match=r"no bias for pseudo-layer 0, linLayerID 4 \(b_hh gate z\)"):
        WeightLayout.from_params(dims, bad, size)
    with pytest.raises(LayoutError, match="overlap"):
        bad = dict(params)
        bad[(1, 0)] = LinearParams(params[(0, 0)].matrix_offset, (2, 3), params[(1, 0)].bias_offset, 2)
        WeightLayout.from_params(dims, bad, size)
    with pytest.raises(LayoutError, match="outside the weight space"):
        WeightLayout.from_params(dims, params, size - 1)


def test_dense_is_false_when_regions_leave_gaps():
    dims = make_dims("rnn_relu", inp=2, hidden=2)
    params, size = canonical_params(dims)
    assert not WeightLayout.from_params(dims, params, size + 4).dense


# ---------------------------------------------------------------------------------------------- gate order


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def cudnn_cell(mode, space, params, p, x, h, c):
    """One step of the cell equations of cuDNN's documentation (cudnnRNNMode_t), with W_k / R_k read from
    the weight space by linLayerID k."""
    def lin(k, v):
        info = params[(p, k)]
        m = space[info.matrix_offset:info.matrix_offset + math.prod(info.matrix_shape)].reshape(info.matrix_shape)
        b = 0 if info.bias_offset is None else space[info.bias_offset:info.bias_offset + info.bias_size]
        return m @ v + b
    if mode == "lstm":
        i, f = _sigmoid(lin(0, x) + lin(4, h)), _sigmoid(lin(1, x) + lin(5, h))
        g, o = np.tanh(lin(2, x) + lin(6, h)), _sigmoid(lin(3, x) + lin(7, h))
        c = f * c + i * g
        return o * np.tanh(c), c
    if mode == "gru":
        r, u = _sigmoid(lin(0, x) + lin(3, h)), _sigmoid(lin(1, x) + lin(4, h))
        n = np.tanh(lin(2, x) + r * lin(5, h))
        return (1 - u) * n + u * h, None
    pre = lin(0, x) + lin(1, h)
    return (np.maximum(pre, 0) if mode == "rnn_relu" else np.tanh(pre)), None


@pytest.mark.parametrize("mode, bias", list(itertools.product(MODES, (True, False))))
def test_cudnn_cell_equations_on_the_packed_space_equal_torch_cells(mode, bias, rng):
    """The packing map is right for cuDNN's documented equations: one step read by linLayerID from the
    packed space equals torch.nn's cell with PyTorch's weights, for every pseudo-layer of a 2-layer
    bidirectional network."""
    torch = pytest.importorskip("torch")
    dims = make_dims(mode, inp=3, hidden=4, layers=2, dirs=2, bias=bias, dtype="float64")
    params, size = canonical_params(dims)
    layout = WeightLayout.from_params(dims, params, size)
    weights = random_weights(rng, dims)
    space = np.zeros(size)
    pack(layout, weights, space)
    for p, (w_ih, w_hh, b_ih, b_hh) in enumerate(weights):
        cls = {"lstm": torch.nn.LSTMCell, "gru": torch.nn.GRUCell}.get(mode, torch.nn.RNNCell)
        kwargs = {"nonlinearity": mode[4:]} if cls is torch.nn.RNNCell else {}
        cell = cls(w_ih.shape[1], 4, bias=bias, dtype=torch.float64, **kwargs)
        with torch.no_grad():
            cell.weight_ih.copy_(torch.from_numpy(w_ih))
            cell.weight_hh.copy_(torch.from_numpy(w_hh))
            if bias:
                cell.bias_ih.copy_(torch.from_numpy(b_ih))
                cell.bias_hh.copy_(torch.from_numpy(b_hh))
        x, h, c = rng.standard_normal(w_ih.shape[1]), rng.standard_normal(4), rng.standard_normal(4)
        h_new, c_new = cudnn_cell(mode, space, params, p, x, h, c)
        tx, th, tc = (torch.from_numpy(v)[None] for v in (x, h, c))
        with torch.no_grad():
            want = cell(tx, (th, tc)) if mode == "lstm" else cell(tx, th)
        if mode == "lstm":
            np.testing.assert_allclose(h_new, want[0][0].numpy(), rtol=1e-12)
            np.testing.assert_allclose(c_new, want[1][0].numpy(), rtol=1e-12)
        else:
            np.testing.assert_allclose(h_new, want[0].numpy(), rtol=1e-12)


# ---------------------------------------------------------------------------------------------- packed weights


def _located(layout, base, itemsize, allocation, moved=None, contiguous=True):
    out = {}
    for r in layout.regions:
        ptr = base + r.offset * itemsize + (8 if (r.entry, r.slot) == moved else 0)
        out[(r.entry, r.slot)] = Located(ptr, contiguous, allocation)
    return out


def test_packed_base_recognises_views_of_one_weight_space():
    dims = make_dims("lstm", layers=2, dirs=2)
    params, size = canonical_params(dims)
    layout = WeightLayout.from_params(dims, params, size)
    base, item = 1 << 30, 4
    alloc = (17, base - 512, base + size * item + 512)
    assert packed_base(layout, _located(layout, base, item, alloc), item) == base
    assert packed_base(layout, _located(layout, base, item, alloc, moved=(2, 1)), item) is None
    assert packed_base(layout, _located(layout, base, item, alloc, contiguous=False), item) is None
    assert packed_base(layout, _located(layout, base, item, (17, base, base + size * item - 4)), item) is None
    mixed = _located(layout, base, item, alloc)
    mixed[(3, 0)] = Located(mixed[(3, 0)].ptr, True, (18,) + alloc[1:])
    assert packed_base(layout, mixed, item) is None
    missing = _located(layout, base, item, alloc)
    missing[(0, 2)] = None
    assert packed_base(layout, missing, item) is None


def test_backend_rnn_has_the_reference_signature():
    import inspect
    from dnnbind.highlevel.cudnn import rnn
    ours = list(inspect.signature(rnn).parameters)
    theirs = list(inspect.signature(dispatch.load_backend("reference").rnn).parameters)
    assert ours[:len(theirs)] == theirs == ["x", "weights", "h0", "c0", "dims"]


def test_region_view_shapes():
    dims = make_dims("gru", inp=3, hidden=2)
    params, size = canonical_params(dims)
    layout = WeightLayout.from_params(dims, params, size)
    space = np.arange(size, dtype=float)
    shapes = [region_view(space, r).shape for r in layout.regions]
    assert shapes == [(6, 3), (6, 2), (6,), (6,)]


# ---------------------------------------------------------------------------------------------- LSTM projection


def proj_shapes(inp, hidden, proj, layers, dirs, bias=True):
    g = 4 * hidden
    return [((g, inp if i < dirs else dirs * proj), (g, proj)) + (((g,), (g,)) if bias else (None, None))
            + ((proj, hidden),) for i in range(layers * dirs)]


def make_proj_dims(inp=3, hidden=4, proj=2, layers=1, dirs=1, bias=True, seq=5, batch=2, lengths=None,
                   dtype="float32"):
    return RNNDims((seq, batch, inp), proj_shapes(inp, hidden, proj, layers, dirs, bias), mode="lstm",
                   hidden_size=hidden, num_layers=layers, bidirectional=dirs == 2, lengths=lengths, dtype=dtype,
                   proj_size=proj)


PROJ_CONFIGS = [(layers, dirs, bias) for layers in (1, 2) for dirs in (1, 2) for bias in (True, False)]


@pytest.mark.parametrize("layers, dirs, bias", PROJ_CONFIGS)
def test_rnn_descriptor_takes_the_projection(layers, dirs, bias):
    """cudnnSetRNNDescriptor_v8 with projSize below hiddenSize (the real libcudnn, on the host) holds it."""
    for dtype in ("float16", "float32", "float64"):
        dims = make_proj_dims(inp=7, hidden=5, proj=3, layers=layers, dirs=dirs, bias=bias, dtype=dtype)
        read, _ = NetworkPlan(dims, math_type(dims)).desc.read()
        assert read == RNNSettings.of(dims, math_type(dims))
        assert (read.hidden_size, read.proj_size, read.cell_mode) == (5, 3, cudnn.CUDNN_LSTM)
    plain = make_dims("lstm", inp=7, hidden=5)
    assert RNNSettings.of(plain, math_type(plain)).proj_size == 5      # projSize = hiddenSize: none


def test_projection_is_part_of_the_plan_keys():
    with_proj, plain = make_proj_dims(hidden=4, proj=2), make_dims("lstm", inp=3, hidden=4)
    assert network_key(with_proj, 0, 0) != network_key(plain, 0, 0)
    assert sequence_key(with_proj, 0) != sequence_key(plain, 0)


def test_sequence_plan_with_projection_describes_h_and_c_apart():
    dims = make_proj_dims(inp=6, hidden=5, proj=3, layers=2, dirs=2, seq=4, batch=3, lengths=(4, 2, 3),
                          dtype="float64")
    plan = SequencePlan(dims)
    assert plan.x.read()["shape"] == (4, 3, 6) and plan.y.read()["shape"] == (4, 3, 6)    # 2 directions * 3
    assert plan.h.read()[1:] == ((4, 3, 3), (9, 3, 1))
    assert plan.c.read()[1:] == ((4, 3, 5), (15, 5, 1))
    plain = SequencePlan(make_dims("lstm", inp=6, hidden=5))
    assert plain.c is plain.h


def test_linear_id_of_the_projection():
    assert linear_id("lstm", 4, 0) == 8


@pytest.mark.parametrize("layers, dirs, bias", PROJ_CONFIGS)
def test_projection_layout_and_packing(layers, dirs, bias, rng):
    """The predicted layout with w_hr (linLayerID 8, (proj, hidden), no bias) holds exactly torch's
    parameters; recurrent matrices have proj columns; pack puts w_hr where the answer says, unpack gives
    5-entry views back."""
    dims = make_proj_dims(inp=3, hidden=4, proj=2, layers=layers, dirs=dirs, bias=bias, dtype="float64")
    params, size = canonical_params(dims)
    assert set(params) == {(p, lin) for p in range(layers * dirs) for lin in range(9)}
    shapes = proj_shapes(3, 4, 2, layers, dirs, bias)
    assert size == sum(int(np.prod(s)) for e in shapes for s in e if s)
    for (p, lin), info in params.items():
        want = (2, 4) if lin == 8 else (4, (3 if p < dirs else 2 * dirs) if lin < 4 else 2)
        assert info.matrix_shape == want
        assert (info.bias_size == 4) if bias and lin < 8 else info.bias_offset is None
    layout = WeightLayout.from_params(dims, params, size)
    assert layout.whole and layout.dense and layout.has_proj
    assert len(layout.regions) == layers * dirs * ((4 if bias else 2) + 1)
    weights = [tuple(None if s is None else rng.standard_normal(s) for s in e) for e in shapes]
    space = np.full(size, np.nan)
    pack(layout, weights, space)
    assert not np.isnan(space).any()
    for p, entry in enumerate(weights):
        info = params[(p, 8)]
        np.testing.assert_array_equal(space[info.matrix_offset:info.matrix_offset + 8].reshape(2, 4), entry[4])
    back = unpack(layout, space, np)
    assert all(len(e) == 5 for e in back)
    for entry, again in zip(weights, back):
        for a, b in zip(entry, again):
            assert (a is None and b is None) or (np.array_equal(a, b) and np.shares_memory(b, space))


def test_projection_layout_errors_name_w_hr():
    dims = make_proj_dims(inp=3, hidden=4, proj=2)
    params, size = canonical_params(dims)
    bad = dict(params)
    bad[(0, 8)] = LinearParams(params[(0, 8)].matrix_offset, (4, 2), None, None)
    with pytest.raises(LayoutError, match=r"shape \(4, 2\) for the matrix of pseudo-layer 0, linLayerID 8 "
                                          r"\(w_hr, the projection\), expected \(2, 4\)"):
        WeightLayout.from_params(dims, bad, size)
    del bad[(0, 8)]
    with pytest.raises(LayoutError, match=r"no parameters for pseudo-layer 0, linLayerID 8 \(w_hr"):
        WeightLayout.from_params(dims, bad, size)


def test_projection_residual_specs():
    from dnnbind.highlevel.cudnn.rnn import spec_of
    from dnnbind.highlevel.residual import ArraySpec
    dims = make_proj_dims(inp=3, hidden=4, proj=2, layers=2, dirs=2, seq=5, batch=3)
    f32 = np.dtype(np.float32)
    assert spec_of(dims, f32, 400, 64) == (ArraySpec((5, 3, 3), f32), ArraySpec((4, 3, 2), f32),
                                           ArraySpec((4, 3, 4), f32), ArraySpec((5, 3, 4), f32),
                                           ArraySpec((100,), f32), ArraySpec((64,), np.dtype(np.uint8)))


def test_gpu_problem_helper_with_projection_runs_on_the_reference(rng):
    """The GPU tests' problem builder with proj: shapes of h, c and w_hr, and the reference runs it."""
    from .rnn_cases import Problem
    problem = Problem(rng, np.asarray, "lstm", 2, 2, bias=False, lengths=(4, 2, 3), seq=4, inp=3, hidden=4, proj=2)
    assert problem.h0.shape == (4, 3, 2) and problem.c0.shape == (4, 3, 4)
    assert problem.options()["proj_size"] == 2 and all(len(e) == 5 for e in problem.weights)
    (y, hy, cy), pullback = problem.reference()
    assert y.shape == (4, 3, 4) and hy.shape == (4, 3, 2) and cy.shape == (4, 3, 4)
    grads = pullback(problem.dy, problem.dhy, problem.dcy)
    assert [g.shape for e in grads[3] for g in e if g is not None] == \
        [a.shape for e in problem.weights for a in e if a is not None]
