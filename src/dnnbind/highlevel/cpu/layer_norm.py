"""Layer normalization on the cpu backend: the reference's vectorized numpy code
(:mod:`dnnbind.highlevel.reference.layer_norm`), computed in float32 for float16 and bfloat16 (float64
for float32 and float64, so that a large offset does not swamp a small spread), and saving nothing
under ``dnnbind.no_grad()``. No faster path exists: every step is one numpy reduction or broadcast.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.cpu._precision import HALF_DTYPES, cotangent
from dnnbind.highlevel.grad_mode import saving
from dnnbind.highlevel.reference.layer_norm import gradients, normalize, saved_specs
from dnnbind.highlevel.residual import ALL_NEEDED, ArraySpec


def compute_dtype(dtype: Any) -> np.dtype:
    """float32 for float16 and bfloat16 data, float64 for float32 and float64."""
    return np.dtype(np.float32) if np.dtype(dtype) in HALF_DTYPES else np.dtype(np.float64)


def layer_norm_forward(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, normalized_ndim: int,
                       eps: float) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    return normalize(x, weight, bias, normalized_ndim, eps, compute_dtype(x.dtype), saving())


def layer_norm_backward(saved: tuple, cotangents: tuple, normalized_ndim: int, eps: float, *,
                        needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    x = saved[0]
    return gradients(saved, cotangent("dy", cotangents[0], x.shape, x.dtype), normalized_ndim, needs)


def layer_norm_residuals(x: ArraySpec, weight: ArraySpec | None, bias: ArraySpec | None, normalized_ndim: int,
                         eps: float) -> tuple[ArraySpec, ...]:
    return saved_specs(x, weight, normalized_ndim, compute_dtype(x.dtype))
