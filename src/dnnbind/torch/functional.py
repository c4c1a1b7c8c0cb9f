"""dnnbind's ten ops on torch tensors; same arguments and semantics as :mod:`dnnbind.highlevel.ops`.

Each is differentiable through ``torch.autograd`` by way of :func:`dnnbind.torch.autograd.apply`.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import torch

from dnnbind.highlevel import ops
from dnnbind.torch.autograd import apply

Tensor = torch.Tensor


def conv(x: Tensor, w: Tensor, b: Tensor | None = None, *, stride: Any = 1, padding: Any = 0,
         dilation: Any = 1, groups: int = 1, flip: bool = False) -> Tensor:
    """N-d convolution (1 to 3 spatial dims) like ``torch.nn.functional.conv{1,2,3}d``; ``flip=True``:
    true convolution. ``padding`` may also be one (low, high) pair per spatial dim."""
    run = functools.partial(ops.conv, stride=stride, padding=padding, dilation=dilation, groups=groups, flip=flip)
    return apply(run, {"x": x, "w": w, "b": b})


def conv_transpose(x: Tensor, w: Tensor, b: Tensor | None = None, *, stride: Any = 1, padding: Any = 0,
                   output_padding: Any = 0, dilation: Any = 1, groups: int = 1, flip: bool = False) -> Tensor:
    """Transposed convolution like ``torch.nn.functional.conv_transpose{1,2,3}d`` (w is (C_in, C_out/groups, ...))."""
    run = functools.partial(ops.conv_transpose, stride=stride, padding=padding, output_padding=output_padding,
                            dilation=dilation, groups=groups, flip=flip)
    return apply(run, {"x": x, "w": w, "b": b})


def maxpool(x: Tensor, window: Any, *, stride: Any = None, padding: Any = 0) -> Tensor:
    """Max pooling like ``torch.nn.functional.max_pool{1,2,3}d`` (stride defaults to the window)."""
    return apply(functools.partial(ops.maxpool, window=window, stride=stride, padding=padding), {"x": x})


def meanpool(x: Tensor, window: Any, *, stride: Any = None, padding: Any = 0,
             count_include_pad: bool = True) -> Tensor:
    """Average pooling like ``torch.nn.functional.avg_pool{1,2,3}d``."""
    run = functools.partial(ops.meanpool, window=window, stride=stride, padding=padding,
                            count_include_pad=count_include_pad)
    return apply(run, {"x": x})


def softmax(x: Tensor, *, axis: int = 1) -> Tensor:
    """Softmax along ``axis`` (``torch.softmax(x, dim=axis)``)."""
    return apply(functools.partial(ops.softmax, axis=axis), {"x": x})


def logsoftmax(x: Tensor, *, axis: int = 1) -> Tensor:
    """Log-softmax along ``axis`` (``torch.log_softmax(x, dim=axis)``)."""
    return apply(functools.partial(ops.logsoftmax, axis=axis), {"x": x})


def activation(x: Tensor, mode: str, *, alpha: float | None = None) -> Tensor:
    """Pointwise activation: relu, sigmoid, tanh, elu, leaky_relu, clipped_relu, swish or identity."""
    return apply(functools.partial(ops.activation, mode=mode, alpha=alpha), {"x": x})


def batchnorm(x: Tensor, gamma: Tensor, beta: Tensor, *, running_mean: Tensor | None = None,
              running_var: Tensor | None = None, training: bool = True, momentum: float = 0.1,
              eps: float = 1e-5) -> Tensor:
    """Batch normalisation over axis 1 like ``torch.nn.functional.batch_norm``; the running statistics
    (contiguous tensors) are updated in place when training."""
    run = functools.partial(ops.batchnorm, training=training, momentum=momentum, eps=eps)
    return apply(run, {"x": x, "gamma": gamma, "beta": beta},
                 inplace={"running_mean": running_mean, "running_var": running_var})


def dropout(x: Tensor, p: float, *, seed: int | None = None) -> Tensor:
    """Inverted dropout with probability ``p``. Without a seed one is drawn from torch's default
    generator, so ``torch.manual_seed`` makes it reproducible."""
    if seed is None:
        seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
    return apply(functools.partial(ops.dropout, p=p, seed=seed), {"x": x})


def _rnn(x: Any, h0: Any, c0: Any, weights: Any, **kwargs: Any) -> Any:
    """ops.rnn with its array arguments in the order of its pullback's gradients."""
    return ops.rnn(x, weights, h0=h0, c0=c0, **kwargs)


def rnn(x: Tensor, weights: Sequence[Sequence[Tensor | None]], *, mode: str = "lstm", hidden_size: int,
        num_layers: int = 1, bidirectional: bool = False, h0: Tensor | None = None, c0: Tensor | None = None,
        lengths: Any = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """Multi-layer RNN over x (seq, batch, input) with torch.nn.LSTM/GRU/RNN's weights and semantics.

    ``weights[layer * num_directions + direction] = (w_ih, w_hh, b_ih, b_hh)``; ``lengths`` gives
    packed-sequence semantics. Returns (y, hy, cy), cy None unless ``mode="lstm"``.
    """
    if isinstance(lengths, torch.Tensor):
        lengths = lengths.tolist()
    run = functools.partial(_rnn, mode=mode, hidden_size=hidden_size, num_layers=num_layers,
                            bidirectional=bidirectional, lengths=lengths)
    return apply(run, {"x": x, "h0": h0, "c0": c0, "weights": weights})
