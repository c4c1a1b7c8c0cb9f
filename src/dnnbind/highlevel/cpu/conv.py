"""The cpu backend's convolution primitives on numpy: im2col plus BLAS matrix products, and the special
paths of :mod:`conv_paths`. :data:`PRIMITIVES` hands them to :mod:`dnnbind.highlevel.conv_composed`, which
builds conv and the transposed convolution (the data gradient of a convolution) from them.

For a block of samples and a range of groups, the padded input is copied into a column buffer
(samples, groups, C/groups * prod(kernel), columns); the forward pass is then one batched matmul by
the filter and the filter gradient a matmul of the output gradient by the columns. The data gradient
of a stride-1 convolution is itself a stride-1 convolution (of dy with the flipped, transposed
filter) and takes the forward path; strided ones multiply by the transposed filter and scatter the
columns back (col2im, one add per kernel offset).

Two column layouts:

* flat rows (every stride 1): column j is position j of the flattened padded image, so the columns
  of kernel offset k are the contiguous range ``[offset(k), offset(k) + L)`` of each image plane.
  im2col and col2im then move long contiguous rows. The few columns that fall between output rows
  produce values nobody reads (forward) or receive zero gradient (backward).
* windows (any stride): a strided ``sliding_window_view`` of the padded input, one column per output.

Work is cut into blocks of samples whose columns fit in cache (``BLOCK_BYTES``); when the whole
problem fits in one block the forward pass keeps its columns for the pullback, otherwise the
pullback rebuilds them block by block (cheaper than writing and re-reading a large buffer).
(groups x batch) chunks can run on the shared thread pool (numpy releases the GIL in BLAS and in
copies); :func:`use_threads` holds the rule measured for when that pays.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.cpu.channels import add_channel_bias, channel_sums, native_runs
from dnnbind.highlevel.cpu.conv_geometry import (FLAT_MAX_WASTE, FlatRows, _padding, data_grad_problem,
                                                       kernel_offsets, offset_index, pad, unpad, windows)
from dnnbind.highlevel.cpu.conv_paths import (GEMM_THREAD_MIN_MACS, Depthwise, Direct, Path, Pointwise,
                                                    product, blas_path, macs, special_path)
from dnnbind.highlevel.cpu._memory import fits_in_memory
from dnnbind.highlevel.grad_mode import borrowing
from dnnbind.highlevel.cpu._precision import (cotangent, half_backward, half_forward, half_residuals,
                                                    private)
from dnnbind.highlevel.residual import ArraySpec, passes_when
from dnnbind.highlevel.cpu._scratch import scratch
from dnnbind.highlevel.cpu._threads import blas_single_threaded, one_blas_thread, run, split, workers
from dnnbind.highlevel.cpu import native

#: Target size of one block's column buffer: a few samples' worth that stays in the CPU's caches.
BLOCK_BYTES = 8 << 20
#: Split a problem over the thread pool from this many multiply-adds on (bench/bench_reference.py).
THREAD_MIN_MACS = 16_000_000

Chunk = tuple[int, int, int, int]   # groups [g0, g1) x samples [n0, n1)


def use_threads(dims: ConvDims) -> bool:
    """Whether to split this problem over the thread pool: the rule measured on a 2-core machine.

    With a multi-threaded BLAS (numpy's default) our threads only compete with BLAS's and lose
    (10-40% slower at groups=1 and groups=5); with BLAS limited to one thread they win 1.5-1.7x on
    problems of THREAD_MIN_MACS multiply-adds and more, and lose on smaller ones.
    """
    return _big_enough(dims) and workers() >= 2 and blas_single_threaded()


@functools.lru_cache(maxsize=256)
def _big_enough(dims: ConvDims) -> bool:
    """Whether the problem splits (several groups or samples) into pieces worth a thread each."""
    return (dims.groups > 1 or dims.batch > 1) and macs(dims) >= THREAD_MIN_MACS


def plan_chunks(dims: ConvDims, threaded: bool) -> list[Chunk]:
    """One chunk, or one per worker cut along the axis (samples or groups) that splits more evenly."""
    g, n = dims.groups, dims.batch
    if not threaded:
        return [(0, g, 0, n)]
    parts = workers()

    def cost(count: int) -> float:   # largest piece relative to a perfect split
        return -(-count // min(count, parts)) / (count / parts)

    if cost(n) <= cost(g):
        return [(0, g, n0, n1) for n0, n1 in split(n, parts)]
    return [(g0, g1, 0, n) for g0, g1 in split(g, parts)]


@functools.lru_cache(maxsize=256)
def layout(dims: ConvDims, dtype: np.dtype, threaded: bool) -> "_Layout":
    """The problem's im2col plan, built once per (problem, dtype, threading) and then reused: a repeated
    call pays a dictionary lookup instead of the geometry."""
    return _Layout(dims, np.dtype(dtype), threaded)


#: Window layouts whose columns for one sample hold at most this many elements gather them through a
#: precomputed index (one call) instead of a strided window view (fixed cost of a dozen calls).
GATHER_MAX_ELEMENTS = 1 << 15


class _Layout:
    """Everything one problem's im2col needs: sizes, column layout, blocks. Immutable; see :func:`layout`."""

    def __init__(self, dims: ConvDims, dtype: np.dtype, threaded: bool) -> None:
        self.dims = dims
        g = dims.groups
        self.cg, self.kg = dims.in_channels // g, dims.out_channels // g
        self.offsets = kernel_offsets(dims)
        self.rows = self.cg * len(self.offsets)                   # column-matrix rows per group
        self.rows_layout = FlatRows(dims)
        self.p = self.rows_layout.outputs
        self.flat = (dims.spatial_rank > 1 and all(s == 1 for s in dims.stride)
                     and self.rows_layout.waste <= FLAT_MAX_WASTE)
        self.cols = self.rows_layout.length if self.flat else self.p   # columns per sample
        self.starts = self.rows_layout.starts
        self.chunks = plan_chunks(dims, threaded)
        self.item = np.dtype(dtype).itemsize
        per_sample = max(g1 - g0 for g0, g1, _, _ in self.chunks) * self.rows * self.cols * self.item
        self.block = max(1, BLOCK_BYTES // per_sample)
        # all of the problem's columns, and whether they fit one block's budget
        self.columns_shape = (dims.batch, g, self.rows, self.cols)
        fits = int(np.prod(self.columns_shape)) * self.item <= BLOCK_BYTES
        self.ranges = sorted({(n0, n1) for _, _, n0, n1 in self.chunks})
        self.y_shape = dims.y_shape
        self.gather = None
        if not self.flat and dims.in_channels * self.rows // self.cg * self.cols <= GATHER_MAX_ELEMENTS:
            self.gather = self._gather_index()
        # a small problem: all columns gathered at once, one chunk (the forward skips the sweep)
        self.whole = self.gather is not None and fits and len(self.chunks) == 1

    def _gather_index(self) -> np.ndarray:
        """Flat index into one padded sample of every column element, (C * prod(kernel) * P,) row-major."""
        dims = self.dims
        plane = np.arange(int(np.prod(dims.padded_size))).reshape(dims.padded_size)
        taps = np.stack([plane[offset_index(dims, off)[2:]].reshape(-1) for off in self.offsets])   # (T, P)
        channel = np.arange(dims.in_channels)[:, None, None] * plane.size
        return (channel + taps[None]).reshape(-1).astype(np.intp)

    @functools.cached_property
    def _scatter_index(self) -> np.ndarray:
        """The gather index turned around: for each element of one padded sample, the positions of the
        column entries that add into it (C * prod(kernel) * P of them), in column order, padded with
        C * prod(kernel) * P (a zero appended to the columns) to the most any element takes."""
        gather = self.gather
        assert gather is not None
        size = self.dims.in_channels * int(np.prod(self.dims.padded_size))
        counts = np.bincount(gather, minlength=size)
        order = np.argsort(gather, kind="stable")                 # column positions grouped by target
        rank = np.arange(gather.size) - np.repeat(np.cumsum(counts) - counts, counts)
        index = np.full((size, max(1, int(counts.max()))), gather.size, np.intp)
        index[gather[order], rank] = order
        return index

    def blocks(self, n0: int, n1: int) -> list[tuple[int, int]]:
        return [(b, min(b + self.block, n1)) for b in range(n0, n1, self.block)]

    # -- im2col and col2im ----------------------------------------------------------------------

    def fill(self, buf: np.ndarray, xp: np.ndarray, n0: int, n1: int, c0: int, c1: int) -> None:
        """buf (samples, groups, rows, cols) <- columns of xp[n0:n1, c0:c1]."""
        nb, nc = n1 - n0, c1 - c0
        if self.flat:
            src = xp.reshape(xp.shape[0], xp.shape[1], -1)[n0:n1, c0:c1]
            dst = buf.reshape(nb, nc, len(self.offsets), self.cols)
            for k, start in enumerate(self.starts):
                dst[:, :, k] = src[:, :, start:start + self.cols]
        elif self.gather is not None:
            per_channel = len(self.offsets) * self.p
            xp.reshape(xp.shape[0], -1)[n0:n1].take(self.gather[c0 * per_channel:c1 * per_channel], axis=1,
                                                    out=buf.reshape(nb, -1))
        else:
            dims = self.dims
            np.copyto(buf.reshape((nb, nc) + dims.kernel_size + dims.out_size), windows(xp[n0:n1, c0:c1], dims))

    def scatter(self, dxp: np.ndarray, dcols: np.ndarray, n0: int, n1: int, c0: int, c1: int) -> None:
        """dxp[n0:n1, c0:c1] += col2im(dcols), dcols (samples, groups, rows, cols)."""
        nb, nc = n1 - n0, c1 - c0
        if self.flat:
            dst = dxp.reshape(dxp.shape[0], dxp.shape[1], -1)[n0:n1, c0:c1]
            src = dcols.reshape(nb, nc, len(self.offsets), self.cols)
            for k, start in enumerate(self.starts):
                dst[:, :, start:start + self.cols] += src[:, :, k]
        elif self.gather is not None and (c0, c1) == (0, self.dims.in_channels):
            # a small problem: every element's column entries gathered and summed (in column order) at
            # once, rather than one strided add per kernel offset
            flat = np.concatenate([dcols.reshape(nb, -1), np.zeros((nb, 1), dcols.dtype)], axis=1)
            dxp.reshape(dxp.shape[0], -1)[n0:n1] += flat[:, self._scatter_index].sum(axis=-1)
        else:
            dims = self.dims
            src = dcols.reshape((nb, nc) + dims.kernel_size + dims.out_size)
            dst = dxp[n0:n1, c0:c1]
            for offset in self.offsets:
                dst[offset_index(dims, offset)] += src[(slice(None), slice(None)) + offset]

    # -- output space <-> column space ------------------------------------------------------------

    def output_view(self, a: np.ndarray) -> np.ndarray:
        """(samples, channels, cols) in flat rows -> strided view (samples, channels, *out)."""
        return self.rows_layout.output_view(a)

    def to_columns(self, dy: np.ndarray, n0: int, n1: int, g0: int, g1: int) -> np.ndarray:
        """Output-shaped dy[n0:n1, groups g0:g1] as (samples, groups, K/groups, cols)."""
        block = dy[n0:n1, g0 * self.kg:g1 * self.kg]
        shape = (n1 - n0, g1 - g0, self.kg, self.cols)
        if not self.flat:
            return block.reshape(shape)
        ext = scratch("output columns", (n1 - n0, (g1 - g0) * self.kg, self.cols), dy.dtype)
        ext.fill(0)                      # the columns between output rows take no gradient
        self.output_view(ext)[...] = block
        return ext.reshape(shape)


def _group_filter(w: np.ndarray, dims: ConvDims) -> np.ndarray:
    """The filter as (groups, K/groups, C/groups * prod(kernel)), flipped first when ``dims.flip``."""
    if dims.flip:
        w = np.flip(w, tuple(range(2, w.ndim)))
    return np.ascontiguousarray(w).reshape(dims.groups, dims.out_channels // dims.groups, -1)


# ----------------------------------------------------------------------------------------------
# one sweep over (chunks x blocks) does any combination of forward, filter and data gradient


def _sweep(lay: _Layout, wg: np.ndarray, *, xp: Any = None,
           y: np.ndarray | None = None,
           dy: np.ndarray | None = None, dxp: np.ndarray | None = None,
           dw_parts: np.ndarray | None = None) -> None:
    """For every block of samples and chunk of groups:

    * columns of the padded input ``xp``,
    * ``y`` (output-shaped) = w * x,
    * ``dw_parts[i]`` += dy * columns (i: the chunk's sample range), when given,
    * ``dxp`` (padded-input-shaped) += col2im(w^T * dy), when given.
    """
    need_columns = y is not None or dw_parts is not None
    ranges = lay.ranges

    def task(g0: int, g1: int, n0: int, n1: int) -> None:
        c0, c1 = g0 * lay.cg, g1 * lay.cg
        for b0, b1 in (((n0, n1),) if n1 - n0 <= lay.block else lay.blocks(n0, n1)):
            nb, ng = b1 - b0, g1 - g0
            cols: Any = None
            if need_columns:
                cols = scratch("columns", (nb, ng, lay.rows, lay.cols), wg.dtype)
                lay.fill(cols, xp, b0, b1, c0, c1)
            if y is not None:
                yb = y[b0:b1, g0 * lay.kg:g1 * lay.kg]
                if lay.flat:
                    prod = scratch("product", (nb, ng, lay.kg, lay.cols), wg.dtype)
                    product(wg[g0:g1], cols, prod)
                    yb[...] = lay.output_view(prod.reshape(nb, -1, lay.cols))
                else:
                    product(wg[g0:g1], cols, yb.reshape(nb, ng, lay.kg, lay.p))
            if dy is not None:
                dyc = lay.to_columns(dy, b0, b1, g0, g1)
                if dw_parts is not None:
                    part = dw_parts[ranges.index((n0, n1)), g0:g1]
                    for i in range(nb):
                        product(dyc[i], cols[i].swapaxes(-1, -2), part, accumulate=True)
                if dxp is not None:
                    dcols = scratch("data columns", (nb, ng, lay.rows, lay.cols), wg.dtype)
                    product(wg[g0:g1].swapaxes(-1, -2), dyc, dcols)
                    lay.scatter(dxp, dcols, b0, b1, c0, c1)

    run(task, lay.chunks)


def _filter_grad(dw_parts: np.ndarray, dims: ConvDims) -> np.ndarray:
    """The sweep's per-chunk filter gradients summed, in w's shape, for the filter as applied (callers
    flip it back for ``dims.flip``)."""
    return (dw_parts[0] if len(dw_parts) == 1 else dw_parts.sum(axis=0)).reshape(dims.w_shape)


def _im2col_filter_grad(dy: np.ndarray, x: np.ndarray, wg: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
    """dw by im2col columns and BLAS products (wg: the grouped filter as applied), unflipped."""
    lay = layout(dims, dy.dtype, threaded)
    dw_parts = _new_parts(lay, wg)
    _sweep(lay, wg, xp=pad(x, dims, temporary=True), dy=dy, dw_parts=dw_parts)
    return _filter_grad(dw_parts, dims)


def _new_parts(lay: _Layout, wg: np.ndarray) -> np.ndarray:
    return np.zeros((len(lay.ranges),) + wg.shape, wg.dtype)


def _data_grad(dy: np.ndarray, wg: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
    """Gradient with respect to the (unpadded) input, dims.x_shape, for output gradient ``dy``.

    With every stride 1 this is itself a convolution (:func:`conv_geometry.data_grad_problem`), which
    takes the path that suits it and, unlike col2im, moves data the size of dy rather than of x times
    the kernel. Strided convolutions scatter the columns back (col2im).
    """
    if any(s != 1 for s in dims.stride):
        lay = layout(dims, dy.dtype, threaded)
        dxp = np.zeros(dims.x_shape[:2] + dims.padded_size, dy.dtype)
        _sweep(lay, wg, dy=np.ascontiguousarray(dy), dxp=dxp)
        return unpad(dxp, dims)
    dy, w_back, back = data_grad_problem(dy, wg.reshape(dims.w_shape), dims)
    return _forward(dy, w_back, back, threaded)


def _forward(x: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
    """The convolution's output alone (no flip, no bias), by the path that suits the problem."""
    path = special_path(dims)
    if path is not None:
        return path.forward(x, w, dims, threaded)
    lay = layout(dims, x.dtype, threaded)
    y = np.empty(lay.y_shape, x.dtype)
    _sweep(lay, _group_filter(w, dims), xp=pad(x, dims, temporary=True), y=y)
    return y


def _path_filter_grad(path: Path, dy: np.ndarray, x: np.ndarray, wf: np.ndarray, dims: ConvDims,
                      threaded: bool, saved: bool = False) -> np.ndarray:
    """A special path's filter gradient, unflipped (as the path applies the filter wf); Direct's C kernel
    takes large planes, the BLAS paths the rest (:data:`conv_paths.DIRECT_FILTER_MIN_RUN`). ``saved``: x is
    the forward's residual (for Pointwise its sample, see :func:`_kept_shape`)."""
    if path is Pointwise:
        return path.filter_grad(dy, x, dims, threaded, sampled=saved)
    if path is not Direct or Direct.native_filter_grad(dims):
        return path.filter_grad(dy, x, dims, threaded)
    base = blas_path(dims)
    if base is not None:
        return base.filter_grad(dy, x, dims, _threads(dims, base, None))
    return _im2col_filter_grad(dy, x, _grouped(wf, dims), dims, use_threads(dims))


def _grouped(wf: np.ndarray, dims: ConvDims) -> np.ndarray:
    """The filter as applied (w's shape, C-contiguous) as (groups, K/groups, C/groups * prod(kernel))."""
    return wf.reshape(dims.groups, dims.out_channels // dims.groups, -1)


# ----------------------------------------------------------------------------------------------
# primitives: the convolution and the transposed one are composed from them (dnnbind.highlevel.conv_composed)

def _threads(dims: ConvDims, path: Path | None, threaded: bool | None) -> bool:
    if threaded is not None:
        return threaded
    return path.use_threads(dims) if path is not None else use_threads(dims)


#: the paths that run dnnbind's C kernels
_KERNEL_PATHS = (Direct, Depthwise)


def _blas_beside_kernels(dims_at: int) -> Any:
    """Run the op with numpy's BLAS on one thread where dnnbind's C kernels run the problem and it is
    (its ConvDims is positional argument ``dims_at``) big enough for the pool, whose BLAS paths then
    split over it instead (their use_threads rules). OpenBLAS's workers poll for about a tenth of a
    second after each multi-threaded call, taking a core from the C kernels that follow on the pool:
    measured on a 2-core EPYC, a strided 256 -> 512 layer's forward and backward (C forward and data
    gradient, a BLAS filter gradient) took 47 ms with BLAS on two threads and 32 ms with this."""
    def alone(*args: Any, **kwargs: Any) -> bool:
        """Whether BLAS keeps its own threads for this call (a BLAS path's products are split best so)."""
        dims = args[dims_at] if len(args) > dims_at else kwargs["dims"]
        return macs(dims) < GEMM_THREAD_MIN_MACS or native.library() is None or special_path(dims) not in _KERNEL_PATHS

    def decorate(op: Any) -> Any:
        @passes_when(alone)
        @functools.wraps(op)
        def beside(*args: Any, **kwargs: Any) -> Any:
            if alone(*args, **kwargs):
                return op(*args, **kwargs)
            with one_blas_thread():
                return op(*args, **kwargs)
        return beside
    return decorate


def _kept_shape(dims: ConvDims) -> tuple[int, ...]:
    """What the forward keeps of x: x, or for a 1x1 kernel without padding (the problem's geometry, not
    a path's choice) the pixels the kernel visits, which is all its backward reads."""
    return Pointwise.sample_shape(dims) if Pointwise.applies(dims) else dims.x_shape


class _Call:
    """One call's primitives (:class:`dnnbind.highlevel.conv_composed.ConvCall`) on the path that suits
    its problem (:func:`conv_paths.special_path`, None: im2col), threaded by the measured rule unless the
    ``threaded`` option forces the pool on or off (benchmarks)."""

    __slots__ = ("dims", "path", "threaded", "x", "w", "b", "saved", "dy")

    def __init__(self, dims: ConvDims, options: dict[str, Any], x: Any = None, w: Any = None, b: Any = None,
                 saved: tuple = (), dy: Any = None) -> None:
        self.dims, self.x, self.w, self.b, self.saved, self.dy = dims, x, w, b, saved, dy
        self.path = special_path(dims)
        self.threaded = _threads(dims, self.path, options.get("threaded"))

    def __enter__(self) -> "_Call":              # its own scope: on the CPU a call needs none
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def input(self, x: np.ndarray) -> np.ndarray:
        """x as the path reads it (Pointwise: the pixels the kernel visits)."""
        return Pointwise.sample(x, self.dims) if self.path is Pointwise else np.ascontiguousarray(x)

    def extend(self, x: np.ndarray) -> np.ndarray:
        return private(np.ascontiguousarray(_extend(x, self.dims)), x)

    def filter(self, w: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(_flipped(w, self.dims) if self.dims.flip else w)

    def forward_keeping(self, x: np.ndarray, wf: np.ndarray, keep: bool,
                        b: np.ndarray | None = None) -> tuple[np.ndarray, Any]:
        """y (plus the bias ``b``), and x as the backward reads it when ``keep``, the forward's own:
        Direct's and Depthwise's C kernels copy x as they read it (one pass over x fewer), Pointwise keeps
        the pixels it samples; Direct's adds the bias as it writes y (one pass over y fewer). What is kept
        depends on the problem's geometry alone, never on which path runs (:func:`_kept_shape`)."""
        path, dims = self.path, self.dims
        kept = None
        lent = keep and borrowing() and x.flags.c_contiguous       # a lent x is kept as it is
        if path is Direct or path is Depthwise:
            # an x that is not C-contiguous gets its copy below
            kept = np.empty_like(x) if x.flags.c_contiguous and keep and not lent else None
            if path is Direct:
                y, b = path.forward(x, wf, dims, self.threaded, keep=kept, bias=b), None
            else:
                y = path.forward(x, wf, dims, self.threaded, keep=kept)
        elif path is Pointwise:
            sampled = Pointwise.sample(x, dims)
            y = path.forward(sampled, wf, dims, self.threaded, sampled=True)
            kept = private(sampled, x) if keep else None      # (the sample may be x itself)
        else:
            y = self.forward(x, wf)
        if kept is None and keep:
            kept = x if lent else np.array(x, order="C")
        if b is not None:
            y = self.add_bias(y, b, False)
        return y, kept

    def forward(self, xi: np.ndarray, wf: np.ndarray) -> np.ndarray:
        path, dims = self.path, self.dims
        if path is Pointwise:
            return path.forward(xi, wf, dims, self.threaded, sampled=True)
        if path is not None:
            return path.forward(xi, wf, dims, self.threaded)
        lay = layout(dims, xi.dtype, self.threaded)
        wg = _grouped(wf, dims)
        xp = pad(xi, dims, temporary=True)
        if lay.whole:                           # small: every column in one gather, one product
            columns = scratch("whole columns", lay.columns_shape, xi.dtype)
            lay.fill(columns, xp, 0, dims.batch, 0, dims.in_channels)
            y = np.empty(lay.columns_shape[:2] + (lay.kg, lay.columns_shape[-1]), xi.dtype)
            product(wg, columns, y)
            return y.reshape(lay.y_shape)
        y = np.empty(lay.y_shape, xi.dtype)
        _sweep(lay, wg, xp=xp, y=y)
        return y

    def data_grad(self, dy: np.ndarray, wf: np.ndarray) -> np.ndarray:
        if self.path is Direct and not Direct.native_data_grad(self.dims):
            return _data_grad(dy, _grouped(wf, self.dims), self.dims, use_threads(self.dims))
        if self.path is not None:
            return self.path.data_grad(dy, wf, self.dims, self.threaded)
        return _data_grad(dy, _grouped(wf, self.dims), self.dims, self.threaded)

    def filter_grad(self, xi: np.ndarray, dy: np.ndarray, wf: np.ndarray) -> np.ndarray:
        if self.path is not None:
            return _path_filter_grad(self.path, dy, xi, wf, self.dims, self.threaded, saved=True)
        return _im2col_filter_grad(dy, xi, _grouped(wf, self.dims), self.dims, self.threaded)

    def filter_and_bias_grad(self, xi: np.ndarray, dy: np.ndarray, wf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The filter gradient and db: Direct's C kernel sums db from the dy planes it reads anyway (the
        bits of :func:`channel_sums`), the other paths one after the other."""
        if self.path is Direct and Direct.native_filter_grad(self.dims) and native_runs(dy):
            dwf, db = Direct.filter_grad(dy, xi, self.dims, self.threaded, bias_grad=True)
            return dwf, db.astype(dy.dtype)
        return self.filter_grad(xi, dy, wf), self.bias_grad(dy, False)

    def forward_and_filter_grad(self, xi: np.ndarray, dy: np.ndarray, wf: np.ndarray, need_y: bool,
                                need_dw: bool) -> tuple[Any, Any]:
        """The forward of xi and the filter gradient at xi for dy: on the im2col path in one sweep over
        xi's columns (a transposed convolution's backward), else one after the other."""
        if self.path is not None:
            return (self.forward(xi, wf) if need_y else None), (self.filter_grad(xi, dy, wf) if need_dw else None)
        dims = self.dims
        lay = layout(dims, xi.dtype, self.threaded)
        wg = _grouped(wf, dims)
        y = np.empty(dims.y_shape, xi.dtype) if need_y else None
        dw_parts = _new_parts(lay, wg) if need_dw else None
        _sweep(lay, wg, xp=pad(xi, dims), y=y, dy=dy if need_dw else None, dw_parts=dw_parts)
        return y, None if dw_parts is None else _filter_grad(dw_parts, dims)

    def weight_grad(self, dwf: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(_flipped(dwf, self.dims))

    def add_bias(self, y: np.ndarray, b: np.ndarray, transposed: bool) -> np.ndarray:
        add_channel_bias(y, b)
        return y

    def bias_grad(self, dy: np.ndarray, transposed: bool) -> np.ndarray:
        return channel_sums(dy)

    def result(self, a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a)

    def keep(self, a: np.ndarray, source: Any, filter: bool = False) -> np.ndarray:
        return a.copy() if a is source and not borrowing() else private(a, source)  # the input: a copy


class Primitives:
    """The cpu convolution's primitives (:class:`dnnbind.highlevel.conv_composed.ConvPrimitives`): half
    precision computed in float32, a problem too big for the machine's memory refused at once, and numpy's
    BLAS on one thread beside the C kernels (:func:`_blas_beside_kernels`)."""

    OPTIONS = ("threaded",)

    def forward_call(self, op: str, dims: ConvDims, options: dict[str, Any], x: Any, w: Any, b: Any) -> Any:
        return _Call(dims, options, x=x, w=w, b=b)

    def backward_call(self, op: str, dims: ConvDims, options: dict[str, Any], saved: tuple, dy: Any,
                      dy_shape: tuple[int, ...]) -> Any:
        dy = np.ascontiguousarray(cotangent("dy", dy, dy_shape, saved[1].dtype))
        return _Call(dims, options, saved=saved, dy=dy)

    def saved_input_shape(self, dims: ConvDims) -> tuple[int, ...]:
        return _kept_shape(dims)

    def residual(self, shape: tuple[int, ...], dtype: Any, same_as: tuple | None) -> ArraySpec:
        return ArraySpec(shape, np.dtype(dtype), same_as)

    @staticmethod
    def wrap_forward(forward: Any) -> Any:
        return _blas_beside_kernels(dims_at=3)(fits_in_memory(half_forward(forward), _builds_columns))

    @staticmethod
    def wrap_backward(backward: Any) -> Any:
        return _blas_beside_kernels(dims_at=2)(half_backward(backward))

    @staticmethod
    def wrap_residuals(residuals: Any) -> Any:
        return half_residuals(residuals)


PRIMITIVES = Primitives()


def _builds_columns(name: str, dims: ConvDims) -> bool:
    """Whether a forward builds im2col columns: not a convolution on the C kernels' Direct path, which
    reads x in place (a transposed convolution's data-gradient paths are counted as building them)."""
    return name != "conv_forward" or special_path(dims) is not Direct


def _extend(x: np.ndarray, dims: ConvDims) -> np.ndarray:
    """x zero-extended to the forward convolution's output shape (only when output_padding >= stride)."""
    if x.shape == dims.y_shape:
        return x
    xe = np.zeros(dims.y_shape, x.dtype)
    xe[tuple(slice(0, s) for s in x.shape)] = x
    return xe


def _flipped(w: np.ndarray, dims: ConvDims) -> np.ndarray:
    return np.flip(w, tuple(range(2, w.ndim))) if dims.flip else w
