"""MaxPool{1,2,3}d and AvgPool{1,2,3}d: torch.nn's classes whose forward runs dnnbind's maxpool and
meanpool ops.

Options the ops lack are translated where the translation is exact, and refused otherwise:
``ceil_mode`` adds the extra windows as extra high-side padding (max-pool padding never wins;
average pooling divides by the real elements with ``count_include_pad=False``); ``divisor_override``
rescales a ``count_include_pad=True`` mean, whose divisor is the full window everywhere. Max-pool
``dilation`` > 1, ``return_indices=True``, and a ``ceil_mode`` window that would need more padding than
the ops accept raise NotImplementedError.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from dnnbind.torch import functional as F
from dnnbind.torch.errors import torch_argument_names
from dnnbind.torch.layer_inputs import batched, not_supported, unbatch

Tensor = torch.Tensor
_NAMES = {"x": "input", "window": "kernel_size"}


def _per_dim(value: Any, n: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


def _ceil_extra(size: int, k: int, s: int, p: int) -> int:
    """Extra high-side padding that makes floor-mode pooling give torch's ceil_mode output size."""
    out = -(-(size + 2 * p - k) // s) + 1
    if (out - 1) * s >= size + p:          # torch: the last window must start inside the input or left padding
        out -= 1
    return max(0, (out - 1) * s + k - (size + 2 * p))


class _Geometry:
    """A pooling layer's kernel, stride and padding per spatial dim, with ceil_mode's extra padding."""

    def __init__(self, layer: Any, x: Tensor) -> None:
        n = x.dim() - 2
        self.name = type(layer).__name__
        self.kernel = _per_dim(layer.kernel_size, n)
        self.stride = _per_dim(layer.stride, n) if layer.stride else self.kernel
        self.padding = _per_dim(layer.padding, n)
        size = tuple(x.shape[2:])
        self.extra = tuple(_ceil_extra(*dims) for dims in zip(size, self.kernel, self.stride, self.padding)) \
            if layer.ceil_mode else (0,) * n
        if any(2 * (p + e) > k >= 2 * p for p, e, k in zip(self.padding, self.extra, self.kernel)):
            raise not_supported(self.name, "ceil_mode", True,
                                f"on input of spatial size {size} the last window needs high-side padding "
                                f"{tuple(p + e for p, e in zip(self.padding, self.extra))}, more than half of "
                                f"kernel_size={self.kernel}, which the op refuses")

    @property
    def op_padding(self) -> Any:
        """The op's padding: torch's ints, or (low, high) pairs when ceil_mode adds windows."""
        if not any(self.extra):
            return self.padding
        return [(p, p + e) for p, e in zip(self.padding, self.extra)]


class _MaxPool:
    """forward and the option checks shared by MaxPool1d, MaxPool2d and MaxPool3d."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__(kernel_size, stride, padding, dilation, return_indices, ceil_mode)  # type: ignore[call-arg]
        self._check_options()

    def _check_options(self) -> None:
        layer: Any = self
        name = type(self).__name__
        if layer.return_indices:
            raise not_supported(name, "return_indices", True, "dnnbind's maxpool returns no indices")
        kernel, dilation = _per_dim(layer.kernel_size, layer._spatial), _per_dim(layer.dilation, layer._spatial)
        if any(d != 1 and k > 1 for d, k in zip(dilation, kernel)):
            raise not_supported(name, "dilation", layer.dilation, "dnnbind's maxpool has no dilation")

    def forward(self, input: Tensor) -> Tensor:
        layer: Any = self
        x, unbatched = batched(type(self).__name__, input, layer._spatial)
        self._check_options()
        geometry = _Geometry(layer, x)
        with torch_argument_names(_NAMES):
            y = F.maxpool(x, geometry.kernel, stride=geometry.stride, padding=geometry.op_padding)
        return unbatch(y, unbatched)


class MaxPool1d(_MaxPool, nn.MaxPool1d):
    """torch.nn.MaxPool1d computed by dnnbind (no dilation, no return_indices)."""
    _spatial = 1


class MaxPool2d(_MaxPool, nn.MaxPool2d):
    """torch.nn.MaxPool2d computed by dnnbind (no dilation, no return_indices)."""
    _spatial = 2


class MaxPool3d(_MaxPool, nn.MaxPool3d):
    """torch.nn.MaxPool3d computed by dnnbind (no dilation, no return_indices)."""
    _spatial = 3


class _AvgPool:
    """forward shared by AvgPool1d, AvgPool2d and AvgPool3d."""

    def forward(self, input: Tensor) -> Tensor:
        layer: Any = self
        name = type(self).__name__
        x, unbatched = batched(name, input, layer._spatial)
        geometry = _Geometry(layer, x)
        divisor = getattr(layer, "divisor_override", None)       # AvgPool1d has none
        if divisor is not None and (isinstance(divisor, bool) or not isinstance(divisor, int) or divisor == 0):
            raise ValueError(f"{name}: divisor_override={divisor!r} must be a non-zero int")
        include_pad = bool(layer.count_include_pad) or divisor is not None
        if include_pad and divisor is None and any(geometry.extra):
            raise not_supported(name, "ceil_mode", True,
                                f"with count_include_pad=True on input of spatial size {tuple(x.shape[2:])}, "
                                f"torch divides the windows past the padded input by fewer elements than "
                                f"kernel_size={geometry.kernel} holds")
        with torch_argument_names(_NAMES):
            y = F.meanpool(x, geometry.kernel, stride=geometry.stride, padding=geometry.op_padding,
                           count_include_pad=include_pad)
        if divisor is not None:
            # with count_include_pad the op divides every window by its full size: rescale to divisor_override
            y = y * (math.prod(geometry.kernel) / divisor)
        return unbatch(y, unbatched)


class AvgPool1d(_AvgPool, nn.AvgPool1d):
    """torch.nn.AvgPool1d computed by dnnbind."""
    _spatial = 1


class AvgPool2d(_AvgPool, nn.AvgPool2d):
    """torch.nn.AvgPool2d computed by dnnbind."""
    _spatial = 2


class AvgPool3d(_AvgPool, nn.AvgPool3d):
    """torch.nn.AvgPool3d computed by dnnbind."""
    _spatial = 3
