"""Max and mean pooling on MIOpen: miopenPoolingForward / miopenPoolingBackward.

MIOpen pools 2-d and 3-d data (1-d runs as 2-d with a height of 1), in NCHW memory (channels-last
input is copied; results are C-contiguous). Max pooling runs the forward with ``do_backward`` set:
MIOpen then saves, per output, the index of the window's maximum in a workspace that its backward
pass reads; it is one of the residuals. Its index type must be able to count past the largest
index (MIOpen refuses otherwise): window positions in 2-d (mask index mode), positions in the whole
padded image in 3-d (image index mode, the only one MIOpen's 3-d solver has); :func:`workspace_index`
picks the smallest type that fits.

meanpool uses miopenPoolingAverageInclusive (count_include_pad) or miopenPoolingAverage. Asymmetric
padding and ``ceil_mode``'s extra padding pad x explicitly (-inf for max, zero for mean), and a mean
whose divisor MIOpen then gets wrong is rescaled (see :mod:`dnnbind.highlevel.gpu.rescale`), as is
``divisor_override``, which MIOpen does not have (it runs miopenPoolingAverageInclusive).

Residuals (see :func:`maxpool_residuals`): the explicitly padded x and y, which miopenPoolingBackward
takes, and for max pooling the index workspace (bytes); the backward finds the plan again from dims.

Differences from the reference: MIOpen's max ignores NaN (a window's maximum is taken with ``>``), and
ties go to the first maximum in the window, as in the reference.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.dims.checks import numpy_dtype
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.gpu import window_max
from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.geometry import PoolGeometry, crop, pad, padded_shape
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.rescale import library_includes_pad, mean_rescale_factor
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.miopen._lib import handle, lib, scaling
from dnnbind.highlevel.miopen.descriptors import PoolingDescriptor, TensorDescriptor
from dnnbind.highlevel.residual import ArraySpec

PLANS: PlanCache["PoolPlan"] = PlanCache("miopen.pool", maxsize=256)

MAX, MEAN_INCLUDE_PAD, MEAN_EXCLUDE_PAD = "max", "mean_include_pad", "mean_exclude_pad"

#: miopenIndexType_t names, smallest first, with their sizes in bytes
INDEX_TYPES = (("miopenIndexUint8", 1), ("miopenIndexUint16", 2), ("miopenIndexUint32", 4),
               ("miopenIndexUint64", 8))


def workspace_index(window: Sequence[int], x_shape: Sequence[int]) -> tuple[str, str, int]:
    """(index mode, index type, bytes per index) of the max-pooling workspace, as enum names.

    2-d (x 4-d): mask mode, indices count window positions; 3-d: image mode, indices count positions
    of x's (padded) spatial volume. MIOpen reserves the type's largest value, so the count of positions
    must stay below it.
    """
    if len(x_shape) == 4:
        mode, positions = "miopenPoolingWorkspaceIndexMask", int(np.prod(window))
    else:
        mode, positions = "miopenPoolingWorkspaceIndexImage", int(np.prod(x_shape[2:]))
    for name, size in INDEX_TYPES:
        if positions < 2 ** (8 * size) - 1:
            return mode, name, size
    raise ValueError(f"pooling over {positions} positions needs indices wider than 64 bits")


def _mode(kind: str) -> int:
    return {MAX: lib.miopenPoolingMax, MEAN_INCLUDE_PAD: lib.miopenPoolingAverageInclusive,
            MEAN_EXCLUDE_PAD: lib.miopenPoolingAverage}[kind]


class PoolPlan:
    """Descriptors of the (explicitly padded, lifted) x, y and the pooling; the index workspace size; the
    mean's rescale (for the divisor of ``kind``, or ``divisor_override``)."""

    def __init__(self, dims: PoolDims, kind: str, divisor_override: int | None = None) -> None:
        self.dims = dims
        self.kind = kind
        self.geometry = g = PoolGeometry.of(dims)
        index_mode, index_type, _ = workspace_index(g.window, g.x_shape)
        self.pooling = PoolingDescriptor(_mode(kind), g.window, g.padding, g.stride,
                                         index_type=getattr(lib, index_type), index_mode=getattr(lib, index_mode))
        self.x = TensorDescriptor(g.x_shape, dims.dtype)
        self.y = TensorDescriptor(g.y_shape, dims.dtype)
        self.workspace = self.pooling.workspace_size(self.y) if kind == MAX else 0
        self.fill = -np.inf if kind == MAX else 0.0
        self.rescale = None if kind == MAX else mean_rescale_factor(dims, g, kind == MEAN_INCLUDE_PAD,
                                                                     divisor_override)
        self._rescale_device: dict[int, Any] = {}

    def rescale_on_device(self, cp: Any, device: int) -> Any:
        """The rescale factor as a CuPy array of shape (1, 1, *out) in the data's dtype."""
        factor = self._rescale_device.get(device)
        if factor is None and self.rescale is not None:
            factor = self._rescale_device[device] = cp.asarray(self.rescale.astype(numpy_dtype(self.dims.dtype)))
        return factor


