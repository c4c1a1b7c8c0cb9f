"""Softmax and log-softmax along one axis, numerically stable (the maximum is subtracted first).

Both save their result y only (a copy of it: the caller's y may change after the forward; none inside
dnnbind.no_grad()). Where the C kernels are built they compute both (csrc/softmax.c: three passes over
each line, sums in float64), else numpy."""
from __future__ import annotations

import numpy as np

from dnnbind.highlevel.grad_mode import own, saving
from dnnbind.highlevel.cpu import native
from dnnbind.highlevel.cpu._precision import cotangent, half_backward, half_forward, half_residuals
from dnnbind.highlevel.residual import ArraySpec


@half_forward
def softmax_forward(x: np.ndarray, axis: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """y = exp(x) / sum(exp(x)) along ``axis``."""
    if native.available(x.dtype):
        return _saved(native.softmax_forward(np.ascontiguousarray(x), axis, False))
    y = x - x.max(axis=axis, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=axis, keepdims=True)
    return _saved(y)


@half_backward
def softmax_backward(saved: tuple, cotangents: tuple, axis: int) -> np.ndarray:
    (y,), (dy,) = saved, cotangents
    dy = cotangent("dy", dy, y.shape, y.dtype)
    if native.available(y.dtype):
        return native.softmax_backward(y, np.ascontiguousarray(dy), axis, False)
    dx = dy * y
    dx -= y * dx.sum(axis=axis, keepdims=True)
    return dx


@half_forward
def logsoftmax_forward(x: np.ndarray, axis: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """y = x - log(sum(exp(x))) along ``axis``."""
    if native.available(x.dtype):
        return _saved(native.softmax_forward(np.ascontiguousarray(x), axis, True))
    shifted = x - x.max(axis=axis, keepdims=True)
    y = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return _saved(y)


@half_backward
def logsoftmax_backward(saved: tuple, cotangents: tuple, axis: int) -> np.ndarray:
    (y,), (dy,) = saved, cotangents
    dy = cotangent("dy", dy, y.shape, y.dtype)
    if native.available(y.dtype):
        return native.softmax_backward(y, np.ascontiguousarray(dy), axis, True)
    return dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)


def _saved(y: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """(y, its private copy for the backward, or y itself where the caller lends its result), or (y, ())
    inside dnnbind.no_grad()."""
    return (y, (own(y),)) if saving() else (y, ())


@half_residuals
def softmax_residuals(x: ArraySpec, axis: int) -> tuple[ArraySpec]:
    """y, in x's dtype."""
    return (ArraySpec(tuple(x.shape), x.dtype, ("y",)),)


logsoftmax_residuals = softmax_residuals
