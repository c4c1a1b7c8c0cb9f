"""Max and mean pooling, one pass per window position over the padded input (:class:`PoolDims`).

Max pooling is :mod:`dnnbind.highlevel.gpu.window_max`, the array code every backend shares for PyTorch's
rules: window position k of a dim reads k * dilation; padding is -inf and never wins; ties go to the FIRST
maximum in row-major order of the window positions; NaN counts as a maximum (the last NaN wins); a window
whose elements in x are all -inf routes its gradient to its first element in x. It saves the winning
position of every window; ``return_indices`` gives PyTorch's flat index of each winner in its input plane.

Mean pooling sums each window (padding adds zeros) in float64 and divides by
:meth:`PoolDims.mean_divisor` (``count_include_pad``, ``ceil_mode``'s extra windows, ``divisor_override``);
it saves nothing.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.dims import PoolDims
from dnnbind.highlevel.gpu import window_max
from dnnbind.highlevel.reference._arrays import F64, as64, cast, cotangent
from dnnbind.highlevel.residual import ArraySpec


def maxpool_forward(x: np.ndarray, dims: PoolDims, return_indices: bool = False) -> tuple[Any, tuple[np.ndarray]]:
    y, winners = window_max.forward(np, as64(x), dims)
    y = cast(y, x.dtype)
    return ((y, window_max.flat_indices(np, winners, dims)) if return_indices else y), (winners,)


def maxpool_backward(saved: tuple, cotangents: tuple, dims: PoolDims, return_indices: bool = False) -> np.ndarray:
    """dx: dy added to every window's winner (the indices, an integer result, take no cotangent)."""
    (winners,), dy = saved, cotangents[0]
    return cast(window_max.backward(np, winners, cotangent("dy", dy, dims.y_shape, F64), dims), dy.dtype)


def maxpool_residuals(x: Any, dims: PoolDims, return_indices: bool = False) -> tuple[ArraySpec]:
    return (ArraySpec(dims.y_shape, dims.winner_dtype),)


def _divisor(dims: PoolDims, count_include_pad: bool, divisor_override: int | None) -> np.ndarray:
    """What each output divides its window's sum by, broadcast against y."""
    per_dim, constant = dims.mean_divisor(count_include_pad, divisor_override)
    divisor = np.full((1, 1) + (1,) * dims.spatial_rank, float(constant))
    for axis, counts in enumerate(per_dim):
        shape = [1] * divisor.ndim
        shape[2 + axis] = len(counts)
        divisor = divisor * np.array(counts, F64).reshape(shape)
    return divisor


def meanpool_forward(x: np.ndarray, dims: PoolDims, count_include_pad: bool = True,
                     divisor_override: int | None = None) -> tuple[np.ndarray, tuple]:
    xp = window_max.padded(np, as64(x), dims, 0.0)
    y = np.zeros(dims.y_shape)
    for position in dims.window_positions:
        y += xp[dims.window_index(position)]
    return cast(y / _divisor(dims, count_include_pad, divisor_override), x.dtype), ()


def meanpool_backward(saved: tuple, cotangents: tuple, dims: PoolDims, count_include_pad: bool = True,
                      divisor_override: int | None = None) -> np.ndarray:
    """dx: each output's gradient over its divisor, added to every element of its window."""
    (dy,) = cotangents
    share = cotangent("dy", dy, dims.y_shape, F64) / _divisor(dims, count_include_pad, divisor_override)
    dxp = np.zeros(dims.x_shape[:2] + dims.padded_size)
    for position in dims.window_positions:
        dxp[dims.window_index(position)] += share
    return cast(window_max.unpadded(np, dxp, dims), dy.dtype)


def meanpool_residuals(x: Any, dims: PoolDims, count_include_pad: bool = True,
                       divisor_override: int | None = None) -> tuple:
    return ()