def plan_for(dims: PoolDims, kind: str, divisor_override: int | None = None) -> PoolPlan:
    return PLANS.get((dims, kind, divisor_override), lambda: PoolPlan(dims, kind, divisor_override))


def _kind(count_include_pad: bool, divisor_override: int | None = None) -> str:
    return MEAN_INCLUDE_PAD if library_includes_pad(count_include_pad, divisor_override) else MEAN_EXCLUDE_PAD


def _params(dims: PoolDims, kind: str) -> dict[str, Any]:
    return {"window": dims.window, "stride": dims.stride, "pad_low": dims.pad_low, "pad_high": dims.pad_high,
            "mode": kind}


def _forward(op: str, x: Any, dims: PoolDims, kind: str,
             divisor_override: int | None = None) -> tuple[Any, tuple[Any, ...]]:
    cp = cupy()
    alpha, beta = scaling(dims.dtype)
    with Call(op, _params(dims, kind), dlpack_devices=DLPACK_ROCM, x=x) as call:
        x = call["x"]
        plan = plan_for(dims, kind, divisor_override)
        g = plan.geometry
        xp = pad(cp, x, g.extra_low, g.extra_high, "NCHW", plan.fill)
        y = cp.empty(dims.y_shape, x.dtype)
        indices = cp.empty(plan.workspace, np.uint8) if kind == MAX else None
        lib.miopenPoolingForward(handle(call.device, current_stream()).ptr, plan.pooling.handle, alpha,
                                 plan.x.handle, xp.data.ptr, beta, plan.y.handle, y.data.ptr, indices is not None,
                                 None if indices is None else indices.data.ptr, plan.workspace)
        if plan.rescale is not None:
            y *= plan.rescale_on_device(cp, call.device)
        saved = (private(cp, xp, x), y.copy())       # the backward's own
    return y, saved if indices is None else saved + (indices,)


def _backward(op: str, saved: tuple, cotangents: tuple, dims: PoolDims, kind: str,
              divisor_override: int | None = None) -> Any:
    cp = cupy()
    xp, y = saved[0], saved[1]
    indices = saved[2] if kind == MAX else None
    alpha, beta = scaling(dims.dtype)
    device, dtype = y.device.id, y.dtype
    with Call(f"{op} backward", _params(dims, kind), device=device, dlpack_devices=DLPACK_ROCM,
              dy=cotangents[0]) as back:
        plan = plan_for(dims, kind, divisor_override)
        g = plan.geometry
        dy = cotangent("dy", back["dy"], dims.y_shape, dtype, "NCHW", device, DLPACK_ROCM)
        if plan.rescale is not None:
            dy = cp.ascontiguousarray(dy * plan.rescale_on_device(cp, device))
        dxp = cp.empty(xp.shape, dtype)
        lib.miopenPoolingBackward(handle(device, current_stream()).ptr, plan.pooling.handle, alpha, plan.y.handle,
                                  y.data.ptr, plan.y.handle, dy.data.ptr, plan.x.handle, xp.data.ptr, beta,
                                  plan.x.handle, dxp.data.ptr, None if indices is None else indices.data.ptr)
        return crop(cp, dxp, dims.x_shape, g.extra_low, "NCHW")


