"""The MIOpen backend: the high-level ops on CuPy arrays on ROCm through AMD's MIOpen.

Same function names, arguments and semantics as :mod:`dnnbind.highlevel.reference`; the public ops in
:mod:`dnnbind.highlevel.ops` dispatch here for CuPy arrays when ``cupy.cuda.runtime.is_hip``. Every
library call goes through the generated module :mod:`dnnbind.gen.miopen`. Importing this package needs
neither CuPy, nor a GPU, nor MIOpen itself: plans (descriptors, output shapes, pooling workspace sizes,
batch-norm parameter descriptors, RNN weight layouts) build on the host once the library is found;
running an op needs all three.

What MIOpen needs that the cuDNN backend does not do: Find before a convolution runs on a handle
(or immediate mode, ``settings(immediate=True)``); flipped kernels for ``flip=True`` (MIOpen computes
cross-correlation only); alpha = 1 and beta = 0 in every call; a saved index workspace for max pooling;
PyTorch's RNN gate order mapped onto MIOpen's. The module docstrings say how.

Not verified on AMD hardware: no AMD GPU has run this code. The host-side plan building and the
mappings are tested against the real libMIOpen 3.4 (see the README).

Options the public ops do not take are in :data:`settings`; plan caches report through
:func:`cache_info` and empty with :func:`clear_caches`. conv and conv_transpose also take
``layout="NCHW"|"NHWC"`` (NCHW by default).
"""
from __future__ import annotations

from dnnbind.highlevel.gpu import cache as _cache
from dnnbind.highlevel.gpu.cache import CacheInfo
from dnnbind.highlevel.miopen.activation import activation
from dnnbind.highlevel.miopen.batchnorm import batchnorm
from dnnbind.highlevel.miopen.conv import conv, conv_transpose
from dnnbind.highlevel.miopen.dropout import dropout
from dnnbind.highlevel.miopen.pool import maxpool, meanpool
from dnnbind.highlevel.miopen.rnn import rnn
from dnnbind.highlevel.miopen.settings import MIOpenSettings, settings
from dnnbind.highlevel.miopen.softmax import logsoftmax, softmax

__all__ = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation", "batchnorm",
           "dropout", "rnn", "settings", "MIOpenSettings", "cache_info", "clear_caches", "CacheInfo"]


def cache_info() -> dict[str, CacheInfo]:
    """Statistics (hits, misses, evictions, size, maxsize) of every MIOpen plan cache, by name."""
    return _cache.cache_info("miopen.")


def clear_caches() -> None:
    """Drop every cached MIOpen plan (descriptors go once no pullback holds them) and reset the statistics.

    What Find established lives on the handles and stays: MIOpen needs it per handle, not per plan.
    """
    _cache.clear_caches("miopen.")
