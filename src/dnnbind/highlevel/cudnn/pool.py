"""Max and mean pooling on cuDNN: cudnnPoolingForward / cudnnPoolingBackward.

maxpool uses CUDNN_POOLING_MAX, or CUDNN_POOLING_MAX_DETERMINISTIC under ``settings(deterministic=True)``
(bitwise reproducible gradients for overlapping windows), with NaN propagation (NaN wins a window, as
in the reference). meanpool uses AVERAGE_COUNT_INCLUDE_PADDING or _EXCLUDE_PADDING.

Asymmetric padding: cuDNN pads symmetrically, so x is padded explicitly by the rest (-inf for max,
zero for mean). For a mean that excludes padding, cuDNN then counts the explicit padding as data; the
output and the gradient are rescaled per output position (:mod:`dnnbind.highlevel.gpu.rescale`, a factor
computed on the host once per plan).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from dnnbind.highlevel.cudnn._lib import DTYPES, handle, lib
from dnnbind.highlevel.cudnn.descriptors import PoolingDescriptor, TensorDescriptor
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.dims import PoolDims, numpy_dtype
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.geometry import PoolGeometry, crop, pad
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.rescale import exclude_pad_factor
from dnnbind.highlevel.gpu.saved import private

PLANS: PlanCache["PoolPlan"] = PlanCache("cudnn.pool", maxsize=256)

MAX, MEAN_INCLUDE_PAD, MEAN_EXCLUDE_PAD = "max", "mean_include_pad", "mean_exclude_pad"


def _mode(kind: str, deterministic: bool) -> int:
    c = lib()
    if kind == MAX:
        return c.CUDNN_POOLING_MAX_DETERMINISTIC if deterministic else c.CUDNN_POOLING_MAX
    if kind == MEAN_INCLUDE_PAD:
        return c.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
    return c.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING


class PoolPlan:
    """Descriptors of the (explicitly padded) x, y and the pooling, plus the exclude-padding rescale."""

    def __init__(self, dims: PoolDims, kind: str, deterministic: bool, layout: str) -> None:
        self.dims = dims
        self.kind = kind
        self.layout = _layout.check_layout(layout)
        self.geometry = g = PoolGeometry.of(dims)
        self.dtype = DTYPES[dims.dtype]
        self.mode = _mode(kind, deterministic)
        self.pooling = PoolingDescriptor(self.mode, g.window, g.padding, g.stride)
        self.x = TensorDescriptor(g.x_shape, dims.dtype, layout=layout)
        self.y = TensorDescriptor(g.y_shape, dims.dtype, layout=layout)
        self.fill = -np.inf if kind == MAX else 0.0
        self.rescale = exclude_pad_factor(dims, g) if kind == MEAN_EXCLUDE_PAD else None
        self._rescale_device: Any = None

    def rescale_on_device(self, cp: Any) -> Any:
        """The rescale factors as a CuPy array of shape (1, 1, *out) in the data's dtype."""
        assert self.rescale is not None, "only exclude-padding means with explicit padding rescale"
        if self._rescale_device is None:
            self._rescale_device = cp.asarray(self.rescale.astype(numpy_dtype(self.dims.dtype)))
        return self._rescale_device


def plan_for(dims: PoolDims, kind: str, layout: str, device: int) -> PoolPlan:
    deterministic = settings.current().deterministic and kind == MAX
    key = (dims, kind, deterministic, layout, device)
    return PLANS.get(key, lambda: PoolPlan(dims, kind, deterministic, layout))


def _pool(op: str, x: Any, dims: PoolDims, kind: str, layout: str | None) -> tuple[Any, Callable]:
    cp = cupy()
    lay = layout
    params = lambda: {"window": dims.window, "stride": dims.stride, "pad_low": dims.pad_low,  # noqa: E731
                      "pad_high": dims.pad_high, "mode": kind, "layout": lay}
    with Call(op, params, x=x) as call:
        x = call["x"]
        lay = _layout.check_layout(layout) if layout is not None else _layout.layout_of(x) or "NCHW"
        plan = plan_for(dims, kind, lay, call.device)
        g, one, zero = plan.geometry, plan.dtype.one, plan.dtype.zero
        xp = pad(cp, x, g.extra_low, g.extra_high, lay, plan.fill)
        y = _layout.empty(cp, dims.y_shape, x.dtype, lay)
        c = lib()
        c.cudnnPoolingForward(handle(call.device, current_stream()), plan.pooling.handle, one, plan.x.handle,
                              xp.data.ptr, zero, plan.y.handle, y.data.ptr)
        if plan.rescale is not None:
            y *= plan.rescale_on_device(cp)
        xp, saved_y = private(cp, xp, x), y.copy(order="K")     # the pullback's own
    device, dtype = call.device, x.dtype

    def pullback(dy: Any) -> Any:
        with Call(f"{op} pullback", params, device=device, dy=dy) as back:
            dy = cotangent("dy", back["dy"], dims.y_shape, dtype, lay, device)
            if plan.rescale is not None:
                dy = _layout.in_layout(cp, dy * plan.rescale_on_device(cp), lay)
            dxp = _layout.empty(cp, xp.shape, dtype, lay)
            c.cudnnPoolingBackward(handle(device, current_stream()), plan.pooling.handle, one, plan.y.handle,
                                   saved_y.data.ptr, plan.y.handle, dy.data.ptr, plan.x.handle, xp.data.ptr, zero,
                                   plan.x.handle, dxp.data.ptr)
            return crop(cp, dxp, dims.x_shape, g.extra_low, lay)

    return y, pullback


def maxpool(x: Any, dims: PoolDims, *, layout: str | None = None) -> tuple[Any, Callable]:
    """Max pooling (see :func:`dnnbind.maxpool`); the pullback keeps x (padded) and y for cuDNN."""
    return _pool("maxpool", x, dims, MAX, layout)


def meanpool(x: Any, dims: PoolDims, count_include_pad: bool = True, *,
             layout: str | None = None) -> tuple[Any, Callable]:
    """Mean pooling (see :func:`dnnbind.meanpool`)."""
    return _pool("meanpool", x, dims, MEAN_INCLUDE_PAD if count_include_pad else MEAN_EXCLUDE_PAD, layout)
