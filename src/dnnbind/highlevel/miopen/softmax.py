"""Softmax and log-softmax along any axis on MIOpen: miopenSoftmaxForward_V2 / miopenSoftmaxBackward_V2.

MIOpen normalises a 4-d tensor over C (CHANNEL mode, for every n, h, w) or over C*H*W (INSTANCE mode,
for every n). An array of any rank is described, without copying, as (outer, C, inner, 1) where C is
the softmax axis (see :func:`dnnbind.highlevel.gpu.views.axis_view`): INSTANCE mode when inner is 1,
CHANNEL mode otherwise. MIOPEN_SOFTMAX_ACCURATE subtracts the maximum first; MIOPEN_SOFTMAX_LOG gives
log-softmax. Works on C-contiguous arrays, and on channels-last arrays normalised along the channels;
others are copied to C order once.

The residual is y (a copy: the caller gets its own), in the memory layout the forward ran in; the
backward finds the plan again from y's shape, layout and dtype.
"""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.views import axis_view
from dnnbind.highlevel.miopen._lib import handle, lib, scaling
from dnnbind.highlevel.miopen.descriptors import TensorDescriptor
from dnnbind.highlevel.residual import ArraySpec

PLANS: PlanCache["SoftmaxPlan"] = PlanCache("miopen.softmax", maxsize=256)


class SoftmaxPlan:
    """The 4-d descriptor of one (shape, layout, dtype, axis) and MIOpen's mode for it."""

    def __init__(self, shape: tuple[int, ...], layout: str, dtype: str, axis: int) -> None:
        view = axis_view(shape, _layout.strides(shape, layout), axis)
        if view is None:
            raise ValueError(f"an array of shape {shape} in {layout} memory cannot be viewed as 4-d along "
                             f"axis {axis}; copy it to C order (see run_layout)")
        dims, strides = view
        self.desc = TensorDescriptor(dims, dtype, strides)
        self.mode = lib.MIOPEN_SOFTMAX_MODE_INSTANCE if dims[2] == 1 else lib.MIOPEN_SOFTMAX_MODE_CHANNEL


def plan_for(shape: tuple[int, ...], layout: str, dtype: str, axis: int) -> SoftmaxPlan:
    return PLANS.get((shape, layout, dtype, axis), lambda: SoftmaxPlan(shape, layout, dtype, axis))


def run_layout(x: Any, axis: int) -> str | None:
    """The dense layout x is in if MIOpen can see it as (outer, C, inner, 1) along ``axis``; None when x
    must be copied to C order first (not dense, or channels-last normalised along a spatial axis)."""
    lay = _layout.layout_of(x)
    if lay is None or axis_view(x.shape, _layout.strides(x.shape, lay), axis) is None:
        return None
    return lay


_ALGORITHMS = {"softmax": "MIOPEN_SOFTMAX_ACCURATE", "logsoftmax": "MIOPEN_SOFTMAX_LOG"}


def _forward(op: str, x: Any, axis: int) -> tuple[Any, tuple[Any]]:
    cp = cupy()
    with Call(op, {"axis": axis}, dlpack_devices=DLPACK_ROCM, x=x) as call:
        x = call["x"]
        lay = run_layout(x, axis)
        if lay is None:
            x, lay = cp.ascontiguousarray(x), "NCHW"
        plan = plan_for(tuple(x.shape), lay, x.dtype.name, axis)
        alpha, beta = scaling(x.dtype)
        y = _layout.empty(cp, x.shape, x.dtype, lay)
        d = plan.desc.handle
        lib.miopenSoftmaxForward_V2(handle(call.device, current_stream()).ptr, alpha, d, x.data.ptr, beta, d,
                                    y.data.ptr, getattr(lib, _ALGORITHMS[op]), plan.mode)
    return y.copy(order="K"), (y,)         # the residual is the forward's own y: the caller gets a copy


def _backward(op: str, saved: tuple, cotangents: tuple, axis: int) -> Any:
    (y,), (dy,) = saved, cotangents
    cp = cupy()
    device = y.device.id
    with Call(f"{op} backward", {"axis": axis}, device=device, dlpack_devices=DLPACK_ROCM, dy=dy) as back:
        lay = run_layout(y, axis)           # the layout the forward ran in: y was made dense in it
        if lay is None:
            raise ValueError(f"the saved y of {op} is not laid out as the forward made it")
        plan = plan_for(tuple(y.shape), lay, y.dtype.name, axis)
        dy = cotangent("dy", back["dy"], y.shape, y.dtype, lay, device, DLPACK_ROCM)
        dx = _layout.empty(cp, y.shape, y.dtype, lay)
        alpha, beta = scaling(y.dtype)
        d = plan.desc.handle
        lib.miopenSoftmaxBackward_V2(handle(device, current_stream()).ptr, alpha, d, y.data.ptr, d, dy.data.ptr,
                                     beta, d, dx.data.ptr, getattr(lib, _ALGORITHMS[op]), plan.mode)
    return dx


def softmax_forward(x: Any, axis: int) -> tuple[Any, tuple[Any]]:
    """Softmax along ``axis`` (MIOPEN_SOFTMAX_ACCURATE); saves y."""
    return _forward("softmax", x, axis)


def softmax_backward(saved: tuple, cotangents: tuple, axis: int) -> Any:
    """dx from the saved y and dy."""
    return _backward("softmax", saved, cotangents, axis)


def logsoftmax_forward(x: Any, axis: int) -> tuple[Any, tuple[Any]]:
    """Log-softmax along ``axis`` (MIOPEN_SOFTMAX_LOG); saves y."""
    return _forward("logsoftmax", x, axis)


def logsoftmax_backward(saved: tuple, cotangents: tuple, axis: int) -> Any:
    """dx from the saved y (log-probabilities) and dy."""
    return _backward("logsoftmax", saved, cotangents, axis)


def softmax_residuals(x: ArraySpec, axis: int) -> tuple[ArraySpec]:
    """y: x's shape and dtype (MIOpen computes half precision as it is)."""
    return (ArraySpec(tuple(x.shape), x.dtype),)


logsoftmax_residuals = softmax_residuals
