"""The MIOpen backend: the high-level ops on CuPy arrays on ROCm through AMD's MIOpen.

Same function names, arguments and semantics as :mod:`dnnbind.highlevel.reference`, in both forms of
:mod:`dnnbind.highlevel.residual`: ``NAME_forward`` / ``NAME_backward`` / ``NAME_residuals`` (the saved
state is CuPy arrays; plans come back from the plan caches by the same key) and ``NAME``, the
``(result, pullback)`` form built on them; the public ops in :mod:`dnnbind.highlevel.ops` dispatch here
for CuPy arrays when ``cupy.cuda.runtime.is_hip``. Every
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

bfloat16: MIOpen documents bfloat16 as partially supported, for its convolutions; the convolutions and
layer_norm (whose kernels take miopenBFloat16) take it, and every other op refuses bfloat16 up front with
a TypeError saying so (:data:`BFLOAT16_OPS`, read from the support table in ``support.py``), rather than
failing inside the library.

Options the public ops do not take are in :data:`settings`; plan caches report through
:func:`cache_info` and empty with :func:`clear_caches`. The convolutions also take the options
``layout="NCHW"|"NHWC"`` (NCHW by default) and ``settings=`` (a :class:`MIOpenSettings`; by default
those in force at the call; their ``(result, pullback)`` form hands the forward's to the pullback).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from dnnbind.highlevel.conv_composed import COMPOSED, conv_ops
from dnnbind.highlevel.gpu import cache as _cache
from dnnbind.highlevel.gpu.cache import CacheInfo
from dnnbind.highlevel.miopen import activation as _activation
from dnnbind.highlevel.miopen import batchnorm as _batchnorm
from dnnbind.highlevel.miopen import conv as _conv
from dnnbind.highlevel.miopen import dropout as _dropout
from dnnbind.highlevel.miopen import layer_norm as _layer_norm
from dnnbind.highlevel.miopen import pool as _pool
from dnnbind.highlevel.miopen import rnn as _rnn
from dnnbind.highlevel.miopen import softmax as _softmax
from dnnbind.highlevel.miopen.settings import MIOpenSettings, current, settings
from dnnbind.highlevel.miopen.support import SUPPORTS
from dnnbind.highlevel.residual import install_forms

#: the ops MIOpen has bfloat16 kernels for, as its support table says (MIOpen documents bfloat16 for its
#: convolutions; its layer-norm kernels take miopenBFloat16 too)
BFLOAT16_OPS = tuple(op for op, support in SUPPORTS.items() if "bfloat16" in support.dtypes)


def _no_bfloat16(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (op's forward or residuals), refusing a bfloat16 x (an array or an ArraySpec) with a
    TypeError naming the op: MIOpen has no bfloat16 kernel for it."""
    @functools.wraps(fn)
    def checked(x: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(getattr(x, "dtype", None), "name", None) == "bfloat16":
            raise TypeError(f"the MIOpen backend has no bfloat16 kernel for {op} (MIOpen supports bfloat16 in "
                            f"{', '.join(BFLOAT16_OPS[:-1])} and {BFLOAT16_OPS[-1]} only); convert x to float16 "
                            f"or float32, for example x.astype(cupy.float32)")
        return fn(x, *args, **kwargs)
    return checked


def _forward_settings(run: Callable[..., Any]) -> Callable[..., Any]:
    """A convolution's (result, pullback) form whose pullback chooses algorithms as its forward did:
    ``settings`` (a thread's or task's, see :mod:`settings`) fixed at the call unless given."""
    @functools.wraps(run)
    def fixed(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("settings") is None:
            kwargs["settings"] = current()
        return run(*args, **kwargs)
    return fixed


def _adapt(op: str, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """What MIOpen adds to an op (:func:`dnnbind.highlevel.residual.install_forms`): bfloat16 refused up front
    where its support table has no bfloat16 (inside the edge policy), and
    the convolutions' pullbacks choosing algorithms with their forward's settings."""
    if part in ("forward", "residuals") and op not in BFLOAT16_OPS:
        return _no_bfloat16(op, fn)
    if part == "pair" and op in COMPOSED:
        return _forward_settings(fn)
    return fn


# every op in both forms, with the edge policy (0-d and zero-size arrays) applied once; the convolutions
# composed from the conv primitives
OPS = install_forms(globals(), (_activation, _batchnorm, conv_ops(_conv.PRIMITIVES), _dropout, _layer_norm, _pool,
                                _rnn, _softmax), adapt=_adapt)
__all__ = [*OPS, *(f"{op}_{part}" for op in OPS for part in ("forward", "backward", "residuals")), "settings",
           "BFLOAT16_OPS", "MIOpenSettings", "cache_info", "clear_caches", "CacheInfo"]


def cache_info() -> dict[str, CacheInfo]:
    """Statistics (hits, misses, evictions, size, maxsize) of every MIOpen plan cache, by name."""
    return _cache.cache_info("miopen.")


def clear_caches() -> None:
    """Drop every cached MIOpen plan (descriptors go once nothing holds them) and reset the statistics.

    What Find established lives on the handles and stays: MIOpen needs it per handle, not per plan.
    Residuals are arrays only, so clearing never affects a pending backward: it builds its plan again.
    """
    _cache.clear_caches("miopen.")
