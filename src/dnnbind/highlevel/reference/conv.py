"""Convolution and transposed convolution on numpy: im2col plus BLAS matrix products.

The padded input is viewed as sliding windows (no copy) and copied once into a column buffer laid
out (N, groups, C/groups * prod(kernel), prod(out)), so that the forward pass is one batched matmul
writing straight into y's NCHW layout. The same buffer serves the filter gradient, which is why the
pullback keeps it. The data gradient multiplies by the transposed filter and scatters the columns
back (col2im), one strided add per kernel offset.

Groups can run on the shared thread pool: numpy releases the GIL in BLAS and in large copies.
"""
from __future__ import annotations

import itertools
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.reference._precision import cotangent, half_in_float32
from dnnbind.highlevel.reference._threads import run, split, workers

#: Threads pay once the problem has this many multiply-adds or more; below it one thread (with
#: BLAS's own threads) wins. Measured with bench/bench_reference.py; see plan_chunks.
THREAD_MIN_MACS = 8_000_000

Chunk = tuple[int, int, int, int]   # groups [g0, g1) x batch [n0, n1)


def use_threads(dims: ConvDims) -> bool:
    """Whether to split this problem over the thread pool (the measured rule)."""
    if workers() < 2 or (dims.groups < 2 and dims.batch < 2):
        return False
    k = int(np.prod(dims.kernel_size))
    macs = dims.batch * dims.out_channels * (dims.in_channels // dims.groups) * k * int(np.prod(dims.out_size))
    return macs >= THREAD_MIN_MACS


def plan_chunks(dims: ConvDims, threaded: bool) -> list[Chunk]:
    """Cut (groups x batch) into one chunk per worker along the axis that splits more evenly."""
    g, n = dims.groups, dims.batch
    if not threaded:
        return [(0, g, 0, n)]
    parts = workers()

    def imbalance(count: int) -> float:
        pieces = min(count, parts)
        return -(-count // pieces) / (count / pieces) - (pieces - 1)  # prefer more pieces, then balance

    if imbalance(n) <= imbalance(g):
        return [(0, g, n0, n1) for n0, n1 in split(n, parts)]
    return [(g0, g1, 0, n) for g0, g1 in split(g, parts)]


# ----------------------------------------------------------------------------------------------
# geometry helpers (pure views and index tuples)


def _spatial_axes(dims: ConvDims) -> tuple[int, ...]:
    return tuple(range(2, 2 + dims.spatial_rank))


def _pad(x: np.ndarray, dims: ConvDims) -> np.ndarray:
    """x padded with zeros (x itself when there is no padding)."""
    if not any(dims.pad_low + dims.pad_high):
        return x
    xp = np.zeros(x.shape[:2] + dims.padded_size, x.dtype)
    xp[_interior(dims)] = x
    return xp


def _interior(dims: ConvDims) -> tuple[slice, ...]:
    """Index of the unpadded region inside a padded array."""
    return (slice(None), slice(None)) + tuple(
        slice(a, a + s) for a, s in zip(dims.pad_low, dims.x_shape[2:]))


def _windows(xp: np.ndarray, dims: ConvDims) -> np.ndarray:
    """View (N, C, *kernel, *out) of the padded input: element [n, c, *k, *o] multiplies w[:, c, *k]."""
    n = dims.spatial_rank
    view = sliding_window_view(xp, dims.dilated_kernel, axis=_spatial_axes(dims))
    view = view[(slice(None), slice(None))
                + tuple(slice(None, None, s) for s in dims.stride)
                + tuple(slice(None, None, d) for d in dims.dilation)]
    return view.transpose((0, 1) + tuple(range(2 + n, 2 + 2 * n)) + tuple(range(2, 2 + n)))


def _offset_index(dims: ConvDims, offset: tuple[int, ...]) -> tuple[slice, ...]:
    """Index into a padded array of the inputs that kernel position ``offset`` touches, one per output."""
    return (slice(None), slice(None)) + tuple(
        slice(k * d, k * d + s * (o - 1) + 1, s)
        for k, d, s, o in zip(offset, dims.dilation, dims.stride, dims.out_size))


def _group_filter(w: np.ndarray, dims: ConvDims) -> np.ndarray:
    """The filter as (groups, K/groups, C/groups * prod(kernel)), flipped first when ``dims.flip``."""
    if dims.flip:
        w = np.flip(w, _spatial_axes(dims))
    g = dims.groups
    return np.ascontiguousarray(w).reshape(g, dims.out_channels // g, -1)


def _ungroup_filter(dw: np.ndarray, dims: ConvDims) -> np.ndarray:
    dw = dw.reshape(dims.w_shape)
    if dims.flip:
        dw = np.ascontiguousarray(np.flip(dw, _spatial_axes(dims)))
    return dw


# ----------------------------------------------------------------------------------------------
# the three primitives, each on a contiguous range of groups


class _Columns:
    """im2col buffers, one per chunk: (batch in chunk, groups in chunk, C/groups * prod(kernel), prod(out))."""

    def __init__(self, xp: np.ndarray, dims: ConvDims, chunks: list[Chunk]) -> None:
        self.chunks = chunks
        self.buffers: dict[Chunk, np.ndarray] = {}
        windows = _windows(xp, dims)
        cg = dims.in_channels // dims.groups
        ck = cg * int(np.prod(dims.kernel_size))
        p = int(np.prod(dims.out_size))

        def fill(g0: int, g1: int, n0: int, n1: int) -> None:
            buf = np.empty((n1 - n0, g1 - g0, ck, p), xp.dtype)
            np.copyto(buf.reshape((n1 - n0, (g1 - g0) * cg) + dims.kernel_size + dims.out_size),
                      windows[n0:n1, g0 * cg:g1 * cg])
            self.buffers[(g0, g1, n0, n1)] = buf

        run(fill, chunks)


def _forward(cols: _Columns, wg: np.ndarray, dims: ConvDims) -> np.ndarray:
    """y = w * x: one matmul per chunk, straight into y's layout."""
    g = dims.groups
    y = np.empty(dims.y_shape, wg.dtype)
    y4 = y.reshape(dims.batch, g, dims.out_channels // g, -1)

    def apply(g0: int, g1: int, n0: int, n1: int) -> None:
        np.matmul(wg[g0:g1], cols.buffers[(g0, g1, n0, n1)], out=y4[n0:n1, g0:g1])

    run(apply, cols.chunks)
    return y


def _backward(cols: _Columns | None, dy: np.ndarray, wg: np.ndarray, dims: ConvDims,
              chunks: list[Chunk]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Gradients for output gradient ``dy``: the data gradient (dims.x_shape) when ``cols`` is None or
    the chunks say so, and the grouped filter gradient when ``cols`` (the forward's im2col) is given.

    With ``cols`` given both are computed; with cols None only the data gradient.
    """
    g = dims.groups
    kg = dims.out_channels // g
    cg = dims.in_channels // g
    dy4 = np.ascontiguousarray(dy).reshape(dims.batch, g, kg, -1)
    dxp = np.zeros(dims.x_shape[:2] + dims.padded_size, dy.dtype)
    batch_ranges = sorted({(n0, n1) for _, _, n0, n1 in chunks})
    dw_parts = np.zeros((len(batch_ranges),) + wg.shape, wg.dtype) if cols is not None else None
    offsets = list(itertools.product(*(range(k) for k in dims.kernel_size)))

    def grads(g0: int, g1: int, n0: int, n1: int) -> None:
        dyc = dy4[n0:n1, g0:g1]
        if dw_parts is not None:
            col = cols.buffers[(g0, g1, n0, n1)]
            part = dw_parts[batch_ranges.index((n0, n1)), g0:g1]
            for i in range(n1 - n0):   # accumulate per sample: no (batch, ...) temporary
                part += np.matmul(dyc[i], col[i].swapaxes(-1, -2))
        dcols = np.matmul(wg[g0:g1].swapaxes(-1, -2), dyc)
        dcols = dcols.reshape((n1 - n0, (g1 - g0) * cg) + dims.kernel_size + dims.out_size)
        target = dxp[n0:n1, g0 * cg:g1 * cg]
        for offset in offsets:
            target[_offset_index(dims, offset)] += dcols[(slice(None), slice(None)) + offset]

    run(grads, chunks)
    dx = np.ascontiguousarray(dxp[_interior(dims)]) if any(dims.pad_low + dims.pad_high) else dxp
    dwg = None if dw_parts is None else (dw_parts[0] if len(dw_parts) == 1 else dw_parts.sum(axis=0))
    return dx, dwg


def _filter_grad(cols: _Columns, dy: np.ndarray, wg: np.ndarray, dims: ConvDims) -> np.ndarray:
    """Grouped filter gradient only (conv_transpose's pullback)."""
    g = dims.groups
    dy4 = np.ascontiguousarray(dy).reshape(dims.batch, g, dims.out_channels // g, -1)
    batch_ranges = sorted({(n0, n1) for _, _, n0, n1 in cols.chunks})
    dw_parts = np.zeros((len(batch_ranges),) + wg.shape, wg.dtype)

    def grads(g0: int, g1: int, n0: int, n1: int) -> None:
        col = cols.buffers[(g0, g1, n0, n1)]
        part = dw_parts[batch_ranges.index((n0, n1)), g0:g1]
        for i in range(n1 - n0):
            part += np.matmul(dy4[n0 + i, g0:g1], col[i].swapaxes(-1, -2))

    run(grads, cols.chunks)
    return dw_parts[0] if len(dw_parts) == 1 else dw_parts.sum(axis=0)


def _bias_grad(dy: np.ndarray) -> np.ndarray:
    return dy.reshape(dy.shape[0], dy.shape[1], -1).sum(axis=2).sum(axis=0)


def _add_bias(y: np.ndarray, b: np.ndarray) -> None:
    y += b.reshape((1, -1) + (1,) * (y.ndim - 2))


# ----------------------------------------------------------------------------------------------
# ops


@half_in_float32
def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, dims: ConvDims,
         *, threaded: bool | None = None) -> tuple[np.ndarray, Callable]:
    """Convolution (cross-correlation; true convolution when ``dims.flip``) with optional bias.

    ``threaded`` forces the thread pool on or off (benchmarks); None applies :func:`use_threads`.
    """
    chunks = plan_chunks(dims, use_threads(dims) if threaded is None else threaded)
    wg = _group_filter(w, dims)
    cols = _Columns(_pad(x, dims), dims, chunks)
    y = _forward(cols, wg, dims)
    if b is not None:
        _add_bias(y, b)

    def pullback(dy: np.ndarray) -> tuple[np.ndarray, ...]:
        dy = cotangent("dy", dy, dims.y_shape, y.dtype)
        dx, dwg = _backward(cols, dy, wg, dims, chunks)
        dw = _ungroup_filter(dwg, dims)
        return (dx, dw) if b is None else (dx, dw, _bias_grad(dy))

    return y, pullback


@half_in_float32
def conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, dims: ConvDims,
                   *, threaded: bool | None = None) -> tuple[np.ndarray, Callable]:
    """Transposed convolution: the data gradient of the convolution that ``dims`` describes.

    ``dims`` comes from :meth:`ConvDims.transposed`, so dims.x_shape is this op's output shape and x
    plays the part of that convolution's output gradient.
    """
    chunks = plan_chunks(dims, use_threads(dims) if threaded is None else threaded)
    wg = _group_filter(w, dims)
    xe = _extend(x, dims)
    y, _ = _backward(None, xe, wg, dims, chunks)
    if b is not None:
        _add_bias(y, b)

    def pullback(dy: np.ndarray) -> tuple[np.ndarray, ...]:
        dy = cotangent("dy", dy, dims.x_shape, y.dtype)
        cols = _Columns(_pad(dy, dims), dims, chunks)
        dxe = _forward(cols, wg, dims)
        dx = dxe if dxe.shape == x.shape else np.ascontiguousarray(dxe[tuple(slice(0, s) for s in x.shape)])
        dw = _ungroup_filter(_filter_grad(cols, xe, wg, dims), dims)
        return (dx, dw) if b is None else (dx, dw, _bias_grad(dy))

    return y, pullback


def _extend(x: np.ndarray, dims: ConvDims) -> np.ndarray:
    """x zero-extended to the forward convolution's output shape (only when output_padding >= stride)."""
    if x.shape == dims.y_shape:
        return x
    xe = np.zeros(dims.y_shape, x.dtype)
    xe[tuple(slice(0, s) for s in x.shape)] = x
    return xe
