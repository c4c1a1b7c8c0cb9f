"""PyTorch adapter: dnnbind's ops on torch tensors, differentiable through ``torch.autograd``.

CPU tensors run on the numpy reference backend, CUDA tensors on the GPU backends (through CuPy, on
torch's current stream); both without copies. Gradients come from the ops' own pullbacks.

PyTorch is optional: ``import dnnbind`` never imports it; only ``import dnnbind.torch`` does.
"""
from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as exc:                              # pragma: no cover - exercised in a subprocess test
    raise ImportError("dnnbind.torch needs PyTorch (pip install torch); the rest of dnnbind works "
                      "without it") from exc

from dnnbind.torch.functional import (activation, batchnorm, conv, conv_transpose, dropout, logsoftmax,
                                      maxpool, meanpool, rnn, softmax)
from dnnbind.torch.nn import GRU, LSTM, RNN, BatchNorm, Conv, Conv1d, Conv2d, Conv3d, Dropout, Pool

__all__ = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation",
           "batchnorm", "dropout", "rnn",
           "Conv", "Conv1d", "Conv2d", "Conv3d", "Pool", "BatchNorm", "Dropout", "RNN", "LSTM", "GRU"]
