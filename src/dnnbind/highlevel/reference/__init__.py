"""The numpy reference backend: defines the ops' semantics and is the oracle for the GPU backends.

Each function takes arguments already checked by :mod:`dnnbind.highlevel.ops` (dims objects, resolved
coefficients) and returns ``(result, pullback)``. A GPU backend provides the same names.
"""
from __future__ import annotations

from dnnbind.highlevel.reference.activation import activation
from dnnbind.highlevel.reference.batchnorm import batchnorm
from dnnbind.highlevel.reference.conv import conv, conv_transpose
from dnnbind.highlevel.reference.dropout import dropout
from dnnbind.highlevel.reference.pool import maxpool, meanpool
from dnnbind.highlevel.reference.rnn import rnn
from dnnbind.highlevel.reference.softmax import logsoftmax, softmax

__all__ = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation",
           "batchnorm", "dropout", "rnn"]
