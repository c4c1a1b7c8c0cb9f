"""Convolution geometry: :class:`ConvDims`, for conv and conv_transpose (the data gradient of a conv)."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.dims.checks import (check_array_shape, check_dtype, check_int, padding_pairs, per_dim,
                                           prod)
from dnnbind.highlevel.dims.problem import OFFSET_BYTES, Problem, Shape, spatial_out


def _conv_shapes(x_shape: Sequence[int], w_shape: Sequence[int], groups: Any,
                 w_layout: str) -> tuple[Shape, Shape, int, int]:
    """The checks conv and conv_transpose share: ranks of x and w, and groups dividing x's channels."""
    x = check_array_shape("x", x_shape, (3, 4, 5), "(N, C, 1 to 3 spatial dimensions)", (0,), "the batch N")
    w = tuple(int(s) for s in w_shape)
    if len(w) != len(x):
        raise ValueError(f"w has shape {w} ({len(w)} dimensions) but x has shape {x}; w must be {w_layout} with "
                         f"{len(x) - 2} spatial dimensions like x")
    check_array_shape("w", w, (len(x),), "")
    groups = check_int("groups", groups)
    if groups < 1:
        raise ValueError(f"groups={groups} must be positive")
    if x[1] % groups:
        raise ValueError(f"groups={groups} does not divide the {x[1]} input channels of x")
    return x, w, len(x) - 2, groups




