"""High-level ops on numpy (reference backend) or CuPy (cuDNN / MIOpen) arrays.

Every op returns ``(result, pullback)``; see :mod:`dnnbind.highlevel.ops` for the contract and
:mod:`dnnbind.highlevel.dims` for the shape logic shared by all backends.
"""
from __future__ import annotations

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.grad_mode import no_grad
from dnnbind.highlevel.ops import (activation, batchnorm, conv, conv_transpose, dropout, logsoftmax, maxpool,
                                   meanpool, rnn, softmax)

__all__ = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation",
           "batchnorm", "dropout", "rnn", "ConvDims", "PoolDims", "no_grad"]
