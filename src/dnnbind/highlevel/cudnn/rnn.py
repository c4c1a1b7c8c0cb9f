"""Multi-layer, optionally bidirectional RNN / LSTM / GRU on cuDNN 9 (the v8 RNN API).

Forward: cudnnRNNForward in training mode (inference mode with ``training=False``; its pullback then
refuses to run). Pullback: cudnnRNNBackwardData_v8, then cudnnRNNBackwardWeights_v8 (CUDNN_WGRAD_MODE_ADD
into a zeroed gradient space). Semantics, shapes and PyTorch's weight layout and gate order are those of
:func:`dnnbind.rnn` and the reference backend; see :mod:`rnn_weights` for how the weights map onto
cuDNN's weight space and :mod:`rnn_packing` for packing them once.

Variable lengths: x and y are described as CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED with one length per
sequence (any order) and padded I/O enabled, which is PyTorch's packed-sequence semantics: a sequence
takes steps t < length only, the reverse direction starts at its last valid step, hy/cy are taken
there. cuDNN reads the lengths twice: the host copy went into the RNN data descriptors
(seqLengthArray) and every call passes the device copy (devSeqLengths, an int32 device array). Padded
positions of y and dx are set to zero here, and dy's are ignored, whatever cuDNN does with them.

The reserve space. The training forward fills it and the pullback owns it (no global state).
cudnnRNNBackwardData_v8 WRITES into it: the header declares its reserveSpace [in,out], and
cudnnRNNBackwardWeights_v8 consumes what BackwardData left there (hence their fixed order; PyTorch's
cuDNN RNN notes that BackwardData "mutates reserve" and always runs it first). Run on the forward's own
buffer, a second pullback call would start from clobbered intermediates. So every pullback call COPIES
the reserve space and runs both backward calls on the copy (one device-to-device copy per call, far
cheaper than recomputing the forward); the forward's reserve space stays pristine and every call gives
the same result. Workspace sizes are asked for on every call (cudnnGetRNNTempSpaceSizes).
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Sequence

import numpy as np

from dnnbind.highlevel.cudnn._lib import handle, lib
from dnnbind.highlevel.cudnn.rnn_packing import (PackedRNNWeights, WeightSpace, math_type, pack_rnn_weights,
                                                 weight_space)
from dnnbind.highlevel.cudnn.rnn_plan import NetworkPlan, SequencePlan, network_plan, sequence_plan
from dnnbind.highlevel.cudnn.rnn_weights import unpack
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.dims import RNNDims
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.workspace import address, allocate
from dnnbind.highlevel.gpu.saved import private

__all__ = ["rnn", "pack_rnn_weights", "PackedRNNWeights", "RNNPullback"]


def _params(dims: RNNDims, training: bool) -> Callable[[], dict[str, Any]]:
    """The op's parameters for error messages, computed only when one is raised."""
    def params() -> dict[str, Any]:
        return {"mode": dims.mode, "hidden_size": dims.hidden_size, "num_layers": dims.num_layers,
                "bidirectional": dims.num_directions == 2, "lengths": dims.lengths, "training": training,
                "math_type": math_type(dims), "workspace_limit": settings.current().workspace_limit}
    return params


def _temp_sizes(h: Any, net: NetworkPlan, seq: SequencePlan, training: bool) -> tuple[int, int]:
    """(workspace, reserve space) bytes by cudnnGetRNNTempSpaceSizes."""
    c = lib()
    work, reserve = ctypes.c_size_t(), ctypes.c_size_t()
    mode = c.CUDNN_FWD_MODE_TRAINING if training else c.CUDNN_FWD_MODE_INFERENCE
    c.cudnnGetRNNTempSpaceSizes(h, net.desc.handle, mode, seq.x.handle, ctypes.byref(work), ctypes.byref(reserve))
    return work.value, reserve.value


