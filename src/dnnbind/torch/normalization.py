"""BatchNorm{1,2,3}d and LayerNorm: torch.nn's classes (parameters, buffers, momentum=None as the cumulative
average, num_batches_tracked, state_dict, repr) whose forward runs dnnbind's batchnorm and layer_norm ops."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dnnbind.torch import functional as F
from dnnbind.torch.errors import torch_argument_names
from dnnbind.torch.fused import Fusion
from dnnbind.torch.layer_inputs import fusion

Tensor = torch.Tensor
_NAMES = {"x": "input", "gamma": "weight", "beta": "bias"}
_LAYER_NORM_NAMES = {"x": "input"}
#: input dtypes that batch norm normalises in float32 when its parameters are float32 (mixed precision)
_HALF = (torch.float16, torch.bfloat16)


class _BatchNorm:
    """forward shared by BatchNorm1d, BatchNorm2d and BatchNorm3d; it follows torch.nn's _BatchNorm.forward."""

    def _settings(self) -> tuple[Tensor | None, Tensor | None, bool, Tensor | None]:
        """(running_mean, running_var, training, counted): the statistics the op updates or reads (None:
        none), whether it normalises by the batch's own statistics, and the num_batches_tracked a call
        counts (None: no count)."""
        layer: Any = self
        # batch statistics in training, and in eval mode when there are no running statistics
        use_batch = layer.training or (layer.running_mean is None and layer.running_var is None)
        update = not layer.training or layer.track_running_stats
        counted = (layer.num_batches_tracked if layer.training and layer.track_running_stats
                   and layer.num_batches_tracked is not None else None)
        return (layer.running_mean if update else None, layer.running_var if update else None, use_batch,
                counted)

    def forward(self, input: Tensor) -> Tensor:
        layer: Any = self
        layer._check_input_dim(input)
        running_mean, running_var, use_batch, counted = self._settings()
        momentum = 0.0 if layer.momentum is None else layer.momentum
        if counted is not None:
            counted.add_(1)
            if layer.momentum is None:                     # cumulative moving average
                momentum = 1.0 / float(counted)
        channels = input.shape[1]
        gamma = layer.weight if layer.weight is not None else input.new_ones(channels)
        beta = layer.bias if layer.bias is not None else input.new_zeros(channels)
        # a half or bfloat16 input with float32 parameters (mixed precision: autocast leaves batch norm's
        # parameters in float32) is normalised in float32, as torch's own CPU kernel computes it
        mixed = input.dtype in _HALF and gamma.dtype == torch.float32 and beta.dtype == torch.float32
        with torch_argument_names(_NAMES):
            y = F.batchnorm(input.float() if mixed else input, gamma, beta, running_mean=running_mean,
                            running_var=running_var, training=use_batch, momentum=momentum, eps=layer.eps)
        return y.to(input.dtype) if mixed else y

    def _fuses(self) -> bool:
        """Whether its settings let the layer join a Sequential's run (not without affine parameters, nor
        with the cumulative average: momentum None, a new value each call)."""
        layer: Any = self
        return layer.momentum is not None and layer.weight is not None and layer.bias is not None

    def _fusion(self, shape: tuple[int, ...]) -> Fusion | None:
        """This layer's op for :class:`~dnnbind.torch.sequential.Sequential` (None: the layer's own forward
        must run: settings :meth:`_fuses` refuses, or an input its class refuses)."""
        layer: Any = self
        if not self._fuses():
            return None
        try:
            layer._check_input_dim(_Rank(len(shape)))
        except ValueError:
            return None
        running_mean, running_var, use_batch, counted = self._settings()
        return fusion(F.batchnorm, (layer.weight, layer.bias, running_mean, running_var), training=use_batch,
                      momentum=layer.momentum, eps=layer.eps, counted=counted)


class _Rank:
    """Stands for an input of ``rank`` dimensions where torch's _check_input_dim asks for its dim()."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def dim(self) -> int:
        return self.rank


class BatchNorm1d(_BatchNorm, nn.BatchNorm1d):
    """torch.nn.BatchNorm1d computed by dnnbind."""


class BatchNorm2d(_BatchNorm, nn.BatchNorm2d):
    """torch.nn.BatchNorm2d computed by dnnbind."""


class BatchNorm3d(_BatchNorm, nn.BatchNorm3d):
    """torch.nn.BatchNorm3d computed by dnnbind."""


class LayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm computed by dnnbind: same arguments, parameters (weight, bias), repr and
    state_dict. As torch's own kernels do, a float16 or bfloat16 input with float32 parameters (mixed
    precision) is normalized in float32 and comes back in the input's dtype."""

    def forward(self, input: Tensor) -> Tensor:
        weight, bias = self.weight, self.bias
        mixed = (input.dtype in _HALF and (weight is not None or bias is not None)
                 and all(p is None or p.dtype == torch.float32 for p in (weight, bias)))
        with torch_argument_names(_LAYER_NORM_NAMES):
            y = F.layer_norm(input.float() if mixed else input, self.normalized_shape, weight, bias, eps=self.eps)
        return y.to(input.dtype) if mixed else y

    def _fusion(self, shape: tuple[int, ...]) -> Fusion | None:
        """This layer's op for :class:`~dnnbind.torch.sequential.Sequential`."""
        layer: Any = self
        return fusion(F.layer_norm, (layer.weight, layer.bias), tuple(layer.normalized_shape), layer.eps)
