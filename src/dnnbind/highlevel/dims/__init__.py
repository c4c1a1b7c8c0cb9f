"""Shape logic and argument checking shared by every backend, one module per job.

:mod:`.checks` (dtype names, scalar validators, per-dimension arguments), :mod:`.conv` (:class:`ConvDims`),
:mod:`.pool` (:class:`PoolDims`, window slicing), :mod:`.rnn` (:class:`RNNDims`, weight parsing),
:mod:`.batchnorm` (its shape checks). The op specs (:mod:`dnnbind.highlevel.specs`) call them once per
call signature, before any backend runs, so every backend agrees on what is legal and on the wording
of the error. The dims objects are frozen dataclasses, hashable, keyed by :meth:`Problem.key`.
"""
from __future__ import annotations

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.dims.rnn import RNNDims

__all__ = ["ConvDims", "PoolDims", "RNNDims"]
