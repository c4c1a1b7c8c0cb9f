"""What every reference op does with its arrays: compute in float64, hand results back in the caller's dtype.

float64 holds float16, bfloat16 and float32 values exactly, so an op computed on float64 copies and rounded
once at the end is the most accurate answer the output dtype can hold; the copies are also the forward's
own residuals (changing the caller's arrays later changes nothing).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from dnnbind.highlevel.dims.checks import check_dtype, check_shape

F64 = np.dtype(np.float64)


def as64(a: Any) -> Any:
    """A float64 copy of ``a`` (always a new array), or None for None."""
    return None if a is None else np.array(a, dtype=F64)


def cast(a: Any, dtype: Any) -> Any:
    """``a`` in ``dtype`` (None stays None)."""
    return None if a is None else np.asarray(a).astype(dtype)


def cotangent(name: str, value: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Check a pullback argument (an array of the forward result's shape) and return it in ``dtype``."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, not {type(value).__name__}")
    check_dtype(name, value.dtype)
    check_shape(name, value.shape, shape, "the shape of the forward result")
    return value.astype(dtype, copy=False)


def channel_sum(a: np.ndarray) -> np.ndarray:
    """The sum of ``a`` over every axis but 1 (the channels)."""
    return a.sum(axis=(0,) + tuple(range(2, a.ndim)))


def channel_shape(a: np.ndarray) -> tuple[int, ...]:
    """(1, C, 1, ...): a per-channel vector broadcast against ``a``."""
    return (1, a.shape[1]) + (1,) * (a.ndim - 2)


def ieee_quiet() -> np.errstate:
    """numpy's floating-point warnings off. An op meeting an inf or a NaN gives its IEEE result
    (inf * 0 and inf - inf are NaN, a sum past the largest float inf), as torch's and the vendors'
    kernels do, silently; numpy would also warn ("invalid value encountered in matmul")."""
    return np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore")


def _error_state() -> Any:
    """numpy's context variable of the floating-point error state (numpy 2: what np.errstate sets), or
    None where this numpy keeps it elsewhere."""
    try:
        from numpy._core.umath import _extobj_contextvar
    except ImportError:
        return None
    return _extobj_contextvar


_STATE = _error_state()
if _STATE is not None:
    with ieee_quiet():
        _QUIET = _STATE.get()


def quiet(op: Callable[..., Any]) -> Callable[..., Any]:
    """``op`` run under :func:`ieee_quiet`: what the numpy backends run every op's forward and backward
    in (:func:`dnnbind.highlevel.residual.install_forms`'s ``around``), once per call rather than around
    each numpy call that could warn. Where numpy keeps its error state in a context variable (numpy 2)
    the call sets it to the quiet state np.errstate made once, and back: 0.3 us, where entering a new
    np.errstate costs 1.4 (2-core EPYC), on every forward and backward of every op."""
    if _STATE is None:
        @functools.wraps(op)
        def run(*args: Any, **kwargs: Any) -> Any:
            with ieee_quiet():
                return op(*args, **kwargs)
        return run
    state, quiet_state = _STATE, _QUIET

    @functools.wraps(op)
    def run_quiet(*args: Any, **kwargs: Any) -> Any:
        token = state.set(quiet_state)
        try:
            return op(*args, **kwargs)
        finally:
            state.reset(token)
    return run_quiet
