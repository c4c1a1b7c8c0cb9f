"""The numpy reference backend: defines the ops' semantics and is the oracle for the GPU backends.

Each function takes arguments already checked by :mod:`dnnbind.highlevel.ops` and returns
``(result, pullback)``. A GPU backend provides the same names with the same signatures:

    conv(x, w, b, dims: ConvDims)               b may be None
    conv_transpose(x, w, b, dims: ConvDims)     dims from ConvDims.transposed (x_shape = the output's)
    maxpool(x, dims: PoolDims)
    meanpool(x, dims: PoolDims, count_include_pad: bool)
    softmax(x, axis: int), logsoftmax(x, axis: int)       axis already non-negative
    activation(x, mode: str, alpha: float | None)         alpha already resolved to the mode's default
    batchnorm(x, gamma, beta, *, running_mean, running_var, training, momentum, eps)
    dropout(x, p: float, seed)                            seed: None, an int or a numpy Generator
    rnn(x, weights, h0, c0, dims: RNNDims)                weights: list of [w_ih, w_hh, b_ih, b_hh]
"""
from __future__ import annotations

from dnnbind.highlevel.reference.activation import activation
from dnnbind.highlevel.reference.batchnorm import batchnorm
from dnnbind.highlevel.reference.conv import conv, conv_transpose
from dnnbind.highlevel.reference.dropout import dropout
from dnnbind.highlevel.reference.pool import maxpool, meanpool
from dnnbind.highlevel.reference.rnn import rnn
from dnnbind.highlevel.reference.softmax import logsoftmax, softmax

from dnnbind.highlevel.edges import guarded

# the edge policy (0-d and zero-size arrays) for every op, called through dnnbind's ops or directly
conv, conv_transpose = guarded("conv")(conv), guarded("conv_transpose")(conv_transpose)
maxpool, meanpool = guarded("maxpool")(maxpool), guarded("meanpool")(meanpool)
softmax, logsoftmax = guarded("softmax")(softmax), guarded("logsoftmax")(logsoftmax)
activation, dropout = guarded("activation")(activation), guarded("dropout")(dropout)
batchnorm, rnn = guarded("batchnorm")(batchnorm), guarded("rnn")(rnn)

__all__ = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation",
           "batchnorm", "dropout", "rnn"]
