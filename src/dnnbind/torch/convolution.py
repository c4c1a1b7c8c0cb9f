"""Conv{1,2,3}d and ConvTranspose{1,2,3}d: torch.nn's classes (arguments, parameters, initialisation,
repr, state_dict) whose forward runs dnnbind's conv and conv_transpose ops.

A padding_mode other than "zeros" (reflect, replicate, circular) pads the input with torch's own
``torch.nn.functional.pad`` and convolves without padding, as torch.nn.Conv{1,2,3}d does itself: the
convolution is dnnbind's, the copy that pads is torch's."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dnnbind.torch import functional as F
from dnnbind.torch.errors import torch_argument_names
from dnnbind.torch.fused import Fusion
from dnnbind.torch.layer_inputs import batched, fusion, per_dim, unbatch

Tensor = torch.Tensor
_NAMES = {"x": "input", "w": "weight", "b": "bias"}


def conv_padding(layer: nn.modules.conv._ConvNd) -> Any:
    """The op's padding for a torch conv layer: ints, or (low, high) pairs for padding="same"."""
    if layer.padding == "valid":
        return 0
    if layer.padding == "same":
        pairs = []
        for k, d in zip(layer.kernel_size, layer.dilation):
            total = d * (k - 1)
            pairs.append((total // 2, total - total // 2))   # torch puts the odd element on the high side
        return pairs
    return layer.padding


class _Conv:
    """forward shared by Conv1d, Conv2d and Conv3d."""

    def _settings(self) -> dict[str, Any]:
        """The conv op's keyword arguments for this layer (no padding where the input comes padded)."""
        layer: Any = self
        padding = 0 if layer.padding_mode != "zeros" else conv_padding(layer)
        if not isinstance(layer.padding, str):
            padding = per_dim(layer, "padding", padding)
        return {"stride": per_dim(layer, "stride", layer.stride), "padding": padding,
                "dilation": per_dim(layer, "dilation", layer.dilation), "groups": layer.groups}

    def forward(self, input: Tensor) -> Tensor:
        layer: Any = self
        per_dim(layer, "kernel_size", layer.kernel_size)
        x, unbatched = batched(type(self).__name__, input, layer._spatial)
        if layer.padding_mode != "zeros":       # torch's own padding (and its checks), as torch's layer
            x = torch.nn.functional.pad(x, layer._reversed_padding_repeated_twice, mode=layer.padding_mode)
        with torch_argument_names(_NAMES):
            y = F.conv(x, layer.weight, layer.bias, **self._settings())
        return unbatch(y, unbatched)

    def _fuses(self) -> bool:
        """Whether its settings let the layer join a Sequential's run (a padding mode other than zeros pads
        through torch)."""
        return self.padding_mode == "zeros"  # type: ignore[attr-defined]

    def _fusion(self, shape: tuple[int, ...]) -> Fusion | None:
        """This layer's op on a batched input of ``shape`` for :class:`~dnnbind.torch.sequential.Sequential`
        (None: the layer's own forward must run: settings :meth:`_fuses` refuses, or unbatched input)."""
        layer: Any = self
        if not self._fuses() or len(shape) != layer._spatial + 2:
            return None
        per_dim(layer, "kernel_size", layer.kernel_size)
        return fusion(F.conv, (layer.weight, layer.bias), **self._settings())


class Conv1d(_Conv, nn.Conv1d):
    """torch.nn.Conv1d computed by dnnbind (other padding modes pad through torch, as torch's own)."""
    _spatial = 1


class Conv2d(_Conv, nn.Conv2d):
    """torch.nn.Conv2d computed by dnnbind (other padding modes pad through torch, as torch's own)."""
    _spatial = 2


class Conv3d(_Conv, nn.Conv3d):
    """torch.nn.Conv3d computed by dnnbind (other padding modes pad through torch, as torch's own)."""
    _spatial = 3


class _ConvTranspose:
    """forward shared by ConvTranspose1d, ConvTranspose2d and ConvTranspose3d (output_size as in torch)."""

    def _settings(self, output_padding: Any) -> dict[str, Any]:
        """The conv_transpose op's keyword arguments for this layer."""
        layer: Any = self
        return {"stride": per_dim(layer, "stride", layer.stride), "padding": per_dim(layer, "padding", layer.padding),
                "output_padding": per_dim(layer, "output_padding", output_padding),
                "dilation": per_dim(layer, "dilation", layer.dilation), "groups": layer.groups}

    def forward(self, input: Tensor, output_size: list[int] | None = None) -> Tensor:
        layer: Any = self
        spatial = layer._spatial
        per_dim(layer, "kernel_size", layer.kernel_size)
        x, unbatched = batched(type(self).__name__, input, spatial)
        # torch's own arithmetic turns output_size into output_padding (and checks it)
        output_padding = layer._output_padding(input, output_size, layer.stride, layer.padding,
                                               layer.kernel_size, spatial, layer.dilation)
        with torch_argument_names(_NAMES):
            y = F.conv_transpose(x, layer.weight, layer.bias, **self._settings(output_padding))
        return unbatch(y, unbatched)

    def _fuses(self) -> bool:
        """Whether its settings let the layer join a Sequential's run (not a padding_mode torch refuses)."""
        return self.padding_mode == "zeros"  # type: ignore[attr-defined]

    def _fusion(self, shape: tuple[int, ...]) -> Fusion | None:
        """This layer's op on a batched input of ``shape`` (called without output_size, as a Sequential
        calls it) for :class:`~dnnbind.torch.sequential.Sequential` (None: unbatched input, or settings
        :meth:`_fuses` refuses)."""
        layer: Any = self
        if not self._fuses() or len(shape) != layer._spatial + 2:
            return None
        per_dim(layer, "kernel_size", layer.kernel_size)
        # torch's own arithmetic, as forward's: without output_size it reads no input
        output_padding = layer._output_padding(None, None, layer.stride, layer.padding, layer.kernel_size,
                                               len(layer.kernel_size), layer.dilation)
        return fusion(F.conv_transpose, (layer.weight, layer.bias), **self._settings(output_padding))


class ConvTranspose1d(_ConvTranspose, nn.ConvTranspose1d):
    """torch.nn.ConvTranspose1d computed by dnnbind."""
    _spatial = 1


class ConvTranspose2d(_ConvTranspose, nn.ConvTranspose2d):
    """torch.nn.ConvTranspose2d computed by dnnbind."""
    _spatial = 2


class ConvTranspose3d(_ConvTranspose, nn.ConvTranspose3d):
    """torch.nn.ConvTranspose3d computed by dnnbind."""
    _spatial = 3
