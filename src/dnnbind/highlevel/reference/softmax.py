"""Softmax and log-softmax along one axis, numerically stable (the maximum is subtracted first).

Both save their result y only (a copy of it: the caller's y may change after the forward)."""
from __future__ import annotations

import numpy as np

from dnnbind.highlevel.reference._precision import cotangent, half_backward, half_forward, half_residuals
from dnnbind.highlevel.residual import ArraySpec


@half_forward
def softmax_forward(x: np.ndarray, axis: int) -> tuple[np.ndarray, tuple[np.ndarray]]:
    """y = exp(x) / sum(exp(x)) along ``axis``."""
    y = x - x.max(axis=axis, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=axis, keepdims=True)
    return y.copy(), (y,)


@half_backward
def softmax_backward(saved: tuple, cotangents: tuple, axis: int) -> np.ndarray:
    (y,), (dy,) = saved, cotangents
    dx = cotangent("dy", dy, y.shape, y.dtype) * y
    dx -= y * dx.sum(axis=axis, keepdims=True)
    return dx


@half_forward
def logsoftmax_forward(x: np.ndarray, axis: int) -> tuple[np.ndarray, tuple[np.ndarray]]:
    """y = x - log(sum(exp(x))) along ``axis``."""
    shifted = x - x.max(axis=axis, keepdims=True)
    y = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return y.copy(), (y,)


@half_backward
def logsoftmax_backward(saved: tuple, cotangents: tuple, axis: int) -> np.ndarray:
    (y,), (dy,) = saved, cotangents
    dy = cotangent("dy", dy, y.shape, y.dtype)
    return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)


@half_residuals
def softmax_residuals(x: ArraySpec, axis: int) -> tuple[ArraySpec]:
    """y, in x's dtype."""
    return (ArraySpec(tuple(x.shape), x.dtype),)


logsoftmax_residuals = softmax_residuals
