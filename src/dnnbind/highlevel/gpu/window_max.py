"""Max pooling over strided window views, for what the libraries cannot pool: dilated windows.

Neither cuDNN nor MIOpen has a pooling dilation, so both GPU backends run a dilated max pool here,
with array operations only (CuPy on the device; any numpy-compatible module ``xp`` works, which is
how the host tests check this code against the reference backend). One pass per window position
reads the strided view of the padded input that position sees for every output (position k of a dim
reads k * dilation), keeping the running maximum and the position it came from. Ties and NaN follow
the reference backend and PyTorch: the FIRST maximum in row-major order of the window positions wins,
and NaN counts as a maximum (so the last NaN of a window wins). Padding is -inf and never wins.

Residual: the winning window position of every output (y's shape, the smallest unsigned type that
counts the window, as the reference saves). The backward adds dy to the winners, one strided view
per window position; the positions of one view are distinct, so the additions never collide.
:func:`flat_indices` turns the winners into PyTorch's ``return_indices`` (flat index into each input
plane).
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from dnnbind.highlevel.dims import PoolDims


def positions(dims: PoolDims) -> list[tuple[int, ...]]:
    """The window positions in row-major order (the winner's code is the index into this list)."""
    return list(itertools.product(*(range(k) for k in dims.window)))


def window_view(dims: PoolDims, position: tuple[int, ...]) -> tuple[slice, ...]:
    """Index into the padded input of the elements window ``position`` reads, one per output."""
    return (slice(None), slice(None)) + tuple(
        slice(k * d, k * d + s * (o - 1) + 1, s)
        for k, d, s, o in zip(position, dims.dilation, dims.stride, dims.out_size))


def winner_dtype(dims: PoolDims) -> np.dtype:
    """The smallest unsigned type that counts the window's positions."""
    return np.min_scalar_type(int(np.prod(dims.window)))


def interior(dims: PoolDims) -> tuple[slice, ...]:
    return (slice(None), slice(None)) + tuple(slice(a, a + s) for a, s in zip(dims.pad_low, dims.x_shape[2:]))


def padded(xp: Any, x: Any, dims: PoolDims) -> Any:
    """x padded by dims' padding (low, and high with ceil_mode's extra) with -inf."""
    if not any(dims.pad_low + dims.pad_high):
        return x
    out = xp.full(dims.x_shape[:2] + dims.padded_size, -np.inf, x.dtype)
    out[interior(dims)] = x
    return out


def forward(xp: Any, x: Any, dims: PoolDims) -> tuple[Any, Any]:
    """(y, winners): the max of every window and the window position it came from."""
    xp_ = padded(xp, x, dims)
    pos = positions(dims)
    y = xp.array(xp_[window_view(dims, pos[0])])          # a C-contiguous copy
    winners = xp.zeros(y.shape, winner_dtype(dims))
    for i, position in enumerate(pos[1:], 1):
        v = xp_[window_view(dims, position)]
        better = xp.greater(v, y) | xp.isnan(v)
        xp.maximum(y, v, out=y)                              # NaN from either side: v wins when greater or NaN
        winners[better] = i
    return y, winners


def backward(xp: Any, winners: Any, dy: Any, dims: PoolDims) -> Any:
    """dx (C-contiguous, dy's dtype): dy added to every window's winner."""
    dxp = xp.zeros(dims.x_shape[:2] + dims.padded_size, dy.dtype)
    for i, position in enumerate(positions(dims)):
        dxp[window_view(dims, position)] += dy * (winners == i)
    if not any(dims.pad_low + dims.pad_high):
        return dxp
    return xp.ascontiguousarray(dxp[interior(dims)])


def flat_indices(xp: Any, winners: Any, dims: PoolDims) -> Any:
    """PyTorch's ``return_indices``: for every output, the flat index of its winner in its (N, C) plane
    of the unpadded input, int64. A window whose winner is padding (one that reads no element of x, or
    only -inf ones after padding) gets PyTorch's index there: that of its first position at or past x's
    start in every dim (which may lie past x's end, as in PyTorch)."""
    pos = xp.asarray(np.array(positions(dims), np.int64).reshape(-1, dims.spatial_rank))
    chosen = pos[winners.astype(np.int64)]                  # (*y_shape, rank)
    coords, fallback = [], []
    inside = xp.ones(dims.y_shape, bool)
    for axis, (d, s, lo, o, size) in enumerate(zip(dims.dilation, dims.stride, dims.pad_low, dims.out_size,
                                                   dims.x_shape[2:])):
        shape = [1] * (2 + dims.spatial_rank)
        shape[2 + axis] = o
        start = np.arange(o, dtype=np.int64) * s - lo
        first = start + (-(-np.maximum(-start, 0) // d)) * d          # PyTorch: start += d while start < 0
        coord = xp.asarray(start.reshape(shape)) + chosen[..., axis] * d
        inside &= (coord >= 0) & (coord < size)
        coords.append(coord)
        fallback.append(xp.asarray(first.reshape(shape)))
    flat = xp.zeros(dims.y_shape, np.int64)
    for coord, first, size in zip(coords, fallback, dims.x_shape[2:]):
        flat = flat * size + xp.where(inside, coord, first)
    return flat
