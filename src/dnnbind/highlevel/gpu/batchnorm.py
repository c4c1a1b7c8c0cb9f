"""Batch-norm pieces that no library call provides, shared by the GPU backends.

The libraries' backward passes differentiate the *training* formula (batch statistics depend on x);
inference normalises with fixed running statistics, so its pullback is the gradient of an affine map,
computed here with CuPy. Running statistics of a dtype or memory layout the library cannot update in
place are updated through a copy and written back.
"""
from __future__ import annotations

from typing import Any


def as_param(cp: Any, a: Any, dtype: str) -> Any:
    """A contiguous array of ``dtype`` with a's values: a itself when it already is one."""
    return a if a.dtype == dtype and a.flags.c_contiguous else cp.ascontiguousarray(a, dtype=dtype)


def write_back(running: Any, updated: Any) -> None:
    """Copy ``updated`` into the caller's ``running`` statistics (in place, in running's dtype)
    unless the library updated ``running`` itself."""
    if running is not None and updated is not running:
        running[...] = updated


def affine_pullback(cp: Any, x: Any, dy: Any, scale: Any, mean: Any, invstd: Any,
                    dtype: str) -> tuple[Any, Any, Any]:
    """Gradients (dx, dgamma, dbeta) of y = (x - mean) * invstd * scale + bias, mean and invstd fixed,
    computed in ``dtype`` (the parameters' dtype)."""
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    axes = (0,) + tuple(range(2, x.ndim))
    dyp = dy.astype(dtype, copy=False)
    xhat = (x.astype(dtype, copy=False) - mean.reshape(shape)) * invstd.reshape(shape)
    dbeta = dyp.sum(axis=axes)
    dgamma = (dyp * xhat).sum(axis=axes)
    dx = dyp * (scale * invstd).reshape(shape)
    return dx, dgamma, dbeta
