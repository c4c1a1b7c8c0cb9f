"""The cuDNN backend: the high-level ops on CuPy arrays (and other CUDA arrays) through cuDNN.

Same function names, arguments and semantics as :mod:`dnnbind.highlevel.reference` (rnn also takes
weights packed once by :func:`pack_rnn_weights`); the public ops
in :mod:`dnnbind.highlevel.ops` dispatch here for CuPy arrays on CUDA. Every library call goes through
the generated module :mod:`dnnbind.gen.cudnn`. Importing this package needs neither CuPy nor a GPU
(plans and descriptors build on the host); running an op needs both.

Options the public ops do not take (algorithm choice, determinism, workspace limit, TF32) are in
:data:`settings`; plan caches report through :func:`cache_info` and empty with :func:`clear_caches`.
The conv and pooling functions here also take ``layout="NCHW"|"NHWC"`` (the memory layout to run in;
by default the input's own).
"""
from __future__ import annotations

from dnnbind.highlevel.cudnn.activation import activation
from dnnbind.highlevel.cudnn.batchnorm import batchnorm
from dnnbind.highlevel.cudnn.conv import conv, conv_transpose
from dnnbind.highlevel.cudnn.dropout import dropout
from dnnbind.highlevel.cudnn.pool import maxpool, meanpool
from dnnbind.highlevel.cudnn.rnn import pack_rnn_weights, rnn
from dnnbind.highlevel.cudnn.settings import Settings, settings
from dnnbind.highlevel.cudnn.softmax import logsoftmax, softmax
from dnnbind.highlevel.gpu import cache as _cache
from dnnbind.highlevel.gpu.cache import CacheInfo

from dnnbind.highlevel.edges import guarded

# the edge policy (0-d and zero-size arrays) for every op, called through dnnbind's ops or directly
conv, conv_transpose = guarded("conv")(conv), guarded("conv_transpose")(conv_transpose)
maxpool, meanpool = guarded("maxpool")(maxpool), guarded("meanpool")(meanpool)
softmax, logsoftmax = guarded("softmax")(softmax), guarded("logsoftmax")(logsoftmax)
activation, dropout = guarded("activation")(activation), guarded("dropout")(dropout)
batchnorm, rnn = guarded("batchnorm")(batchnorm), guarded("rnn")(rnn)

__all__ = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation", "batchnorm",
           "dropout", "rnn", "pack_rnn_weights", "settings", "Settings", "cache_info", "clear_caches", "CacheInfo"]


def cache_info() -> dict[str, CacheInfo]:
    """Statistics (hits, misses, evictions, size, maxsize) of every cuDNN plan cache, by name."""
    return _cache.cache_info("cudnn.")


def clear_caches() -> None:
    """Drop every cached cuDNN plan (descriptors go once no pullback holds them) and reset the statistics."""
    _cache.clear_caches("cudnn.")
