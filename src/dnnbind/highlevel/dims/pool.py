"""Pooling geometry: :class:`PoolDims` and the window slicing the CPU backends index padded arrays with."""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.dims.checks import check_array_shape, check_dtype, padding_pairs, per_dim, prod
from dnnbind.highlevel.dims.problem import OFFSET_BYTES, Problem, Shape, spatial_out


def window_slices(dims: Any, position: Sequence[int]) -> tuple[slice, ...]:
    """Index into a padded (N, C, *spatial) array of the elements that window or kernel ``position`` reads
    for every output (position k of a dim reads k * dilation), for ConvDims and PoolDims alike (both have
    ``dilation``, ``stride`` and ``out_size``)."""
    return (slice(None), slice(None)) + tuple(
        slice(k * d, k * d + s * (o - 1) + 1, s) for k, d, s, o in zip(position, dims.dilation, dims.stride,
                                                                       dims.out_size))


def interior_slices(dims: Any) -> tuple[slice, ...]:
    """Index of x inside its padded (N, C, *spatial) array, for ConvDims and PoolDims alike."""
    return (slice(None), slice(None)) + tuple(slice(a, a + s) for a, s in zip(dims.pad_low, dims.x_shape[2:]))



def _pool_out(size: int, lo: int, hi: int, extent: int, stride: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size in one dim; with ``ceil_mode`` rounded up, as long as the last
    window starts inside x or its low padding."""
    span = size + lo + hi - extent
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + lo:
        out -= 1
    return out


# ----------------------------------------------------------------------------------------------
# convolution


@dataclass(frozen=True, init=False, eq=False)
class PoolDims(Problem):
    """Geometry of one N-d pooling: window, stride (defaults to window), dilation and padding per dim.

    Padding may be at most half the window in every dim (PyTorch's rule: half the window itself, also
    with dilation). ``ceil_mode`` (PyTorch's) rounds the output size up, but the last window must start
    inside x or its low padding; the extra windows run past the padded input, which PoolDims expresses
    as extra high-side padding (``ceil_extra``, not limited to half the window). ``pad_high`` is the
    whole high-side padding (the user's plus ``ceil_extra``): a backend pads by ``pad_low`` and
    ``pad_high`` and pools without rounding. :meth:`mean_divisor` says what a mean divides by.
    """

    _KIND = "pool"

    x_shape: Shape
    window: Shape
    stride: Shape
    dilation: Shape
    pad_low: Shape
    pad_high: Shape
    ceil_mode: bool
    ceil_extra: Shape
    dtype: str

    def __init__(self, x_shape: Sequence[int], window: Any, *, stride: Any = None, padding: Any = 0,
                 dilation: Any = 1, ceil_mode: bool = False, dtype: Any = "float32") -> None:
        x_shape = check_array_shape("x", x_shape, (3, 4, 5), "(N, C, 1 to 3 spatial dimensions)", (0,),
                                     "the batch N")
        n = len(x_shape) - 2
        window = per_dim("window", window, n, minimum=1)
        stride = window if stride is None else per_dim("stride", stride, n, minimum=1)
        dilation = per_dim("dilation", dilation, n, minimum=1)
        if not isinstance(ceil_mode, (bool, np.bool_)):
            raise TypeError(f"ceil_mode={ceil_mode!r} must be a bool")
        ceil_mode = bool(ceil_mode)
        lo, hi = padding_pairs("padding", padding, n)
        if any(2 * p > k for p, k in zip(lo + hi, window + window)):
            raise ValueError(f"padding={padding!r} must be at most half the window {window} in every dimension")
        dtype = check_dtype("x", dtype)
        extent = tuple(d * (k - 1) + 1 for k, d in zip(window, dilation))
        out = tuple(_pool_out(*a, ceil_mode) for a in zip(x_shape[2:], lo, hi, extent, stride))
        if any(o < 1 for o in out):
            padded = tuple(s + a + b for s, a, b in zip(x_shape[2:], lo, hi))
            dilated = f" dilated to {extent}" if extent != window else ""
            raise ValueError(f"the output would be empty: x's spatial size {x_shape[2:]} padded to {padded} "
                             f"is smaller than window={window}{dilated}")
        extra = tuple(max(0, (o - 1) * st + e - (s + a + b))
                      for o, st, e, s, a, b in zip(out, stride, extent, x_shape[2:], lo, hi))
        hi = tuple(b + e for b, e in zip(hi, extra))
        for name, value in (("x_shape", x_shape), ("window", window), ("stride", stride), ("dilation", dilation),
                            ("pad_low", lo), ("pad_high", hi), ("ceil_mode", ceil_mode), ("ceil_extra", extra),
                            ("dtype", dtype)):
            object.__setattr__(self, name, value)
        assert self.out_size == out, (self.out_size, out)

    @property
    def extent(self) -> Shape:
        """The dilated window: how far each window reaches, per spatial dim."""
        return tuple(d * (k - 1) + 1 for k, d in zip(self.window, self.dilation))

    @property
    def dilated(self) -> bool:
        return any(d != 1 for d, k in zip(self.dilation, self.window) if k > 1)

    @property
    def user_pad_high(self) -> Shape:
        """The high-side padding the user asked for (``pad_high`` less ``ceil_extra``)."""
        return tuple(b - e for b, e in zip(self.pad_high, self.ceil_extra))

    @functools.cached_property
    def window_positions(self) -> tuple[tuple[int, ...], ...]:
        """Every position in the window, row-major: the order in which ties are decided (first wins) and
        the code a max pool saves for its winner."""
        return tuple(itertools.product(*(range(k) for k in self.window)))

    def window_index(self, position: tuple[int, ...]) -> tuple[slice, ...]:
        """Index into the padded input of the elements window ``position`` reads (position k of a dim reads
        k * dilation), one per output."""
        return window_slices(self, position)

    @functools.cached_property
    def interior(self) -> tuple[slice, ...]:
        """Index of x inside the padded input."""
        return interior_slices(self)

    @property
    def winner_dtype(self) -> np.dtype:
        """The smallest unsigned type that counts the window's positions (a max pool's saved winners)."""
        return np.min_scalar_type(len(self.window_positions))

    def mean_counts(self, count_include_pad: bool) -> tuple[tuple[int, ...], ...]:
        """Per spatial dim, the divisor's factor for each output position (the divisor of an N-d window is
        the product over dims), as PyTorch's avg_pool computes it: with ``count_include_pad`` the window
        clipped to x plus the user's padding (not ``ceil_extra``), else clipped to x alone. The one rule
        of the reference backend and the GPU backends' rescale (:mod:`dnnbind.highlevel.gpu.rescale`)."""
        counts = []
        for size, k, st, lo, hi, o in zip(self.x_shape[2:], self.window, self.stride, self.pad_low,
                                           self.user_pad_high, self.out_size):
            first, last = (-lo, size + hi) if count_include_pad else (0, size)
            counts.append(tuple(min(i * st - lo + k, last) - max(i * st - lo, first) for i in range(o)))
        return tuple(counts)

    def mean_divisor(self, count_include_pad: bool,
                     divisor_override: int | None = None) -> tuple[tuple[tuple[int, ...], ...], int]:
        """What each output of a mean divides its window's sum by (padding adds zeros to the sum), as
        ``(per_dim, constant)``: output (i, j, ...) divides by ``constant * per_dim[0][i] * per_dim[1][j] *
        ...``. Without ``divisor_override``: (:meth:`mean_counts`, 1); with it, every output divides by the
        override alone, whatever ``count_include_pad`` says (torch's rule), so the counts are all 1. The one
        rule of the reference backend's ``_divisor`` and the GPU backends' rescale
        (:mod:`dnnbind.highlevel.gpu.rescale`); the override is checked by
        :func:`~dnnbind.highlevel.dims.checks.check_divisor_override`."""
        if divisor_override is None:
            return self.mean_counts(count_include_pad), 1
        return tuple((1,) * o for o in self.out_size), int(divisor_override)

    @property
    def spatial_rank(self) -> int:
        return len(self.x_shape) - 2

    @functools.cached_property
    def padded_size(self) -> Shape:
        return tuple(s + a + b for s, a, b in zip(self.x_shape[2:], self.pad_low, self.pad_high))

    @functools.cached_property
    def out_size(self) -> Shape:
        return spatial_out(self.x_shape[2:], self.pad_low, self.pad_high, self.extent, self.stride)

    @functools.cached_property
    def y_shape(self) -> Shape:
        return self.x_shape[:2] + self.out_size

    def working_bytes(self, itemsize: int) -> int:
        """A lower bound of the memory one call needs on the CPU, in bytes, known before allocating:
        the padded input, the output and its bookkeeping (the max-pool argmax) and the list of window
        offsets. The reference backend checks it first, so a huge problem fails at once."""
        return self._working_elements * itemsize + prod(self.window) * OFFSET_BYTES

    @functools.cached_property
    def _working_elements(self) -> int:
        return prod(self.x_shape[:2]) * prod(self.padded_size) + 2 * prod(self.y_shape)
