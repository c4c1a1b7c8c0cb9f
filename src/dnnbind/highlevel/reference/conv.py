"""Convolution from four primitives, in NNlib's manner, as direct sums in float64.

On validated :class:`ConvDims` and the filter as applied (flipped beforehand for ``dims.flip``):

* :func:`conv_data` -- the forward, ``y[n, k, o] = sum_c sum_j x_pad[n, c, o * stride + j * dilation]
  w[k, c, j]`` within each group;
* :func:`conv_data_grad` -- its gradient with respect to x (the same sum, scattered);
* :func:`conv_filter_grad` -- its gradient with respect to w;
* :func:`bias_grad` -- the sum of dy over everything but the channels.

Each loops over the kernel positions j; one position's term is an ``einsum`` over the group's channels.
A transposed convolution is the data gradient of the convolution its dims describe
(:meth:`ConvDims.transposed`); its gradients are that convolution's forward and filter gradient. Both
save the filter as applied and their input, as float64 copies.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import interior_slices, window_slices
from dnnbind.highlevel.reference._arrays import F64, as64, cast, channel_shape, channel_sum, cotangent
from dnnbind.highlevel.residual import ALL_NEEDED, ArraySpec


def _positions(dims: ConvDims) -> Any:
    return itertools.product(*(range(k) for k in dims.kernel_size))


def _grouped(a: np.ndarray, groups: int) -> np.ndarray:
    """(N, C, ...) -> (N, groups, C / groups, ...)."""
    return a.reshape(a.shape[0], groups, a.shape[1] // groups, *a.shape[2:])


def _window(dims: ConvDims, position: tuple[int, ...]) -> tuple[slice, ...]:
    """Index into a grouped padded input of what kernel ``position`` reads for every output."""
    return (slice(None),) + window_slices(dims, position)


def _padded(x: np.ndarray, dims: ConvDims) -> np.ndarray:
    return np.pad(x, [(0, 0), (0, 0)] + list(zip(dims.pad_low, dims.pad_high)))


def conv_data(x: np.ndarray, w: np.ndarray, dims: ConvDims) -> np.ndarray:
    """The convolution (cross-correlation) of x (dims.x_shape) with w (dims.w_shape): dims.y_shape."""
    g = dims.groups
    xg, wg = _grouped(_padded(x, dims), g), w.reshape(g, -1, *w.shape[1:])
    y = np.zeros((dims.batch, g, dims.out_channels // g) + dims.out_size)
    for j in _positions(dims):
        y += np.einsum("ngc...,gkc->ngk...", xg[_window(dims, j)], wg[(Ellipsis,) + j])
    return y.reshape(dims.y_shape)


def conv_data_grad(dy: np.ndarray, w: np.ndarray, dims: ConvDims) -> np.ndarray:
    """dx (dims.x_shape) of :func:`conv_data` for its output gradient dy (dims.y_shape)."""
    g = dims.groups
    dyg, wg = _grouped(dy, g), w.reshape(g, -1, *w.shape[1:])
    dxg = np.zeros((dims.batch, g, dims.in_channels // g) + dims.padded_size)
    for j in _positions(dims):
        dxg[_window(dims, j)] += np.einsum("ngk...,gkc->ngc...", dyg, wg[(Ellipsis,) + j])
    return dxg.reshape(dims.x_shape[:2] + dims.padded_size)[interior_slices(dims)]


def conv_filter_grad(x: np.ndarray, dy: np.ndarray, dims: ConvDims) -> np.ndarray:
    """dw (dims.w_shape) of :func:`conv_data` at input x for its output gradient dy."""
    g = dims.groups
    xg, dyg = _grouped(_padded(x, dims), g), _grouped(dy, g)
    dyg = dyg.reshape(dyg.shape[:3] + (-1,))                       # the outputs in one axis
    dw = np.zeros((g, dims.out_channels // g, dims.in_channels // g) + dims.kernel_size)
    for j in _positions(dims):
        patch = xg[_window(dims, j)]
        dw[(Ellipsis,) + j] = np.einsum("ngkp,ngcp->gkc", dyg, patch.reshape(patch.shape[:3] + (-1,)))
    return dw.reshape(dims.w_shape)


def bias_grad(dy: np.ndarray) -> np.ndarray:
    return channel_sum(dy)


def _applied(w: np.ndarray, dims: ConvDims) -> np.ndarray:
    """The filter as applied: flipped in every spatial dim for a true convolution (``dims.flip``). Its own
    inverse, so it also turns the applied filter's gradient into w's."""
    return w[(Ellipsis,) + (slice(None, None, -1),) * dims.spatial_rank] if dims.flip else w


def _with_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    return y if b is None else y + as64(b).reshape(channel_shape(y))


def _gradients(dx: Any, dw: Any, db: Any, dims: ConvDims, dtype: Any) -> tuple[Any, Any, Any]:
    return cast(dx, dtype), cast(None if dw is None else _applied(dw, dims), dtype), cast(db, dtype)


def conv_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None,
                 dims: ConvDims) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Convolution (cross-correlation; true convolution when ``dims.flip``) with optional bias."""
    x64, w64 = as64(x), as64(_applied(w, dims))
    return cast(_with_bias(conv_data(x64, w64, dims), b), x.dtype), (w64, x64)


