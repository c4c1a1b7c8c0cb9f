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
from dnnbind.highlevel.residual import install_forms

# every op in both forms, with the edge policy (0-d and zero-size arrays) applied once
OPS = install_forms(globals(), (_activation, _batchnorm, _conv, _dropout, _layer_norm, _pool, _rnn, _softmax),
                    names={"dropout": ("mask",)})
__all__ = [*OPS, "keep_heap_padding"]
