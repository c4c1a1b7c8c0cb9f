"""What dnnbind.jax knows per op: one row each, read from the high-level layer's definitions.

Everything op-specific in dnnbind.jax is in :data:`TABLE`; the rest of the package is generic over its
rows. Each row comes from the op's spec (:data:`dnnbind.highlevel.specs.SPECS`): the residual form's
parameters, the public op's signature, which static arguments vary per call and travel as 0-d arrays
instead of attributes (dropout's seed: ``tensor_arguments``), which arrays the forward updates in place
(batch norm's running statistics: here new arrays, the updated copies), and whether ``jax.vmap`` may fold
its batch axes into x's leading axis (``folds_leading_axis``: one FFI call for the batch) or runs the FFI
call once per batch element.
"""
from __future__ import annotations

import functools
import inspect
from typing import NamedTuple

from dnnbind.highlevel import public
from dnnbind.highlevel.specs import OP_NAMES, SPECS


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
    spec = SPECS[op]
    return Row(op, spec.array_names, tuple(a.gradient is not None for a in spec.arrays), spec.gradients,
               inspect.signature(getattr(public, op)), spec.tensor_arguments, spec.updated_in_place,
               spec.folds_leading_axis)


TABLE = OP_NAMES
