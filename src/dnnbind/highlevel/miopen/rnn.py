"""Multi-layer, optionally bidirectional RNN / LSTM / GRU on MIOpen, with PyTorch's weights and semantics.

Forward: the PyTorch-layout weights are gathered into MIOpen's weight space (gate order mapped, see
:mod:`rnn_layout`), then miopenRNNForward (training mode) runs and fills the reserve space. The
backward runs miopenRNNBackwardSeqData, then miopenRNNBackwardWeightsSeqTensor with the same workspace
(the weights pass reads what the data pass left there) into a zeroed weight gradient (so the result is
right whether MIOpen accumulates into dw or overwrites it), and scatters that back into PyTorch's
layout. It runs on a copy of the reserve space, so calling the backward twice gives the same result
and never changes what the forward saved.

Residuals (see :func:`rnn_residuals`): x, the raw y (before the padding past each sequence's end is
zeroed), the weight space, the reserve space, h0 and c0; an absent h0 or c0 is saved as an empty
array, so the residuals always have the same count and order.

Variable lengths (``dims.lengths``) use MIOpen's padded seq-major layout with a length per sequence;
y (and dx) are zeroed past each sequence's end, as the reference does, whatever MIOpen leaves there.
float16 and float32 only (MIOpen has no double RNNs); no LSTM projection (``proj_size``: MIOpen has
none, the plan layer raises NotImplementedError).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.dims.rnn import RNNDims
from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.workspace import address, allocate
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.miopen._lib import handle, lib
from dnnbind.highlevel.miopen.rnn_layout import weight_space_size
from dnnbind.highlevel.miopen.rnn_plan import RNNPlan, check_dtype, plan_for
from dnnbind.highlevel.residual import ArraySpec, only_needed


def _params(dims: RNNDims) -> dict[str, Any]:
    return {"mode": dims.mode, "hidden_size": dims.hidden_size, "num_layers": dims.num_layers,
            "bidirectional": dims.num_directions == 2, "lengths": dims.lengths}


def _named(weights: Sequence[Sequence[Any]]) -> dict[str, Any]:
    return {f"weights[{i}][{j}]": a for i, entry in enumerate(weights) for j, a in enumerate(entry)}


def _ptr(a: Any) -> int | None:
    return None if a is None else a.data.ptr


def _masked(cp: Any, plan: RNNPlan, a: Any, device: int) -> Any:
    """a (seq, batch, features) with the steps past each sequence's end set to zero."""
    if plan.dims.lengths is None:
        return a
    return cp.where(plan.on_device(cp, "valid", device), a, a.dtype.type(0))


def _saved_state(cp: Any, state: Any, caller: Any, dtype: Any) -> Any:
    """The residual of h0 or c0: the backward's own copy, or an empty array when it was not given."""
    return cp.empty((0,), dtype) if state is None else private(cp, state, caller)


def rnn_forward(x: Any, weights: Sequence[Sequence[Any]], h0: Any, c0: Any,
                dims: RNNDims) -> tuple[tuple[Any, Any, Any], tuple[Any, ...]]:
    """Run the network; returns ((y, hy, cy), residuals) with cy None unless LSTM (see :func:`dnnbind.rnn`)."""
    check_dtype(dims)
    cp = cupy()
    lstm = dims.mode == "lstm"
    with Call("rnn", _params(dims), dlpack_devices=DLPACK_ROCM, x=x, h0=h0, c0=c0, **_named(weights)) as call:
        device = call.device
        plan = plan_for(dims)
        x = cp.ascontiguousarray(call["x"])
        h0 = None if call["h0"] is None else cp.ascontiguousarray(call["h0"])
        c0 = None if call["c0"] is None else cp.ascontiguousarray(call["c0"])
        entries = [[call[f"weights[{i}][{j}]"] for j in range(4)] for i in range(len(weights))]
        w = plan.pack(cp, entries, device)           # a new array: the backward's own
        h = handle(device, current_stream())
        plan.check_params_size(h)
        work_size, reserve_size = plan.temp_sizes(h)
        work = allocate(work_size)
        reserve = cp.empty(reserve_size, np.uint8)
        y_raw = cp.empty(dims.y_shape, x.dtype)
        hy = cp.empty(dims.h_shape, x.dtype)
        cy = cp.empty(dims.h_shape, x.dtype) if lstm else None
        hd = plan.h.handle
        lib.miopenRNNForward(h.ptr, plan.desc.handle, lib.miopenRNNTraining, plan.x.handle, x.data.ptr, hd, _ptr(h0),
                             hy.data.ptr, hd, _ptr(c0), _ptr(cy), plan.y.handle, y_raw.data.ptr, w.data.ptr, w.nbytes,
                             address(work), work_size, reserve.data.ptr, reserve_size)
        del work
        y = _masked(cp, plan, y_raw, device)
        saved = (private(cp, x, call["x"]), y_raw, w, reserve, _saved_state(cp, h0, call["h0"], x.dtype),
                 _saved_state(cp, c0, call["c0"], x.dtype))
    return (y.copy() if y is y_raw else y, hy, cy), saved         # y_raw is the backward's own


