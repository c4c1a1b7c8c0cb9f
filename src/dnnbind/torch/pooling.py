"""MaxPool{1,2,3}d and AvgPool{1,2,3}d: torch.nn's classes whose forward runs dnnbind's maxpool and
meanpool ops.

kernel_size, stride, padding, dilation and return_indices (max), ceil_mode and count_include_pad are
the ops' own arguments. ``divisor_override`` rescales a ``count_include_pad=True`` mean: each output
times its divisor (:meth:`PoolDims.mean_counts`, the same rule the ops use) over the override.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from dnnbind.highlevel.dims import PoolDims
from dnnbind.torch import functional as F
from dnnbind.torch.errors import torch_argument_names
from dnnbind.torch.layer_inputs import batched, unbatch

Tensor = torch.Tensor
_NAMES = {"x": "input", "window": "kernel_size"}


class _MaxPool:
    """forward shared by MaxPool1d, MaxPool2d and MaxPool3d."""

    def forward(self, input: Tensor) -> Any:
        layer: Any = self
        x, unbatched = batched(type(self).__name__, input, layer._spatial)
        with torch_argument_names(_NAMES):
            out = F.maxpool(x, layer.kernel_size, stride=layer.stride or None, padding=layer.padding,
                            dilation=layer.dilation, ceil_mode=layer.ceil_mode,
                            return_indices=bool(layer.return_indices))
        if layer.return_indices:
            return unbatch(out[0], unbatched), unbatch(out[1], unbatched)
        return unbatch(out, unbatched)


class MaxPool1d(_MaxPool, nn.MaxPool1d):
    """torch.nn.MaxPool1d computed by dnnbind."""
    _spatial = 1


class MaxPool2d(_MaxPool, nn.MaxPool2d):
    """torch.nn.MaxPool2d computed by dnnbind."""
    _spatial = 2


class MaxPool3d(_MaxPool, nn.MaxPool3d):
    """torch.nn.MaxPool3d computed by dnnbind."""
    _spatial = 3


@torch.compiler.assume_constant_result
def _include_pad_counts(shape: tuple[int, ...], kernel: Any, stride: Any, padding: Any,
                        ceil_mode: bool) -> tuple[tuple[int, ...], ...]:
    """:meth:`PoolDims.mean_counts` with count_include_pad: a constant for torch.compile (the layer's
    settings and x's shape)."""
    return PoolDims(shape, kernel, stride=stride, padding=padding, ceil_mode=ceil_mode).mean_counts(True)


def _override_scale(x: Tensor, kernel: Any, stride: Any, padding: Any, ceil_mode: bool, divisor: int) -> Any:
    """What turns the count_include_pad=True mean into torch's divisor_override mean: a number, or a
    tensor of shape (1, 1, *out) where ceil_mode's windows divide by less than the whole kernel."""
    n = x.dim() - 2
    window = tuple(kernel) if isinstance(kernel, (tuple, list)) else (kernel,) * n
    if not ceil_mode:
        return math.prod(window) / divisor
    counts = _include_pad_counts(tuple(int(s) for s in x.shape), kernel, stride, padding, bool(ceil_mode))
    if all(c == k for per_dim, k in zip(counts, window) for c in per_dim):
        return math.prod(window) / divisor
    scale = torch.ones((1, 1) + (1,) * n, dtype=torch.float64)
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
