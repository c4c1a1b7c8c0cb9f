"""The cpu backend: the fast numpy backend, the default for numpy arrays (C kernels, threads, BLAS).

Its semantics are those of :mod:`dnnbind.highlevel.reference` (the plain oracle), which the tests
compare it against. Its C kernels come from the optional package dnnbind-native (:mod:`dnnbind.compiled`);
without it every op runs its numpy path. :func:`keep_heap_padding` is an opt-in that changes glibc's heap
settings for the whole process (see ``_heap.py`` for its measured effect); dnnbind never calls it itself.

Each function takes arguments already checked by :mod:`dnnbind.highlevel.ops` and returns
``(result, pullback)``. A GPU backend provides the same names with the same signatures:

    conv(x, w, b, dims: ConvDims)               b may be None
    conv_transpose(x, w, b, dims: ConvDims)     dims from ConvDims.transposed (x_shape = the output's)
    maxpool(x, dims: PoolDims)
    meanpool(x, dims: PoolDims, count_include_pad: bool, divisor_override: int | None)
    softmax(x, axis: int), logsoftmax(x, axis: int)       axis already non-negative
    activation(x, mode: str, alpha: float | None)         alpha already resolved to the mode's default
    batchnorm(x, gamma, beta, *, running_mean, running_var, training, momentum, eps)
    dropout(x, p: float, seed)                            seed: None, an int or a numpy Generator
    rnn(x, weights, h0, c0, dims: RNNDims)                weights: list of [w_ih, w_hh, b_ih, b_hh]
"""
from __future__ import annotations

from dnnbind.highlevel.cpu import activation as _activation
from dnnbind.highlevel.cpu import batchnorm as _batchnorm
from dnnbind.highlevel.cpu import conv as _conv
from dnnbind.highlevel.cpu import dropout as _dropout
from dnnbind.highlevel.cpu import layer_norm as _layer_norm
from dnnbind.highlevel.cpu import pool as _pool
from dnnbind.highlevel.cpu import rnn as _rnn
from dnnbind.highlevel.cpu import softmax as _softmax

from dnnbind.highlevel.cpu._heap import keep_heap_padding
from dnnbind.highlevel.residual import forms

# every op in both forms, with the edge policy (0-d and zero-size arrays) applied once
activation_forward, activation_backward, activation_residuals, activation = forms(
    "activation", _activation.activation_forward, _activation.activation_backward, _activation.activation_residuals)
batchnorm_forward, batchnorm_backward, batchnorm_residuals, batchnorm = forms(
    "batchnorm", _batchnorm.batchnorm_forward, _batchnorm.batchnorm_backward, _batchnorm.batchnorm_residuals)
layer_norm_forward, layer_norm_backward, layer_norm_residuals, layer_norm = forms(
    "layer_norm", _layer_norm.layer_norm_forward, _layer_norm.layer_norm_backward, _layer_norm.layer_norm_residuals)
dropout_forward, dropout_backward, dropout_residuals, dropout = forms(
    "dropout", _dropout.dropout_forward, _dropout.dropout_backward, _dropout.dropout_residuals, names=("mask",))
maxpool_forward, maxpool_backward, maxpool_residuals, maxpool = forms(
    "maxpool", _pool.maxpool_forward, _pool.maxpool_backward, _pool.maxpool_residuals)
meanpool_forward, meanpool_backward, meanpool_residuals, meanpool = forms(
    "meanpool", _pool.meanpool_forward, _pool.meanpool_backward, _pool.meanpool_residuals)
softmax_forward, softmax_backward, softmax_residuals, softmax = forms(
    "softmax", _softmax.softmax_forward, _softmax.softmax_backward, _softmax.softmax_residuals)
logsoftmax_forward, logsoftmax_backward, logsoftmax_residuals, logsoftmax = forms(
    "logsoftmax", _softmax.logsoftmax_forward, _softmax.logsoftmax_backward, _softmax.logsoftmax_residuals)
conv_forward, conv_backward, conv_residuals, conv = forms(
    "conv", _conv.conv_forward, _conv.conv_backward, _conv.conv_residuals)
conv_transpose_forward, conv_transpose_backward, conv_transpose_residuals, conv_transpose = forms(
    "conv_transpose", _conv.conv_transpose_forward, _conv.conv_transpose_backward, _conv.conv_transpose_residuals)
rnn_forward, rnn_backward, rnn_residuals, rnn = forms(
    "rnn", _rnn.rnn_forward, _rnn.rnn_backward, _rnn.rnn_residuals)
__all__ = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation",
           "batchnorm", "layer_norm", "dropout", "rnn", "keep_heap_padding"]
