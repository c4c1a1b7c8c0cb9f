"""Index geometry of a convolution on numpy arrays, shared by every convolution path.

Padding, the strided views of the inputs each kernel offset touches, the flat-rows layout (stride 1:
the inputs of kernel offset k are a contiguous range of each flattened padded plane), and the data
gradient of a stride-1 convolution written as another convolution.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import interior_slices, window_slices
from dnnbind.highlevel.cpu import native
from dnnbind.highlevel.cpu._scratch import scratch

#: Flat rows waste (L - prod(out)) columns; use them only while that costs at most this fraction.
FLAT_MAX_WASTE = 0.3


class FlatRows:
    """The flat-rows layout of a stride-1 problem: ``pitch`` (elements per step of each padded spatial
    dim), ``length`` L (columns per plane: from output 0 to the last output) and ``starts`` (where the
    inputs of each kernel offset begin in a flattened padded plane)."""

    def __init__(self, dims: ConvDims) -> None:
        padded = dims.padded_size
        self.pitch = tuple(int(np.prod(padded[i + 1:])) for i in range(len(padded)))
        self.length = sum((o - 1) * q for o, q in zip(dims.out_size, self.pitch)) + 1
        self.starts = [sum(k * d * q for k, d, q in zip(off, dims.dilation, self.pitch))
                       for off in kernel_offsets(dims)]
        self.outputs = int(np.prod(dims.out_size))
        self.waste = self.length / self.outputs - 1
        self.out_size = dims.out_size

    def output_view(self, a: np.ndarray) -> np.ndarray:
        """(samples, channels, L) -> strided view (samples, channels, *out) of the real outputs."""
        return as_strided(a, a.shape[:2] + self.out_size, a.strides[:2] + tuple(q * a.itemsize for q in self.pitch),
                          writeable=a.flags.writeable)


@functools.lru_cache(maxsize=256)
def kernel_offsets(dims: ConvDims) -> tuple[tuple[int, ...], ...]:
    """Every kernel position, row-major."""
    return tuple(itertools.product(*(range(k) for k in dims.kernel_size)))


def windows(xp: np.ndarray, dims: ConvDims) -> np.ndarray:
    """View (N, C, *kernel, *out) of a padded input: element [n, c, *k, *o] multiplies w[:, c, *k]."""
    n = dims.spatial_rank
    view = sliding_window_view(xp, dims.dilated_kernel, axis=tuple(range(2, 2 + n)))
    view = view[(slice(None), slice(None))
                + tuple(slice(None, None, s) for s in dims.stride)
                + tuple(slice(None, None, d) for d in dims.dilation)]
    return view.transpose((0, 1) + tuple(range(2 + n, 2 + 2 * n)) + tuple(range(2, 2 + n)))


@functools.lru_cache(maxsize=4096)
def offset_index(dims: ConvDims, offset: tuple[int, ...]) -> tuple[slice, ...]:
    """Index into a padded array of the inputs that kernel position ``offset`` touches, one per output;
    remembered (the loops over kernel offsets ask for every offset on every call)."""
    return window_slices(dims, offset)


@functools.lru_cache(maxsize=256)
def _padding(dims: ConvDims) -> tuple[tuple[int, ...], tuple[slice, ...] | None]:
    """The padded array's shape and the index of the unpadded region inside it (None: nothing padded)."""
    if not any(dims.pad_low + dims.pad_high):
        return dims.x_shape, None
    return dims.x_shape[:2] + dims.padded_size, interior_slices(dims)


def pad(x: np.ndarray, dims: ConvDims, *, temporary: bool = False) -> np.ndarray:
    """x padded with zeros, always C-contiguous (x itself when it already is and nothing is padded);
    x may be a block of the problem's samples.

    ``temporary``: the padded copy is used only within the calling function (never kept, never
    returned), so it may live in this thread's scratch memory (see _scratch).
    """
    shape, inside = _padding(dims)
    if inside is None:
        return np.ascontiguousarray(x)
    shape = x.shape[:1] + shape[1:]
    if temporary:
        xp = scratch("padded input", shape, x.dtype)
        xp.fill(0)
    else:
        xp = np.zeros(shape, x.dtype)
    xp[inside] = x
    return xp


def unpad(dxp: np.ndarray, dims: ConvDims) -> np.ndarray:
    inside = _padding(dims)[1]
    return dxp if inside is None else np.ascontiguousarray(dxp[inside])


def data_grad_problem(dy: np.ndarray, w: np.ndarray, dims: ConvDims) -> tuple[np.ndarray, np.ndarray, ConvDims]:
    """The data gradient of a stride-1 convolution as a forward convolution: (x', w', dims').

    dy, padded by the dilated kernel extent less the forward padding, correlated with the flipped
    filter whose channel axes are swapped within each group; ``w`` is the filter as the forward pass
    applies it (already flipped when ``dims.flip``), shaped dims.w_shape. Outputs that see only
    padding (padding wider than the kernel reaches) are cropped from dy first.
    """
    crop, grouped, spatial, back = _data_grad_geometry(dims)
    if native.available(w.dtype) and w.flags.c_contiguous:
        # numpy's copy of the view goes a kernel's taps at a time: 5-6x a plain copy of the filter
        return dy[crop], native.filter_flip_transpose(w, dims.groups).reshape(back.w_shape), back
    w_t = np.flip(w.reshape(grouped).swapaxes(1, 2), spatial)
    return dy[crop], np.ascontiguousarray(w_t).reshape(back.w_shape), back


@functools.lru_cache(maxsize=256)
def _data_grad_geometry(dims: ConvDims) -> tuple[tuple[slice, ...], tuple[int, ...], tuple[int, ...], ConvDims]:
    """What :func:`data_grad_problem` needs of the geometry alone, remembered per problem: dy's crop, the
    filter's grouped shape, its spatial axes there, and the forward problem it becomes."""
    extent = [d * (k - 1) for d, k in zip(dims.dilation, dims.kernel_size)]
    lo = [e - p for e, p in zip(extent, dims.pad_low)]
    hi = [e - p for e, p in zip(extent, dims.pad_high)]
    crop = (slice(None), slice(None)) + tuple(slice(max(0, -a), o - max(0, -b))
                                              for a, b, o in zip(lo, hi, dims.out_size))
    g, kg, cg = dims.groups, dims.out_channels // dims.groups, dims.in_channels // dims.groups
    cropped = dims.y_shape[:2] + tuple(len(range(o)[c]) for o, c in zip(dims.out_size, crop[2:]))
    back = _back_dims(cropped, (dims.in_channels, kg) + dims.kernel_size,
                      tuple((max(a, 0), max(b, 0)) for a, b in zip(lo, hi)), dims.dilation, g, dims.dtype)
    return crop, (g, kg, cg) + dims.kernel_size, tuple(range(3, 3 + dims.spatial_rank)), back


@functools.lru_cache(maxsize=256)
def _back_dims(x_shape, w_shape, padding, dilation, groups, dtype) -> ConvDims:
    return ConvDims(x_shape, w_shape, padding=padding, dilation=dilation, groups=groups, dtype=dtype)
