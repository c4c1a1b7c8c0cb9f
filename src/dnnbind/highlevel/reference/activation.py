"""Pointwise activations and their derivatives.

The public op resolves ``alpha`` before calling here (see ``ACTIVATION_DEFAULTS`` in
``dnnbind.highlevel.ops``): elu's alpha, leaky_relu's negative slope, clipped_relu's ceiling and
swish's beta (swish(x) = x * sigmoid(beta * x)).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from dnnbind.highlevel.reference._precision import cotangent, half_in_float32


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow and with full relative precision for large negative x."""
    e = np.exp(-np.abs(x))
    out = np.where(x >= 0, 1, e)
    out /= 1 + e
    return out


def _forward(x: np.ndarray, mode: str, alpha: float | None) -> tuple[np.ndarray, Callable]:
    """Return y and a function dy -> dx. The function keeps only arrays computed here (the derivative
    or a mask), never x or y themselves: changing either after the forward does not change it."""
    if mode == "identity":
        return x.copy(), lambda dy: dy.copy()
    if mode == "relu":
        pos = x > 0
        return np.maximum(x, 0), lambda dy: dy * pos
    if mode == "sigmoid":
        y = sigmoid(x)
        slope = y * (1 - y)
        return y, lambda dy: dy * slope
    if mode == "tanh":
        y = np.tanh(x)
        slope = 1 - y * y
        return y, lambda dy: dy * slope
    if mode == "elu":
        neg = x <= 0
        em1 = np.expm1(np.minimum(x, 0))
        y = np.where(neg, alpha * em1, x)
        return y, lambda dy: dy * np.where(neg, alpha * (em1 + 1), 1)
    if mode == "leaky_relu":
        pos = x > 0
        negative_slope = float(alpha or 0.0)
        return (np.where(pos, x, negative_slope * x),
                lambda dy: dy * np.where(pos, 1, negative_slope).astype(x.dtype))
    if mode == "clipped_relu":
        inside = (x > 0) & (x < alpha)
        return np.clip(x, 0, alpha), lambda dy: dy * inside
    if mode == "swish":
        s = sigmoid(alpha * x)
        slope = s * (1 + alpha * x * (1 - s))
        return x * s, lambda dy: dy * slope
    raise ValueError(f"unknown activation mode {mode!r}")  # the public op checks first


@half_in_float32
def activation(x: np.ndarray, mode: str, alpha: float | None) -> tuple[np.ndarray, Callable]:
    """y = f(x) for one of the public modes; the pullback returns dy * f'(x)."""
    y, derivative = _forward(x, mode, alpha)
    y = y.astype(x.dtype, copy=False)

    def pullback(dy: np.ndarray) -> np.ndarray:
        dy = cotangent("dy", dy, y.shape, y.dtype)
        return derivative(dy).astype(y.dtype, copy=False)

    return y, pullback
