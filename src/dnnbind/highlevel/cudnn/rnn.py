"""Multi-layer, optionally bidirectional RNN / LSTM / GRU on cuDNN 9 (the v8 RNN API).

Forward: cudnnRNNForward in training mode (inference mode with ``training=False``: it saves nothing and
its backward refuses to run). Backward: cudnnRNNBackwardData_v8, then cudnnRNNBackwardWeights_v8
(CUDNN_WGRAD_MODE_ADD into a zeroed gradient space). Semantics, shapes and PyTorch's weight layout and gate order are those of
:func:`dnnbind.rnn` and the reference backend; see :mod:`rnn_weights` for how the weights map onto
cuDNN's weight space and :mod:`rnn_packing` for packing them once. An LSTM projection (dims.proj_size)
is cuDNN's recurrent projection (projSize): h, hx/hy and y are proj_size wide, c stays hidden_size wide
(its own tensor descriptor), and w_hr is one more region of the weight space.

Variable lengths: x and y are described as CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED with one length per
sequence (any order) and padded I/O enabled, which is PyTorch's packed-sequence semantics: a sequence
takes steps t < length only, the reverse direction starts at its last valid step, hy/cy are taken
there. cuDNN reads the lengths twice: the host copy went into the RNN data descriptors
(seqLengthArray) and every call passes the device copy (devSeqLengths, an int32 device array). Padded
positions of y and dx are set to zero here, and dy's are ignored, whatever cuDNN does with them.

Residual form (see :mod:`dnnbind.highlevel.residual`). A training forward saves (x, hx, cx for LSTM
only, y, the weight space, the reserve space), all its own: x, the initial states (zeros when None) and
y as C-order arrays, the flat weight space (the per-call packed copy, or a copy of the caller's packed
space) and cuDNN's reserve space (uint8). The backward finds its plans in the caches by dims and the
math type of the settings in force (allow_tf32 must be as in the forward: the reserve space is checked
against the size cuDNN asks for). Sizes of the weight and reserve spaces come from cuDNN's host-side
queries (cudnnGetRNNWeightSpaceSize, cudnnGetRNNTempSpaceSizes), which need a handle, hence a GPU.

The reserve space. cudnnRNNBackwardData_v8 WRITES into it: the header declares its reserveSpace [in,out],
and cudnnRNNBackwardWeights_v8 consumes what BackwardData left there (hence their fixed order; PyTorch's
cuDNN RNN notes that BackwardData "mutates reserve" and always runs it first). Run on the saved buffer,
a second backward call would start from clobbered intermediates. So every backward call COPIES the
reserve space and runs both backward calls on the copy (one device-to-device copy per call, far cheaper
than recomputing the forward); the saved reserve space stays pristine and every call gives the same
result. Workspace sizes are asked for on every call (cudnnGetRNNTempSpaceSizes).
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Sequence

import numpy as np

from dnnbind.highlevel.cudnn._lib import handle, lib
from dnnbind.highlevel.cudnn.rnn_packing import PackedRNNWeights, math_type, pack_rnn_weights, weight_space
from dnnbind.highlevel.cudnn.rnn_plan import NetworkPlan, SequencePlan, network_plan, sequence_plan
from dnnbind.highlevel.cudnn.rnn_weights import unpack
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.dims.checks import numpy_dtype
from dnnbind.highlevel.dims.rnn import RNNDims
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.workspace import address, allocate
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.residual import ArraySpec, only_needed

__all__ = ["rnn_forward", "rnn_backward", "rnn_residuals", "pack_rnn_weights", "PackedRNNWeights"]


def _params(dims: RNNDims, training: bool) -> Callable[[], dict[str, Any]]:
    """The op's parameters for error messages, computed only when one is raised."""
    def params() -> dict[str, Any]:
        return {"mode": dims.mode, "hidden_size": dims.hidden_size, "proj_size": dims.proj_size,
                "num_layers": dims.num_layers,
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


def _plans(dims: RNNDims, device: int) -> tuple[NetworkPlan, SequencePlan, Any]:
    """(network plan, sequence plan, this thread's handle on the current stream) for ``dims``."""
    return (network_plan(dims, math_type(dims), device), sequence_plan(dims, device),
            handle(device, current_stream()))


def rnn_forward(x: Any, weights: Sequence[Sequence[Any]], h0: Any, c0: Any, dims: RNNDims, *,
                training: bool = True) -> tuple[tuple[Any, Any, Any], tuple]:
    """Run the network (see :func:`dnnbind.rnn`); returns ((y, hy, cy), residuals), cy None unless LSTM.

    ``weights``: PyTorch-layout (w_ih, w_hh, b_ih, b_hh) per layer and direction (and w_hr, cuDNN's
    recurrent projection, with dims.proj_size), or a
    :class:`PackedRNNWeights` from :func:`pack_rnn_weights` (no packing). ``training=False`` runs cuDNN's
    inference mode (no reserve space) and saves nothing; its backward raises.
    """
    cp = cupy()
    c = lib()
    named = {f"weights[{i}][{j}]": a for i, entry in enumerate(weights) for j, a in enumerate(entry)}
    with Call("rnn", _params(dims, training), x=x, h0=h0, c0=c0, **named) as call:
        x = cp.ascontiguousarray(call["x"])
        arrays = [[call[f"weights[{i}][{j}]"] for j in range(len(weights[i]))] for i in range(len(weights))]
        device, dtype = call.device, x.dtype
        net, seq, h = _plans(dims, device)
        space = weight_space(cp, net, h, arrays)
        weights_saved = space.private() if training else space.array
        lstm = dims.mode == "lstm"
        hx = _state(cp, call["h0"], dims.h_shape, dtype)
        cx = _state(cp, call["c0"], dims.c_shape, dtype) if lstm else None
        y = cp.empty(dims.y_shape, dtype)
        hy = cp.empty(dims.h_shape, dtype)
        cy = cp.empty(dims.c_shape, dtype) if lstm else None
        work_bytes, reserve_bytes = _temp_sizes(h, net, seq, training)
        work = allocate(work_bytes, settings.current().workspace_limit, "RNN workspace")
        reserve = cp.empty(reserve_bytes if training else 0, np.uint8)
        c.cudnnRNNForward(h, net.desc.handle, c.CUDNN_FWD_MODE_TRAINING if training else c.CUDNN_FWD_MODE_INFERENCE,
                          seq.device_lengths(cp), seq.x.handle, x, seq.y.handle, y, seq.h.handle, hx, hy,
                          seq.c.handle if lstm else None, cx, cy, space.nbytes, int(weights_saved.data.ptr),
                          work_bytes, address(work), reserve.nbytes, reserve if reserve.nbytes else None)
        y = _zero_padding(cp, y, seq.valid(cp))
        if not training:
            return (y, hy, cy), ()
        # the backward's own x, states and y (the weight space is a private copy already)
        states = (private(cp, hx, call["h0"]),) + (() if cx is None else (private(cp, cx, call["c0"]),))
        return (y, hy, cy), (private(cp, x, call["x"]),) + states + (y.copy(), weights_saved, reserve)


def rnn_backward(residuals: tuple, cotangents: tuple, dims: RNNDims, *, training: bool = True,
                 needs: tuple[bool, ...] | None = None) -> tuple[Any, Any, Any, list]:
    """(dy, dhy=None, dcy=None) -> (dx, dh0, dc0, dweights) from the saved arrays; dc0 None unless LSTM,
    dweights (w_ih, w_hh, b_ih, b_hh) per layer and direction (biases None without biases; dw_hr as a
    5th array with a projection). The weights' pass runs only where ``needs`` asks for dweights (the
    data pass gives dx, dh0 and dc0 together); what ``needs`` marks False comes back as None."""
    if not residuals:
        raise RuntimeError("this rnn forward ran in inference mode (training=False) and kept no reserve space; "
                           "run it with training=True to take gradients")
    lstm = dims.mode == "lstm"
    dy, dhy, dcy = (tuple(cotangents) + (None, None, None))[:3]
    if dcy is not None and not lstm:
        raise ValueError(f"dcy is only used by mode='lstm', not mode={dims.mode!r}")
    x, hx = residuals[:2]
    cx = residuals[2] if lstm else None
    y, space, saved_reserve = residuals[-3:]
    cp = cupy()
    c = lib()
    device, dtype = x.device.id, x.dtype
    with Call("rnn pullback", _params(dims, True), device=device, dy=dy, dhy=dhy, dcy=dcy) as back:
        net, seq, h = _plans(dims, device)
        work_bytes, reserve_bytes = _temp_sizes(h, net, seq, True)
        _check_spaces(net.weight_space_bytes(h), reserve_bytes, space, saved_reserve)
        valid = seq.valid(cp)
        dy = _cotangent(cp, "dy", back["dy"], dims.y_shape, dtype, device)
        dy = cp.ascontiguousarray(_zero_padding(cp, dy, valid))
        dhy = _cotangent(cp, "dhy", back["dhy"], dims.h_shape, dtype, device)
        dcy = _cotangent(cp, "dcy", back["dcy"], dims.c_shape, dtype, device) if lstm else None
        work = allocate(work_bytes, settings.current().workspace_limit, "RNN workspace")
        reserve = saved_reserve.copy()          # BackwardData writes into it: keep the saved one pristine
        lengths = seq.device_lengths(cp)
        dx = cp.empty(x.shape, dtype)
        dhx = cp.empty(dims.h_shape, dtype)
        dcx = cp.empty(dims.c_shape, dtype) if lstm else None
        c.cudnnRNNBackwardData_v8(h, net.desc.handle, lengths, seq.y.handle, y, dy, seq.x.handle, dx,
                                  seq.h.handle, hx, dhy, dhx, seq.c.handle if lstm else None, cx,
                                  dcy, dcx, space.nbytes, space, work_bytes, address(work), reserve.nbytes, reserve)
        dweights = None
        if needs is None or needs[3]:
            layout = net.layout(h, cp)
            dspace = cp.zeros(layout.size, dtype)   # CUDNN_WGRAD_MODE_ADD accumulates into it
            c.cudnnRNNBackwardWeights_v8(h, net.desc.handle, c.CUDNN_WGRAD_MODE_ADD, lengths, seq.x.handle, x,
                                         seq.h.handle, hx, seq.y.handle, y, space.nbytes, dspace,
                                         work_bytes, address(work), reserve.nbytes, reserve)
            dweights = unpack(layout, dspace, cp)
        dx = _zero_padding(cp, dx, valid)
        return only_needed((dx, dhx, dcx, dweights), needs)


def _cotangent(cp: Any, name: str, value: Any, shape: tuple[int, ...], dtype: Any, device: int) -> Any:
    """A C-contiguous cotangent of ``shape``; zeros when it is None."""
    if value is None:
        return cp.zeros(shape, dtype)
    return cp.ascontiguousarray(cotangent(name, value, shape, dtype, None, device))


def _check_spaces(space_bytes: int, reserve_bytes: int, space: Any, reserve: Any) -> None:
    """RuntimeError unless the saved weight and reserve spaces have the sizes this network asks for now."""
    if space.nbytes != space_bytes or reserve.nbytes != reserve_bytes:
        raise RuntimeError(f"the saved weight space ({space.nbytes} bytes) and reserve space ({reserve.nbytes} "
                           f"bytes) are not what cuDNN asks for this network now ({space_bytes} and {reserve_bytes} "
                           f"bytes): run the backward with the settings of the forward (allow_tf32)")


def rnn_residuals(x: Any, weights: Any, h0: Any, c0: Any, dims: RNNDims, *,
                  training: bool = True) -> tuple[ArraySpec, ...]:
    """x, hx, cx (LSTM only), y in x's dtype; the flat weight space (elements of x's dtype) and the reserve
    space (uint8) in the sizes cuDNN gives on the current device; nothing in inference mode. Runs no
    kernel, but cuDNN's size queries need a handle, hence CuPy and a GPU."""
    if not training:
        return ()
    device = cupy().cuda.runtime.getDevice()
    net, seq, h = _plans(dims, device)
    _, reserve_bytes = _temp_sizes(h, net, seq, True)
    return spec_of(dims, x.dtype, net.weight_space_bytes(h), reserve_bytes)


def spec_of(dims: RNNDims, dtype: Any, space_bytes: int, reserve_bytes: int) -> tuple[ArraySpec, ...]:
    """The residuals of a training forward of ``dims`` whose weight and reserve spaces have these sizes."""
    state = ArraySpec(dims.h_shape, dtype)
    states = (state, ArraySpec(dims.c_shape, dtype)) if dims.mode == "lstm" else (state,)
    return ((ArraySpec((dims.seq_len, dims.batch, dims.input_size), dtype),) + states
            + (ArraySpec(dims.y_shape, dtype), ArraySpec((space_bytes // numpy_dtype(dims.dtype).itemsize,), dtype),
               ArraySpec((reserve_bytes,), np.dtype(np.uint8))))
