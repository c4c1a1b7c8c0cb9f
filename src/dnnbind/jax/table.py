"""What dnnbind.jax knows per op: one row each, read from the high-level layer's definitions.

Everything op-specific in dnnbind.jax is in :data:`TABLE`; the rest of the package is generic over its
rows. Each row comes from the residual form's parameters (:data:`dnnbind.highlevel.residual.FORMS`) and
the public op's signature, plus three facts a spec carries: which static arguments vary per call and
travel as 0-d arrays instead of attributes (dropout's seed), which arrays the forward updates in place
(batch norm's running statistics: here new arrays, the updated copies), and whether ``jax.vmap`` may fold
its batch axes into x's leading axis (ops that treat each position of it apart: one FFI call for the
batch) or runs the FFI call once per batch element.
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
#: ops that work on each position of x's leading axis apart (every array, output and residual has it): under
#: jax.vmap, the batch axes fold into that axis and one FFI call runs the whole batch; the others run once
#: per batch element
_FOLDS = frozenset({"activation", "maxpool", "meanpool"})


class Row(NamedTuple):
    op: str
    arrays: tuple[str, ...]           # the residual form's array parameters, in order
    differentiable: tuple[bool, ...]  # per array: whether it has a gradient
    gradients: tuple[str, ...]        # what the backward returns, in order
    signature: inspect.Signature      # the public op's (its array and keyword arguments)
    traced: tuple[str, ...]
    updated: tuple[str, ...]
    folds: bool                       # jax.vmap folds its batch axes into x's leading axis

    @property
    def vmap_method(self) -> str:
        """jax.ffi.ffi_call's: batch axes as more leading axes of every buffer (folded by the handler), or
        one call per batch element."""
        return "broadcast_all" if self.folds else "sequential"


@functools.lru_cache(maxsize=None)
def row(op: str) -> Row:
    """The row of ``op`` (KeyError for an op dnnbind does not have)."""
    form = FORMS[op]
    return Row(op, form.arrays, tuple(f"d{a}" in form.gradients for a in form.arrays), form.gradients,
               inspect.signature(getattr(ops, op)), _TRACED.get(op, ()), _UPDATED.get(op, ()),
               op in _FOLDS)


TABLE = tuple(FORMS)
