"""Inverted dropout: keep each element with probability 1 - p and scale the kept ones by 1/(1 - p).

The mask comes from ``numpy.random.default_rng(seed)`` drawn in float32 whatever x's dtype, so a seed
gives the same mask for float16, float32 and float64 inputs. p = 1 is allowed and gives zeros (and zero
gradients), like PyTorch. The residual is the boolean mask.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.cpu._precision import cotangent, half_backward, half_forward
from dnnbind.highlevel.residual import ArraySpec


def _scale(p: float, dtype: np.dtype) -> Any:
    return dtype.type(1.0 / (1.0 - p) if p < 1 else 0.0)


@half_forward
def dropout_forward(x: np.ndarray, p: float, seed: Any = None) -> tuple[np.ndarray, tuple[np.ndarray]]:
    """y = x * mask / (1 - p); saves the boolean mask (read-only)."""
    keep = np.random.default_rng(seed).random(x.shape, dtype=np.float32) >= p
    keep.flags.writeable = False
    y = np.multiply(x, keep)
    y *= _scale(p, x.dtype)
    return y, (keep,)


@half_backward
def dropout_backward(saved: tuple, cotangents: tuple, p: float, seed: Any = None) -> np.ndarray:
    (keep,), (dy,) = saved, cotangents
    dx = np.multiply(cotangent("dy", dy, keep.shape, dy.dtype), keep)
    dx *= _scale(p, dx.dtype)
    return dx


def dropout_residuals(x: Any, p: float, seed: Any = None) -> tuple[ArraySpec]:
    """The mask: bool, x's shape."""
    return (ArraySpec(tuple(x.shape), np.dtype(bool)),)
