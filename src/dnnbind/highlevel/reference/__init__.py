"""The reference backend: plain numpy, small, obviously correct; the ops' semantics and the tests' oracle.

Every op is computed in float64 from direct sums (results rounded once, to the input's dtype), with no
fast paths: the cpu backend (:mod:`dnnbind.highlevel.cpu`, the default for numpy arrays) is checked against
it, and so are the GPU backends. Run an op on it by name (``dispatch.backend_function("reference", op)``)
or call this module's functions. Each op comes in both forms (:func:`dnnbind.highlevel.residual.forms`):
``NAME_forward``, ``NAME_backward``, ``NAME_residuals`` and ``NAME`` -> (result, pullback), on arguments
the public ops have checked (the dims objects), with the cpu backend's signatures.
"""
from __future__ import annotations

from dnnbind.highlevel.reference import batchnorm as _batchnorm
from dnnbind.highlevel.reference import conv as _conv
from dnnbind.highlevel.reference import layer_norm as _layer_norm
from dnnbind.highlevel.reference import pointwise as _pointwise
from dnnbind.highlevel.reference import pool as _pool
from dnnbind.highlevel.reference import rnn as _rnn
from dnnbind.highlevel.residual import forms

# every op in both forms, with the edge policy (0-d and zero-size arrays) applied once
activation_forward, activation_backward, activation_residuals, activation = forms(
    "activation", _pointwise.activation_forward, _pointwise.activation_backward, _pointwise.activation_residuals)
batchnorm_forward, batchnorm_backward, batchnorm_residuals, batchnorm = forms(
    "batchnorm", _batchnorm.batchnorm_forward, _batchnorm.batchnorm_backward, _batchnorm.batchnorm_residuals)
layer_norm_forward, layer_norm_backward, layer_norm_residuals, layer_norm = forms(
    "layer_norm", _layer_norm.layer_norm_forward, _layer_norm.layer_norm_backward, _layer_norm.layer_norm_residuals)
dropout_forward, dropout_backward, dropout_residuals, dropout = forms(
    "dropout", _pointwise.dropout_forward, _pointwise.dropout_backward, _pointwise.dropout_residuals,
    names=("mask",))
maxpool_forward, maxpool_backward, maxpool_residuals, maxpool = forms(
    "maxpool", _pool.maxpool_forward, _pool.maxpool_backward, _pool.maxpool_residuals)
meanpool_forward, meanpool_backward, meanpool_residuals, meanpool = forms(
    "meanpool", _pool.meanpool_forward, _pool.meanpool_backward, _pool.meanpool_residuals)
softmax_forward, softmax_backward, softmax_residuals, softmax = forms(
    "softmax", _pointwise.softmax_forward, _pointwise.softmax_backward, _pointwise.softmax_residuals)
logsoftmax_forward, logsoftmax_backward, logsoftmax_residuals, logsoftmax = forms(
    "logsoftmax", _pointwise.logsoftmax_forward, _pointwise.logsoftmax_backward, _pointwise.logsoftmax_residuals)
conv_forward, conv_backward, conv_residuals, conv = forms(
    "conv", _conv.conv_forward, _conv.conv_backward, _conv.conv_residuals)
conv_transpose_forward, conv_transpose_backward, conv_transpose_residuals, conv_transpose = forms(
    "conv_transpose", _conv.conv_transpose_forward, _conv.conv_transpose_backward, _conv.conv_transpose_residuals)
rnn_forward, rnn_backward, rnn_residuals, rnn = forms(
    "rnn", _rnn.rnn_forward, _rnn.rnn_backward, _rnn.rnn_residuals)
__all__ = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation",
           "batchnorm", "layer_norm", "dropout", "rnn"]
