"""What the libraries can express of a ConvDims/PoolDims, and what the backends do around them.

cuDNN and MIOpen descriptors take one padding per spatial dim, applied on both sides, and want at
least two spatial dims. So:

* asymmetric padding (low != high) becomes the symmetric part ``min(low, high)``, which the library
  applies, plus explicit padding of the input by the rest (``extra_low``, ``extra_high``); the
  gradient with respect to the explicitly padded input is cropped back;
* one spatial dim is run as two, with a height of 1 (:func:`layout.lift`).

All shapes here are logical NCHW shapes; the memory layout is described separately.
"""
from __future__ import annotations

from dataclasses import dataclass

from typing import Any

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.gpu.layout import empty, in_layout, lift, lift_spatial

Shape = tuple[int, ...]


def split_padding(low: Shape, high: Shape) -> tuple[Shape, Shape, Shape]:
    """(symmetric, extra_low, extra_high) with symmetric + extra_low == low, symmetric + extra_high == high."""
    sym = tuple(min(a, b) for a, b in zip(low, high))
    return sym, tuple(a - s for a, s in zip(low, sym)), tuple(b - s for b, s in zip(high, sym))


def padded_shape(shape: Shape, extra_low: Shape, extra_high: Shape) -> Shape:
    return shape[:2] + tuple(s + a + b for s, a, b in zip(shape[2:], extra_low, extra_high))


def interior(shape: Shape, extra_low: Shape) -> tuple[slice, ...]:
    """Index of the original array (spatial ``shape``) inside its explicitly padded copy."""
    return (slice(None), slice(None)) + tuple(slice(a, a + s) for a, s in zip(extra_low, shape[2:]))


@dataclass(frozen=True)
class ConvGeometry:
    """The convolution the library runs for ``dims`` (lifted shapes, symmetric padding)."""

    x_shape: Shape          # x as handed to the library: explicitly padded, lifted
    w_shape: Shape          # lifted
    y_shape: Shape          # lifted
    bias_shape: Shape       # (1, K, 1, 1[, 1])
    padding: Shape          # symmetric, lifted
    stride: Shape
    dilation: Shape
    extra_low: Shape        # explicit padding of x (not lifted: it applies to the caller's array)
    extra_high: Shape
    groups: int
    flip: bool

    @classmethod
    def of(cls, dims: ConvDims) -> "ConvGeometry":
        sym, lo, hi = split_padding(dims.pad_low, dims.pad_high)
        y = lift(dims.y_shape)
        return cls(lift(padded_shape(dims.x_shape, lo, hi)), lift(dims.w_shape), y,
                   (1, y[1]) + (1,) * (len(y) - 2), lift_spatial(sym, 0), lift_spatial(dims.stride, 1),
                   lift_spatial(dims.dilation, 1), lo, hi, dims.groups, dims.flip)

    @property
    def explicit_padding(self) -> bool:
        return any(self.extra_low + self.extra_high)


@dataclass(frozen=True)
class PoolGeometry:
    """The pooling the library runs for ``dims`` (lifted shapes, symmetric padding)."""

    x_shape: Shape          # explicitly padded, lifted
    y_shape: Shape
    window: Shape
    padding: Shape
    stride: Shape
    extra_low: Shape
    extra_high: Shape

    @classmethod
    def of(cls, dims: PoolDims) -> "PoolGeometry":
        sym, lo, hi = split_padding(dims.pad_low, dims.pad_high)
        return cls(lift(padded_shape(dims.x_shape, lo, hi)), lift(dims.y_shape), lift_spatial(dims.window, 1),
                   lift_spatial(sym, 0), lift_spatial(dims.stride, 1), lo, hi)

    @property
    def explicit_padding(self) -> bool:
        return any(self.extra_low + self.extra_high)


def window_counts(size: Shape, window: Shape, stride: Shape, pad_low: Shape, out: Shape) -> list[list[int]]:
    """Per spatial dim, how many of each output's window positions fall inside an input of ``size``
    (separable: the count of an N-d window is the product over dims)."""
    counts = []
    for s, k, st, lo, o in zip(size, window, stride, pad_low, out):
        counts.append([min(i * st - lo + k, s) - max(i * st - lo, 0) for i in range(o)])
    return counts


def pad(cp: Any, x: Any, extra_low: Shape, extra_high: Shape, layout: str, fill: float = 0.0) -> Any:
    """x padded explicitly with ``fill`` and stored in ``layout`` (x itself, or a copy in ``layout``,
    when there is nothing to pad)."""
    if not any(extra_low + extra_high):
        return in_layout(cp, x, layout)
    out = empty(cp, padded_shape(x.shape, extra_low, extra_high), x.dtype, layout)
    out.fill(fill)
    out[interior(x.shape, extra_low)] = x
    return out


def crop(cp: Any, padded: Any, shape: Shape, extra_low: Shape, layout: str) -> Any:
    """The part of ``padded`` that :func:`pad` filled from an array of ``shape``, as a new dense array."""
    if tuple(padded.shape) == tuple(shape):
        return padded
    return in_layout(cp, padded[interior(shape, extra_low)], layout)
