"""BatchNorm{1,2,3}d: torch.nn's classes (parameters, buffers, momentum=None as the cumulative average,
num_batches_tracked, state_dict, repr) whose forward runs dnnbind's batchnorm op."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dnnbind.torch import functional as F
from dnnbind.torch.errors import torch_argument_names

Tensor = torch.Tensor
_NAMES = {"x": "input", "gamma": "weight", "beta": "bias"}


class _BatchNorm:
    """forward shared by BatchNorm1d, BatchNorm2d and BatchNorm3d; it follows torch.nn's _BatchNorm.forward."""

    def forward(self, input: Tensor) -> Tensor:
        layer: Any = self
        layer._check_input_dim(input)
        momentum = 0.0 if layer.momentum is None else layer.momentum
        if layer.training and layer.track_running_stats and layer.num_batches_tracked is not None:
            layer.num_batches_tracked.add_(1)
            if layer.momentum is None:                     # cumulative moving average
                momentum = 1.0 / float(layer.num_batches_tracked)
        # batch statistics in training, and in eval mode when there are no running statistics
        use_batch = layer.training or (layer.running_mean is None and layer.running_var is None)
        update = not layer.training or layer.track_running_stats
        channels = input.shape[1]
        gamma = layer.weight if layer.weight is not None else input.new_ones(channels)
        beta = layer.bias if layer.bias is not None else input.new_zeros(channels)
        with torch_argument_names(_NAMES):
            return F.batchnorm(input, gamma, beta, running_mean=layer.running_mean if update else None,
                               running_var=layer.running_var if update else None, training=use_batch,
                               momentum=momentum, eps=layer.eps)


class BatchNorm1d(_BatchNorm, nn.BatchNorm1d):
    """torch.nn.BatchNorm1d computed by dnnbind."""


class BatchNorm2d(_BatchNorm, nn.BatchNorm2d):
    """torch.nn.BatchNorm2d computed by dnnbind."""


class BatchNorm3d(_BatchNorm, nn.BatchNorm3d):
    """torch.nn.BatchNorm3d computed by dnnbind."""
