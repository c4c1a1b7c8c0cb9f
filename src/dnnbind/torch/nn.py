"""``torch.nn`` modules running dnnbind's ops: swap a torch layer for one of these, keep the state_dict.

Parameter and buffer names, shapes and initialisation follow torch.nn.Conv{1,2,3}d, BatchNorm{1,2,3}d,
so ``Conv2d(...).load_state_dict(torch.nn.Conv2d(...).state_dict())`` works (and back).
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from dnnbind.torch import functional as F
from dnnbind.torch.recurrent import GRU, LSTM, RNN

__all__ = ["Conv", "Conv1d", "Conv2d", "Conv3d", "Pool", "BatchNorm", "Dropout", "RNN", "LSTM", "GRU"]


def _tuple(value: Any, n: int, name: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * n
    value = tuple(value)
    if len(value) != n:
        raise ValueError(f"{name}={value!r} must be an int or {n} ints")
    return value


class Conv(nn.Module):
    """Convolution over ``ndim`` spatial dims (1 to 3) with torch.nn.ConvNd's parameters (weight, bias).

    ``ndim`` defaults to the length of a tuple ``kernel_size``, else 2. ``padding`` is an int, one int
    per dim, or one (low, high) pair per dim; ``flip=True`` computes a true convolution.
    """

    ndim: int | None = None

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True, *, ndim: int | None = None,
                 flip: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        ndim = ndim or self.ndim or (len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 2)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"in_channels={in_channels} and out_channels={out_channels} must be divisible "
                             f"by groups={groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, ndim, "kernel_size")
        self.stride, self.padding, self.dilation, self.flip = stride, padding, dilation, flip
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups, *self.kernel_size, **factory))
        self.bias = nn.Parameter(torch.empty(out_channels, **factory)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch.nn.ConvNd's initialisation."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight[0].numel()
            bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                      dilation=self.dilation, groups=self.groups, flip=self.flip)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, "
                f"bias={self.bias is not None}" + (", flip=True" if self.flip else ""))


class Conv1d(Conv):
    ndim = 1


class Conv2d(Conv):
    ndim = 2


class Conv3d(Conv):
    ndim = 3


class Pool(nn.Module):
    """Max (``mode="max"``) or average (``mode="mean"``) pooling over 1 to 3 spatial dims."""

    def __init__(self, window: Any, stride: Any = None, padding: Any = 0, *, mode: str = "max",
                 count_include_pad: bool = True) -> None:
        super().__init__()
        if mode not in ("max", "mean"):
            raise ValueError(f"mode={mode!r} must be 'max' or 'mean'")
        self.window, self.stride, self.padding, self.mode = window, stride, padding, mode
        self.count_include_pad = count_include_pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "max":
            return F.maxpool(x, self.window, stride=self.stride, padding=self.padding)
        return F.meanpool(x, self.window, stride=self.stride, padding=self.padding,
                          count_include_pad=self.count_include_pad)

    def extra_repr(self) -> str:
        return f"{self.window}, stride={self.stride}, padding={self.padding}, mode={self.mode!r}"


class BatchNorm(nn.Module):
    """Batch normalisation over channel axis 1 of (N, C) or (N, C, *spatial) inputs, like
    torch.nn.BatchNorm{1,2,3}d: parameters weight and bias (when ``affine``), buffers running_mean,
    running_var and num_batches_tracked (when ``track_running_stats``); ``momentum=None`` is the
    cumulative average. Training mode uses and updates batch statistics, eval mode the running ones.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, *, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.ones(num_features, **factory)) if affine else None
        self.bias = nn.Parameter(torch.zeros(num_features, **factory)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features, **factory))
            self.register_buffer("running_var", torch.ones(num_features, **factory))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        momentum = self.momentum if self.momentum is not None else 0.0
        if self.training and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        gamma = self.weight if self.weight is not None else torch.ones(x.shape[1], dtype=x.dtype, device=x.device)
        beta = self.bias if self.bias is not None else torch.zeros(x.shape[1], dtype=x.dtype, device=x.device)
        # without running statistics, eval mode normalises with the batch's own (as torch does)
        return F.batchnorm(x, gamma, beta, running_mean=self.running_mean, running_var=self.running_var,
                           training=self.training or self.running_mean is None, momentum=momentum, eps=self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class Dropout(nn.Module):
    """Inverted dropout in training mode, the identity in eval mode."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.p) if self.training and self.p > 0 else x

    def extra_repr(self) -> str:
        return f"p={self.p}"
