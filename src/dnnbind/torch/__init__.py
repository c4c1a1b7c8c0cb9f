"""PyTorch adapter: dnnbind's ops on torch tensors, differentiable through ``torch.autograd``.

CPU tensors run on the cpu backend (numpy), CUDA tensors on the GPU backends (through CuPy, on
torch's current stream); both without copies. Gradients come from the ops' own pullbacks.

Functions (``dnnbind.torch.conv`` ...) take and return tensors; layers with torch.nn's names and
arguments (``dnnbind.torch.Conv2d`` ...) live in :mod:`dnnbind.torch.nn`, which is torch.nn with
dnnbind's layers in place of torch's: ``from dnnbind.torch import nn`` switches a model over.

PyTorch is optional: ``import dnnbind`` never imports it; only ``import dnnbind.torch`` does.
"""
from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as exc:                              # pragma: no cover - exercised in a subprocess test
    raise ImportError("dnnbind.torch needs PyTorch (pip install torch); the rest of dnnbind works "
                      "without it") from exc

from dnnbind.highlevel.specs import OP_NAMES
from dnnbind.torch import nn
from dnnbind.torch.functional import (activation, batchnorm, conv, conv_bias_activation, conv_transpose, dropout,
                                      layer_norm, logsoftmax, maxpool, meanpool, rnn, softmax)
from dnnbind.torch.nn import (ELU, GRU, LSTM, RNN, AvgPool1d, AvgPool2d, AvgPool3d, BatchNorm1d, BatchNorm2d,
                              BatchNorm3d, Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
                              ConvTranspose3d, Dropout, Hardtanh, LayerNorm, LeakyReLU, LogSoftmax, MaxPool1d,
                              MaxPool2d, MaxPool3d, ReLU, ReLU6, Sigmoid, SiLU, Softmax, Tanh)

from dnnbind.highlevel.cpu import native as _native

# the cpu backend's C kernels split their work over torch's own OpenMP threads from now on (which
# spin after every torch op: threads of dnnbind's own beside them would fight them for the cores)
_native.share_openmp_team()

__all__ = [*OP_NAMES, "nn", *nn.PROVIDED]
