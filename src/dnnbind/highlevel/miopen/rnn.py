"""Multi-layer, optionally bidirectional RNN / LSTM / GRU on MIOpen, with PyTorch's weights and semantics.

Forward: the PyTorch-layout weights are gathered into MIOpen's weight space (gate order mapped, see
:mod:`rnn_layout`), then miopenRNNForward (training mode) runs and fills the reserve space. The
pullback runs miopenRNNBackwardSeqData, then miopenRNNBackwardWeightsSeqTensor with the same workspace
(the weights pass reads what the data pass left there) into a zeroed weight gradient (so the result is
right whether MIOpen accumulates into dw or overwrites it), and scatters that back into PyTorch's
layout. It runs on a copy of the reserve space, so calling the pullback twice gives the same result
and never changes what the forward saved.

Variable lengths (``dims.lengths``) use MIOpen's padded seq-major layout with a length per sequence;
y (and dx) are zeroed past each sequence's end, as the reference does, whatever MIOpen leaves there.
float16 and float32 only (MIOpen has no double RNNs).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from dnnbind.highlevel.dims import RNNDims
from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.workspace import address, allocate
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.miopen._lib import handle, lib
from dnnbind.highlevel.miopen.rnn_plan import RNNPlan, check_dtype, plan_for


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


def rnn(x: Any, weights: Sequence[Sequence[Any]], h0: Any, c0: Any, dims: RNNDims) -> tuple[tuple, Callable]:
    """Run the network; returns ((y, hy, cy), pullback) with cy None unless LSTM (see :func:`dnnbind.rnn`)."""
    cp = cupy()
    check_dtype(dims)
    lstm = dims.mode == "lstm"
    params = _params(dims)
    with Call("rnn", params, dlpack_devices=DLPACK_ROCM, x=x, h0=h0, c0=c0, **_named(weights)) as call:
        device = call.device
        plan = plan_for(dims)
        x = cp.ascontiguousarray(call["x"])
        h0 = None if call["h0"] is None else cp.ascontiguousarray(call["h0"])
        c0 = None if call["c0"] is None else cp.ascontiguousarray(call["c0"])
        entries = [[call[f"weights[{i}][{j}]"] for j in range(4)] for i in range(len(weights))]
        w = plan.pack(cp, entries, device)
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
        # the pullback's own x, states and raw y (the packed weights w are already a copy)
        x, h0 = private(cp, x, call["x"]), None if h0 is None else private(cp, h0, call["h0"])
        c0 = None if c0 is None else private(cp, c0, call["c0"])
        y = private(cp, y, y_raw)

    def pullback(dy: Any, dhy: Any = None, dcy: Any = None) -> tuple[Any, Any, Any, list]:
        if dcy is not None and not lstm:
            raise ValueError(f"dcy is only used by mode='lstm', not mode={dims.mode!r}")
        with Call("rnn pullback", params, device=device, dlpack_devices=DLPACK_ROCM, dy=dy, dhy=dhy,
                  dcy=dcy) as back:
            dtype = x.dtype
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
            dw = cp.zeros(plan.weight_elements, dtype)
            lib.miopenRNNBackwardWeightsSeqTensor(h.ptr, plan.desc.handle, plan.x.handle, x.data.ptr, hd, _ptr(h0),
                                                  plan.y.handle, y_raw.data.ptr, dw.data.ptr, dw.nbytes, address(work),
                                                  work_size, scratch.data.ptr, scratch.size)
            dweights = plan.unpack(cp, dw, device)
            return _masked(cp, plan, dx, device), dh0, dc0, dweights

    return (y, hy, cy), pullback

