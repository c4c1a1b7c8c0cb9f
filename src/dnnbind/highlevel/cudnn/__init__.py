"""The cuDNN backend: the high-level ops on CuPy arrays (and other CUDA arrays) through cuDNN.

Same function names, arguments and semantics as :mod:`dnnbind.highlevel.reference` (rnn also takes
weights packed once by :func:`pack_rnn_weights`), in both forms: ``NAME_forward``, ``NAME_backward`` and
``NAME_residuals`` (the residual form, :mod:`dnnbind.highlevel.residual`: everything the backward reads
is saved as CuPy arrays) and ``NAME`` (``(result, pullback)``, built on them). The public ops
in :mod:`dnnbind.highlevel.ops` dispatch here for CuPy arrays on CUDA. Every library call goes through
the generated module :mod:`dnnbind.gen.cudnn`. Importing this package needs neither CuPy nor a GPU
(plans and descriptors build on the host); running an op needs both.

Options the public ops do not take (algorithm choice, determinism, workspace limit, TF32) are in
:data:`settings`; plan caches report through :func:`cache_info` and empty with :func:`clear_caches`.
The conv and pooling functions here also take ``layout="NCHW"|"NHWC"`` (the memory layout to run in;
by default the input's own), and rnn takes ``training=False`` (cuDNN's inference mode, no residuals).
A backward takes its plans from the caches by the forward's key, under the settings in force when it runs.
"""
from __future__ import annotations

from dnnbind.highlevel.cudnn import activation as _activation
from dnnbind.highlevel.cudnn import batchnorm as _batchnorm
from dnnbind.highlevel.cudnn import conv as _conv
from dnnbind.highlevel.cudnn import dropout as _dropout
from dnnbind.highlevel.cudnn import layer_norm as _layer_norm
from dnnbind.highlevel.cudnn import pool as _pool
from dnnbind.highlevel.cudnn import rnn as _rnn
from dnnbind.highlevel.cudnn import softmax as _softmax
from dnnbind.highlevel.cudnn.rnn import pack_rnn_weights
from dnnbind.highlevel.cudnn.settings import Settings, settings
from dnnbind.highlevel.gpu import cache as _cache
from dnnbind.highlevel.gpu.cache import CacheInfo
from dnnbind.highlevel.gpu.dropout_mask import with_mask
from dnnbind.highlevel.residual import forms, install_chains

# every op in both forms, with the edge policy (0-d and zero-size arrays) applied once
conv_forward, conv_backward, conv_residuals, conv = forms(
    "conv", _conv.conv_forward, _conv.conv_backward, _conv.conv_residuals)
conv_transpose_forward, conv_transpose_backward, conv_transpose_residuals, conv_transpose = forms(
    "conv_transpose", _conv.conv_transpose_forward, _conv.conv_transpose_backward, _conv.conv_transpose_residuals)
maxpool_forward, maxpool_backward, maxpool_residuals, maxpool = forms(
    "maxpool", _pool.maxpool_forward, _pool.maxpool_backward, _pool.maxpool_residuals)
meanpool_forward, meanpool_backward, meanpool_residuals, meanpool = forms(
    "meanpool", _pool.meanpool_forward, _pool.meanpool_backward, _pool.meanpool_residuals)
softmax_forward, softmax_backward, softmax_residuals, softmax = forms(
    "softmax", _softmax.softmax_forward, _softmax.softmax_backward, _softmax.softmax_residuals)
logsoftmax_forward, logsoftmax_backward, logsoftmax_residuals, logsoftmax = forms(
    "logsoftmax", _softmax.logsoftmax_forward, _softmax.logsoftmax_backward, _softmax.logsoftmax_residuals)
activation_forward, activation_backward, activation_residuals, activation = forms(
    "activation", _activation.activation_forward, _activation.activation_backward, _activation.activation_residuals)
batchnorm_forward, batchnorm_backward, batchnorm_residuals, batchnorm = forms(
    "batchnorm", _batchnorm.batchnorm_forward, _batchnorm.batchnorm_backward, _batchnorm.batchnorm_residuals)
# not available (cuDNN's legacy API has none): every call raises NotImplementedError saying why, except an
# empty one, which the edge policy answers without the backend, as for every op
layer_norm_forward, layer_norm_backward, layer_norm_residuals, layer_norm = forms(
    "layer_norm", _layer_norm.layer_norm_forward, _layer_norm.layer_norm_backward, _layer_norm.layer_norm_residuals)
dropout_forward, dropout_backward, dropout_residuals, _dropout_pair = forms(
    "dropout", _dropout.dropout_forward, _dropout.dropout_backward, _dropout.dropout_residuals)
dropout = with_mask(_dropout_pair)      # the residuals are reserve spaces: pullback.mask is computed
rnn_forward, rnn_backward, rnn_residuals, rnn = forms(
    "rnn", _rnn.rnn_forward, _rnn.rnn_backward, _rnn.rnn_residuals)

OPS = install_chains(globals(), (), ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation", "batchnorm",
       "layer_norm", "dropout", "rnn"])
__all__ = [f"{op}{suffix}" for op in OPS for suffix in ("", "_forward", "_backward", "_residuals")] + [
    "pack_rnn_weights", "settings", "Settings", "cache_info", "clear_caches", "CacheInfo"]


def cache_info() -> dict[str, CacheInfo]:
    """Statistics (hits, misses, evictions, size, maxsize) of every cuDNN plan cache, by name."""
    return _cache.cache_info("cudnn.")


def clear_caches() -> None:
    """Drop every cached cuDNN plan (descriptors go once nothing holds them) and reset the statistics."""
    _cache.clear_caches("cudnn.")
