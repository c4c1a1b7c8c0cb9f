"""Activations, softmax, log-softmax and dropout, in float64.

Activations follow PyTorch at the kinks: relu keeps -0 and passes the gradient unless x <= 0 (a NaN passes
it); elu's derivative at 0 is alpha; leaky_relu's at 0 is its slope; clipped_relu's is 0 at 0, at the
ceiling and at NaN (where torch's hardtanh backward gives 1 or 0 by dtype and size); swish(x) = x * sigmoid(beta * x). alpha arrives resolved (``ops.ACTIVATION_DEFAULTS``).
Each saves f'(x) (none for identity). Softmax and log-softmax save y.

Dropout keeps each element with probability 1 - p and scales the kept ones by 1 / (1 - p) (p = 1: zeros);
:func:`keep_mask` draws the mask, the one rule every numpy backend uses, so a seed gives the same mask
on each of them and for every float dtype.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.reference._arrays import F64, as64, cast, cotangent
from dnnbind.highlevel.residual import ArraySpec
from dnnbind.highlevel.specs.activation import STEP_MODES


def sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):          # exp(-x) = inf for very negative x: the result is 0
        return 1.0 / (1.0 + np.exp(-x))


def _activation(x: np.ndarray, mode: str, alpha: float | None) -> tuple[np.ndarray, np.ndarray | None]:
    """(f(x), f'(x)) in float64; f'(x) None for identity."""
    if mode == "identity":
        return x.copy(), None
    if mode == "relu":
        return np.where(x < 0, 0.0, x), np.where(x <= 0, 0.0, 1.0)
    if mode == "sigmoid":
        y = sigmoid(x)
        return y, y * (1 - y)
    if mode == "tanh":
        y = np.tanh(x)
        return y, 1 - y * y
    if mode == "elu":
        negative = np.where(x <= 0, x, 0.0)             # elu(-0) = -0, as in torch
        # f' = alpha e^x, not alpha (expm1(x) + 1), which cancels; NaN at NaN, as torch's vectorized loop
        return np.where(x <= 0, alpha * np.expm1(negative), x), np.where(x > 0, 1.0, alpha * np.exp(negative))
    if mode == "leaky_relu":
        slope = 0.0 if alpha is None else float(alpha)
        return np.where(x > 0, x, slope * x), np.where(x > 0, 1.0, slope)
    if mode == "clipped_relu":
        return np.clip(x, 0, alpha), np.where((x > 0) & (x < alpha), 1.0, 0.0)
    if mode == "swish":
        s = sigmoid(alpha * x)
        return x * s, s * (1 + alpha * x * (1 - s))
    raise ValueError(f"unknown activation mode {mode!r}")    # the public op checks first


def activation_forward(x: np.ndarray, mode: str, alpha: float | None) -> tuple[np.ndarray, tuple]:
    y, slope = _activation(as64(x), mode, alpha)
    return cast(y, x.dtype), () if slope is None else (slope,)


def activation_backward(saved: tuple, cotangents: tuple, mode: str, alpha: float | None) -> np.ndarray:
    """dx = dy * f'(x); relu's and clipped_relu's f' selects (dy where it is 1, else 0: an inf or NaN dy
    there gives 0, as torch's threshold and hardtanh backwards)."""
    (dy,) = cotangents
    shape = saved[0].shape if saved else getattr(dy, "shape", ())
    d = cotangent("dy", dy, shape, F64)
    if not saved:
        return cast(d, dy.dtype)
    if mode in STEP_MODES:
        return cast(np.where(saved[0] == 0, 0.0, d), dy.dtype)
    return cast(d * saved[0], dy.dtype)


def activation_residuals(x: ArraySpec, mode: str, alpha: float | None) -> tuple[ArraySpec, ...]:
    return () if mode == "identity" else (ArraySpec(tuple(x.shape), F64),)


def softmax_forward(x: np.ndarray, axis: int) -> tuple[np.ndarray, tuple]:
    """y = exp(x - max) / sum(exp(x - max)) along ``axis``."""
    e = np.exp(as64(x) - np.max(as64(x), axis=axis, keepdims=True))
    y = e / e.sum(axis=axis, keepdims=True)
    return cast(y, x.dtype), (y,)


def softmax_backward(saved: tuple, cotangents: tuple, axis: int) -> np.ndarray:
    """dx = y * (dy - sum(dy * y))."""
    (y,), (dy,) = saved, cotangents
    d = cotangent("dy", dy, y.shape, F64)
    return cast(y * (d - (d * y).sum(axis=axis, keepdims=True)), dy.dtype)


def logsoftmax_forward(x: np.ndarray, axis: int) -> tuple[np.ndarray, tuple]:
    """y = x - max - log(sum(exp(x - max))) along ``axis``."""
    shifted = as64(x) - np.max(as64(x), axis=axis, keepdims=True)
    y = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    return cast(y, x.dtype), (y,)


def logsoftmax_backward(saved: tuple, cotangents: tuple, axis: int) -> np.ndarray:
    """dx = dy - exp(y) * sum(dy)."""
    (y,), (dy,) = saved, cotangents
    d = cotangent("dy", dy, y.shape, F64)
    return cast(d - np.exp(y) * d.sum(axis=axis, keepdims=True), dy.dtype)


def softmax_residuals(x: ArraySpec, axis: int) -> tuple[ArraySpec]:
    return (ArraySpec(tuple(x.shape), F64),)


logsoftmax_residuals = softmax_residuals


def keep_mask(shape: tuple[int, ...], p: float, seed: Any) -> np.ndarray:
    """Dropout's mask (True: kept), read-only: ``numpy.random.default_rng(seed)`` drawn in float32 whatever
    the data's dtype, an element kept where its draw is >= p."""
    keep = np.random.default_rng(seed).random(shape, dtype=np.float32) >= p
    keep.flags.writeable = False
    return keep


def dropout_scale(p: float) -> float:
    """What a kept element is multiplied by: 1 / (1 - p), and 0 for p = 1."""
    return 1.0 / (1.0 - p) if p < 1 else 0.0


def dropout_forward(x: np.ndarray, p: float, seed: Any = None) -> tuple[np.ndarray, tuple[np.ndarray]]:
    keep = keep_mask(x.shape, p, seed)
    return cast(as64(x) * keep * dropout_scale(p), x.dtype), (keep,)


def dropout_backward(saved: tuple, cotangents: tuple, p: float, seed: Any = None) -> np.ndarray:
    (keep,), (dy,) = saved, cotangents
    return cast(cotangent("dy", dy, keep.shape, F64) * keep * dropout_scale(p), dy.dtype)


def dropout_residuals(x: Any, p: float, seed: Any = None) -> tuple[ArraySpec]:
    return (ArraySpec(tuple(x.shape), np.dtype(bool)),)
