"""Layer normalization on the cpu backend: the reference's vectorized numpy code
(:mod:`dnnbind.highlevel.reference.layer_norm`), one piece of code for both (no faster path exists:
every step is one numpy reduction or broadcast). The forward computes in float32 for float16 and
bfloat16 and in float64 for float32 and float64 (so that a large offset does not swamp a small
spread); it saves mean and rstd as MIOpen and torch do, in float32 but for float64 data (so that
frameworks such as JAX without x64 can hold them), and the backward computes in that dtype. Nothing
is saved under ``dnnbind.no_grad()``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.cpu._precision import HALF_DTYPES, cotangent
from dnnbind.highlevel.grad_mode import saving
from dnnbind.highlevel.reference.layer_norm import gradients, normalize, saved_specs
from dnnbind.highlevel.residual import ALL_NEEDED, ArraySpec


def compute_dtype(dtype: Any) -> np.dtype:
    """The forward's: float32 for float16 and bfloat16 data, float64 for float32 and float64."""
    return np.dtype(np.float32) if np.dtype(dtype) in HALF_DTYPES else np.dtype(np.float64)


def saved_dtype(dtype: Any) -> np.dtype:
    """The saved statistics' and the backward's: float64 for float64 data, float32 otherwise."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def layer_norm_forward(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, normalized_ndim: int,
                       eps: float) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    return normalize(x, weight, bias, normalized_ndim, eps, compute_dtype(x.dtype), saving(), saved_dtype(x.dtype))


def layer_norm_backward(saved: tuple, cotangents: tuple, normalized_ndim: int, eps: float, *,
                        needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    x = saved[0]
    return gradients(saved, cotangent("dy", cotangents[0], x.shape, x.dtype), normalized_ndim, needs)


def layer_norm_residuals(x: ArraySpec, weight: ArraySpec | None, bias: ArraySpec | None, normalized_ndim: int,
                         eps: float) -> tuple[ArraySpec, ...]:
    return saved_specs(x, weight, normalized_ndim, saved_dtype(x.dtype))
