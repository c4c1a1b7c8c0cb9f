"""Backend-independent plumbing of the GPU backends (cuDNN now, MIOpen next).

One module per job: ``arrays`` (CuPy on first use, adapting device arrays), ``layout`` (NCHW/NHWC
memory), ``geometry`` (what symmetric-padding, >= 2-d libraries run, explicit padding), ``views``
(describing arrays without copies: softmax axis views, flat blocks, zero extension), ``rescale``
(mean pooling's divisor where explicit padding makes the library's differ), ``window_max`` (dilated max
pooling on CuPy), ``cache`` (bounded LRU plan caches with statistics),
``settings`` (algorithm choice, determinism, workspace limit, TF32), ``handles`` (per-thread,
per-device library handles bound to the current stream), ``workspace`` (scratch memory from CuPy's
pool), ``descriptors`` (owned library descriptors), ``dtypes`` (dtype -> library data types),
``call`` and ``errors`` (one op invocation, and library errors that name the op), ``pullback``
(cotangent checks), ``conv_call`` (what both backends' convolution primitives share), ``batchnorm``
and ``elementwise`` (what no library call provides). A backend plugs
in its library calls.
"""
from __future__ import annotations

from dnnbind.highlevel.gpu.cache import CacheInfo, PlanCache, cache_info, clear_caches

__all__ = ["CacheInfo", "PlanCache", "cache_info", "clear_caches"]
