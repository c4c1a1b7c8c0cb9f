"""The cpu backend: the fast numpy backend, the default for numpy arrays (C kernels, threads, BLAS).

Its semantics are those of :mod:`dnnbind.highlevel.reference` (the plain oracle), which the tests
compare it against. Its C kernels come from the optional package dnnbind-native (:mod:`dnnbind.compiled`);
without it every op runs its numpy path. :func:`keep_heap_padding` is an opt-in that changes glibc's heap
settings for the whole process (see ``_heap.py`` for its measured effect); dnnbind never calls it itself.

Each op comes in the forms of :func:`dnnbind.highlevel.residual.forms` (``NAME_forward``, ``NAME_backward``,
``NAME_residuals`` and ``NAME`` -> (result, pullback)), on the arguments its spec lists
(:mod:`dnnbind.highlevel.specs`: the arrays, then the static arguments such as the dims objects), already
checked by :mod:`dnnbind.highlevel.ops`; the GPU backends provide the same names. The convolutions are
composed from this backend's conv primitives (:mod:`dnnbind.highlevel.conv_composed`).
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
from dnnbind.highlevel.conv_composed import conv_ops
from dnnbind.highlevel.reference._arrays import quiet
from dnnbind.highlevel.residual import install_forms

# every op in both forms, with the edge policy (0-d and zero-size arrays) applied once, run with numpy's
# floating-point warnings off (inf and NaN give their IEEE results silently); the convolutions composed
# from the conv primitives
OPS = install_forms(globals(), (_activation, _batchnorm, conv_ops(_conv.PRIMITIVES), _dropout, _layer_norm, _pool,
                                _rnn, _softmax), around=quiet)
__all__ = [*OPS, "keep_heap_padding"]
