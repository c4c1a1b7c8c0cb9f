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
from dnnbind.highlevel.reference._threads import run_chunks, workers

#: Threading over groups pays once each group's work is this many multiply-adds or more; below it
#: the batched single-thread matmul (with BLAS's own threads) wins. Measured in bench_reference.py.
THREAD_MIN_MACS_PER_GROUP = 8_000_000


def use_threads(dims: ConvDims) -> bool:
    """Whether to run the groups of this problem on the thread pool (the measured rule)."""
    if dims.groups < 2 or workers() < 2:
        return False
    k = int(np.prod(dims.kernel_size))
    per_group = dims.batch * (dims.out_channels // dims.groups) * (dims.in_channels // dims.groups) * k
    return per_group * int(np.prod(dims.out_size)) >= THREAD_MIN_MACS_PER_GROUP


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
    """im2col buffers, one per chunk of groups: (N, groups in chunk, C/groups * prod(kernel), prod(out))."""

    def __init__(self, xp: np.ndarray, dims: ConvDims, threaded: bool) -> None:
        self.dims = dims
        self.chunks: dict[tuple[int, int], np.ndarray] = {}
        windows = _windows(xp, dims)
        cg = dims.in_channels // dims.groups
        ck = cg * int(np.prod(dims.kernel_size))
        p = int(np.prod(dims.out_size))

        def fill(g0: int, g1: int) -> None:
            buf = np.empty((dims.batch, g1 - g0, ck, p), xp.dtype)
            np.copyto(buf.reshape((dims.batch, (g1 - g0) * cg) + dims.kernel_size + dims.out_size),
                      windows[:, g0 * cg:g1 * cg])
            self.chunks[(g0, g1)] = buf

        self.threaded = threaded
        run_chunks(dims.groups, fill, threaded)


def _forward(cols: _Columns, wg: np.ndarray, dims: ConvDims) -> np.ndarray:
    """y = w * x for the whole batch: one matmul per chunk of groups, straight into y's layout."""
    g = dims.groups
    y = np.empty(dims.y_shape, wg.dtype)
    y4 = y.reshape(dims.batch, g, dims.out_channels // g, -1)

    def apply(g0: int, g1: int) -> None:
        np.matmul(wg[g0:g1], cols.chunks[(g0, g1)], out=y4[:, g0:g1])

    run_chunks(g, apply, cols.threaded)
    return y


def _backward(cols: _Columns | None, dy: np.ndarray, wg: np.ndarray, dims: ConvDims,
              want_dx: bool, threaded: bool) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Data gradient (unpadded, dims.x_shape) and grouped filter gradient for output gradient ``dy``."""
    g = dims.groups
    kg = dims.out_channels // g
    cg = dims.in_channels // g
    dy4 = np.ascontiguousarray(dy).reshape(dims.batch, g, kg, -1)
    dxp = np.zeros(dims.x_shape[:2] + dims.padded_size, dy.dtype) if want_dx else None
    dwg = np.empty_like(wg) if cols is not None else None
    offsets = list(itertools.product(*(range(k) for k in dims.kernel_size)))

    def grads(g0: int, g1: int) -> None:
        dyc = dy4[:, g0:g1]
        if dwg is not None:
            col = cols.chunks[(g0, g1)]
            if dims.batch == 1:
                np.matmul(dyc[0], col[0].swapaxes(-1, -2), out=dwg[g0:g1])
            else:
                np.sum(np.matmul(dyc, col.swapaxes(-1, -2)), axis=0, out=dwg[g0:g1])
        if dxp is not None:
            dcols = np.matmul(wg[g0:g1].swapaxes(-1, -2), dyc)
            dcols = dcols.reshape((dims.batch, (g1 - g0) * cg) + dims.kernel_size + dims.out_size)
            target = dxp[:, g0 * cg:g1 * cg]
            for offset in offsets:
                target[_offset_index(dims, offset)] += dcols[(slice(None), slice(None)) + offset]

    run_chunks(g, grads, threaded)
    dx = None
    if dxp is not None:
        dx = np.ascontiguousarray(dxp[_interior(dims)]) if any(dims.pad_low + dims.pad_high) else dxp
    return dx, dwg


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

    ``threaded`` forces group threading on or off (benchmarks); None applies :func:`use_threads`.
    """
    threaded = use_threads(dims) if threaded is None else threaded
    wg = _group_filter(w, dims)
    cols = _Columns(_pad(x, dims), dims, threaded)
    y = _forward(cols, wg, dims)
    if b is not None:
        _add_bias(y, b)

    def pullback(dy: np.ndarray) -> tuple[np.ndarray, ...]:
        dy = cotangent("dy", dy, dims.y_shape, y.dtype)
        dx, dwg = _backward(cols, dy, wg, dims, True, threaded)
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
    threaded = use_threads(dims) if threaded is None else threaded
    wg = _group_filter(w, dims)
    xe = _extend(x, dims)
    y, _ = _backward(None, xe, wg, dims, True, threaded)
    if b is not None:
        _add_bias(y, b)

    def pullback(dy: np.ndarray) -> tuple[np.ndarray, ...]:
        dy = cotangent("dy", dy, dims.x_shape, y.dtype)
        cols = _Columns(_pad(dy, dims), dims, threaded)
        dxe = _forward(cols, wg, dims)
        dx = dxe if dxe.shape == x.shape else np.ascontiguousarray(dxe[tuple(slice(0, s) for s in x.shape)])
        _, dwg = _backward(cols, xe, wg, dims, False, threaded)
        dw = _ungroup_filter(dwg, dims)
        return (dx, dw) if b is None else (dx, dw, _bias_grad(dy))

    return y, pullback


def _extend(x: np.ndarray, dims: ConvDims) -> np.ndarray:
    """x zero-extended to the forward convolution's output shape (only when output_padding >= stride)."""
    if x.shape == dims.y_shape:
        return x
    xe = np.zeros(dims.y_shape, x.dtype)
    xe[tuple(slice(0, s) for s in x.shape)] = x
    return xe
