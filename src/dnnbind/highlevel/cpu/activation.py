"""Pointwise activations and their derivatives.

The public op resolves ``alpha`` before calling here (see ``ACTIVATION_DEFAULTS`` in
``dnnbind.highlevel.ops``): elu's alpha, leaky_relu's negative slope, clipped_relu's ceiling and
swish's beta (swish(x) = x * sigmoid(beta * x)).
"""
from __future__ import annotations


import numpy as np

from dnnbind.highlevel.grad_mode import saving
from dnnbind.highlevel.cpu import native
from dnnbind.highlevel.cpu._precision import cotangent, half_backward, half_forward, half_residuals
from dnnbind.highlevel.residual import ArraySpec


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow and with full relative precision for large negative x."""
    e = np.exp(-np.abs(x))
    out = np.where(x >= 0, 1, e)
    out /= 1 + e
    return out


#: modes whose derivative is saved as a boolean mask (1 where it is 1, else 0); identity saves nothing
_MASKED = native.MASKED_ACTIVATIONS


def _forward(x: np.ndarray, mode: str, alpha: float | None) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """y and the derivative f'(x) (a mask for relu and clipped_relu, nothing for identity). Only arrays
    computed here are saved, never x or y themselves."""
    if mode == "identity":
        return x.copy(), ()
    # relu as torch's: -0 stays -0, and the gradient passes unless x <= 0 (a NaN passes it)
    if mode == "relu":
        return np.where(x < 0, 0, x), (~(x <= 0),)
    if mode == "sigmoid":
        y = sigmoid(x)
        return y, (y * (1 - y),)
    if mode == "tanh":
        y = np.tanh(x)
        return y, (1 - y * y,)
    if mode == "elu":
        neg = x <= 0
        em1 = np.expm1(np.minimum(x, 0))
        return np.where(neg, alpha * em1, x), (np.where(neg, alpha * (em1 + 1), 1),)
    if mode == "leaky_relu":
        pos = x > 0
        negative_slope = 0.0 if alpha is None else float(alpha)
        return np.where(pos, x, negative_slope * x), (np.where(pos, 1, negative_slope),)
    if mode == "clipped_relu":
        return np.clip(x, 0, alpha), ((x > 0) & (x < alpha),)
    if mode == "swish":
        s = sigmoid(alpha * x)
        return x * s, (s * (1 + alpha * x * (1 - s)),)
    raise ValueError(f"unknown activation mode {mode!r}")  # the public op checks first


@half_forward
def activation_forward(x: np.ndarray, mode: str, alpha: float | None) -> tuple[np.ndarray, tuple]:
    """y = f(x) for one of the public modes; saves f'(x) (see :func:`activation_residuals`), except
    inside dnnbind.no_grad(). The C kernels take one pass over memory (numpy several, on one core)."""
    if mode in native.ACTIVATIONS and native.available(x.dtype):
        y, slope = native.activation_forward(np.ascontiguousarray(x), mode, alpha, saving())
        return y, () if slope is None else (slope,)
    y, saved = _forward(x, mode, alpha)
    return y.astype(x.dtype, copy=False), tuple(s.astype(x.dtype if mode not in _MASKED else bool, copy=False)
                                                for s in saved)


@half_backward
def activation_backward(saved: tuple, cotangents: tuple, mode: str, alpha: float | None) -> np.ndarray:
    """dx = dy * f'(x)."""
    (dy,) = cotangents
    if not saved:
        return cotangent("dy", dy, dy.shape, dy.dtype).copy()
    (slope,) = saved
    dtype = slope.dtype if mode not in _MASKED else dy.dtype
    dy = cotangent("dy", dy, slope.shape, dtype)
    if native.available(dtype) and slope.flags.c_contiguous:
        return native.activation_backward(np.ascontiguousarray(dy), slope)
    return np.multiply(dy, slope, dtype=dtype)


@half_residuals
def activation_residuals(x: ArraySpec, mode: str, alpha: float | None) -> tuple[ArraySpec, ...]:
    """Nothing for identity, a bool mask for relu and clipped_relu, else f'(x) in x's dtype."""
    if mode == "identity":
        return ()
    return (ArraySpec(tuple(x.shape), np.dtype(bool) if mode in _MASKED else x.dtype),)
