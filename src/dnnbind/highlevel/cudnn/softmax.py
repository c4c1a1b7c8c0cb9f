"""Softmax and log-softmax along any axis on cuDNN: cudnnSoftmaxForward / cudnnSoftmaxBackward.

cuDNN normalises over the channel dimension of a 4-d tensor (CHANNEL mode: over C for every n, h, w;
INSTANCE mode: over C*H*W for every n). An array of any rank is described, without copying, as
(outer, C, inner, 1) where C is the softmax axis, outer the product of the axes before it and inner of
those after it (:func:`dnnbind.highlevel.gpu.views.axis_view`); INSTANCE mode when inner is 1, CHANNEL
mode otherwise. Works on C-contiguous and channels-last arrays whose other axes merge (others are copied
to C order once). CUDNN_SOFTMAX_ACCURATE subtracts the maximum first; CUDNN_SOFTMAX_LOG gives log-softmax.
"""
from __future__ import annotations

from typing import Any, Callable

from dnnbind.highlevel.cudnn._lib import DTYPES, handle, lib
from dnnbind.highlevel.cudnn.descriptors import TensorDescriptor
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.views import axis_view

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


def _run(op: str, x: Any, axis: int, algo_name: str) -> tuple[Any, Callable]:
    cp = cupy()
    c = lib()
    algo = getattr(c, algo_name)
    with Call(op, {"axis": axis}, x=x) as call:
        x = call["x"]
        lay = _layout.layout_of(x)
        if lay is None or (lay == "NHWC" and axis_view(x.shape, _layout.strides(x.shape, lay), axis) is None):
            x, lay = cp.ascontiguousarray(x), "NCHW"
        plan = PLANS.get((tuple(x.shape), lay, x.dtype.name, axis, call.device),
                         lambda: SoftmaxPlan(tuple(x.shape), lay, x.dtype.name, axis))
        y = _layout.empty(cp, x.shape, x.dtype, lay)
        c.cudnnSoftmaxForward(handle(call.device, current_stream()), algo, plan.mode, plan.dtype.one,
                              plan.desc.handle, x.data.ptr, plan.dtype.zero, plan.desc.handle, y.data.ptr)
    device = call.device

    def pullback(dy: Any) -> Any:
        with Call(f"{op} pullback", {"axis": axis}, device=device, dy=dy) as back:
            dy = cotangent("dy", back["dy"], y.shape, y.dtype, lay, device)
            dx = _layout.empty(cp, y.shape, y.dtype, lay)
            c.cudnnSoftmaxBackward(handle(device, current_stream()), algo, plan.mode, plan.dtype.one,
                                   plan.desc.handle, y.data.ptr, plan.desc.handle, dy.data.ptr, plan.dtype.zero,
                                   plan.desc.handle, dx.data.ptr)
            return dx

    return y.copy(order="K"), pullback     # the pullback keeps y: the caller gets a copy


def softmax(x: Any, axis: int) -> tuple[Any, Callable]:
    """Softmax along ``axis`` (CUDNN_SOFTMAX_ACCURATE); the pullback keeps y."""
    return _run("softmax", x, axis, "CUDNN_SOFTMAX_ACCURATE")


def logsoftmax(x: Any, axis: int) -> tuple[Any, Callable]:
    """Log-softmax along ``axis`` (CUDNN_SOFTMAX_LOG); the pullback keeps y."""
    return _run("logsoftmax", x, axis, "CUDNN_SOFTMAX_LOG")
