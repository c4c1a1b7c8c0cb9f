"""Sums over every axis but the channels (axis 1) and per-channel biases, for every reference op that
needs them (batch norm, convolution biases): dnnbind's C kernels where they are built (one pass,
summed in float64), numpy otherwise."""
from __future__ import annotations

import numpy as np

from dnnbind.highlevel.reference import native


def channel_sums(a: np.ndarray) -> np.ndarray:
    """The sum of ``a`` over every axis but 1, in a's dtype."""
    if native.available(a.dtype):
        return native.channel_sums(np.ascontiguousarray(a))[0].astype(a.dtype)
    return a.reshape(a.shape[0], a.shape[1], -1).sum(axis=2).sum(axis=0)   # contiguous reductions first


def add_channel_bias(y: np.ndarray, b: np.ndarray) -> None:
    """y += b[c] along axis 1, in place (y is C-contiguous, as every op's fresh result is); the same
    one rounding per element either way, by numpy below :data:`NATIVE_BIAS_MIN` elements (the
    kernel's call costs about 4 us, numpy's 0.7 us plus a quarter of a nanosecond per element)."""
    if y.size >= NATIVE_BIAS_MIN and native.available(y.dtype) and y.flags.c_contiguous:
        native.channel_affine(y, None, np.ascontiguousarray(b, dtype=y.dtype), out=y)
    else:
        y += b.reshape((1, -1) + (1,) * (y.ndim - 2))


NATIVE_BIAS_MIN = 1 << 14
