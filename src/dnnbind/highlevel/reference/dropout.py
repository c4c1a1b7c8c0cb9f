"""Inverted dropout: keep each element with probability 1 - p and scale the kept ones by 1/(1 - p).

The mask comes from ``numpy.random.default_rng(seed)`` drawn in float32 whatever x's dtype, so a seed
gives the same mask for float16, float32 and float64 inputs. p = 1 is allowed and gives zeros (and zero
gradients), like PyTorch. The pullback keeps the boolean mask.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from dnnbind.highlevel.reference._precision import cotangent, half_in_float32


@half_in_float32
def dropout(x: np.ndarray, p: float, seed: Any = None) -> tuple[np.ndarray, Callable]:
    keep = np.random.default_rng(seed).random(x.shape, dtype=np.float32) >= p
    keep.flags.writeable = False
    scale = x.dtype.type(1.0 / (1.0 - p) if p < 1 else 0.0)
    y = np.multiply(x, keep)
    y *= scale

    def pullback(dy: np.ndarray) -> np.ndarray:
        dy = cotangent("dy", dy, y.shape, y.dtype)
        dx = np.multiply(dy, keep)
        dx *= scale
        return dx

    pullback.mask = keep  # type: ignore[attr-defined]  # read-only view for callers who need it
    return y, pullback
