"""MaxPool{1,2,3}d and AvgPool{1,2,3}d: torch.nn's classes whose forward runs dnnbind's maxpool and
meanpool ops.

kernel_size, stride, padding, dilation and return_indices (max), ceil_mode, count_include_pad and
divisor_override (mean) are the ops' own arguments.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dnnbind.torch import functional as F
from dnnbind.torch.errors import torch_argument_names
from dnnbind.torch.fused import Fusion
from dnnbind.torch.layer_inputs import batched, fusion, per_dim, unbatch

Tensor = torch.Tensor
_NAMES = {"x": "input", "window": "kernel_size"}


def _pool_settings(layer: Any) -> tuple[Any, dict[str, Any]]:
    """(window, the settings both pooling ops share) of a pooling layer: a stride of None or () (torch's
    "the kernel size") is the op's None; a stride of 0 reaches the op, which refuses it."""
    stride = layer.stride
    if stride is None or (isinstance(stride, (list, tuple)) and not stride):
        stride = None
    return per_dim(layer, "kernel_size", layer.kernel_size), {
        "stride": None if stride is None else per_dim(layer, "stride", stride),
        "padding": per_dim(layer, "padding", layer.padding)}


class _MaxPool:
    """forward shared by MaxPool1d, MaxPool2d and MaxPool3d."""

    def _settings(self) -> tuple[Any, dict[str, Any]]:
        """(window, the maxpool op's keyword arguments) for this layer."""
        layer: Any = self
        window, shared = _pool_settings(layer)
        return window, {**shared, "dilation": per_dim(layer, "dilation", layer.dilation),
                        "ceil_mode": layer.ceil_mode, "return_indices": bool(layer.return_indices)}

    def forward(self, input: Tensor) -> Any:
        layer: Any = self
        window, settings = self._settings()
        x, unbatched = batched(type(self).__name__, input, layer._spatial)
        with torch_argument_names(_NAMES):
            out = F.maxpool(x, window, **settings)
        if layer.return_indices:
            return unbatch(out[0], unbatched), unbatch(out[1], unbatched)
        return unbatch(out, unbatched)

    def _fuses(self) -> bool:
        """Whether its settings let the layer join a Sequential's run (not with indices asked for: a run's
        layers have one result each)."""
        return not self.return_indices  # type: ignore[attr-defined]

    def _fusion(self, shape: tuple[int, ...]) -> Fusion | None:
        """This layer's op for :class:`~dnnbind.torch.sequential.Sequential` (None: unbatched input, or
        settings :meth:`_fuses` refuses)."""
        layer: Any = self
        if not self._fuses() or len(shape) != layer._spatial + 2:
            return None
        window, settings = self._settings()
        return fusion(F.maxpool, (), window, **settings)


class MaxPool1d(_MaxPool, nn.MaxPool1d):
    """torch.nn.MaxPool1d computed by dnnbind."""
    _spatial = 1


class MaxPool2d(_MaxPool, nn.MaxPool2d):
    """torch.nn.MaxPool2d computed by dnnbind."""
    _spatial = 2


class MaxPool3d(_MaxPool, nn.MaxPool3d):
    """torch.nn.MaxPool3d computed by dnnbind."""
    _spatial = 3


class _AvgPool:
    """forward shared by AvgPool1d, AvgPool2d and AvgPool3d."""

    def _settings(self) -> tuple[Any, dict[str, Any]]:
        """(window, the meanpool op's keyword arguments) for this layer."""
        layer: Any = self
        window, shared = _pool_settings(layer)
        return window, {**shared, "count_include_pad": layer.count_include_pad, "ceil_mode": layer.ceil_mode,
                        "divisor_override": getattr(layer, "divisor_override", None)}    # AvgPool1d has none

    def forward(self, input: Tensor) -> Tensor:
        layer: Any = self
        window, settings = self._settings()
        x, unbatched = batched(type(self).__name__, input, layer._spatial)
        with torch_argument_names(_NAMES):
            y = F.meanpool(x, window, **settings)
        return unbatch(y, unbatched)

    def _fusion(self, shape: tuple[int, ...]) -> Fusion | None:
        """This layer's op for :class:`~dnnbind.torch.sequential.Sequential` (None: unbatched input)."""
        layer: Any = self
        if len(shape) != layer._spatial + 2:
            return None
        window, settings = self._settings()
        return fusion(F.meanpool, (), window, **settings)


class AvgPool1d(_AvgPool, nn.AvgPool1d):
    """torch.nn.AvgPool1d computed by dnnbind."""
    _spatial = 1


class AvgPool2d(_AvgPool, nn.AvgPool2d):
    """torch.nn.AvgPool2d computed by dnnbind."""
    _spatial = 2


class AvgPool3d(_AvgPool, nn.AvgPool3d):
    """torch.nn.AvgPool3d computed by dnnbind."""
    _spatial = 3
