"""Convolution from four primitives, in NNlib's manner, as direct sums in float64.

On validated :class:`ConvDims` and the filter as applied (flipped beforehand for ``dims.flip``):

* :func:`conv_data` -- the forward, ``y[n, k, o] = sum_c sum_j x_pad[n, c, o * stride + j * dilation]
  w[k, c, j]`` within each group;
* :func:`conv_data_grad` -- its gradient with respect to x (the same sum, scattered);
* :func:`conv_filter_grad` -- its gradient with respect to w;
* :func:`bias_grad` -- the sum of dy over everything but the channels.

Each loops over the kernel positions j; one position's term is an ``einsum`` over the group's channels.
:data:`PRIMITIVES` hands them to :mod:`dnnbind.highlevel.conv_composed`, which builds conv and the
transposed convolution from them; every array is computed in float64 and saved as a float64 copy, results
are rounded once to the input's (the backward: the cotangent's) dtype.
"""
from __future__ import annotations

import contextlib
import itertools
from typing import Any

import numpy as np

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import interior_slices, window_slices
from dnnbind.highlevel.reference._arrays import F64, as64, cast, channel_shape, channel_sum, cotangent
from dnnbind.highlevel.residual import ArraySpec


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


class _Call:
    """One call's primitives (:class:`dnnbind.highlevel.conv_composed.ConvCall`) in float64; results in
    ``dtype``."""

    def __init__(self, dims: ConvDims, dtype: Any, x: Any = None, w: Any = None, b: Any = None,
                 saved: tuple = (), dy: Any = None) -> None:
        self.dims, self.dtype, self.x, self.w, self.b, self.saved, self.dy = dims, dtype, x, w, b, saved, dy

    def input(self, x: np.ndarray) -> np.ndarray:
        return as64(x)

    def extend(self, x: np.ndarray) -> np.ndarray:
        """x zero-extended to the convolution's output shape (output_padding >= stride)."""
        xe = np.zeros(self.dims.y_shape)
        xe[tuple(slice(0, s) for s in x.shape)] = x
        return xe

    def filter(self, w: np.ndarray) -> np.ndarray:
        return as64(_applied(w, self.dims))

    def forward(self, xi: np.ndarray, wf: np.ndarray) -> np.ndarray:
        return conv_data(xi, wf, self.dims)

    def data_grad(self, dy: np.ndarray, wf: np.ndarray) -> np.ndarray:
        return conv_data_grad(dy, wf, self.dims)

    def filter_grad(self, xi: np.ndarray, dy: np.ndarray, wf: np.ndarray) -> np.ndarray:
        return conv_filter_grad(xi, dy, self.dims)

    def weight_grad(self, dwf: np.ndarray) -> np.ndarray:
        return _applied(dwf, self.dims)

    def add_bias(self, y: np.ndarray, b: np.ndarray, transposed: bool) -> np.ndarray:
        return y + as64(b).reshape(channel_shape(y))

    def bias_grad(self, dy: np.ndarray, transposed: bool) -> np.ndarray:
        return bias_grad(dy)

    def result(self, a: np.ndarray) -> np.ndarray:
        return cast(a, self.dtype)

    def keep(self, a: np.ndarray, source: Any, filter: bool = False) -> np.ndarray:
        return a                             # input, extend and filter made float64 copies


class Primitives:
    """The reference convolution's primitives (:class:`dnnbind.highlevel.conv_composed.ConvPrimitives`)."""

    def forward_call(self, op: str, dims: ConvDims, options: dict, x: Any, w: Any, b: Any) -> Any:
        return contextlib.nullcontext(_Call(dims, x.dtype, x=x, w=w, b=b))

    def backward_call(self, op: str, dims: ConvDims, options: dict, saved: tuple, dy: Any,
                      dy_shape: tuple[int, ...]) -> Any:
        d = cotangent("dy", dy, dy_shape, F64)          # checks dy first
        return contextlib.nullcontext(_Call(dims, dy.dtype, saved=saved, dy=d))

    def saved_input_shape(self, dims: ConvDims) -> tuple[int, ...]:
        return dims.x_shape

    def residual(self, shape: tuple[int, ...], dtype: Any, same_as: tuple | None) -> ArraySpec:
        """Float64 copies: never the arrays given."""
        return ArraySpec(shape, F64)


PRIMITIVES = Primitives()