def conv_backward(saved: tuple, cotangents: tuple, dims: ConvDims,
                  needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    """(dx, dw, db); a gradient ``needs`` marks False is None."""
    (w64, x64), (dy,) = saved, cotangents
    d = cotangent("dy", dy, dims.y_shape, F64)
    return _gradients(conv_data_grad(d, w64, dims) if needs[0] else None,
                      conv_filter_grad(x64, d, dims) if needs[1] else None,
                      bias_grad(d) if needs[2] else None, dims, dy.dtype)


def conv_residuals(x: Any, w: Any, b: Any, dims: ConvDims) -> tuple[ArraySpec, ArraySpec]:
    """The filter as applied and x, in float64."""
    return ArraySpec(dims.w_shape, F64), ArraySpec(dims.x_shape, F64)


def _extended(x: np.ndarray, dims: ConvDims) -> np.ndarray:
    """conv_transpose's x zero-extended to the convolution's output shape (output_padding >= stride)."""
    xe = np.zeros(dims.y_shape)
    xe[tuple(slice(0, s) for s in x.shape)] = x
    return xe


def conv_transpose_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None,
                           dims: ConvDims) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Transposed convolution: the data gradient of the convolution ``dims`` describes (from
    :meth:`ConvDims.transposed`: dims.x_shape is this op's output shape)."""
    xe, w64 = _extended(x, dims), as64(_applied(w, dims))
    return cast(_with_bias(conv_data_grad(xe, w64, dims), b), x.dtype), (w64, xe)


def conv_transpose_backward(saved: tuple, cotangents: tuple, dims: ConvDims,
                            needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    """(dx, dw, db): the convolution's forward, its filter gradient (with the roles of x and dy swapped)
    and the bias gradient."""
    (w64, xe), (dy,) = saved, cotangents
    d = cotangent("dy", dy, dims.x_shape, F64)
    crop = tuple(slice(0, s) for s in dims.transpose_input_shape)
    return _gradients(conv_data(d, w64, dims)[crop] if needs[0] else None,
                      conv_filter_grad(d, xe, dims) if needs[1] else None,
                      bias_grad(d) if needs[2] else None, dims, dy.dtype)


def conv_transpose_residuals(x: Any, w: Any, b: Any, dims: ConvDims) -> tuple[ArraySpec, ArraySpec]:
    """The filter as applied and x extended, in float64."""
    return ArraySpec(dims.w_shape, F64), ArraySpec(dims.y_shape, F64)
