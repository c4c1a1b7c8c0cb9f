"""What dnnbind.jax knows per op: one row each, read from the high-level layer's definitions.

Everything op-specific in dnnbind.jax is in :data:`TABLE`; the rest of the package is generic over its
rows. Each row comes from the residual form's parameters (:data:`dnnbind.highlevel.residual.FORMS`) and
the public op's signature, plus three facts a spec carries: which static arguments vary per call and
travel as 0-d arrays instead of attributes (dropout's seed), which arrays the forward updates in place
(batch norm's running statistics: here new arrays, the updated copies), and how ``jax.vmap`` runs the
FFI call (elementwise ops take the batch as more leading axes; the others run once per batch element).
"""
from __future__ import annotations

import functools
import inspect
from typing import NamedTuple

from dnnbind.highlevel import ops
from dnnbind.highlevel.residual import FORMS

#: static arguments whose value varies per call: a 0-d uint32 array input instead of an attribute
_TRACED = {"dropout": ("seed",)}
#: arrays the forward updates in place: aliased to extra outputs, returned as new arrays
_UPDATED = {"batchnorm": ("running_mean", "running_var")}
#: jax.ffi.ffi_call's vmap_method: elementwise ops take more leading axes as they are
_VMAP = {"activation": "broadcast_all"}


class Row(NamedTuple):
    op: str
    arrays: tuple[str, ...]           # the residual form's array parameters, in order
    differentiable: tuple[bool, ...]  # per array: whether it has a gradient
    gradients: tuple[str, ...]        # what the backward returns, in order
    signature: inspect.Signature      # the public op's (its array and keyword arguments)
    traced: tuple[str, ...]
    updated: tuple[str, ...]
    vmap_method: str


@functools.lru_cache(maxsize=None)
def row(op: str) -> Row:
    """The row of ``op`` (KeyError for an op dnnbind does not have)."""
    form = FORMS[op]
    return Row(op, form.arrays, tuple(f"d{a}" in form.gradients for a in form.arrays), form.gradients,
               inspect.signature(getattr(ops, op)), _TRACED.get(op, ()), _UPDATED.get(op, ()),
               _VMAP.get(op, "sequential"))


TABLE = tuple(FORMS)
