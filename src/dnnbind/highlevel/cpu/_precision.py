"""Half-precision support (float16, bfloat16): compute in float32, hand results and gradients back
in the input's dtype; and the rule for what a forward pass saves.

numpy has no fast float16 kernels (no float16 BLAS at all) and no bfloat16 at all (``ml_dtypes``
provides the dtype, with casts but no fast arithmetic); float32 accumulation is what the GPU libraries
do for half-precision data too. Three decorators (forward, backward, residual spec) do the conversion
for every op.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from dnnbind.highlevel.grad_mode import borrowing
from dnnbind.highlevel.reference._arrays import cotangent  # noqa: F401  (the one check, re-exported)
from dnnbind.highlevel.residual import passes_when, undeclared

_FLOAT32 = np.dtype(np.float32)


def _half_dtypes() -> tuple[np.dtype, ...]:
    try:
        import ml_dtypes
    except ImportError:      # without ml_dtypes no bfloat16 array can exist
        return (np.dtype(np.float16),)
    return (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


#: the dtypes computed in float32
HALF_DTYPES = _half_dtypes()


def _cast(tree: Any, source: np.dtype, target: np.dtype) -> Any:
    """Cast every ``source``-dtype array in a nest of tuples/lists to ``target``; leave the rest."""
    if isinstance(tree, np.ndarray):
        return tree.astype(target) if tree.dtype == source else tree
    if isinstance(tree, (tuple, list)):
        return type(tree)(_cast(item, source, target) for item in tree)
    return tree


def private(array: np.ndarray, *sources: Any) -> np.ndarray:
    """``array``, or a copy of it when it may share memory with one of ``sources`` (None skipped).

    The rule every forward pass follows: what a pullback reads is the forward's own, so changing x, the
    parameters or the returned result after the forward never changes what the pullback returns; unless
    the caller lends them (:func:`dnnbind.highlevel.grad_mode.borrowing`): then ``array`` as it is.
    """
    if borrowing():
        return array
    for source in sources:                       # (a loop: a repeated small call's cost is in its frames)
        if source is not None and np.may_share_memory(array, source):
            return array.copy()
    return array


def half_forward(forward: Callable[..., Any], inplace: tuple[int, ...] = ()) -> Callable[..., Any]:
    """Run a residual-form forward in float32 when its first argument is float16 or bfloat16
    (:data:`HALF_DTYPES`), results back in that dtype; the residuals stay in float32. The positional
    arguments at ``inplace`` are arrays the forward updates in place (batch norm's running statistics):
    they pass unconverted."""
    @passes_when(lambda *args, **kwargs: args[0].dtype not in HALF_DTYPES)
    @functools.wraps(forward)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        half = args[0].dtype
        if half not in HALF_DTYPES:
            return forward(*args, **kwargs)
        args = tuple(a if i in inplace else _cast(a, half, _FLOAT32) for i, a in enumerate(args))
        result, residuals = forward(*args, **kwargs)
        return _cast(result, _FLOAT32, half), residuals
    return wrapper


def half_backward(backward: Callable[..., Any]) -> Callable[..., Any]:
    """The backward of :func:`half_forward`: half cotangents in, half gradients out."""
    @functools.wraps(backward)
    def wrapper(residuals: tuple, cotangents: tuple, *args: Any, **kwargs: Any) -> Any:
        half = getattr(cotangents[0], "dtype", None) if cotangents else None
        if half not in HALF_DTYPES:
            return backward(residuals, cotangents, *args, **kwargs)
        return _cast(backward(residuals, _cast(cotangents, half, _FLOAT32), *args, **kwargs), _FLOAT32, half)
    return wrapper


def half_residuals(spec: Callable[..., Any]) -> Callable[..., Any]:
    """The residual spec of :func:`half_forward`: half array specs are computed as float32 ones."""
    @functools.wraps(spec)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        half = args[0].dtype
        if half not in HALF_DTYPES:
            return spec(*args, **kwargs)
        # what the float32 computation saves is no longer the half arrays themselves
        return undeclared(spec(*_cast_specs(args, half), **kwargs))
    return wrapper


def _cast_specs(tree: Any, half: np.dtype) -> Any:
    from dnnbind.highlevel.residual import ArraySpec
    if hasattr(tree, "shape") and hasattr(tree, "dtype"):
        return ArraySpec(tuple(tree.shape), _FLOAT32) if tree.dtype == half else tree
    if isinstance(tree, (tuple, list)):
        return type(tree)(_cast_specs(item, half) for item in tree)
    return tree
