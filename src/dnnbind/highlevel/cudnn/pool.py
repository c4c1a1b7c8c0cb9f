"""Max and mean pooling on cuDNN: cudnnPoolingForward / cudnnPoolingBackward.

maxpool uses CUDNN_POOLING_MAX, or CUDNN_POOLING_MAX_DETERMINISTIC under ``settings(deterministic=True)``
(bitwise reproducible gradients for overlapping windows), with NaN propagation (NaN wins a window, as
in the reference). meanpool uses AVERAGE_COUNT_INCLUDE_PADDING or _EXCLUDE_PADDING.

Asymmetric padding (and ``ceil_mode``'s extra high-side padding): cuDNN pads symmetrically, so x is
padded explicitly by the rest (-inf for max, zero for mean). cuDNN then counts the explicit padding
as data where PyTorch's mean does not; the output and the gradient are rescaled per output position
(:mod:`dnnbind.highlevel.gpu.rescale`, a factor computed on the host once per plan). ``divisor_override``,
which cuDNN does not have, runs AVERAGE_COUNT_INCLUDE_PADDING and is the same kind of rescale.

With the graph path on (``$DNNBIND_CUDNN_GRAPH=1``), problems cuDNN's resample operations plan run
through them instead (:mod:`.pool_graph` says which; the trace says why the others stay here).

Residual form (see :mod:`dnnbind.highlevel.residual`): both save x (explicitly padded) and y, in the
layout they ran in; the backward reads that layout from the saved x's strides (or the ``layout=``
option) and takes the plan from the cache by the same key, with the deterministic setting in force
when it runs.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from dnnbind.highlevel.cudnn import pool_graph
from dnnbind.highlevel.cudnn._lib import DTYPES, handle, lib
from dnnbind.highlevel.cudnn.descriptors import PoolingDescriptor, TensorDescriptor
from dnnbind.highlevel.cudnn.graph import choose, execute
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.dims.checks import numpy_dtype
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu import window_max
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.geometry import PoolGeometry, crop, pad, padded_shape
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.rescale import library_includes_pad, mean_rescale_factor
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.residual import ArraySpec

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
    """Descriptors of the (explicitly padded) x, y and the pooling, plus the mean's rescale (for the
    divisor of ``kind``, or ``divisor_override``)."""

    def __init__(self, dims: PoolDims, kind: str, deterministic: bool, layout: str,
                 divisor_override: int | None = None) -> None:
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
        self.rescale = None if kind == MAX else mean_rescale_factor(dims, g, kind == MEAN_INCLUDE_PAD,
                                                                     divisor_override)
        self._rescale_device: Any = None

    def rescale_on_device(self, cp: Any) -> Any:
        """The rescale factors as a CuPy array of shape (1, 1, *out) in the data's dtype."""
        assert self.rescale is not None, "only means whose divisor cuDNN gets wrong rescale"
        if self._rescale_device is None:
            self._rescale_device = cp.asarray(self.rescale.astype(numpy_dtype(self.dims.dtype)))
        return self._rescale_device


def plan_for(dims: PoolDims, kind: str, layout: str, device: int, divisor_override: int | None = None) -> PoolPlan:
    deterministic = settings.current().deterministic and kind == MAX
    key = (dims, kind, deterministic, layout, device, divisor_override)
    return PLANS.get(key, lambda: PoolPlan(dims, kind, deterministic, layout, divisor_override))


def _lay(x: Any, layout: str | None) -> str:
    """The memory layout to run in: the ``layout`` option, else x's own (NCHW when x is neither)."""
    return _layout.check_layout(layout) if layout is not None else _layout.layout_of(x) or "NCHW"


def _params(dims: PoolDims, kind: str, lay: Callable[[], str | None]) -> Callable[[], dict[str, Any]]:
    """The op's parameters for error messages, computed only when one is raised."""
    return lambda: {"window": dims.window, "stride": dims.stride, "pad_low": dims.pad_low, "pad_high": dims.pad_high,
                    "mode": kind, "layout": lay()}


