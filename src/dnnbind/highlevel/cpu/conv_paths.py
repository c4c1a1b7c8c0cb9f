"""Convolution paths for the classes of problems that im2col + GEMM serves badly or needlessly.

* :class:`Pointwise`: 1x1 kernels without padding (any stride, groups, rank). The convolution *is* a
  matrix product per sample and group: y[n, g] = W[g] x[n, g], with no column buffer at all (a strided
  one gathers its sampled pixels once).
* :class:`Depthwise`: one input and one output channel per group (groups == channels, MobileNet's
  depthwise layers). im2col + one GEMM with a single row per group is all call overhead and a column
  buffer far larger than the cache. dnnbind's own C kernels (:mod:`native`) run it in one pass over
  each plane; without them, :class:`DepthwiseNumpy` cuts the work into blocks of samples and channels
  that stay in cache. Forward: each kernel offset's shifted view is copied into the block's columns and
  one batched product per channel (1 x taps) @ (taps x pixels) combines them. Data gradient: stride 1
  is the forward pass again (on dy, flipped kernel); strided undilated ones split by stride phase into
  stride-1 problems (:func:`_phases`), strided dilated ones add weight times dy into each offset's
  shifted view. Filter gradient: one dot product per channel and offset (per stride phase when strided
  and undilated). Blocks are split over the thread pool when numpy's BLAS is single-threaded. Stride 1
  uses the flat-rows layout, where each shifted view is one contiguous run per plane.

* :class:`Shifted`: stride 1 with 16 or more channels per group. One product per kernel offset, of
  that offset's filter slice by the padded input shifted by the offset, read in place (BLAS operands
  with a row pitch, through :mod:`_blas`) and accumulated into the output: no column buffer at all.
* :class:`Direct`: everything else where dnnbind's C kernels are built: a direct convolution
  (:mod:`native`), with the BLAS paths below for what it leaves to them.
* :class:`Folded`: small output planes (the late layers of a CNN, strided or not; taken before
  Shifted, and before Direct). im2col with the samples side by side, so each product is one wide GEMM over every sample
  instead of one skinny GEMM per sample (49 columns at 7x7), and the filter gradient one product
  instead of a loop over samples.

All are exact in the sense the GPU tests need: plain float sums of the same products, no transforms.
Each path offers forward, data gradient and filter gradient as separate calls: conv.py's primitives,
from which :mod:`dnnbind.highlevel.conv_composed` builds the convolution and the transposed one.
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.cpu import native
from dnnbind.highlevel.cpu._blas import gemm, gemm_available
from dnnbind.highlevel.cpu._precision import private
from dnnbind.highlevel.cpu._scratch import scratch
from dnnbind.highlevel.cpu._threads import blas_single_threaded, run, split, workers
from dnnbind.highlevel.cpu.conv_geometry import (FLAT_MAX_WASTE, FlatRows, _padding, data_grad_problem,
                                                       kernel_offsets, offset_index, pad, unpad, windows)

#: Elements per block of the depthwise path (its column buffer: 2 MiB of float32). Measured on a 2-core
#: EPYC (1 MiB L2 per core): smaller blocks pay more numpy calls than they save in cache misses.
BLOCK_ELEMENTS = 512 * 1024
#: Split the depthwise path over the thread pool from this many multiply-adds on.
THREAD_MIN_MACS = 1_000_000
#: ... and its C kernels from this many on, Direct's as well. The pool's workers spin between calls, so a
#: split pays early: measured (3x3, float32, one thread against two, us, 2-core Xeon with AVX-512), 3
#: to 16 channels at 32x32 forward 18/20 at 0.44 M multiply-adds, 31/26 at 0.88 M, 102/81 at 3.5 M,
#: 507/295 at 14 M; 16 to 32 channels at 16x16 forward 48/37 at 2.4 M, filter gradient 64/49.
NATIVE_THREAD_MIN_MACS = 1_000_000


def product(a: np.ndarray, b: np.ndarray, out: np.ndarray, threaded: bool = False, by_rows: bool = False,
             accumulate: bool = False) -> None:
    """out = a @ b (``accumulate``: out += a @ b) over stacks of matrices, broadcast as np.matmul does:
    every product of the convolution paths comes here.

    * Over an inner dimension of one (one input or output channel per group) as a broadcast multiply:
      numpy's matmul takes its slow non-BLAS loop there (measured, 2-core EPYC: a depthwise 1x1
      forward, x(8, 64, 56, 56), 2.7 ms against 0.3).
    * Else np.matmul, split over the pool by columns of out (``by_rows``: by rows) when ``threaded``; a
      2-D product split by rows runs on the C kernels' team where they are built (:func:`native.split_product`).
    """
    if a.shape[-1] == 1 and not accumulate:
        np.multiply(a, b, out=out)
        return
    if accumulate:
        out += np.matmul(a, b)
        return
    if not threaded:
        np.matmul(a, b, out=out)
        return
    if (by_rows and a.ndim == b.ndim == 2 and a.dtype == b.dtype == out.dtype
            and native.split_product_available(out.dtype)):
        native.split_product(a, b, out, threaded=True)
        return

    def part(i0: int, i1: int) -> None:
        if by_rows:
            np.matmul(a[..., i0:i1, :], b, out=out[..., i0:i1, :])
        else:
            np.matmul(a, b[..., i0:i1], out=out[..., i0:i1])

    run(part, split(out.shape[-2 if by_rows else -1], workers()))


def _channel_major(a: np.ndarray, groups: int) -> np.ndarray:
    """(samples, channels, *out) as (groups, channels / groups, samples * outputs), a copy: the samples
    side by side, so that one product per group covers all of them."""
    n, c = a.shape[:2]
    return np.ascontiguousarray(a.reshape(n, c, -1).swapaxes(0, 1)).reshape(groups, c // groups, -1)


def _sampled(x: np.ndarray, dims: ConvDims) -> np.ndarray:
    """The pixels a 1x1 kernel visits, contiguous (x itself at stride 1)."""
    if all(s == 1 for s in dims.stride):
        return np.ascontiguousarray(x)
    return np.ascontiguousarray(x[offset_index(dims, (0,) * dims.spatial_rank)])


class Pointwise:
    """1x1 kernel, no padding: matrix products per sample and group, no im2col."""

    @staticmethod
    def applies(dims: ConvDims) -> bool:
        return all(k == 1 for k in dims.kernel_size) and not any(dims.pad_low + dims.pad_high)

    @staticmethod
    def use_threads(dims: ConvDims) -> bool:
        """Split the samples over the pool where numpy's BLAS is held to one thread (a multi-threaded BLAS
        keeps every core busy itself)."""
        return dims.batch > 1 and macs(dims) >= GEMM_THREAD_MIN_MACS and workers() > 1 and blas_single_threaded()

    @staticmethod
    def _sizes(dims: ConvDims) -> tuple[int, int, int, int, int]:
        g = dims.groups
        p = int(np.prod(dims.out_size))
        return dims.batch, g, dims.in_channels // g, dims.out_channels // g, p

    @staticmethod
    def _samples(dims: ConvDims, threaded: bool) -> list[tuple[int, int]]:
        """Ranges of samples, one per thread of the pool."""
        return split(dims.batch, workers()) if threaded else [(0, dims.batch)]

    @staticmethod
    def sample(x: np.ndarray, dims: ConvDims) -> np.ndarray:
        """The forward's own copy of what its backward needs from x: the pixels the kernel visits
        (all of x at stride 1), contiguous. The convolution saves it instead of x (a quarter of x at
        stride 2, and one pass over x fewer than copying x and sampling it again). Never x's memory,
        also where the strided view is contiguous already (planes of one pixel)."""
        return private(_sampled(x, dims), x)

    @staticmethod
    def sample_shape(dims: ConvDims) -> tuple[int, ...]:
        return dims.x_shape[:2] + dims.out_size

    @staticmethod
    def forward(x: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool, sampled: bool = False) -> np.ndarray:
        """y; ``sampled``: x is already :meth:`sample`'s result."""
        n, g, cg, kg, p = Pointwise._sizes(dims)
        xs = np.ascontiguousarray(x) if sampled else _sampled(x, dims)
        y = np.empty(dims.y_shape, x.dtype)
        xs, yv, wg = xs.reshape(n, g, cg, p), y.reshape(n, g, kg, p), w.reshape(g, kg, cg)

        def samples(n0: int, n1: int) -> None:
            product(wg, xs[n0:n1], yv[n0:n1])

        run(samples, Pointwise._samples(dims, threaded))
        return y

    @staticmethod
    def data_grad(dy: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        n, g, cg, kg, p = Pointwise._sizes(dims)
        wt = w.reshape(g, kg, cg).swapaxes(-1, -2)
        dxs = np.empty((n, g, cg, p), dy.dtype)
        dyg = dy.reshape(n, g, kg, p)

        def samples(n0: int, n1: int) -> None:
            product(wt, dyg[n0:n1], dxs[n0:n1])

        run(samples, Pointwise._samples(dims, threaded))
        dxs = dxs.reshape((n, dims.in_channels) + dims.out_size)
        if all(s == 1 for s in dims.stride):
            return dxs
        dx = np.zeros(dims.x_shape, dy.dtype)
        dx[offset_index(dims, (0,) * dims.spatial_rank)] = dxs
        return dx

    @staticmethod
    def filter_grad(dy: np.ndarray, x: np.ndarray, dims: ConvDims, threaded: bool, sampled: bool = False) -> np.ndarray:
        """dw; ``sampled``: x is already :meth:`sample`'s result (the forward's residual)."""
        n, g, cg, kg, p = Pointwise._sizes(dims)
        xs = np.ascontiguousarray(x) if sampled else _sampled(x, dims)
        xs, dyg = xs.reshape(n, g, cg, p), dy.reshape(n, g, kg, p)
        ranges = Pointwise._samples(dims, threaded)
        parts = np.empty((len(ranges), g, kg, cg), dy.dtype)

        def samples(part: np.ndarray, n0: int, n1: int) -> None:
            for i in range(n0, n1):
                product(dyg[i], xs[i].swapaxes(-1, -2), part, by_rows=True, accumulate=i > n0)

        run(samples, [(part, n0, n1) for part, (n0, n1) in zip(parts, ranges)])
        dw = parts[0] if len(parts) == 1 else parts.sum(axis=0)
        return dw.reshape(dims.w_shape)


class _Blocks:
    """How the depthwise path cuts (samples x channels) into cache-sized blocks, and per-thread lists."""

    def __init__(self, dims: ConvDims, plane: int, threaded: bool) -> None:
        n, c = dims.batch, dims.in_channels
        per_block = max(1, BLOCK_ELEMENTS // plane)          # channels of one sample, or whole samples
        if per_block >= c:
            step = max(1, per_block // c)
            blocks = [(n0, min(n0 + step, n), 0, c) for n0 in range(0, n, step)]
        else:
            blocks = [(i, i + 1, c0, min(c0 + per_block, c)) for i in range(n) for c0 in range(0, c, per_block)]
        parts = workers() if threaded else 1
        self.lists = [(blocks[a:b],) for a, b in split(len(blocks), parts)]


class Depthwise:
    """groups == in_channels == out_channels: dnnbind's own C kernels (:mod:`native`, one pass over each
    plane in cache) where they are built, else numpy (:class:`DepthwiseNumpy`)."""

    @staticmethod
    def applies(dims: ConvDims) -> bool:
        return dims.groups > 1 and dims.in_channels == dims.groups == dims.out_channels

    @staticmethod
    def use_threads(dims: ConvDims) -> bool:
        """The kernels use no BLAS, so the pool pays on every problem big enough for its overhead."""
        if not native.available(_compute_dtype(dims)):
            return DepthwiseNumpy.use_threads(dims)
        return macs(dims) >= NATIVE_THREAD_MIN_MACS and workers() > 1

    @staticmethod
    def forward(x: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool,
                keep: np.ndarray | None = None) -> np.ndarray:
        """y; ``keep`` (x's shape), when given, receives a copy of x (in C: made as each plane is read)."""
        if not native.available(x.dtype):
            if keep is not None:
                np.copyto(keep, x)
            return DepthwiseNumpy.forward(x, w, dims, threaded)
        return native.depthwise_forward(np.ascontiguousarray(x), np.ascontiguousarray(w), dims, threaded, keep)

    @staticmethod
    def data_grad(dy: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        if not native.available(dy.dtype):
            return DepthwiseNumpy.data_grad(dy, w, dims, threaded)
        return native.depthwise_data_grad(np.ascontiguousarray(dy), np.ascontiguousarray(w), dims, threaded)

    @staticmethod
    def filter_grad(dy: np.ndarray, x: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        if not native.available(dy.dtype):
            return DepthwiseNumpy.filter_grad(dy, x, dims, threaded)
        return native.depthwise_filter_grad(np.ascontiguousarray(dy), np.ascontiguousarray(x), dims, threaded)


def _compute_dtype(dims: ConvDims) -> np.dtype:
    """The dtype the cpu backend computes a problem in: float64, or float32 (half precision included)."""
    return np.dtype(np.float64 if np.dtype(dims.dtype) == np.float64 else np.float32)


class DepthwiseNumpy:
    """The depthwise path in numpy: one weighted, shifted view per kernel offset."""

    @staticmethod
    def use_threads(dims: ConvDims) -> bool:
        """Split over the pool on large problems, and only when numpy's BLAS is single-threaded: the
        blocks' products and dot products are BLAS calls, and a multi-threaded BLAS would fight our
        threads for the cores (the same rule as the im2col path, see conv.use_threads)."""
        return macs(dims) >= THREAD_MIN_MACS and workers() > 1 and blas_single_threaded()

    @staticmethod
    def _flat(dims: ConvDims) -> FlatRows | None:
        if any(s != 1 for s in dims.stride):
            return None
        rows = FlatRows(dims)
        return rows if rows.waste <= FLAT_MAX_WASTE else None

    @staticmethod
    def forward(x: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        """Per block: the kernel offsets' shifted views copied into a column block that stays in cache,
        then one product per channel (1 x taps) @ (taps x pixels)."""
        xp = pad(x, dims, temporary=True)
        coef = np.ascontiguousarray(w).reshape(dims.out_channels, 1, -1)
        y = np.empty(dims.y_shape, x.dtype)
        flat = DepthwiseNumpy._flat(dims)
        offsets = kernel_offsets(dims)
        taps = len(offsets)
        xf = xp.reshape(xp.shape[0], xp.shape[1], -1)
        cols = flat.length if flat is not None else int(np.prod(dims.out_size))

        def task(blocks: list) -> None:
            for n0, n1, c0, c1 in blocks:
                buf = scratch("columns", (n1 - n0, c1 - c0, taps, cols), x.dtype)
                if flat is not None:
                    for t, start in enumerate(flat.starts):
                        buf[:, :, t] = xf[n0:n1, c0:c1, start:start + cols]
                else:
                    block, view = xp[n0:n1, c0:c1], buf.reshape((n1 - n0, c1 - c0, taps) + dims.out_size)
                    for t, off in enumerate(offsets):
                        view[:, :, t] = block[offset_index(dims, off)]
                out = np.matmul(coef[c0:c1], buf, out=scratch("product", (n1 - n0, c1 - c0, 1, cols), x.dtype))
                out = out.reshape(n1 - n0, c1 - c0, cols)
                y[n0:n1, c0:c1] = flat.output_view(out) if flat is not None else out.reshape(y[n0:n1, c0:c1].shape)

        run(task, _Blocks(dims, cols * taps, threaded).lists)
        return y

    @staticmethod
    def data_grad(dy: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        if all(s == 1 for s in dims.stride):
            dy, w_back, back = data_grad_problem(dy, w, dims)
            return DepthwiseNumpy.forward(dy, w_back, back, threaded)
        if _undilated(dims):
            dxp = np.zeros(dims.x_shape[:2] + dims.padded_size, dy.dtype)
            for taps, crop, sub in _phases(dims):
                dxp[taps][crop] = DepthwiseNumpy.data_grad(dy, np.ascontiguousarray(w[taps]), sub, threaded)
            return unpad(dxp, dims)
        coef = np.ascontiguousarray(w).reshape(dims.out_channels, -1)
        dxp = np.zeros(dims.x_shape[:2] + dims.padded_size, dy.dtype)
        offsets = kernel_offsets(dims)
        tail = (1,) * dims.spatial_rank

        def task(blocks: list) -> None:
            for n0, n1, c0, c1 in blocks:
                g = dy[n0:n1, c0:c1]
                tmp = np.empty_like(g)
                block = dxp[n0:n1, c0:c1]
                for t, off in enumerate(offsets):
                    np.multiply(g, coef[c0:c1, t].reshape((-1,) + tail), out=tmp)
                    block[offset_index(dims, off)] += tmp

        run(task, _Blocks(dims, int(np.prod(dims.out_size)), threaded).lists)
        return unpad(dxp, dims)

    @staticmethod
    def filter_grad(dy: np.ndarray, x: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        if any(s != 1 for s in dims.stride) and _undilated(dims):
            xp, dw = pad(x, dims), np.empty(dims.w_shape, dy.dtype)
            for taps, crop, sub in _phases(dims):
                dw[taps] = DepthwiseNumpy.filter_grad(dy, np.ascontiguousarray(xp[taps][crop]), sub, threaded)
            return dw
        xp = pad(x, dims, temporary=True)
        offsets = kernel_offsets(dims)
        flat = DepthwiseNumpy._flat(dims)
        lists = _Blocks(dims, flat.length if flat is not None else int(np.prod(dims.out_size)), threaded).lists
        parts = np.zeros((len(lists), dims.out_channels, len(offsets)), dy.dtype)
        xf = xp.reshape(xp.shape[0], xp.shape[1], -1)
        spatial = tuple(range(2, 2 + dims.spatial_rank))

        def task(blocks: list, part: np.ndarray) -> None:
            for n0, n1, c0, c1 in blocks:
                if flat is not None:
                    ext = scratch("output columns", (n1 - n0, c1 - c0, flat.length), dy.dtype)
                    ext.fill(0)
                    flat.output_view(ext)[...] = dy[n0:n1, c0:c1]
                    for t, start in enumerate(flat.starts):
                        part[c0:c1, t] += np.vecdot(ext, xf[n0:n1, c0:c1, start:start + flat.length]).sum(axis=0)
                    continue
                g = dy[n0:n1, c0:c1]
                tmp = np.empty_like(g)
                block = xp[n0:n1, c0:c1]
                for t, off in enumerate(offsets):
                    np.multiply(g, block[offset_index(dims, off)], out=tmp)
                    part[c0:c1, t] += tmp.sum(axis=spatial).sum(axis=0)

        run(task, [(blocks, part) for (blocks,), part in zip(lists, parts)])
        return parts.sum(axis=0).reshape(dims.w_shape)


#: Split a Shifted problem over the thread pool from this many multiply-adds on (the im2col rule's
#: threshold, conv.THREAD_MIN_MACS: both are BLAS products of the same size)
GEMM_THREAD_MIN_MACS = 16_000_000
#: Shifted takes problems with at least this many input channels per group: its products are only that
#: deep (im2col's are deeper by the kernel's size). Measured (3x3, padding 1, forward + backward, batch
#: 32, 2-core Xeon): 16 channels 15.7 ms against im2col's 21.1; 8 channels 9.8 against 13.0 but 5.1
#: against 4.8 at 16x16; 3 channels 7.7 against 6.3.
SHIFTED_MIN_CHANNELS = 16


class Shifted:
    """Stride 1, any kernel: per kernel offset, one product of that offset's filter slice (K x C) by the
    padded input shifted by the offset, read where it lies, accumulated into the output (BLAS with
    beta = 1, :mod:`_blas`). No column buffer: the input is copied once, channel-major with the samples
    side by side (C, N * plane), so that in the flat-rows layout every offset's operand is one matrix
    with a row pitch of N * plane covering all samples (the few columns between rows and between
    samples produce values nobody reads, and take zero gradient)."""

    @staticmethod
    def applies(dims: ConvDims) -> bool:
        if any(s != 1 for s in dims.stride) or dims.in_channels // dims.groups < SHIFTED_MIN_CHANNELS:
            return False
        return gemm_available(_compute_dtype(dims)) and FlatRows(dims).waste <= FLAT_MAX_WASTE

    @staticmethod
    def use_threads(dims: ConvDims) -> bool:
        """Split the samples over the pool on large problems when numpy's BLAS is single-threaded (each
        product is a BLAS call: a multi-threaded BLAS already uses every core)."""
        return dims.batch > 1 and macs(dims) >= GEMM_THREAD_MIN_MACS and workers() > 1 and blas_single_threaded()

    @staticmethod
    def _channel_major(x: np.ndarray, dims: ConvDims) -> np.ndarray:
        """x padded, as (C, N * plane): channel c's row holds every sample's padded plane in turn."""
        n, c = dims.x_shape[:2]
        xc = np.zeros((c, n) + dims.padded_size, x.dtype)
        inside = _padding(dims)[1]                # x's place in the padded array, None without padding
        xc[inside if inside is not None else ...] = x.swapaxes(0, 1)
        return xc.reshape(c, -1)

    @staticmethod
    def _parts(dims: ConvDims, threaded: bool) -> list[tuple[int, int]]:
        return split(dims.batch, workers()) if threaded else [(0, dims.batch)]

    @staticmethod
    def _sizes(dims: ConvDims) -> tuple[int, int, int, int, int]:
        """(groups, output and input channels per group, elements of one padded plane, row pitch)."""
        g, plane = dims.groups, int(np.prod(dims.padded_size))
        return g, dims.out_channels // g, dims.in_channels // g, plane, dims.batch * plane

    @staticmethod
    def forward(x: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        rows, xc = FlatRows(dims), Shifted._channel_major(x, dims)
        g, kg, cg, plane, pitch = Shifted._sizes(dims)
        k = dims.out_channels
        taps = np.ascontiguousarray(w.reshape(k, cg, -1).transpose(2, 0, 1))      # (offsets, K, C/groups)
        yc = np.empty((k, pitch), x.dtype)

        def task(n0: int, n1: int) -> None:
            width = (n1 - n0 - 1) * plane + rows.length
            for t, start in enumerate(rows.starts):
                for gi in range(g):
                    gemm(taps, (t * k + gi * kg) * cg, cg, xc, gi * cg * pitch + n0 * plane + start,
                                     pitch, yc, gi * kg * pitch + n0 * plane, pitch, kg, width, cg, accumulate=t > 0)

        run(task, Shifted._parts(dims, threaded))
        return np.ascontiguousarray(rows.output_view(yc.reshape(k, dims.batch, plane).swapaxes(0, 1)))

    @staticmethod
    def data_grad(dy: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        dy, w_back, back = data_grad_problem(dy, w, dims)      # stride 1: a forward convolution of dy
        return Shifted.forward(np.ascontiguousarray(dy), w_back, back, threaded)

    @staticmethod
    def filter_grad(dy: np.ndarray, x: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        rows, xc = FlatRows(dims), Shifted._channel_major(x, dims)
        g, kg, cg, plane, pitch = Shifted._sizes(dims)
        k = dims.out_channels
        dyc = np.zeros((k, pitch), dy.dtype)               # dy in the flat layout; 0 between the outputs
        rows.output_view(dyc.reshape(k, dims.batch, plane).swapaxes(0, 1))[...] = dy
        parts = Shifted._parts(dims, threaded)
        sums = np.empty((len(parts), len(rows.starts), k, cg), dy.dtype)   # per part: offsets x (K, C/groups)

        def task(i: int, n0: int, n1: int) -> None:
            width = (n1 - n0 - 1) * plane + rows.length
            for t, start in enumerate(rows.starts):
                for gi in range(g):
                    gemm(dyc, gi * kg * pitch + n0 * plane, pitch, xc,
                                     gi * cg * pitch + n0 * plane + start, pitch, sums[i], (t * k + gi * kg) * cg, cg,
                                     kg, cg, width, trans_b=True)

        run(task, [(i, n0, n1) for i, (n0, n1) in enumerate(parts)])
        dw = sums.sum(axis=0) if len(parts) > 1 else sums[0]
        return np.ascontiguousarray(dw.transpose(1, 2, 0)).reshape(dims.w_shape)


#: Folded takes problems whose output planes have at most this many pixels: wider ones already give
#: the per-sample products enough columns. Measured (3x3, batch 8, forward + backward, median of three
#: A/B rounds on a 2-core Xeon): 512 channels at 7x7 41-48 ms against Shifted's 62-72; 256 -> 512 at
#: stride 2 to 7x7 28-30 against im2col's 34-37; 128 -> 256 at stride 2 to 14x14 29-33 against
#: im2col's 25-28 (which keeps its columns for the backward); 256 channels at 14x14 40-43 against
#: Shifted's 43-47.
FOLDED_MAX_OUTPUTS = 128
#: ... and products at least this deep (channels per group times kernel size): shallower ones are cheap
#: either way, and im2col's one gather serves small problems best.
FOLDED_MIN_DEPTH = 64
#: Samples per block: the block's columns stay under this many bytes (im2col's budget; buffers this size
#: are reused from call to call, see _scratch).
FOLDED_BLOCK_BYTES = 8 << 20


class Folded:
    """Small output planes: im2col into (groups, C/groups * prod(kernel), samples * outputs), the samples
    side by side, so that the forward, the filter gradient and the data gradient are each one product
    per group and block of samples. The output and dy pass through a transposed (channel-major) copy,
    cheap next to products this deep. A single sample too: its one product per group, split over the
    pool, beats Direct's register tiles on planes this small (batch 1, 3x3, ms, 2-core EPYC: 512
    channels at 7x7, forward 1.0 against 1.5-1.7; 256 -> 512 at stride 2 to 7x7, forward + backward
    1.8 against 3.2)."""

    @staticmethod
    def applies(dims: ConvDims) -> bool:
        depth = dims.in_channels // dims.groups * int(np.prod(dims.kernel_size))
        return int(np.prod(dims.out_size)) <= FOLDED_MAX_OUTPUTS and depth >= FOLDED_MIN_DEPTH

    @staticmethod
    def use_threads(dims: ConvDims) -> bool:
        """Split each product over the pool when numpy's BLAS is single-threaded (:func:`product`)."""
        return macs(dims) >= GEMM_THREAD_MIN_MACS and workers() > 1 and blas_single_threaded()

    @staticmethod
    def _blocks(dims: ConvDims, item: int) -> list[tuple[int, int]]:
        per_sample = dims.in_channels * int(np.prod(dims.kernel_size)) * int(np.prod(dims.out_size)) * item
        step = max(1, FOLDED_BLOCK_BYTES // per_sample)
        return [(n0, min(n0 + step, dims.batch)) for n0 in range(0, dims.batch, step)]

    @staticmethod
    def _columns(x: np.ndarray, dims: ConvDims, n0: int, n1: int) -> np.ndarray:
        """The columns of samples [n0, n1) of the (unpadded) input, (groups, C/groups * prod(kernel),
        samples * outputs): one strided copy of the padded block's windows, (C, *kernel, samples, *out)."""
        n, r = n1 - n0, dims.spatial_rank
        cols = scratch("folded columns", (dims.in_channels,) + dims.kernel_size + (n,) + dims.out_size, x.dtype)
        order = (1,) + tuple(range(2, 2 + r)) + (0,) + tuple(range(2 + r, 2 + 2 * r))
        np.copyto(cols, windows(pad(x[n0:n1], dims, temporary=True), dims).transpose(order))
        return cols.reshape(dims.groups, -1, n * int(np.prod(dims.out_size)))

    @staticmethod
    def forward(x: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        g, k, p = dims.groups, dims.out_channels, int(np.prod(dims.out_size))
        wg = np.ascontiguousarray(w).reshape(g, k // g, -1)
        y = np.empty(dims.y_shape, x.dtype)
        for n0, n1 in Folded._blocks(dims, x.itemsize):
            cols = Folded._columns(x, dims, n0, n1)
            yt = scratch("folded product", (g, k // g, (n1 - n0) * p), x.dtype)
            product(wg, cols, yt, threaded)
            y[n0:n1] = yt.reshape(k, n1 - n0, *dims.out_size).swapaxes(0, 1)
        return y

    @staticmethod
    def _filter_outweighs_columns(dims: ConvDims) -> bool:
        """Whether the products' columns (samples times outputs) number at most a quarter of a group's
        output channels: the filter then outweighs the columns, and the data gradient reads it transposed
        in its product rather than copying it into the data-gradient problem's filter (stride 1).
        Measured (3x3, ms, 2-core EPYC, product and scatter against the forward convolution of dy):
        batch 1, 512 channels at 7x7 1.27 against 1.67; 1024 at 7x7 5.9 against 12.3; but batch 8, 512
        at 7x7 9.0 against 7.0, and batch 1, 256 at 14x14 1.5 against 1.0."""
        return 4 * dims.batch * math.prod(dims.out_size) <= dims.out_channels // dims.groups

    @staticmethod
    def data_grad(dy: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        if all(s == 1 for s in dims.stride) and not Folded._filter_outweighs_columns(dims):
            # a forward convolution of dy (which may fold too)
            dy, w_back, back = data_grad_problem(dy, w, dims)
            path = special_path(back)
            return (path or Folded).forward(np.ascontiguousarray(dy), w_back, back, threaded)
        g, k, c, r = dims.groups, dims.out_channels, dims.in_channels, dims.spatial_rank
        wt = np.ascontiguousarray(w).reshape(g, k // g, -1).swapaxes(-1, -2)
        dxp = np.zeros(dims.x_shape[:2] + dims.padded_size, dy.dtype)
        for n0, n1 in Folded._blocks(dims, dy.itemsize):
            dyt = _channel_major(dy[n0:n1], g)
            dcols = scratch("folded data columns", (g, wt.shape[1], dyt.shape[-1]), dy.dtype)
            product(wt, dyt, dcols, threaded)
            dcols_view = dcols.reshape((c,) + dims.kernel_size + (n1 - n0,) + dims.out_size)
            block = dxp[n0:n1]
            for offset in kernel_offsets(dims):
                block[offset_index(dims, offset)] += dcols_view[(slice(None),) + offset].swapaxes(0, 1)
        return unpad(dxp, dims)

    @staticmethod
    def filter_grad(dy: np.ndarray, x: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        g, k = dims.groups, dims.out_channels
        dw = np.zeros((g, k // g, dims.in_channels // g * int(np.prod(dims.kernel_size))), dy.dtype)
        part = np.empty_like(dw)
        for n0, n1 in Folded._blocks(dims, dy.itemsize):
            cols = Folded._columns(x, dims, n0, n1)
            dyt = _channel_major(dy[n0:n1], g)
            product(dyt, cols.swapaxes(-1, -2), part, threaded, by_rows=True)
            dw += part
        return dw.reshape(dims.w_shape)


def _undilated(dims: ConvDims) -> bool:
    return all(d == 1 for d in dims.dilation)


@functools.lru_cache(maxsize=256)
def _phases(dims: ConvDims) -> tuple[tuple[tuple[slice, ...], tuple[slice, ...], ConvDims], ...]:
    """A strided, undilated depthwise problem as stride-1 ones, one per stride phase r (per dim, the
    kernel taps r, r + s, r + 2s, ... and the padded inputs at r + s*i, which only those taps read):
    (the phase's slices, for the filter's kernel dims and the padded input's spatial dims alike; the crop
    of the phase's inputs to what its outputs read, out + taps - 1 per dim; its stride-1 ConvDims). The
    output is the sum of the phases' convolutions, so each gradient splits by phase: the data gradient
    is the phases' stride-1 data gradients interleaved, the filter gradient their filter gradients.
    Phases without taps (kernel narrower than the stride) drop out."""
    out = []
    for r in itertools.product(*(range(s) for s in dims.stride)):
        taps = (slice(None), slice(None)) + tuple(slice(ri, None, si) for ri, si in zip(r, dims.stride))
        kernel = tuple(len(range(ri, k, si)) for ri, k, si in zip(r, dims.kernel_size, dims.stride))
        if 0 in kernel:
            continue
        size = tuple(o + k - 1 for o, k in zip(dims.out_size, kernel))
        sub = ConvDims(dims.x_shape[:2] + size, dims.w_shape[:2] + kernel, groups=dims.groups, dtype=dims.dtype)
        out.append((taps, (slice(None), slice(None)) + tuple(slice(0, z) for z in size), sub))
    return tuple(out)


#: Direct computes the filter gradient in C from this many outputs per sample on (the length of a
#: sample's run of outputs in the kernels' plane layout), or stride 1 and DIRECT_FILTER_MIN_SUM outputs
#: over the batch; elsewhere a BLAS path's products are faster. Measured (3x3, 2-core EPYC, medians of
#: three alternations, ms, C against the BLAS path): batch 8, 64 channels at 56x56 (run 3,300) 11.3
#: against 23.6; 128 at 28x28 (run 838) 11.7 against 17.6; 256 at 14x14 (run 222) 12.8 against 16.0
#: but 512 at 7x7 (run 61) 42.7 against 14.0, and strided 256 -> 512 to 7x7 21.3 against 8.0; batch 32,
#: 16 -> 32 channels at 16x16 (run 286) 1.37 against 2.05.
DIRECT_FILTER_MIN_RUN = 512
DIRECT_FILTER_MIN_SUM = 4096
#: ... and for grouped problems wherever one group's filter has at most this many elements: the BLAS
#: path's products are then a group's few output channels each, one after another. Measured as above
#: (ms, C against BLAS): groups 32, 256 channels at 14x14 0.60 against 5.1; groups 8, 256 at 7x7 0.79
#: against 2.7; groups 32, 1024 at 7x7 6.0 against 11.0; groups 2, 128 at 14x14 (36,864 elements) 1.8
#: against 4.5; but groups 4, 512 at 7x7 (147,456) 10.4 against 6.1, and dense problems of small
#: planes gain nothing (64 channels at 7x7, 36,864 elements: 0.67 against 0.56).
DIRECT_FILTER_MAX_GROUP_FILTER = 1 << 16


#: Direct leaves a strided data gradient to the im2col path's col2im where a group has at most this many
#: input channels and the kernel at least DIRECT_DATA_MIN_TAPS taps (a CNN's first layer on an image):
#: each kernel offset's product then fills three rows. Measured (float32, 2-core EPYC, ms, C against
#: col2im): 7x7/2 3 -> 64 at 224x224, batch 8 136 against 102, batch 1 14.7 against 8.7; but 3x3/2 3 ->
#: 32 at 224x224 10.0 against 137, 5x5/2 4 -> 64 at 112x112 11.9 against 128, 7x7/2 8 -> 64 at 112x112
#: 15.3 against 128.
DIRECT_DATA_MAX_GROUP_CHANNELS = 3
DIRECT_DATA_MIN_TAPS = 49


#: Direct takes problems of at least this many multiply-adds: below, its fixed costs (arguments checked,
#: buffers laid out, weights packed) exceed the BLAS paths' (a tiny convolution's one gather and product).
DIRECT_MIN_MACS = 1 << 17


@functools.lru_cache(maxsize=1024)
def macs(dims: ConvDims) -> int:
    """Multiply-adds of the forward pass (each gradient costs as many); remembered per problem."""
    return (dims.batch * dims.out_channels * (dims.in_channels // dims.groups) * math.prod(dims.kernel_size)
            * math.prod(dims.out_size))


class Direct:
    """Every other problem, where dnnbind's C kernels are built (:mod:`native`): a direct convolution on
    each sample's planes in cache, no column buffer, no BLAS: forward, data gradient, and the filter
    gradient of large planes; conv.py hands small planes' filter gradients to the BLAS paths."""

    @staticmethod
    def applies(dims: ConvDims) -> bool:
        return macs(dims) >= DIRECT_MIN_MACS and native.available(_compute_dtype(dims))

    @staticmethod
    def use_threads(dims: ConvDims) -> bool:
        """The kernels use no BLAS: split over the pool on every problem big enough for its overhead (the
        C kernels' threshold, :data:`NATIVE_THREAD_MIN_MACS`)."""
        return macs(dims) >= NATIVE_THREAD_MIN_MACS and workers() > 1

    @staticmethod
    def forward(x: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool,
                keep: np.ndarray | None = None, bias: np.ndarray | None = None) -> np.ndarray:
        """y (plus ``bias`` per output channel, added as y is written); ``keep`` as in
        :meth:`Depthwise.forward`."""
        return native.conv_forward(np.ascontiguousarray(x), np.ascontiguousarray(w), dims, threaded, keep,
                                   None if bias is None else np.ascontiguousarray(bias, dtype=x.dtype))

    @staticmethod
    def data_grad(dy: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
        """Stride 1: the forward of the data-gradient problem (a correlation, in registers); strided: per
        kernel offset, the transposed filter times dy added where the forward read (in C as well). conv.py
        calls it where :meth:`native_data_grad` says so, col2im elsewhere."""
        if all(s == 1 for s in dims.stride):
            dy, w_back, back = data_grad_problem(dy, w, dims)
            path = special_path(back) or Direct
            return path.forward(np.ascontiguousarray(dy), w_back, back, threaded)
        return native.conv_data_grad(np.ascontiguousarray(dy), np.ascontiguousarray(w), dims, threaded)

    @staticmethod
    def filter_grad(dy: np.ndarray, x: np.ndarray, dims: ConvDims, threaded: bool, bias_grad: bool = False) -> Any:
        """dw in C (with ``bias_grad``: (dw, db in float64), from the same pass over dy): conv.py calls it
        where :meth:`native_filter_grad` says so, a BLAS path elsewhere."""
        return native.conv_filter_grad(np.ascontiguousarray(dy), np.ascontiguousarray(x), dims, threaded, bias_grad)

    @staticmethod
    def native_data_grad(dims: ConvDims) -> bool:
        """Whether the C kernels compute this problem's data gradient (see DIRECT_DATA_MAX_GROUP_CHANNELS)."""
        return (all(s == 1 for s in dims.stride) or dims.in_channels // dims.groups > DIRECT_DATA_MAX_GROUP_CHANNELS
                or math.prod(dims.kernel_size) < DIRECT_DATA_MIN_TAPS)

    @staticmethod
    def native_filter_grad(dims: ConvDims) -> bool:
        """Whether the C kernel computes this problem's filter gradient (see DIRECT_FILTER_MIN_RUN and
        DIRECT_FILTER_MAX_GROUP_FILTER)."""
        run = native.run_length(dims)
        group_filter = math.prod(dims.w_shape) // dims.groups
        return (run >= DIRECT_FILTER_MIN_RUN or (dims.groups > 1 and group_filter <= DIRECT_FILTER_MAX_GROUP_FILTER)
                or (all(s == 1 for s in dims.stride) and dims.batch * run >= DIRECT_FILTER_MIN_SUM))


Path = type[Pointwise] | type[Depthwise] | type[Shifted] | type[Folded] | type[Direct]

_BEFORE_DIRECT: tuple[Path, ...] = (Pointwise, Depthwise, Folded)


#: Folded goes before Direct on a grouped problem only from this many input channels per group: with
#: narrower groups its products are a few small GEMMs beside a column copy as large as a dense layer's,
#: while Direct's register tiles take every group in one pass. Measured (3x3, batch 8, forward +
#: backward, ms, Folded against Direct, 2-core EPYC): 512 channels at 7x7 in 32 groups of 16 11.2
#: against 3.5; 1024 in 32 of 32 20.2 against 9.8; 256 in 4 of 64 5.3 against 4.1; 128 at 11x11 in 2 of
#: 64 5.2 against 4.4; 512 in 8 of 64 8.0 against 8.0; but 192 at 11x11 in 2 of 96 9.1 against 12.0,
#: 512 in 4 of 128 10.6 against 13.3.
FOLDED_MIN_GROUP_CHANNELS = 96


def special_path(dims: ConvDims) -> Path | None:
    """The path class for this problem, or None for the general im2col path: 1x1, depthwise and small
    output planes take their BLAS paths; the rest Direct wherever the C kernels are built (asked on every
    call: tests turn them off), else the BLAS paths. Folded before Direct: its one wide
    product per group, on BLAS's own threads, measured 0.72x Direct's time (geometric mean, forward and
    forward + backward alike) over eleven small-plane layers (7x7 to 11x11, 64 to 512 channels) on a
    2-core EPYC; for grouped problems only from :data:`FOLDED_MIN_GROUP_CHANNELS` channels per group."""
    # remembered per problem with what decides Direct besides it (tests lower its threshold, tests and the
    # kernels' bench turn the kernels off in place): a repeated call looks it up instead of asking
    key = (dims, DIRECT_MIN_MACS, native.available, native.library)
    try:
        return _SPECIAL_PATHS[key]
    except KeyError:
        if len(_SPECIAL_PATHS) >= 256:
            _SPECIAL_PATHS.clear()
        path = _SPECIAL_PATHS[key] = _special_path(dims)
        return path


_SPECIAL_PATHS: dict[tuple, "Path | None"] = {}


def _special_path(dims: ConvDims) -> Path | None:
    path = blas_path(dims)
    if not Direct.applies(dims):
        return path
    if path is Folded and dims.groups > 1 and dims.in_channels // dims.groups < FOLDED_MIN_GROUP_CHANNELS:
        return Direct
    if path in _BEFORE_DIRECT:
        return path
    return Direct


@functools.lru_cache(maxsize=256)
def blas_path(dims: ConvDims) -> Path | None:
    """The path without Direct (remembered per problem): what numpy and BLAS do best."""
    path: Path
    for path in (Pointwise, Depthwise, Folded, Shifted):
        if path.applies(dims):
            return path
    return None