def rnn_backward(saved: tuple, cotangents: tuple, dims: RNNDims, *,
                 needs: tuple[bool, ...] | None = None) -> tuple[Any, Any, Any, list]:
    """(dx, dh0, dc0, dweights) from the residuals and (dy, dhy=None, dcy=None); dh0 always an array,
    dc0 None unless LSTM, dweights a list of (w_ih, w_hh, b_ih, b_hh) with None for absent biases. The
    weights' pass runs only where ``needs`` asks for dweights; what it marks False comes back as None."""
    x, y_raw, w, reserve, h0, c0 = saved
    h0, c0 = (None if s.size == 0 else s for s in (h0, c0))
    dy, dhy, dcy = (tuple(cotangents) + (None, None))[:3]
    lstm = dims.mode == "lstm"
    if dcy is not None and not lstm:
        raise ValueError(f"dcy is only used by mode='lstm', not mode={dims.mode!r}")
    cp = cupy()
    device, dtype = x.device.id, x.dtype
    with Call("rnn backward", _params(dims), device=device, dlpack_devices=DLPACK_ROCM, dy=dy, dhy=dhy,
              dcy=dcy) as back:
        plan = plan_for(dims)
        dy = _masked(cp, plan, cotangent("dy", back["dy"], dims.y_shape, dtype, "NCHW", device, DLPACK_ROCM),
                     device)
        dy = cp.ascontiguousarray(dy)
        dhy = cp.zeros(dims.h_shape, dtype) if back["dhy"] is None else \
            cotangent("dhy", back["dhy"], dims.h_shape, dtype, "NCHW", device, DLPACK_ROCM)
        dcy = None if not lstm else cp.zeros(dims.h_shape, dtype) if back["dcy"] is None else \
            cotangent("dcy", back["dcy"], dims.h_shape, dtype, "NCHW", device, DLPACK_ROCM)
        h = handle(device, current_stream())
        work_size, _ = plan.temp_sizes(h)
        work = allocate(work_size)
        scratch = reserve.copy()                 # the backward passes may write into it
        dx = cp.empty(x.shape, dtype)
        dh0 = cp.empty(dims.h_shape, dtype)
        dc0 = cp.empty(dims.h_shape, dtype) if lstm else None
        hd = plan.h.handle
        lib.miopenRNNBackwardSeqData(h.ptr, plan.desc.handle, plan.y.handle, y_raw.data.ptr, dy.data.ptr, hd,
                                     _ptr(h0), dhy.data.ptr, dh0.data.ptr, hd, _ptr(c0), _ptr(dcy), _ptr(dc0),
                                     plan.x.handle, dx.data.ptr, w.data.ptr, w.nbytes, address(work), work_size,
                                     scratch.data.ptr, scratch.size)
        dweights = None
        if needs is None or needs[3]:
            dw = cp.zeros(plan.weight_elements, dtype)
            lib.miopenRNNBackwardWeightsSeqTensor(h.ptr, plan.desc.handle, plan.x.handle, x.data.ptr, hd,
                                                  _ptr(h0), plan.y.handle, y_raw.data.ptr, dw.data.ptr, dw.nbytes,
                                                  address(work), work_size, scratch.data.ptr, scratch.size)
            dweights = plan.unpack(cp, dw, device)
        return only_needed((_masked(cp, plan, dx, device), dh0, dc0, dweights), needs)


def residual_specs(dims: RNNDims, dtype: Any, reserve_size: int, has_h0: bool,
                   has_c0: bool) -> tuple[ArraySpec, ...]:
    """What :func:`rnn_forward` saves, given MIOpen's reserve-space size in bytes (no library call)."""
    state = ArraySpec(dims.h_shape, dtype)
    empty = ArraySpec((0,), dtype)
    return (ArraySpec((dims.seq_len, dims.batch, dims.input_size), dtype), ArraySpec(dims.y_shape, dtype),
            ArraySpec((weight_space_size(dims),), dtype), ArraySpec((reserve_size,), np.dtype(np.uint8)),
            state if has_h0 else empty, state if has_c0 else empty)


def rnn_residuals(x: ArraySpec, weights: Sequence[Sequence[Any]], h0: ArraySpec | None, c0: ArraySpec | None,
                  dims: RNNDims) -> tuple[ArraySpec, ...]:
    """x, y before masking, the weight space (flat), the reserve space (bytes), h0 and c0 (shape (0,) when
    absent), all in x's dtype but the reserve space. Its size is MIOpen's miopenGetRNNTempSpaceSizes, a
    host-side query that needs a handle: CuPy and the current device (see :func:`residual_specs`)."""
    check_dtype(dims)
    cp = cupy()
    _, reserve_size = plan_for(dims).temp_sizes(handle(cp.cuda.runtime.getDevice(), current_stream()))
    return residual_specs(dims, x.dtype, reserve_size, h0 is not None, c0 is not None)