def _forward(op: str, x: Any, dims: PoolDims, kind: str, layout: str | None,
             divisor_override: int | None = None) -> tuple[Any, tuple[Any, Any]]:
    cp = cupy()
    lay = layout
    with Call(op, _params(dims, kind, lambda: lay), x=x) as call:
        x = call["x"]
        lay = _lay(x, layout)
        plan = plan_for(dims, kind, lay, call.device, divisor_override)
        g, one, zero = plan.geometry, plan.dtype.one, plan.dtype.zero
        xp = pad(cp, x, g.extra_low, g.extra_high, lay, plan.fill)
        y = _layout.empty(cp, dims.y_shape, x.dtype, lay)
        h = handle(call.device, current_stream())
        graph = pool_graph.graph_plans(plan, pool_graph.FORWARD, choose.device_of(h)) if choose.enabled() else None
        if graph is not None:
            execute.run_best(h, graph[1], pool_graph.forward_operands(cp, graph[0], xp, y), settings.current())
        else:
            lib().cudnnPoolingForward(h, plan.pooling.handle, one, plan.x.handle, xp.data.ptr, zero, plan.y.handle,
                                      y.data.ptr)
        if plan.rescale is not None:
            y *= plan.rescale_on_device(cp)
        return y, (private(cp, xp, x), y.copy(order="K"))      # the backward's own


def _backward(op: str, residuals: tuple, cotangents: tuple, dims: PoolDims, kind: str,
              layout: str | None, divisor_override: int | None = None) -> Any:
    cp = cupy()
    saved_x, saved_y = residuals
    (dy,) = cotangents
    lay = _lay(saved_x, layout)
    device, dtype = saved_x.device.id, saved_x.dtype
    with Call(f"{op} pullback", _params(dims, kind, lambda: lay), device=device, dy=dy) as back:
        plan = plan_for(dims, kind, lay, device, divisor_override)
        xp, y = _layout.in_layout(cp, saved_x, lay), _layout.in_layout(cp, saved_y, lay)
        dy = cotangent("dy", back["dy"], dims.y_shape, dtype, lay, device)
        if plan.rescale is not None:
            dy = _layout.in_layout(cp, dy * plan.rescale_on_device(cp), lay)
        dxp = _layout.empty(cp, xp.shape, dtype, lay)
        h = handle(device, current_stream())
        graph = pool_graph.graph_plans(plan, pool_graph.BACKWARD, choose.device_of(h)) if choose.enabled() else None
        if graph is not None:
            execute.run_best(h, graph[1], pool_graph.backward_operands(graph[0], xp, y, dy, dxp), settings.current())
        else:
            lib().cudnnPoolingBackward(h, plan.pooling.handle, plan.dtype.one, plan.y.handle, y.data.ptr,
                                       plan.y.handle, dy.data.ptr, plan.x.handle, xp.data.ptr, plan.dtype.zero,
                                       plan.x.handle, dxp.data.ptr)
        return crop(cp, dxp, dims.x_shape, plan.geometry.extra_low, lay)


def _residuals(x: Any, dims: PoolDims) -> tuple[ArraySpec, ArraySpec]:
    g = PoolGeometry.of(dims)
    return ArraySpec(padded_shape(dims.x_shape, g.extra_low, g.extra_high), x.dtype), ArraySpec(dims.y_shape, x.dtype)


def _mean_kind(count_include_pad: bool, divisor_override: int | None = None) -> str:
    return MEAN_INCLUDE_PAD if library_includes_pad(count_include_pad, divisor_override) else MEAN_EXCLUDE_PAD


def _windowed(dims: PoolDims, return_indices: bool) -> bool:
    """Whether max pooling runs on CuPy (window_max): dilated windows, which cuDNN cannot pool, or
    indices asked for, which cuDNN does not give."""
    return dims.dilated or return_indices


