"""Mean pooling's divisor where the library's differs from PyTorch's, because part of the padding is explicit,
or because the caller overrides the divisor.

The libraries pad symmetrically, so asymmetric padding, and ``ceil_mode``'s extra high-side padding
(:attr:`PoolDims.ceil_extra`), pad x explicitly by the rest (see :mod:`dnnbind.highlevel.gpu.geometry`).
The library then counts the explicit padding as data: a mean that excludes padding divides by too much
near the padded edges, and one that includes padding divides every window by the whole window, where
PyTorch leaves ``ceil_mode``'s extra padding out. The libraries have no ``divisor_override`` at all: the
backends run the mean that includes padding (every window divided by the whole window, see
:func:`library_includes_pad`) and replace that divisor. The fix is a separable factor per output position,
(the library's count / the true divisor, :meth:`PoolDims.mean_divisor`), applied to the output and to the
gradient before the library's backward pass.
"""
from __future__ import annotations

import numpy as np

from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.gpu.geometry import PoolGeometry, padded_shape, window_counts


def library_includes_pad(count_include_pad: bool, divisor_override: int | None = None) -> bool:
    """Which of the library's means a backend runs: the one that includes padding for ``count_include_pad``
    and for every ``divisor_override`` (whose rescale then replaces one constant, the whole window)."""
    return bool(count_include_pad) or divisor_override is not None


def library_counts(dims: PoolDims, g: PoolGeometry, count_include_pad: bool) -> list[list[int]]:
    """Per spatial dim, what the library divides each output position by (separable like the true count):
    the whole window when it includes padding (no window of the geometry runs past its padding), else
    the part inside the explicitly padded x."""
    if count_include_pad:
        return [[k] * o for k, o in zip(dims.window, dims.out_size)]
    padded = padded_shape(dims.x_shape, g.extra_low, g.extra_high)[2:]
    symmetric = g.padding[-dims.spatial_rank:]
    return window_counts(padded, dims.window, dims.stride, symmetric, dims.out_size)


def mean_rescale_factor(dims: PoolDims, g: PoolGeometry, count_include_pad: bool,
                        divisor_override: int | None = None) -> np.ndarray | None:
    """The factor of shape (1, 1, *out) in float64, or None where the library's divisor is already right.

    The library runs the mean :func:`library_includes_pad` picks; the true divisor is
    :meth:`PoolDims.mean_divisor` (a constant for a ``divisor_override``, which may be negative)."""
    theirs = library_counts(dims, g, library_includes_pad(count_include_pad, divisor_override))
    true, constant = dims.mean_divisor(count_include_pad, divisor_override)
    if constant == 1 and all(list(a) == list(t) for a, t in zip(theirs, true)):
        return None
    factor = np.full((1, 1) + (1,) * dims.spatial_rank, 1.0 / constant)
    for axis, (a, t) in enumerate(zip(theirs, true)):
        shape = [1] * factor.ndim
        shape[2 + axis] = len(a)
        factor = factor * (np.array(a, float) / np.array(t, float)).reshape(shape)
    return factor
