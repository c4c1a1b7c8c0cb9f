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

bfloat16: MIOpen documents bfloat16 as partially supported, for its convolutions; conv and conv_transpose
take it, and every other op refuses bfloat16 up front with a TypeError saying so (see
:data:`BFLOAT16_OPS`), rather than failing inside the library.

Options the public ops do not take are in :data:`settings`; plan caches report through
:func:`cache_info` and empty with :func:`clear_caches`. conv and conv_transpose also take
``layout="NCHW"|"NHWC"`` (NCHW by default).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from dnnbind.highlevel.edges import guarded
from dnnbind.highlevel.gpu import cache as _cache
from dnnbind.highlevel.gpu.cache import CacheInfo
from dnnbind.highlevel.miopen import activation as _activation
from dnnbind.highlevel.miopen import batchnorm as _batchnorm
from dnnbind.highlevel.miopen import dropout as _dropout
from dnnbind.highlevel.miopen import pool as _pool
from dnnbind.highlevel.miopen import rnn as _rnn
from dnnbind.highlevel.miopen import softmax as _softmax
from dnnbind.highlevel.miopen import conv as _conv
from dnnbind.highlevel.miopen.settings import MIOpenSettings, settings

#: the ops MIOpen has bfloat16 kernels for (MIOpen documents bfloat16 for its convolutions only)
BFLOAT16_OPS = ("conv", "conv_transpose")


def _no_bfloat16(op: Callable[..., Any]) -> Callable[..., Any]:
    """``op``, refusing bfloat16 x with a TypeError naming the op (MIOpen has no bfloat16 kernel for it)."""
    @functools.wraps(op)
    def checked(x: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(getattr(x, "dtype", None), "name", None) == "bfloat16":
            raise TypeError(f"the MIOpen backend has no bfloat16 kernel for {op.__name__} (MIOpen supports "
                            f"bfloat16 in {' and '.join(BFLOAT16_OPS)} only); convert x to float16 or float32, "
                            f"for example x.astype(cupy.float32)")
        return op(x, *args, **kwargs)
    return checked


# bfloat16 refused where MIOpen has no kernel; the edge policy (0-d and zero-size arrays) for every op
activation = guarded("activation")(_no_bfloat16(_activation.activation))
batchnorm = guarded("batchnorm")(_no_bfloat16(_batchnorm.batchnorm))
dropout = guarded("dropout")(_no_bfloat16(_dropout.dropout))
maxpool = guarded("maxpool")(_no_bfloat16(_pool.maxpool))
meanpool = guarded("meanpool")(_no_bfloat16(_pool.meanpool))
rnn = guarded("rnn")(_no_bfloat16(_rnn.rnn))
softmax = guarded("softmax")(_no_bfloat16(_softmax.softmax))
logsoftmax = guarded("logsoftmax")(_no_bfloat16(_softmax.logsoftmax))
conv, conv_transpose = guarded("conv")(_conv.conv), guarded("conv_transpose")(_conv.conv_transpose)

__all__ = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation", "batchnorm",
           "dropout", "rnn", "settings", "BFLOAT16_OPS", "MIOpenSettings", "cache_info", "clear_caches", "CacheInfo"]


def cache_info() -> dict[str, CacheInfo]:
    """Statistics (hits, misses, evictions, size, maxsize) of every MIOpen plan cache, by name."""
    return _cache.cache_info("miopen.")


def clear_caches() -> None:
    """Drop every cached MIOpen plan (descriptors go once no pullback holds them) and reset the statistics.

    What Find established lives on the handles and stays: MIOpen needs it per handle, not per plan.
    """
    _cache.clear_caches("miopen.")
