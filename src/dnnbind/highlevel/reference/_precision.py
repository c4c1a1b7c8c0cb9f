"""float16 support: compute in float32, hand results and gradients back as float16.

numpy has no fast float16 kernels (no float16 BLAS at all), and float32 accumulation is what the GPU
libraries do for half-precision data too. One decorator does the conversion for every op.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from dnnbind.highlevel.dims import check_dtype, check_shape

_HALF = np.dtype(np.float16)


def _cast(tree: Any, source: np.dtype, target: np.dtype) -> Any:
    """Cast every ``source``-dtype array in a nest of tuples/lists to ``target``; leave the rest."""
    if isinstance(tree, np.ndarray):
        return tree.astype(target) if tree.dtype == source else tree
    if isinstance(tree, (tuple, list)):
        return type(tree)(_cast(item, source, target) for item in tree)
    return tree


def _wrap_pullback(pullback: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(pullback)
    def half_pullback(*cotangents: Any) -> Any:
        grads = pullback(*_cast(cotangents, _HALF, np.dtype(np.float32)))
        return _cast(grads, np.dtype(np.float32), _HALF)
    return half_pullback


def half_in_float32(op: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``op`` in float32 when its first argument is float16.

    Positional array arguments (also inside lists/tuples) are converted; keyword arguments pass
    through untouched, which is how ops hand over arrays they update in place (batch norm's running
    statistics). ``op`` returns ``(result, pullback)``; float32 arrays in the result and in the
    pullback's gradients are converted back to float16, and the pullback's float16 cotangents to float32.
    """
    @functools.wraps(op)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if args[0].dtype != _HALF:
            return op(*args, **kwargs)
        result, pullback = op(*_cast(args, _HALF, np.dtype(np.float32)), **kwargs)
        return _cast(result, np.dtype(np.float32), _HALF), _wrap_pullback(pullback)
    return wrapper


def cotangent(name: str, value: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Check a pullback argument (an array of the result's shape) and return it in ``dtype``."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, not {type(value).__name__}")
    check_dtype(name, value.dtype)
    check_shape(name, value.shape, shape, "the shape of the forward result")
    return value.astype(dtype, copy=False)
