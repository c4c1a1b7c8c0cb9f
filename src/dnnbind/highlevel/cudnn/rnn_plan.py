"""Plans of the cuDNN RNN: the network (descriptor, weight-space layout) and the batch of sequences.

:class:`NetworkPlan` holds the RNN descriptor of one network (mode, sizes, biases, directions, dtype,
math type) and, once a handle is at hand, the size of its weight space and the :class:`WeightLayout`
that cudnnGetRNNWeightParams reports (asked once per plan: those calls need a handle, hence a GPU).
:class:`SequencePlan` holds what depends on the batch: the x/y RNN data descriptors with the sequence
lengths (host copy: seqLengthArray; device copy: the devSeqLengths every RNN call reads), the h/c
tensor descriptor, and the mask of padded positions. Both are cached per device in bounded LRU caches
keyed by everything that defines them; neither holds per-call arrays.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from dnnbind.highlevel.cudnn._lib import DTYPES, lib
from dnnbind.highlevel.cudnn.descriptors import TensorDescriptor
from dnnbind.highlevel.cudnn.rnn_descriptors import RNNDataDescriptor, RNNDescriptor, RNNSettings
from dnnbind.highlevel.cudnn.rnn_weights import LayoutError, LinearParams, WeightLayout, linear_layers
from dnnbind.highlevel.dims.checks import numpy_dtype
from dnnbind.highlevel.dims.rnn import RNNDims
from dnnbind.highlevel.gpu.cache import PlanCache

NETWORKS: PlanCache["NetworkPlan"] = PlanCache("cudnn.rnn", maxsize=64)
SEQUENCES: PlanCache["SequencePlan"] = PlanCache("cudnn.rnn_sequences", maxsize=256)


def network_key(dims: RNNDims, math_type: int, device: int) -> tuple:
    """Everything that defines a network plan (not the batch: seq_len, batch and lengths are left out)."""
    return (dims.mode, dims.input_size, dims.hidden_size, dims.proj_size, dims.num_layers, dims.num_directions,
            dims.has_bias, dims.dtype, int(math_type), device)


def sequence_key(dims: RNNDims, device: int) -> tuple:
    return (dims.seq_len, dims.batch, dims.input_size, dims.hidden_size, dims.proj_size, dims.num_layers,
            dims.num_directions, dims.dtype, dims.lengths, device)


class NetworkPlan:
    """The RNN descriptor of one network and, per handle's device, its weight space."""

    def __init__(self, dims: RNNDims, math_type: int) -> None:
        self.dims = dims                      # any batch: only the network's fields are used
        self.dtype = DTYPES[dims.dtype]
        self.itemsize = numpy_dtype(dims.dtype).itemsize
        self.desc = RNNDescriptor(RNNSettings.of(dims, math_type))
        self._layout: WeightLayout | None = None
        self._nbytes: int | None = None
        self._lock = threading.Lock()

    def weight_space_bytes(self, handle: Any) -> int:
        """cudnnGetRNNWeightSpaceSize (asked once)."""
        if self._nbytes is None:
            size = ctypes.c_size_t()
            lib().cudnnGetRNNWeightSpaceSize(handle, self.desc.handle, ctypes.byref(size))
            if size.value % self.itemsize:
                raise LayoutError(f"cuDNN's weight space of {size.value} bytes is not a whole number of "
                                  f"{self.dims.dtype} elements")
            self._nbytes = size.value
        return self._nbytes

    def layout(self, handle: Any, cp: Any) -> WeightLayout:
        """The weight layout cudnnGetRNNWeightParams reports, asked once on a scratch weight space."""
        if self._layout is None:
            with self._lock:
                if self._layout is None:
                    nbytes = self.weight_space_bytes(handle)
                    scratch = cp.empty(max(nbytes, 1), np.uint8)
                    params = query_params(handle, self.desc, self.dims, int(scratch.data.ptr), nbytes,
                                          self.itemsize)
                    self._layout = WeightLayout.from_params(self.dims, params, nbytes // self.itemsize)
        return self._layout


def query_params(handle: Any, desc: RNNDescriptor, dims: RNNDims, base: int, nbytes: int,
                 itemsize: int) -> dict[tuple[int, int], LinearParams]:
    """cudnnGetRNNWeightParams for every pseudo-layer and linear layer, as element offsets from ``base``."""
    c = lib()
    out: dict[tuple[int, int], LinearParams] = {}
    m, b = TensorDescriptor((1, 1, 1), dims.dtype), TensorDescriptor((1, 1, 1), dims.dtype)   # cuDNN sets them
    try:
        for p in range(dims.num_layers * dims.num_directions):
            for lin in range(linear_layers(dims)):
                m_addr, b_addr = ctypes.c_void_p(), ctypes.c_void_p()
                c.cudnnGetRNNWeightParams(handle, desc.handle, p, nbytes, base, lin, m.handle, ctypes.byref(m_addr),
                                          b.handle, ctypes.byref(b_addr))
                m_off = _element_offset(m_addr.value, base, itemsize, p, lin)
                b_off = _element_offset(b_addr.value, base, itemsize, p, lin)
                out[(p, lin)] = LinearParams(
                    m_off, None if m_off is None else _matrix_shape(m.read(), p, lin),
                    b_off, None if b_off is None else int(np.prod(b.read()[1])))
    finally:
        m.close()
        b.close()
    return out


def _element_offset(address: int | None, base: int, itemsize: int, p: int, lin: int) -> int | None:
    if not address:
        return None
    offset, rest = divmod(address - base, itemsize)
    if rest:
        raise LayoutError(f"cuDNN placed pseudo-layer {p}, linLayerID {lin} at byte {address - base}, not on an "
                          f"element boundary")
    return offset


def _matrix_shape(read: tuple[int, tuple[int, ...], tuple[int, ...]], p: int, lin: int) -> tuple[int, int]:
    """(rows, cols) of a row-major matrix descriptor (cuDNN describes it as (1, rows, cols))."""
    _, shape, strides = read
    core = [(n, s) for n, s in zip(shape, strides)][-2:]
    leading = shape[:-2]
    if len(shape) < 2 or any(n != 1 for n in leading) or core[1][1] != 1 or core[0][1] != core[1][0]:
        raise LayoutError(f"cuDNN describes the matrix of pseudo-layer {p}, linLayerID {lin} as shape {shape} "
                          f"with strides {strides}, not a row-major matrix")
    return core[0][0], core[1][0]


class SequencePlan:
    """Descriptors of one batch: x (seq, batch, input) and y (seq, batch, directions * out) with their
    sequence lengths, h (layers * directions, batch, out) and c (layers * directions, batch, hidden); out
    is proj_size with an LSTM projection, else hidden_size (then c describes the same shape as h)."""

    def __init__(self, dims: RNNDims) -> None:
        t, b = dims.seq_len, dims.batch
        self.lengths = np.array(dims.lengths if dims.lengths is not None else [t] * b, np.int32)
        self.variable = dims.lengths is not None and bool((self.lengths < t).any())
        self.x = RNNDataDescriptor(dims.dtype, t, b, dims.input_size, self.lengths)
        self.y = RNNDataDescriptor(dims.dtype, t, b, dims.num_directions * dims.out_size, self.lengths)
        self.h = TensorDescriptor(dims.h_shape, dims.dtype)
        self.c = self.h if dims.c_shape == dims.h_shape else TensorDescriptor(dims.c_shape, dims.dtype)
        self._device_lengths: Any = None
        self._valid: Any = None

    def device_lengths(self, cp: Any) -> Any:
        """The lengths as an int32 CuPy array (devSeqLengths), copied once and kept with the plan."""
        if self._device_lengths is None:
            lengths = cp.asarray(self.lengths)
            cp.cuda.get_current_stream().synchronize()     # the copy is done before another stream reads it
            self._device_lengths = lengths
        return self._device_lengths

    def valid(self, cp: Any) -> Any:
        """(seq, batch, 1) booleans, True where a sequence has data; None when every sequence is full."""
        if not self.variable:
            return None
        if self._valid is None:
            steps = np.arange(self.x.shape[0])[:, None]
            mask = cp.asarray((steps < self.lengths[None, :])[:, :, None])
            cp.cuda.get_current_stream().synchronize()
            self._valid = mask
        return self._valid


def network_plan(dims: RNNDims, math_type: int, device: int) -> NetworkPlan:
    return NETWORKS.get(network_key(dims, math_type, device), lambda: NetworkPlan(dims, math_type))


def sequence_plan(dims: RNNDims, device: int) -> SequencePlan:
    return SEQUENCES.get(sequence_key(dims, device), lambda: SequencePlan(dims))
