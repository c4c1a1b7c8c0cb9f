"""Max and mean pooling: dnnbind's C kernels where they are built (:mod:`native`: each plane once, in
cache; mean pooling as a depthwise correlation with unit weights), numpy otherwise (one vectorised pass
per window offset). Both compute the same values in the same order.

Max pooling may be dilated (window position k of a dim reads k * dilation); mean pooling never is.
Max pool ties: the gradient goes to the FIRST maximum of the window in row-major order of the window
offsets, as in PyTorch. NaN counts as a maximum (PyTorch's ``val > max || isnan(val)``), so a window
holding NaN outputs NaN and routes its gradient to the last NaN.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from dnnbind.highlevel.dims import PoolDims
from dnnbind.highlevel.gpu.window_max import first_in_x, flat_indices, padded, unpadded
from dnnbind.highlevel.cpu import native
from dnnbind.highlevel.cpu._memory import fits_in_memory
from dnnbind.highlevel.cpu._threads import workers
from dnnbind.highlevel.cpu._precision import cotangent, half_backward, half_forward
from dnnbind.highlevel.residual import ArraySpec


@fits_in_memory
def maxpool_forward(x: np.ndarray, dims: PoolDims, return_indices: bool = False) -> tuple[Any, tuple[np.ndarray]]:
    """Max pooling; saves the winning offset of every window (the pooling workspace). With
    ``return_indices`` the result is (y, indices): torch's flat index of every window's winner in its
    (N, C) plane of x, int64, derived from the saved offsets."""
    y, (argmax,) = _maxpool(x, dims)
    if return_indices:
        return (y, flat_indices(np, argmax, dims)), (argmax,)
    return y, (argmax,)


#: Split pooling's C kernels over the thread pool from this many window reads on. Measured (2x2 max
#: pooling, float32, us, one thread against two, 2-core Xeon with AVX-512): forward and backward 63/44
#: and 59/41 at 131 K reads, 26/24 and 21/22 at 33 K.
THREAD_MIN_READS = 1 << 16


def _threaded(dims: PoolDims) -> bool:
    return math.prod(dims.y_shape) * len(dims.window_positions) >= THREAD_MIN_READS and workers() > 1


def _whole_plane(dims: PoolDims) -> bool:
    """Global pooling: one window, the whole unpadded, undilated input plane (each output reduces one
    plane, whose winner's window position is its flat index). Reduced along each plane as a contiguous
    row instead of window position by window position over outputs of one element each."""
    return (dims.window == dims.x_shape[2:] and not any(dims.pad_low) and not any(dims.pad_high)
            and all(d == 1 for d in dims.dilation) and all(o == 1 for o in dims.out_size))


def _rows(a: np.ndarray) -> np.ndarray:
    """(N, C, ...) as one contiguous row per (sample, channel) plane."""
    return np.ascontiguousarray(a).reshape(a.shape[0] * a.shape[1], -1)


def _plane_max(x: np.ndarray, dims: PoolDims) -> tuple[np.ndarray, np.ndarray]:
    """Global max pooling's (y, winners): each plane's max and its flat index, by the windows' rule."""
    if native.available(x.dtype):
        threaded = x.size >= native.POINTWISE_THREAD_MIN_ELEMENTS and workers() > 1   # one pass over memory
        return native.plane_max(np.ascontiguousarray(x), dims, threaded)
    rows = _rows(x)
    y = rows.max(axis=1)
    winners = rows.argmax(axis=1)           # the first maximum; NaN: numpy's first, torch's last
    nan = np.flatnonzero(np.isnan(y))
    if nan.size:
        winners[nan] = rows.shape[1] - 1 - np.isnan(rows[nan, ::-1]).argmax(axis=1)
    return y.reshape(dims.y_shape), winners.astype(dims.winner_dtype).reshape(dims.y_shape)


@half_forward
def _maxpool(x: np.ndarray, dims: PoolDims) -> tuple[np.ndarray, tuple[np.ndarray]]:
    if _whole_plane(dims):
        y, winners = _plane_max(x, dims)
        return y, (winners,)
    if native.available(x.dtype):
        y, winners = native.maxpool_forward(np.ascontiguousarray(x), dims, _threaded(dims))
        return y, (first_in_x(np, y, winners, dims),)
    xp = padded(np, x, dims)
    offsets = dims.window_positions
    y = np.array(xp[dims.window_index(offsets[0])])
    argmax = np.zeros(y.shape, dims.winner_dtype)
    better = np.empty(y.shape, bool)
    nan = np.empty(y.shape, bool)
    delta = np.empty_like(argmax)
    for i, offset in enumerate(offsets[1:], 1):
        v = xp[dims.window_index(offset)]
        np.greater(v, y, out=better)
        np.isnan(v, out=nan)
        better |= nan
        # branch-free updates (a masked copy with a data-dependent mask mispredicts on every other element):
        # maximum() propagates NaN from either side, which is exactly "v wins when greater or NaN"
        np.maximum(y, v, out=y)
        np.subtract(i, argmax, out=delta)
        delta *= better
        argmax += delta
    return y, (first_in_x(np, y, argmax, dims),)


def maxpool_backward(saved: tuple, cotangents: tuple, dims: PoolDims, return_indices: bool = False) -> np.ndarray:
    """dx from the saved winners and dy (the indices, an integer result, take no cotangent: any is ignored)."""
    return _maxpool_backward(saved, cotangents[:1], dims)


@half_backward
def _maxpool_backward(saved: tuple, cotangents: tuple, dims: PoolDims) -> np.ndarray:
    (argmax,), (dy,) = saved, cotangents
    dy = cotangent("dy", dy, dims.y_shape, dy.dtype)
    if _whole_plane(dims):
        rows = np.zeros((dy.shape[0] * dy.shape[1], math.prod(dims.window)), dy.dtype)
        rows[np.arange(rows.shape[0]), argmax.ravel()] = dy.ravel()
        return rows.reshape(dims.x_shape)
    if native.available(dy.dtype):
        return native.maxpool_backward(np.ascontiguousarray(dy), np.ascontiguousarray(argmax), dims, _threaded(dims))
    dxp = np.zeros(dims.x_shape[:2] + dims.padded_size, dy.dtype)
    routed = np.empty(dy.shape, dy.dtype)
    for i, offset in enumerate(dims.window_positions):
        np.multiply(dy, argmax == i, out=routed)
        dxp[dims.window_index(offset)] += routed
    return unpadded(np, dxp, dims)


def maxpool_residuals(x: Any, dims: PoolDims, return_indices: bool = False) -> tuple[ArraySpec]:
    """The winning offset of every window: y's shape, the smallest unsigned type that counts the window."""
    return (ArraySpec(dims.y_shape, dims.winner_dtype),)


@functools.lru_cache(maxsize=256)
def _divisor(dims: PoolDims, count_include_pad: bool, divisor_override: int | None = None) -> np.ndarray | float:
    """What each output divides its window's sum by (:meth:`PoolDims.mean_divisor`, separable per dim): a
    scalar where every output divides by the same number (full windows, or a ``divisor_override``).
    Remembered per problem, as :func:`_scale` and :func:`_unit_window` (read-only arrays)."""
    per_dim, constant = dims.mean_divisor(count_include_pad, divisor_override)
    if all(len(set(counts)) <= 1 for counts in per_dim):
        return float(constant * int(np.prod([counts[0] for counts in per_dim if counts])))
    counts = np.full((1, 1) + (1,) * dims.spatial_rank, float(constant))
    for axis, inside in enumerate(per_dim):
        shape = [1] * counts.ndim
        shape[2 + axis] = len(inside)
        counts = counts * np.array(inside, float).reshape(shape)
    return _read_only(counts)


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@functools.lru_cache(maxsize=256)
def _scale(dims: PoolDims, count_include_pad: bool, divisor_override: int | None, dtype: np.dtype) -> Any:
    scale = 1.0 / _divisor(dims, count_include_pad, divisor_override)
    return _read_only(scale.astype(dtype)) if isinstance(scale, np.ndarray) else dtype.type(scale)


@fits_in_memory
@half_forward
def meanpool_forward(x: np.ndarray, dims: PoolDims, count_include_pad: bool = True,
                     divisor_override: int | None = None) -> tuple[np.ndarray, tuple]:
    """Mean pooling; padding counts towards the divisor when ``count_include_pad`` (PyTorch's default);
    a ``divisor_override`` divides every window's sum by itself instead. Saves nothing: the backward
    needs the geometry only."""
    if _whole_plane(dims):      # each plane's sum in float64, divided once
        rows = _rows(x)
        sums = native.channel_sums(rows[None])[0] if native.available(x.dtype) else rows.sum(axis=1, dtype=float)
        divisor = _divisor(dims, count_include_pad, divisor_override)
        return (sums / divisor).astype(x.dtype).reshape(dims.y_shape), ()
    if native.available(x.dtype):
        y = native.depthwise_forward(np.ascontiguousarray(x), _unit_window(dims, x.dtype), dims, _threaded(dims))
    else:
        xp = padded(np, x, dims, 0.0)
        offsets = dims.window_positions
        y = np.array(xp[dims.window_index(offsets[0])])
        for offset in offsets[1:]:
            y += xp[dims.window_index(offset)]
    y *= _scale(dims, count_include_pad, divisor_override, y.dtype)
    return y, ()


@functools.lru_cache(maxsize=256)
def _unit_window(dims: PoolDims, dtype: np.dtype) -> np.ndarray:
    """Mean pooling's window as a depthwise filter: weight one at every position."""
    return _read_only(np.ones(dims.x_shape[1:2] + (1,) + dims.window, dtype))


@half_backward
def meanpool_backward(saved: tuple, cotangents: tuple, dims: PoolDims, count_include_pad: bool = True,
                      divisor_override: int | None = None) -> np.ndarray:
    """dx: each output's gradient over its divisor, spread over its window (exact: the mean is linear)."""
    (dy,) = cotangents
    dy = cotangent("dy", dy, dims.y_shape, dy.dtype)
    share = dy * _scale(dims, count_include_pad, divisor_override, dy.dtype)
    if _whole_plane(dims):
        dx = np.empty(dims.x_shape, dy.dtype)
        np.copyto(dx, share)                 # (N, C, 1, ...) spread over each plane
        return dx
    if native.available(share.dtype):
        return native.depthwise_data_grad(np.ascontiguousarray(share), _unit_window(dims, share.dtype), dims,
                                          _threaded(dims))
    dxp = np.zeros(dims.x_shape[:2] + dims.padded_size, dy.dtype)
    for offset in dims.window_positions:
        dxp[dims.window_index(offset)] += share
    return unpadded(np, dxp, dims)


def meanpool_residuals(x: Any, dims: PoolDims, count_include_pad: bool = True,
                       divisor_override: int | None = None) -> tuple:
    return ()
