"""Softmax and log-softmax along one axis, numerically stable (the maximum is subtracted first)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from dnnbind.highlevel.reference._precision import cotangent, half_in_float32

# The pullbacks keep y; the caller gets a copy, so changing the returned y leaves the pullback alone.


@half_in_float32
def softmax(x: np.ndarray, axis: int) -> tuple[np.ndarray, Callable]:
    """y = exp(x) / sum(exp(x)) along ``axis``; the pullback keeps y only."""
    y = x - x.max(axis=axis, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=axis, keepdims=True)

    def pullback(dy: np.ndarray) -> np.ndarray:
        dy = cotangent("dy", dy, y.shape, y.dtype)
        dx = dy * y
        dx -= y * dx.sum(axis=axis, keepdims=True)
        return dx

    return y.copy(), pullback


@half_in_float32
def logsoftmax(x: np.ndarray, axis: int) -> tuple[np.ndarray, Callable]:
    """y = x - log(sum(exp(x))) along ``axis``; the pullback keeps y only."""
    shifted = x - x.max(axis=axis, keepdims=True)
    y = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))

    def pullback(dy: np.ndarray) -> np.ndarray:
        dy = cotangent("dy", dy, y.shape, y.dtype)
        return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)

    return y.copy(), pullback
