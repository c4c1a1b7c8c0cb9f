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

from typing import Any, Callable

from dnnbind.highlevel.conv_composed import conv_ops
from dnnbind.highlevel.cudnn import activation as _activation
from dnnbind.highlevel.cudnn import batchnorm as _batchnorm
from dnnbind.highlevel.cudnn import conv as _conv
from dnnbind.highlevel.cudnn import dropout as _dropout
from dnnbind.highlevel.cudnn import fused as _fused
from dnnbind.highlevel.cudnn import layer_norm as _layer_norm
from dnnbind.highlevel.cudnn import pool as _pool
from dnnbind.highlevel.cudnn import rnn as _rnn
from dnnbind.highlevel.cudnn import softmax as _softmax
from dnnbind.highlevel.cudnn.rnn import pack_rnn_weights
from dnnbind.highlevel.cudnn.settings import Settings, settings
from dnnbind.highlevel.gpu import cache as _cache
from dnnbind.highlevel.gpu.cache import CacheInfo
from dnnbind.highlevel.gpu.dropout_mask import with_mask
from dnnbind.highlevel.residual import install_forms
from dnnbind.highlevel.specs import SPECS


def _adapt(op: str, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """What cuDNN adds to an op (:func:`dnnbind.highlevel.residual.install_forms`): where the spec's residual
    is a mask (dropout), cuDNN saves its reserve space instead, so the pullback computes ``mask``."""
    return with_mask(fn) if part == "pair" and SPECS[op].mask_residuals else fn


# every op in both forms, with the edge policy (0-d and zero-size arrays) applied once; the convolutions
# composed from the conv primitives, conv_bias_activation from conv and activation with the fused graph
# (fused.py) where nothing is saved for a backward. layer_norm runs only through the graph API (cuDNN's legacy API has
# none; see layer_norm.py): otherwise every call raises NotImplementedError saying why, except an empty
# one, which the edge policy answers without the backend, as for every op
OPS = install_forms(globals(), (_activation, _batchnorm, conv_ops(_conv.PRIMITIVES), _dropout, _fused, _layer_norm,
                                _pool, _rnn, _softmax), saves_masks=False, adapt=_adapt)
__all__ = [f"{op}{suffix}" for op in OPS for suffix in ("", "_forward", "_backward", "_residuals")] + [
    "pack_rnn_weights", "settings", "Settings", "cache_info", "clear_caches", "CacheInfo"]


def cache_info() -> dict[str, CacheInfo]:
    """Statistics (hits, misses, evictions, size, maxsize) of every cuDNN plan cache, by name."""
    return _cache.cache_info("cudnn.")


def clear_caches() -> None:
    """Drop every cached cuDNN plan (descriptors go once nothing holds them) and reset the statistics."""
    _cache.clear_caches("cudnn.")
