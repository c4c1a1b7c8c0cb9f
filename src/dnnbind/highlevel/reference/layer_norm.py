"""Layer normalization over the trailing ``normalized_ndim`` dims, as torch.nn.functional.layer_norm.

``y = (x - mean) * rstd * weight + bias`` with ``rstd = 1 / sqrt(var + eps)`` and the biased variance;
weight and bias (of shape ``normalized_shape``) are optional. The reference computes in float64; the
cpu backend runs the same code with its own dtypes (:mod:`dnnbind.highlevel.cpu.layer_norm`).
Saves ``(x, mean, rstd)`` plus ``weight`` when given (private copies, or x and weight themselves where
the caller lends them; mean and rstd of x's batch shape, in
float64 here). The gradients are computed in the dtype of the saved statistics, with array methods only,
so a GPU backend without a layer-norm backward (MIOpen) runs the same formulas on its CuPy residuals.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from dnnbind.highlevel.grad_mode import own
from dnnbind.highlevel.reference._arrays import F64, cotangent
from dnnbind.highlevel.residual import ALL_NEEDED, ArraySpec


def _expand(stat: Any, n: int) -> Any:
    """A per-slice statistic of x's batch shape, broadcastable against x."""
    return stat.reshape(stat.shape + (1,) * n)


def normalize(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, normalized_ndim: int,
              eps: float, work: np.dtype, save: bool = True,
              saved_dtype: Any = None) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The forward, computed in ``work``: y in x's dtype and the residuals (see the module doc), mean and
    rstd in ``saved_dtype`` (default ``work``); none when ``save`` is False (no backward can come: x is
    not copied)."""
    n = normalized_ndim
    axes, batch = tuple(range(x.ndim - n, x.ndim)), x.shape[:x.ndim - n]
    xc = x.astype(work)
    with np.errstate(invalid="ignore", divide="ignore"):     # eps = 0 on a constant slice: NaN, as torch
        mean = xc.mean(axis=axes, keepdims=True)
        centered = xc - mean
        rstd = 1.0 / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + work.type(eps))
        y = centered * rstd
    if weight is not None:
        y *= weight.astype(work)
    if bias is not None:
        y += bias.astype(work)
    if not save:
        return y.astype(x.dtype), ()
    stat = work if saved_dtype is None else np.dtype(saved_dtype)
    saved = (own(x), mean.reshape(batch).astype(stat, copy=False), rstd.reshape(batch).astype(stat, copy=False))
    return y.astype(x.dtype), saved + (() if weight is None else (own(weight),))


def gradients(saved: tuple, dy: Any, normalized_ndim: int,
              needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    """(dx, dweight, dbias) for a checked ``dy`` of x's shape and dtype, None where ``needs`` is False::

        dweight = sum over the batch of dy * xhat,   dbias = sum over the batch of dy,
        dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),   g = dy * weight,
        means over the normalized dims, xhat = (x - mean) * rstd.
    """
    x, mean, rstd = saved[:3]
    weight = saved[3] if len(saved) > 3 else None
    n, work, dtype = normalized_ndim, mean.dtype, x.dtype
    axes, batch_axes = tuple(range(x.ndim - n, x.ndim)), tuple(range(x.ndim - n))
    xhat = (x.astype(work) - _expand(mean, n)) * _expand(rstd, n)
    g = dy.astype(work)
    dweight = (g * xhat).sum(axis=batch_axes).astype(dtype) if needs[1] else None
    dbias = g.sum(axis=batch_axes).astype(dtype) if needs[2] else None
    dx = None
    if needs[0]:
        if weight is not None:
            g = g * weight.astype(work)
        count = math.prod(x.shape[x.ndim - n:])
        g_mean = g.sum(axis=axes, keepdims=True) / count
        projection = (g * xhat).sum(axis=axes, keepdims=True) / count
        dx = ((g - g_mean - xhat * projection) * _expand(rstd, n)).astype(dtype)
    return dx, dweight, dbias


def saved_specs(x: ArraySpec, weight: ArraySpec | None, normalized_ndim: int, work: Any) -> tuple[ArraySpec, ...]:
    """What :func:`normalize` saves for arrays of these shapes and dtypes, computed without running."""
    shape = tuple(x.shape)
    stat = ArraySpec(shape[:len(shape) - normalized_ndim], np.dtype(work))
    saved = (ArraySpec(shape, x.dtype, ("x",)), stat, stat)
    return saved + (() if weight is None else (ArraySpec(tuple(weight.shape), weight.dtype, ("weight",)),))


def layer_norm_forward(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, normalized_ndim: int,
                       eps: float) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    return normalize(x, weight, bias, normalized_ndim, eps, F64)


def layer_norm_backward(saved: tuple, cotangents: tuple, normalized_ndim: int, eps: float, *,
                        needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    x = saved[0]
    return gradients(saved, cotangent("dy", cotangents[0], x.shape, x.dtype), normalized_ndim, needs)


def layer_norm_residuals(x: ArraySpec, weight: ArraySpec | None, bias: ArraySpec | None, normalized_ndim: int,
                         eps: float) -> tuple[ArraySpec, ...]:
    return saved_specs(x, weight, normalized_ndim, F64)