@dataclass(frozen=True, init=False, eq=False)
class ConvDims(Problem):
    """Geometry of one N-d convolution (cross-correlation, or true convolution with ``flip``).

    Built from the shapes of x (N, C, *spatial) and w (K, C/groups, *kernel) and the user's stride,
    padding, dilation and groups; every field is normalized to one value per spatial dimension.
    The constructor raises ValueError/TypeError naming the offending argument.

    A transposed convolution is described by :meth:`transposed`: the ConvDims of the *forward*
    convolution whose input has conv_transpose's output shape; conv_transpose is that convolution's
    data gradient. ``output_padding`` is non-zero only there.
    """

    _KIND = "conv"

    x_shape: Shape
    w_shape: Shape
    stride: Shape
    dilation: Shape
    pad_low: Shape
    pad_high: Shape
    groups: int
    flip: bool
    dtype: str
    output_padding: Shape

    def __init__(self, x_shape: Sequence[int], w_shape: Sequence[int], *, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, flip: bool = False,
                 dtype: Any = "float32", output_padding: Any = 0) -> None:
        x_shape, w_shape, n, groups = _conv_shapes(x_shape, w_shape, groups,
                                                   "(out_channels, in_channels/groups, *kernel)")
        if w_shape[0] % groups:
            raise ValueError(f"groups={groups} does not divide the {w_shape[0]} output channels of w "
                             f"(w.shape[0])")
        if w_shape[1] * groups != x_shape[1]:
            raise ValueError(f"x has {x_shape[1]} channels but w.shape[1] * groups = {w_shape[1]} * {groups} "
                             f"= {w_shape[1] * groups}")
        if not isinstance(flip, (bool, np.bool_)):
            raise TypeError(f"flip={flip!r} must be a bool")
        stride = per_dim("stride", stride, n, minimum=1)
        dilation = per_dim("dilation", dilation, n, minimum=1)
        lo, hi = padding_pairs("padding", padding, n)
        op = per_dim("output_padding", output_padding, n, minimum=0)
        dtype = check_dtype("x", dtype)
        extent = tuple(d * (k - 1) + 1 for d, k in zip(dilation, w_shape[2:]))
        padded = tuple(s + a + b for s, a, b in zip(x_shape[2:], lo, hi))
        if any(p < e for p, e in zip(padded, extent)):
            raise ValueError(f"the output would be empty: x's spatial size {x_shape[2:]} padded to {padded} is "
                             f"smaller than the kernel {w_shape[2:]} dilated to {extent} "
                             f"(padding, dilation or w too large)")
        for name, value in (("x_shape", x_shape), ("w_shape", w_shape), ("stride", stride),
                            ("dilation", dilation), ("pad_low", lo), ("pad_high", hi), ("groups", groups),
                            ("flip", bool(flip)), ("dtype", dtype), ("output_padding", op)):
            object.__setattr__(self, name, value)

    @classmethod
    def transposed(cls, x_shape: Sequence[int], w_shape: Sequence[int], *, stride: Any = 1, padding: Any = 0,
                   output_padding: Any = 0, dilation: Any = 1, groups: int = 1, flip: bool = False,
                   dtype: Any = "float32") -> "ConvDims":
        """Dims for ``conv_transpose(x, w)`` with w in PyTorch's layout (C_in, C_out/groups, *kernel).

        Output size per dim: (in - 1)*stride - pad_low - pad_high + dilation*(k - 1) + output_padding + 1,
        where output_padding must be smaller than stride or dilation (PyTorch's rule).
        """
        x_shape, w_shape, n, groups = _conv_shapes(x_shape, w_shape, groups,
                                                   "(in_channels, out_channels/groups, *kernel)")
        if x_shape[1] != w_shape[0]:
            raise ValueError(f"x has {x_shape[1]} channels but w.shape[0] = {w_shape[0]}; conv_transpose "
                             f"takes w as (in_channels, out_channels/groups, *kernel)")
        st = per_dim("stride", stride, n, minimum=1)
        dil = per_dim("dilation", dilation, n, minimum=1)
        lo, hi = padding_pairs("padding", padding, n)
        op = per_dim("output_padding", output_padding, n, minimum=0)
        if any(o >= s and o >= d for o, s, d in zip(op, st, dil)):
            raise ValueError(f"output_padding={output_padding!r} must be smaller than either stride={stride!r} "
                             f"or dilation={dilation!r} in every dimension")
        out = tuple((i - 1) * s - a - b + d * (k - 1) + o + 1
                    for i, s, a, b, d, k, o in zip(x_shape[2:], st, lo, hi, dil, w_shape[2:], op))
        if any(o < 1 for o in out):
            raise ValueError(f"the output would be empty: conv_transpose of spatial size {x_shape[2:]} "
                             f"gives {out} (padding={padding!r} too large)")
        y_shape = (x_shape[0], w_shape[1] * groups) + out
        return cls(y_shape, w_shape, stride=st, padding=tuple(zip(lo, hi)), dilation=dil, groups=groups,
                   flip=flip, dtype=dtype, output_padding=op)

    # -- derived geometry -----------------------------------------------------------------------

    @property
    def spatial_rank(self) -> int:
        return len(self.x_shape) - 2

    @property
    def batch(self) -> int:
        return self.x_shape[0]

    @property
    def in_channels(self) -> int:
        return self.x_shape[1]

    @property
    def out_channels(self) -> int:
        return self.w_shape[0]

    @functools.cached_property
    def kernel_size(self) -> Shape:
        return self.w_shape[2:]

    @functools.cached_property
    def dilated_kernel(self) -> Shape:
        """Spatial extent covered by one dilated kernel."""
        return tuple(d * (k - 1) + 1 for d, k in zip(self.dilation, self.kernel_size))

    @functools.cached_property
    def padded_size(self) -> Shape:
        """Spatial size of x after padding."""
        return tuple(s + a + b for s, a, b in zip(self.x_shape[2:], self.pad_low, self.pad_high))

    @functools.cached_property
    def out_size(self) -> Shape:
        return spatial_out(self.x_shape[2:], self.pad_low, self.pad_high, self.dilated_kernel, self.stride)

    @functools.cached_property
    def y_shape(self) -> Shape:
        """Shape of the convolution's output (N, K, *out_size)."""
        return (self.x_shape[0], self.w_shape[0]) + self.out_size

    @functools.cached_property
    def transpose_input_shape(self) -> Shape:
        """Shape conv_transpose takes as x when these dims come from :meth:`transposed`.

        Equal to ``y_shape`` unless output_padding >= stride (allowed when smaller than dilation): then
        the forward convolution sees output_padding // stride more positions than conv_transpose's input.
        """
        extra = tuple(o // s for o, s in zip(self.output_padding, self.stride))
        return self.y_shape[:2] + tuple(y - e for y, e in zip(self.out_size, extra))

    @property
    def bias_shape(self) -> Shape:
        return (self.w_shape[0],)

    def working_bytes(self, itemsize: int, columns: bool = True) -> int:
        """A lower bound of the memory one call needs on the CPU, in bytes, known before allocating:
        the padded input, the output, the filter, one sample's im2col columns (where the call builds them:
        ``columns``) and the list of kernel offsets. The reference backend checks it first, so a huge
        problem fails at once."""
        elements = self._working_elements if columns else self._working_elements - self._column_elements
        return elements * itemsize + prod(self.kernel_size) * OFFSET_BYTES

    @functools.cached_property
    def _column_elements(self) -> int:
        return self.x_shape[1] * prod(self.kernel_size) * prod(self.out_size)

    @functools.cached_property
    def _working_elements(self) -> int:
        n, c = self.x_shape[:2]
        return n * c * prod(self.padded_size) + prod(self.y_shape) + prod(self.w_shape) + self._column_elements

    @property
    def symmetric_padding(self) -> bool:
        return self.pad_low == self.pad_high
