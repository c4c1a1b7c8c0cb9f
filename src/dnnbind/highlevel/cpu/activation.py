"""Pointwise activations and their derivatives.

The public op resolves ``alpha`` before calling here (see ``ACTIVATION_DEFAULTS`` in
``dnnbind.highlevel.ops``): elu's alpha, leaky_relu's negative slope, clipped_relu's ceiling and
swish's beta (swish(x) = x * sigmoid(beta * x)).
"""
from __future__ import annotations


import numpy as np

from dnnbind.highlevel.grad_mode import borrowing, own, saving
from dnnbind.highlevel.cpu import native
from dnnbind.highlevel.cpu._precision import cotangent, half_backward, half_forward, half_residuals
from dnnbind.highlevel.residual import ArraySpec
from dnnbind.highlevel.specs.activation import BACKWARD_READS


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow and with full relative precision for large negative x."""
    e = np.exp(-np.abs(x))
    out = np.where(x >= 0, 1, e)
    out /= 1 + e
    return out


#: modes whose derivative is saved as a boolean mask (1 where it is 1, else 0) where the forward's residuals
#: are its own: a quarter of the memory of the result it is read from otherwise
_MASKED = native.MASKED_ACTIVATIONS


def _apply(x: np.ndarray, mode: str, alpha: float | None) -> np.ndarray:
    """y = f(x) in numpy (the C kernels compute the same, in the same order of operations)."""
    if mode == "relu":      # as torch's: -0 stays -0
        return np.where(x < 0, 0, x)
    if mode == "sigmoid":
        return sigmoid(x)
    if mode == "tanh":
        return np.tanh(x)
    if mode == "elu":
        return np.where(x <= 0, alpha * np.expm1(np.minimum(x, 0)), x)
    if mode == "leaky_relu":
        return np.where(x > 0, x, (0.0 if alpha is None else float(alpha)) * x)
    if mode == "clipped_relu":
        return np.clip(x, 0, alpha)
    if mode == "swish":
        return x * sigmoid(alpha * x)
    raise ValueError(f"unknown activation mode {mode!r}")  # the public op checks first


def _slope(a: np.ndarray, mode: str, alpha: float | None) -> np.ndarray:
    """f' from what the mode's backward reads (:data:`BACKWARD_READS`: y for relu, sigmoid and tanh, else
    x): a bool mask for relu (the gradient passes unless x <= 0: a NaN passes it, as in torch) and
    clipped_relu (0 at NaN)."""
    if mode == "relu":
        return ~(a <= 0)
    if mode == "sigmoid":
        return a * (1 - a)
    if mode == "tanh":
        return 1 - a * a
    if mode == "elu":       # alpha e^x (not alpha (expm1(x) + 1), which cancels), NaN at NaN as in torch
        return np.where(a > 0, 1, alpha * np.exp(np.minimum(a, 0)))
    if mode == "leaky_relu":
        return np.where(a > 0, 1, 0.0 if alpha is None else float(alpha))
    if mode == "clipped_relu":
        return (a > 0) & (a < alpha)
    s = sigmoid(alpha * a)      # swish
    return s * (1 + alpha * a * (1 - s))


@half_forward
def activation_forward(x: np.ndarray, mode: str, alpha: float | None) -> tuple[np.ndarray, tuple]:
    """y = f(x) for one of the public modes; saves (see :func:`activation_residuals`) relu's and
    clipped_relu's bool mask, or where the caller lends its arrays (and for the other modes) the array
    the mode's backward reads, as torch's own function saves it (:data:`BACKWARD_READS`): y or x, the
    forward's own copy unless lent. Nothing inside dnnbind.no_grad(). The C kernels take one pass over
    memory (numpy several, on one core)."""
    if mode == "identity":
        return x.copy(), ()
    masked = saving() and mode in _MASKED and not borrowing()
    if mode in native.ACTIVATIONS and native.available(x.dtype):
        x = np.ascontiguousarray(x)
        y, mask = native.activation_forward(x, mode, alpha, masked)
    else:
        y = _apply(x, mode, alpha).astype(x.dtype, copy=False)
        mask = _slope(x, mode, alpha) if masked else None
    if not saving():
        return y, ()
    if mask is not None:
        return y, (mask,)
    return y, (own(y) if BACKWARD_READS[mode] == ("y",) else own(x),)


@half_backward
def activation_backward(saved: tuple, cotangents: tuple, mode: str, alpha: float | None) -> np.ndarray:
    """dx = dy * f'(x), f' from the saved mask or recomputed from the saved x or y."""
    (dy,) = cotangents
    if not saved:
        return cotangent("dy", dy, dy.shape, dy.dtype).copy()
    (a,) = saved
    masked = a.dtype == np.bool_
    dtype = dy.dtype if masked else a.dtype
    dy = cotangent("dy", dy, a.shape, dtype)
    if native.available(dtype) and a.flags.c_contiguous:
        if masked:
            return native.activation_backward(np.ascontiguousarray(dy), a)
        return native.activation_backward_from(np.ascontiguousarray(dy), a, mode, alpha)
    slope = a if masked else _slope(a, mode, alpha)
    if slope.dtype == np.bool_:     # dy where it passes, else 0: an inf or NaN dy there gives 0, as in torch
        return np.where(slope, dy, np.zeros((), dtype)).astype(dtype, copy=False)
    return np.multiply(dy, slope, dtype=dtype)


@half_residuals
def activation_residuals(x: ArraySpec, mode: str, alpha: float | None) -> tuple[ArraySpec, ...]:
    """Nothing for identity, a bool mask for relu and clipped_relu (unless lent their arrays), else x or
    y (see :func:`activation_forward`), in x's dtype."""
    if mode == "identity":
        return ()
    if mode in _MASKED and not borrowing():
        return (ArraySpec(tuple(x.shape), np.dtype(bool)),)
    return (ArraySpec(tuple(x.shape), x.dtype, ("y",) if BACKWARD_READS[mode] == ("y",) else ("x",)),)
