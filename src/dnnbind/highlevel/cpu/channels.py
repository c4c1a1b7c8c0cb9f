"""Sums over every axis but the channels (axis 1) and per-channel biases, for every cpu op that
needs them (batch norm, convolution biases): dnnbind's C kernels where they are built (one pass,
summed in float64), numpy otherwise."""
from __future__ import annotations

import numpy as np

from dnnbind.highlevel.cpu import native


#: Per-channel passes (these sums, batch norm) run on numpy below this many elements, where its passes
#: cost less than the C kernels' launches and their per-row parameter spreads (measured, 2-core EPYC,
#: batch norm forward under no_grad: x(2, 3, 4, 4) 14 us against 29, x(32, 64) 17 against 22, but
#: x(8, 16, 8, 8) 26 against 20).
NATIVE_MIN_ELEMENTS = 4096


def native_runs(a: np.ndarray) -> bool:
    """Whether the C kernels take a per-channel pass over ``a``: built for its dtype, ``a`` big enough."""
    return a.size >= NATIVE_MIN_ELEMENTS and native.available(a.dtype)


def channel_sums(a: np.ndarray) -> np.ndarray:
    """The sum of ``a`` over every axis but 1, summed in float64 (as the kernels sum), in a's dtype."""
    if native_runs(a):
        return native.channel_sums(np.ascontiguousarray(a))[0].astype(a.dtype)
    # contiguous reductions first
    return a.reshape(a.shape[0], a.shape[1], -1).sum(axis=2, dtype=np.float64).sum(axis=0).astype(a.dtype)


def add_channel_bias(y: np.ndarray, b: np.ndarray) -> None:
    """y += b[c] along axis 1, in place (y is C-contiguous, as every op's fresh result is); the same
    one rounding per element either way, by numpy below :data:`NATIVE_BIAS_MIN` elements (the
    kernel's call costs about 4 us, numpy's 0.7 us plus a quarter of a nanosecond per element)."""
    if y.size >= NATIVE_BIAS_MIN and native.available(y.dtype) and y.flags.c_contiguous:
        native.channel_affine(y, None, np.ascontiguousarray(b, dtype=y.dtype), out=y)
    else:
        y += b.reshape((1, -1) + (1,) * (y.ndim - 2))


NATIVE_BIAS_MIN = 1 << 14