def _residuals(x: ArraySpec, dims: PoolDims, kind: str) -> tuple[ArraySpec, ...]:
    g = PoolGeometry.of(dims)
    saved = (ArraySpec(padded_shape(dims.x_shape, g.extra_low, g.extra_high), x.dtype),
             ArraySpec(dims.y_shape, x.dtype))
    if kind != MAX:
        return saved
    return saved + (ArraySpec((plan_for(dims, kind).workspace,), np.dtype(np.uint8)),)


def _windowed(dims: PoolDims, return_indices: bool) -> bool:
    """Whether max pooling runs on CuPy (window_max): dilated windows, which MIOpen cannot pool, or
    indices asked for (MIOpen's workspace indices are not torch's)."""
    return dims.dilated or return_indices


def _windowed_forward(x: Any, dims: PoolDims, return_indices: bool) -> tuple[Any, tuple[Any, ...]]:
    cp = cupy()
    with Call("maxpool", _params(dims, MAX), dlpack_devices=DLPACK_ROCM, x=x) as call:
        y, winners = window_max.forward(cp, call["x"], dims)
        y = cp.ascontiguousarray(y)
        if return_indices:
            return (y, window_max.flat_indices(cp, winners, dims)), (winners,)
        return y, (winners,)


def _windowed_backward(saved: tuple, cotangents: tuple, dims: PoolDims) -> Any:
    cp = cupy()
    (winners,) = saved
    device = winners.device.id
    with Call("maxpool backward", _params(dims, MAX), device=device, dlpack_devices=DLPACK_ROCM,
              dy=cotangents[0]) as back:
        dy = cotangent("dy", back["dy"], dims.y_shape, numpy_dtype(dims.dtype), "NCHW", device, DLPACK_ROCM)
        return window_max.backward(cp, winners, dy, dims)


def maxpool_forward(x: Any, dims: PoolDims, return_indices: bool = False) -> tuple[Any, tuple[Any, ...]]:
    """Max pooling (see :func:`dnnbind.maxpool`); saves padded x, y and MIOpen's index workspace.
    Dilated windows, which MIOpen cannot pool, and ``return_indices`` (y, indices) run on CuPy
    (:mod:`dnnbind.highlevel.gpu.window_max`) and save each window's winning position instead."""
    if _windowed(dims, return_indices):
        return _windowed_forward(x, dims, return_indices)
    return _forward("maxpool", x, dims, MAX)


def maxpool_backward(saved: tuple, cotangents: tuple, dims: PoolDims, return_indices: bool = False) -> Any:
    """dx through miopenPoolingBackward, routed by the saved index workspace (on CuPy: by the winners);
    indices take no cotangent."""
    if _windowed(dims, return_indices):
        return _windowed_backward(saved, cotangents, dims)
    return _backward("maxpool", saved, cotangents[:1], dims, MAX)


def maxpool_residuals(x: ArraySpec, dims: PoolDims, return_indices: bool = False) -> tuple[ArraySpec, ...]:
    """x explicitly padded (x's dtype), y, and the index workspace: uint8 bytes, as many as MIOpen's
    miopenPoolingGetWorkSpaceSizeV2 says (a host-side query of the plan's descriptors). On CuPy: the
    winning window position of every output (no library call)."""
    if _windowed(dims, return_indices):
        return (ArraySpec(dims.y_shape, dims.winner_dtype),)
    return _residuals(x, dims, MAX)


def meanpool_forward(x: Any, dims: PoolDims, count_include_pad: bool = True,
                     divisor_override: int | None = None) -> tuple[Any, tuple[Any, ...]]:
    """Mean pooling (see :func:`dnnbind.meanpool`); saves padded x and y."""
    return _forward("meanpool", x, dims, _kind(count_include_pad, divisor_override), divisor_override)


def meanpool_backward(saved: tuple, cotangents: tuple, dims: PoolDims, count_include_pad: bool = True,
                      divisor_override: int | None = None) -> Any:
    """dx through miopenPoolingBackward (the divisor's rescale applied to dy first)."""
    return _backward("meanpool", saved, cotangents, dims, _kind(count_include_pad, divisor_override),
                     divisor_override)


def meanpool_residuals(x: ArraySpec, dims: PoolDims, count_include_pad: bool = True,
                       divisor_override: int | None = None) -> tuple[ArraySpec, ...]:
    """x explicitly padded and y, in x's dtype; no library call."""
    return _residuals(x, dims, _kind(count_include_pad, divisor_override))
