"""The plan of one RNN problem on MIOpen: descriptors and the weight-space layout.

Built from an RNNDims on the host, without a handle: the RNN descriptor, the sequence descriptors of
x and y, the hidden-state descriptor, and the weight layout that miopenGetRNNLayerParamOffset /
miopenGetRNNLayerBiasOffset report (they need no handle, unlike miopenGetRNNParamsSize and the
workspace queries, which the op makes at run time). Sequences use the sequence-tensor API: seq-major
packed data when every sequence has the full length, seq-major padded data with a length per
sequence otherwise (MIOpen sorts and packs them itself).

MIOpen's RNNs run in float16 and float32 only (its RNN descriptor rejects double), and without an LSTM
projection (proj_size; MIOpen has none).
"""
from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.dims.checks import numpy_dtype
from dnnbind.highlevel.dims.rnn import RNNDims
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.miopen import rnn_layout
from dnnbind.highlevel.miopen._lib import Handle, lib
from dnnbind.highlevel.miopen.descriptors import RNNDescriptor, SeqTensorDescriptor, TensorDescriptor
from dnnbind.highlevel.miopen.rnn_layout import Slot

PLANS: PlanCache["RNNPlan"] = PlanCache("miopen.rnn", maxsize=64)

#: dtypes MIOpen runs RNNs in
RNN_DTYPES = ("float16", "float32")


def check_dtype(dims: RNNDims) -> None:
    """NotImplementedError for an LSTM projection (MIOpen has none), TypeError unless MIOpen can run this
    RNN's dtype."""
    if dims.proj_size:
        raise NotImplementedError(f"the MIOpen backend has no LSTM projection (proj_size={dims.proj_size}): "
                                  f"MIOpen's RNN descriptor has no projection size; use the cuDNN or the "
                                  f"reference backend")
    if dims.dtype not in RNN_DTYPES:
        raise TypeError(f"the MIOpen backend runs RNNs in float16 and float32 only (MIOpen's RNN descriptor "
                        f"rejects {dims.dtype}); convert x and the weights, e.g. x.astype('float32')")


class RNNPlan:
    """Descriptors and weight layout of one RNN problem (see the module docstring)."""

    def __init__(self, dims: RNNDims) -> None:
        check_dtype(dims)
        self.dims = dims
        self.desc = RNNDescriptor(dims.hidden_size, dims.num_layers, mode=getattr(lib, rnn_layout.MIOPEN_MODES[dims.mode]),
                                  bidirectional=dims.num_directions == 2, bias=dims.has_bias, dtype=dims.dtype)
        self.x_step = TensorDescriptor((dims.batch, dims.input_size), dims.dtype)    # for layout queries
        self.slots = self._slots()
        self.gather = rnn_layout.gather_index(dims, self.slots)
        self.scatter = rnn_layout.scatter_index(self.gather)
        self.weight_elements = len(self.gather)
        lengths = dims.lengths if dims.lengths is not None else (dims.seq_len,) * dims.batch
        layout = lib.miopenRNNDataSeqMajorPadded if dims.lengths is not None else lib.miopenRNNDataSeqMajorNotPadded
        self.x = SeqTensorDescriptor(dims.dtype, layout, dims.seq_len, dims.batch, dims.input_size, lengths)
        self.y = SeqTensorDescriptor(dims.dtype, layout, dims.seq_len, dims.batch,
                                     dims.hidden_size * dims.num_directions, lengths)
        self.h = TensorDescriptor(dims.h_shape, dims.dtype)
        self._device: dict[tuple[str, int], Any] = {}
        self._checked_size = False

    def _slots(self) -> list[Slot]:
        out = []
        for layer, param, bias in rnn_layout.slot_ids(self.dims):
            query = self.desc.bias_offset if bias else self.desc.param_offset
            offset, shape = query(layer, self.x_step, param)
            out.append(Slot(layer, param, bias, offset, shape))
        return out

    def on_device(self, cp: Any, name: str, device: int) -> Any:
        """Per-device constants: the gather/scatter indices, the (T, B, 1) mask of valid steps."""
        value = self._device.get((name, device))
        if value is None:
            if name == "valid":
                host = (np.arange(self.dims.seq_len)[:, None] < np.asarray(self.dims.lengths)[None, :])[:, :, None]
            else:
                host = getattr(self, name)
            value = self._device[(name, device)] = cp.asarray(host)
        return value

    def pack(self, cp: Any, weights: Sequence[Sequence[Any]], device: int) -> Any:
        """The weight space (a flat CuPy array) holding PyTorch-layout ``weights``."""
        return rnn_layout.concat(cp, weights)[self.on_device(cp, "gather", device)]

    def unpack(self, cp: Any, space: Any, device: int) -> list[tuple[Any, Any, Any, Any]]:
        """PyTorch-layout tensors (new arrays) from a weight space (the weight gradient)."""
        return rnn_layout.split(space[self.on_device(cp, "scatter", device)], self.dims)

    def check_params_size(self, handle: Handle) -> None:
        """Once per plan: MIOpen's own weight-space size (miopenGetRNNParamsSize, which needs a handle)
        must be the one the layout queries tiled; RuntimeError otherwise."""
        if self._checked_size:
            return
        nbytes = ctypes.c_size_t()
        lib.miopenGetRNNParamsSize(handle.ptr, self.desc.handle, self.x_step.handle, ctypes.byref(nbytes),
                                   self.desc.dtype.library)
        expected = self.weight_elements * numpy_dtype(self.dims.dtype).itemsize
        if nbytes.value != expected:
            raise RuntimeError(f"MIOpen's weight space for {self.dims} has {nbytes.value} bytes but its layer "
                               f"offsets tile {expected}: this MIOpen lays weights out in a way dnnbind does not know")
        self._checked_size = True

    def temp_sizes(self, handle: Handle) -> tuple[int, int]:
        """(workspace, reserve space) bytes for training (miopenGetRNNTempSpaceSizes), asked per call."""
        work, reserve = ctypes.c_size_t(), ctypes.c_size_t()
        lib.miopenGetRNNTempSpaceSizes(handle.ptr, self.desc.handle, self.x.handle, lib.miopenRNNTraining,
                                       ctypes.byref(work), ctypes.byref(reserve))
        return work.value, reserve.value


def plan_for(dims: RNNDims) -> RNNPlan:
    return PLANS.get(dims.key(), lambda: RNNPlan(dims))
