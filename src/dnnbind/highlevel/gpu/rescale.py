"""Mean pooling that excludes padding, when part of the padding is explicit.

The libraries pad symmetrically, so asymmetric padding pads x explicitly by the rest (see
:mod:`dnnbind.highlevel.gpu.geometry`). A mean that excludes padding then counts the explicit padding
as data: its divisor is too large near the padded edges. The fix is a separable factor per output
position, (the library's count / the true count), applied to the output and to the gradient before
the library's backward pass.
"""
from __future__ import annotations

import numpy as np

from dnnbind.highlevel.dims import PoolDims
from dnnbind.highlevel.gpu.geometry import PoolGeometry, padded_shape, window_counts


def exclude_pad_factor(dims: PoolDims, g: PoolGeometry) -> np.ndarray | None:
    """The factor of shape (1, 1, *out) in float64, or None when no padding is explicit."""
    if not g.explicit_padding:
        return None
    padded = padded_shape(dims.x_shape, g.extra_low, g.extra_high)[2:]
    symmetric = g.padding[-dims.spatial_rank:]
    theirs = window_counts(padded, dims.window, dims.stride, symmetric, dims.out_size)
    true = window_counts(dims.x_shape[2:], dims.window, dims.stride, dims.pad_low, dims.out_size)
    factor = np.ones((1, 1) + (1,) * dims.spatial_rank)
    for axis, (a, t) in enumerate(zip(theirs, true)):
        shape = [1] * factor.ndim
        shape[2 + axis] = len(a)
        factor = factor * (np.array(a, float) / np.array(t, float)).reshape(shape)
    return factor