def _state(cp: Any, a: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """A C-contiguous state array: ``a`` (or a contiguous copy), or zeros when it is None."""
    return cp.zeros(shape, dtype) if a is None else cp.ascontiguousarray(a)


def _zero_padding(cp: Any, a: Any, valid: Any) -> Any:
    """``a`` with every padded position set to zero (NaN there included); ``a`` itself without padding."""
    return a if valid is None else cp.where(valid, a, a.dtype.type(0))


def rnn(x: Any, weights: Sequence[Sequence[Any]], h0: Any, c0: Any, dims: RNNDims, *,
        training: bool = True) -> tuple[tuple[Any, Any, Any], "RNNPullback"]:
    """Run the network (see :func:`dnnbind.rnn`); returns ((y, hy, cy), pullback), cy None unless LSTM.

    ``weights``: PyTorch-layout (w_ih, w_hh, b_ih, b_hh) per layer and direction, or a
    :class:`PackedRNNWeights` from :func:`pack_rnn_weights` (no copy). ``training=False`` runs cuDNN's
    inference mode (no reserve space); its pullback raises.
    """
    cp = cupy()
    c = lib()
    named = {f"weights[{i}][{j}]": a for i, entry in enumerate(weights) for j, a in enumerate(entry)}
    with Call("rnn", _params(dims, training), x=x, h0=h0, c0=c0, **named) as call:
        x = cp.ascontiguousarray(call["x"])
        arrays = [[call[f"weights[{i}][{j}]"] for j in range(4)] for i in range(len(weights))]
        device, dtype = call.device, x.dtype
        net = network_plan(dims, math_type(dims), device)
        seq = sequence_plan(dims, device)
        h = handle(device, current_stream())
        space = weight_space(cp, net, h, arrays)
        lstm = dims.mode == "lstm"
        hx = _state(cp, call["h0"], dims.h_shape, dtype)
        cx = _state(cp, call["c0"], dims.h_shape, dtype) if lstm else None
        y = cp.empty(dims.y_shape, dtype)
        hy = cp.empty(dims.h_shape, dtype)
        cy = cp.empty(dims.h_shape, dtype) if lstm else None
        work_bytes, reserve_bytes = _temp_sizes(h, net, seq, training)
        work = allocate(work_bytes, settings.current().workspace_limit, "RNN workspace")
        reserve = cp.empty(reserve_bytes if training else 0, np.uint8)
        lengths = seq.device_lengths(cp)
        c.cudnnRNNForward(h, net.desc.handle, c.CUDNN_FWD_MODE_TRAINING if training else c.CUDNN_FWD_MODE_INFERENCE,
                          lengths, seq.x.handle, x, seq.y.handle, y, seq.h.handle, hx, hy,
                          seq.h.handle if lstm else None, cx, cy, space.nbytes, space.ptr, work_bytes, address(work),
                          reserve.nbytes, reserve if reserve.nbytes else None)
        y = _zero_padding(cp, y, seq.valid(cp))
        # the pullback's own x, states and y (the weight space is already a copy, unless packed by the caller)
        x, hx = private(cp, x, call["x"]), private(cp, hx, call["h0"])
        cx = None if cx is None else private(cp, cx, call["c0"])
    pullback = RNNPullback(dims, net, seq, device, x, hx, cx, y.copy(), space, reserve if training else None)
    return (y, hy, cy), pullback


class RNNPullback:
    """(dy, dhy=None, dcy=None) -> (dx, dh0, dc0, dweights) for one forward call.

    Holds what the backward calls read: x, h0, c0, y, the weight space and the forward's reserve space,
    which it never writes (each call works on a copy; see the module docstring).
    """

    def __init__(self, dims: RNNDims, net: NetworkPlan, seq: SequencePlan, device: int, x: Any, hx: Any, cx: Any,
                 y: Any, space: WeightSpace, reserve: Any) -> None:
        self.dims, self._net, self._seq, self._device = dims, net, seq, device
        self._x, self._hx, self._cx, self._y = x, hx, cx, y
        self._space, self._reserve = space, reserve

    def __call__(self, dy: Any, dhy: Any = None, dcy: Any = None) -> tuple[Any, Any, Any, list]:
        dims = self.dims
        if self._reserve is None:
            raise RuntimeError("this rnn forward ran in inference mode (training=False) and kept no reserve space; "
                               "run it with training=True to take gradients")
        lstm = dims.mode == "lstm"
        if dcy is not None and not lstm:
            raise ValueError(f"dcy is only used by mode='lstm', not mode={dims.mode!r}")
        cp = cupy()
        c = lib()
        dtype = self._x.dtype
        with Call("rnn pullback", _params(dims, True), device=self._device, dy=dy, dhy=dhy, dcy=dcy) as back:
            valid = self._seq.valid(cp)
            dy = cotangent("dy", back["dy"], dims.y_shape, dtype, None, self._device)
            dy = cp.ascontiguousarray(_zero_padding(cp, dy, valid))
            dhy = self._cotangent_state(cp, "dhy", back["dhy"])
            dcy = self._cotangent_state(cp, "dcy", back["dcy"]) if lstm else None
            net, seq, space = self._net, self._seq, self._space
            h = handle(self._device, current_stream())
            work_bytes, _ = _temp_sizes(h, net, seq, True)
            work = allocate(work_bytes, settings.current().workspace_limit, "RNN workspace")
            reserve = self._reserve.copy()          # BackwardData writes into it: keep the forward's pristine
            lengths = seq.device_lengths(cp)
            dx = cp.empty(self._x.shape, dtype)
            dhx = cp.empty(dims.h_shape, dtype)
            dcx = cp.empty(dims.h_shape, dtype) if lstm else None
            c.cudnnRNNBackwardData_v8(h, net.desc.handle, lengths, seq.y.handle, self._y, dy, seq.x.handle, dx,
                                      seq.h.handle, self._hx, dhy, dhx, seq.h.handle if lstm else None, self._cx,
                                      dcy, dcx, space.nbytes, space.ptr, work_bytes, address(work), reserve.nbytes,
                                      reserve)
            layout = net.layout(h, cp)
            dspace = cp.zeros(layout.size, dtype)   # CUDNN_WGRAD_MODE_ADD accumulates into it
            c.cudnnRNNBackwardWeights_v8(h, net.desc.handle, c.CUDNN_WGRAD_MODE_ADD, lengths, seq.x.handle, self._x,
                                         seq.h.handle, self._hx, seq.y.handle, self._y, space.nbytes, dspace,
                                         work_bytes, address(work), reserve.nbytes, reserve)
            dx = _zero_padding(cp, dx, valid)
            return dx, dhx, dcx, unpack(layout, dspace, cp)

    def _cotangent_state(self, cp: Any, name: str, value: Any) -> Any:
        dims = self.dims
        if value is None:
            return cp.zeros(dims.h_shape, self._x.dtype)
        return cp.ascontiguousarray(cotangent(name, value, dims.h_shape, self._x.dtype, None, self._device))
