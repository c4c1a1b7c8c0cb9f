"""Softmax and log-softmax along any axis on cuDNN: cudnnSoftmaxForward / cudnnSoftmaxBackward.

cuDNN normalises over the channel dimension of a 4-d tensor (CHANNEL mode: over C for every n, h, w;
INSTANCE mode: over C*H*W for every n). An array of any rank is described, without copying, as
(outer, C, inner, 1) where C is the softmax axis, outer the product of the axes before it and inner of
those after it (:func:`dnnbind.highlevel.gpu.views.axis_view`); INSTANCE mode when inner is 1, CHANNEL
mode otherwise. Works on C-contiguous and channels-last arrays whose other axes merge (others are copied
to C order once). CUDNN_SOFTMAX_ACCURATE subtracts the maximum first; CUDNN_SOFTMAX_LOG gives log-softmax.
Residual form (see :mod:`dnnbind.highlevel.residual`): both save y only, whose strides give the backward
its layout; the caller gets a copy of y.
"""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.cudnn._lib import DTYPES, handle, lib
from dnnbind.highlevel.cudnn.descriptors import TensorDescriptor
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.views import axis_view
from dnnbind.highlevel.residual import ArraySpec

PLANS: PlanCache["SoftmaxPlan"] = PlanCache("cudnn.softmax", maxsize=256)


class SoftmaxPlan:
    """The 4-d descriptor of one (shape, layout, dtype, axis) and cuDNN's mode for it."""

    def __init__(self, shape: tuple[int, ...], layout: str, dtype: str, axis: int) -> None:
        c = lib()
        view = axis_view(shape, _layout.strides(shape, layout), axis)
        assert view is not None, "C-contiguous arrays always merge; _run copies channels-last ones that do not"
        dims, view_strides = view
        self.desc = TensorDescriptor(dims, dtype, view_strides)
        self.mode = c.CUDNN_SOFTMAX_MODE_INSTANCE if dims[2] == 1 else c.CUDNN_SOFTMAX_MODE_CHANNEL
        self.dtype = DTYPES[dtype]


def _in_view_layout(cp: Any, a: Any, axis: int) -> tuple[Any, str]:
    """(a, its layout) when cuDNN can read it as the axis view without a copy, else (a C-order copy, "NCHW")."""
    lay = _layout.layout_of(a)
    if lay is None or (lay == "NHWC" and axis_view(a.shape, _layout.strides(a.shape, lay), axis) is None):
        return cp.ascontiguousarray(a), "NCHW"
    return a, lay


def _plan(a: Any, lay: str, axis: int, device: int) -> SoftmaxPlan:
    return PLANS.get((tuple(a.shape), lay, a.dtype.name, axis, device),
                     lambda: SoftmaxPlan(tuple(a.shape), lay, a.dtype.name, axis))


def _forward(op: str, x: Any, axis: int, algo_name: str) -> tuple[Any, tuple[Any]]:
    cp = cupy()
    c = lib()
    with Call(op, {"axis": axis}, x=x) as call:
        x, lay = _in_view_layout(cp, call["x"], axis)
        plan = _plan(x, lay, axis, call.device)
        y = _layout.empty(cp, x.shape, x.dtype, lay)
        c.cudnnSoftmaxForward(handle(call.device, current_stream()), getattr(c, algo_name), plan.mode, plan.dtype.one,
                              plan.desc.handle, x.data.ptr, plan.dtype.zero, plan.desc.handle, y.data.ptr)
        return y.copy(order="K"), (y,)     # the backward keeps y: the caller gets a copy


def _backward(op: str, residuals: tuple, cotangents: tuple, axis: int, algo_name: str) -> Any:
    cp = cupy()
    c = lib()
    (saved_y,), (dy,) = residuals, cotangents
    device = saved_y.device.id
    with Call(f"{op} pullback", {"axis": axis}, device=device, dy=dy) as back:
        y, lay = _in_view_layout(cp, saved_y, axis)
        plan = _plan(y, lay, axis, device)
        dy = cotangent("dy", back["dy"], y.shape, y.dtype, lay, device)
        dx = _layout.empty(cp, y.shape, y.dtype, lay)
        c.cudnnSoftmaxBackward(handle(device, current_stream()), getattr(c, algo_name), plan.mode, plan.dtype.one,
                               plan.desc.handle, y.data.ptr, plan.desc.handle, dy.data.ptr, plan.dtype.zero,
                               plan.desc.handle, dx.data.ptr)
        return dx


def softmax_forward(x: Any, axis: int) -> tuple[Any, tuple]:
    """Softmax along ``axis`` (CUDNN_SOFTMAX_ACCURATE); saves y."""
    return _forward("softmax", x, axis, "CUDNN_SOFTMAX_ACCURATE")


def softmax_backward(residuals: tuple, cotangents: tuple, axis: int) -> Any:
    """dx from the saved y and dy."""
    return _backward("softmax", residuals, cotangents, axis, "CUDNN_SOFTMAX_ACCURATE")


def logsoftmax_forward(x: Any, axis: int) -> tuple[Any, tuple]:
    """Log-softmax along ``axis`` (CUDNN_SOFTMAX_LOG); saves y."""
    return _forward("logsoftmax", x, axis, "CUDNN_SOFTMAX_LOG")


def logsoftmax_backward(residuals: tuple, cotangents: tuple, axis: int) -> Any:
    """dx from the saved y (the log-probabilities) and dy."""
    return _backward("logsoftmax", residuals, cotangents, axis, "CUDNN_SOFTMAX_LOG")


def softmax_residuals(x: Any, axis: int) -> tuple[ArraySpec]:
    """y: x's shape and dtype."""
    return (ArraySpec(tuple(x.shape), x.dtype),)


logsoftmax_residuals = softmax_residuals