def _windowed_forward(x: Any, dims: PoolDims, return_indices: bool, layout: str | None) -> tuple[Any, tuple]:
    cp = cupy()
    with Call("maxpool", _params(dims, MAX, lambda: layout), x=x) as call:
        x = call["x"]
        lay = _lay(x, layout)
        y, winners = window_max.forward(cp, x, dims)
        y = _layout.in_layout(cp, y, lay)
        if return_indices:
            return (y, window_max.flat_indices(cp, winners, dims)), (winners,)
        return y, (winners,)


def _windowed_backward(residuals: tuple, cotangents: tuple, dims: PoolDims, layout: str | None) -> Any:
    cp = cupy()
    (winners,), dy = residuals, cotangents[0]
    device = winners.device.id
    with Call("maxpool pullback", _params(dims, MAX, lambda: layout), device=device, dy=dy) as back:
        lay = _lay(back["dy"], layout)                  # dx in the layout of dy (y's: x's)
        dy = cotangent("dy", back["dy"], dims.y_shape, numpy_dtype(dims.dtype), None, device)
        return _layout.in_layout(cp, window_max.backward(cp, winners, dy, dims), lay)


def maxpool_forward(x: Any, dims: PoolDims, return_indices: bool = False, *,
                    layout: str | None = None) -> tuple[Any, tuple]:
    """Max pooling (see :func:`dnnbind.maxpool`); saves x (explicitly padded) and y for cuDNN's backward.
    Dilated windows, which cuDNN cannot pool, and ``return_indices`` (y, indices), which it does not give,
    run on CuPy (:mod:`dnnbind.highlevel.gpu.window_max`) and save each window's winning position instead."""
    if _windowed(dims, return_indices):
        return _windowed_forward(x, dims, return_indices, layout)
    return _forward("maxpool", x, dims, MAX, layout)


def maxpool_backward(residuals: tuple, cotangents: tuple, dims: PoolDims, return_indices: bool = False, *,
                     layout: str | None = None) -> Any:
    """dx from the saved (x padded, y) and dy (on CuPy: from the saved winners); indices take no cotangent."""
    if _windowed(dims, return_indices):
        return _windowed_backward(residuals, cotangents, dims, layout)
    return _backward("maxpool", residuals, cotangents[:1], dims, MAX, layout)


def maxpool_residuals(x: Any, dims: PoolDims, return_indices: bool = False, *,
                      layout: str | None = None) -> tuple[ArraySpec, ...]:
    """x explicitly padded and y, in x's dtype; on CuPy: the winning window position of every output."""
    if _windowed(dims, return_indices):
        return (ArraySpec(dims.y_shape, dims.winner_dtype),)
    return _residuals(x, dims)


def meanpool_forward(x: Any, dims: PoolDims, count_include_pad: bool = True, divisor_override: int | None = None,
                     *, layout: str | None = None) -> tuple[Any, tuple]:
    """Mean pooling (see :func:`dnnbind.meanpool`); saves x (explicitly padded) and y, which
    cudnnPoolingBackward takes in every mode."""
    return _forward("meanpool", x, dims, _mean_kind(count_include_pad, divisor_override), layout, divisor_override)


def meanpool_backward(residuals: tuple, cotangents: tuple, dims: PoolDims, count_include_pad: bool = True,
                      divisor_override: int | None = None, *, layout: str | None = None) -> Any:
    """dx from the saved (x padded, y) and dy (rescaled first where cuDNN's divisor differs)."""
    return _backward("meanpool", residuals, cotangents, dims, _mean_kind(count_include_pad, divisor_override),
                     layout, divisor_override)


def meanpool_residuals(x: Any, dims: PoolDims, count_include_pad: bool = True, divisor_override: int | None = None,
                       *, layout: str | None = None) -> tuple[ArraySpec, ...]:
    """x explicitly padded and y, in x's dtype."""
    return _residuals(x, dims)
