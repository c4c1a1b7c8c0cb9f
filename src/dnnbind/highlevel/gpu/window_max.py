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

from typing import Any, Iterator, NamedTuple

import numpy as np

from dnnbind.highlevel.dims.pool import PoolDims


def padded(xp: Any, x: Any, dims: PoolDims, fill: float = -np.inf) -> Any:
    """x padded by dims' padding (low, and high with ceil_mode's extra) with ``fill`` (x itself when
    nothing is padded)."""
    if not any(dims.pad_low + dims.pad_high):
        return x
    out = xp.full(dims.x_shape[:2] + dims.padded_size, fill, x.dtype)
    out[dims.interior] = x
    return out


def unpadded(xp: Any, dxp: Any, dims: PoolDims) -> Any:
    """The part of a padded-input-shaped array that lies on x, C-contiguous."""
    if not any(dims.pad_low + dims.pad_high):
        return dxp
    return xp.ascontiguousarray(dxp[dims.interior])


def forward(xp: Any, x: Any, dims: PoolDims) -> tuple[Any, Any]:
    """(y, winners): the max of every window and the window position it came from."""
    xp_ = padded(xp, x, dims)
    pos = dims.window_positions
    y = xp.array(xp_[dims.window_index(pos[0])])          # a C-contiguous copy
    winners = xp.zeros(y.shape, dims.winner_dtype)
    for i, position in enumerate(pos[1:], 1):
        v = xp_[dims.window_index(position)]
        better = xp.greater(v, y) | xp.isnan(v)
        xp.maximum(y, v, out=y)                              # NaN from either side: v wins when greater or NaN
        winners[better] = i
    return y, first_in_x(xp, y, winners, dims)


class _WindowAxis(NamedTuple):
    """One spatial dim of a pooling's windows, per output (numpy arrays broadcastable against y)."""
    window: int             # the window's size along this dim
    size: int               # x's size along it
    first: np.ndarray       # the first window position at or past x's start (PyTorch: start += d while start < 0)
    first_coord: np.ndarray  # that position's coordinate in x (may lie past x's end)
    coord: Any              # the coordinate in x of each output's winner (an xp array)


def _window_axes(xp: Any, winners: Any, dims: PoolDims) -> Iterator[_WindowAxis]:
    pos = xp.asarray(np.array(dims.window_positions, np.int64).reshape(-1, dims.spatial_rank))
    chosen = pos[winners.astype(np.int64)]                  # (*y_shape, rank)
    for axis, (k, d, s, lo, o, size) in enumerate(zip(dims.window, dims.dilation, dims.stride, dims.pad_low,
                                                      dims.out_size, dims.x_shape[2:])):
        shape = [1] * (2 + dims.spatial_rank)
        shape[2 + axis] = o
        start = (np.arange(o, dtype=np.int64) * s - lo).reshape(shape)
        first = -(-np.maximum(-start, 0) // d)
        yield _WindowAxis(k, size, first, start + first * d, xp.asarray(start) + chosen[..., axis] * d)


def _winner_in_x(xp: Any, axes: list[_WindowAxis], dims: PoolDims) -> Any:
    """Per output, whether its winner is an element of x (not padding)."""
    inside = xp.ones(dims.y_shape, bool)
    for axis in axes:
        inside &= (axis.coord >= 0) & (axis.coord < axis.size)
    return inside


def first_in_x(xp: Any, y: Any, winners: Any, dims: PoolDims) -> Any:
    """``winners`` with PyTorch's choice where padding won: a window whose every element in x is -inf ties with
    its -inf padding, and the first position (padding) wins, which routes no gradient; PyTorch's winner there is
    the window's first element at or past x's start in every dim, which gets the gradient. Only -inf outputs
    can have lost to padding, so nothing else is computed unless there are some."""
    if not any(dims.pad_low + dims.pad_high):
        return winners
    lost = y == -np.inf
    if not bool(lost.any()):
        return winners
    axes = list(_window_axes(xp, winners, dims))
    first_fits = xp.ones(dims.y_shape, bool)
    code = xp.zeros(dims.y_shape, np.int64)
    for axis in axes:
        first_fits &= xp.asarray((axis.first < axis.window) & (axis.first_coord < axis.size))
        code = code * axis.window + xp.asarray(axis.first)
    return xp.where(lost & ~_winner_in_x(xp, axes, dims) & first_fits, code, winners).astype(winners.dtype)


def backward(xp: Any, winners: Any, dy: Any, dims: PoolDims) -> Any:
    """dx (C-contiguous, dy's dtype): dy added to every window's winner."""
    dxp = xp.zeros(dims.x_shape[:2] + dims.padded_size, dy.dtype)
    for i, position in enumerate(dims.window_positions):
        dxp[dims.window_index(position)] += dy * (winners == i)
    return unpadded(xp, dxp, dims)


def flat_indices(xp: Any, winners: Any, dims: PoolDims) -> Any:
    """PyTorch's ``return_indices``: for every output, the flat index of its winner in its (N, C) plane
    of the unpadded input, int64. A window whose winner is padding (one that reads no element of x, or
    only -inf ones after padding) gets PyTorch's index there: that of its first position at or past x's
    start in every dim (which may lie past x's end, as in PyTorch)."""
    axes = list(_window_axes(xp, winners, dims))
    inside = _winner_in_x(xp, axes, dims)
    flat = xp.zeros(dims.y_shape, np.int64)
    for axis in axes:
        flat = flat * axis.size + xp.where(inside, axis.coord, xp.asarray(axis.first_coord))
    return flat
