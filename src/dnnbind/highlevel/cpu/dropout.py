"""Inverted dropout: keep each element with probability 1 - p and scale the kept ones by 1/(1 - p).

The mask is the reference backend's (:func:`dnnbind.highlevel.reference.pointwise.keep_mask`, one rule for
every numpy backend), so a seed gives the same mask on both and for every float dtype. p = 1 is allowed and
gives zeros (and zero gradients), like PyTorch. The residual is the boolean mask.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.cpu._precision import cotangent, half_backward, half_forward
from dnnbind.highlevel.reference.pointwise import dropout_scale, keep_mask
from dnnbind.highlevel.residual import ArraySpec


def _scale(p: float, dtype: np.dtype) -> Any:
    return dtype.type(dropout_scale(p))


@half_forward
def dropout_forward(x: np.ndarray, p: float, seed: Any = None) -> tuple[np.ndarray, tuple[np.ndarray]]:
    """y = x * mask / (1 - p); saves the boolean mask (read-only)."""
    keep = keep_mask(x.shape, p, seed)
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
