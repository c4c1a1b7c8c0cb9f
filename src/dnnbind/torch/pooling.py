"""MaxPool{1,2,3}d and AvgPool{1,2,3}d: torch.nn's classes whose forward runs dnnbind's maxpool and
meanpool ops.

kernel_size, stride, padding, dilation (max), ceil_mode and count_include_pad are the ops' own
arguments. ``divisor_override`` rescales a ``count_include_pad=True`` mean: each output times its
divisor (:meth:`PoolDims.mean_counts`, the same rule the ops use) over the override.
``return_indices=True`` raises NotImplementedError.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from dnnbind.highlevel.dims import PoolDims
from dnnbind.torch import functional as F
from dnnbind.torch.errors import torch_argument_names
from dnnbind.torch.layer_inputs import batched, not_supported, unbatch

Tensor = torch.Tensor
_NAMES = {"x": "input", "window": "kernel_size"}


class _MaxPool:
    """forward and the option checks shared by MaxPool1d, MaxPool2d and MaxPool3d."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__(kernel_size, stride, padding, dilation, return_indices, ceil_mode)  # type: ignore[call-arg]
        self._check_options()

    def _check_options(self) -> None:
        layer: Any = self
        if layer.return_indices:
            raise not_supported(type(self).__name__, "return_indices", True, "dnnbind's maxpool returns no indices")

    def forward(self, input: Tensor) -> Tensor:
        layer: Any = self
        x, unbatched = batched(type(self).__name__, input, layer._spatial)
        self._check_options()
        with torch_argument_names(_NAMES):
            y = F.maxpool(x, layer.kernel_size, stride=layer.stride or None, padding=layer.padding,
                          dilation=layer.dilation, ceil_mode=layer.ceil_mode)
        return unbatch(y, unbatched)


class MaxPool1d(_MaxPool, nn.MaxPool1d):
    """torch.nn.MaxPool1d computed by dnnbind (no return_indices)."""
    _spatial = 1


class MaxPool2d(_MaxPool, nn.MaxPool2d):
    """torch.nn.MaxPool2d computed by dnnbind (no return_indices)."""
    _spatial = 2


class MaxPool3d(_MaxPool, nn.MaxPool3d):
    """torch.nn.MaxPool3d computed by dnnbind (no return_indices)."""
    _spatial = 3


def _override_scale(x: Tensor, kernel: Any, stride: Any, padding: Any, ceil_mode: bool, divisor: int) -> Any:
    """What turns the count_include_pad=True mean into torch's divisor_override mean: a number, or a
    tensor of shape (1, 1, *out) where ceil_mode's windows divide by less than the whole kernel."""
    dims = PoolDims(tuple(x.shape), kernel, stride=stride, padding=padding, ceil_mode=ceil_mode,
                    dtype=str(x.dtype).removeprefix("torch."))
    counts = dims.mean_counts(True)
    if all(c == k for per_dim, k in zip(counts, dims.window) for c in per_dim):
        return math.prod(dims.window) / divisor
    scale = torch.ones((1, 1) + (1,) * dims.spatial_rank, dtype=torch.float64)
    for axis, per_dim in enumerate(counts):
        shape = [1] * scale.dim()
        shape[2 + axis] = len(per_dim)
        scale = scale * torch.tensor(per_dim, dtype=torch.float64).reshape(shape)
    return (scale / divisor).to(device=x.device, dtype=x.dtype)


class _AvgPool:
    """forward shared by AvgPool1d, AvgPool2d and AvgPool3d."""

    def forward(self, input: Tensor) -> Tensor:
        layer: Any = self
        name = type(self).__name__
        x, unbatched = batched(name, input, layer._spatial)
        divisor = getattr(layer, "divisor_override", None)       # AvgPool1d has none
        if divisor is not None and (isinstance(divisor, bool) or not isinstance(divisor, int) or divisor == 0):
            raise ValueError(f"{name}: divisor_override={divisor!r} must be a non-zero int")
        include_pad = bool(layer.count_include_pad) or divisor is not None
        stride = layer.stride or None
        with torch_argument_names(_NAMES):
            y = F.meanpool(x, layer.kernel_size, stride=stride, padding=layer.padding,
                           count_include_pad=include_pad, ceil_mode=layer.ceil_mode)
            if divisor is not None:
                y = y * _override_scale(x, layer.kernel_size, stride, layer.padding, layer.ceil_mode, divisor)
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
