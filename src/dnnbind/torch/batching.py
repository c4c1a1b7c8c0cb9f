"""Batching rules (``torch.library.register_vmap``) for dnnbind's typed ops, from the specs.

A mapped axis of x alone (every other tensor input the same for all) folds into x's batch axis where
the op's spec says its samples are computed independently (:attr:`OpSpec.samples_independent`): one
call on (B * N, ...) instead of B calls. Everything else (a mapped weight, batch norm's statistics over
the batch, the backward ops' per-sample parameter gradients) maps over the axis: one call per entry,
results stacked.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from dnnbind.highlevel.specs import SPECS

Tensor = torch.Tensor


def _pick(value: Any, dim: Any, i: int) -> Any:
    """Entry i of the mapped axis ``dim`` of an input (a list input: per element)."""
    if dim is None or value is None:
        return value
    if isinstance(value, (list, tuple)):
        dims = dim if isinstance(dim, (list, tuple)) else [dim] * len(value)
        return [_pick(v, d, i) for v, d in zip(value, dims)]
    return value.select(dim, i)


def map_over(op: Callable[..., Any], info: Any, in_dims: Sequence[Any], args: Sequence[Any]) -> tuple[Any, Any]:
    """The op called once per entry of the mapped axis, results stacked along a new axis 0."""
    results = [op(*[_pick(a, d, i) for a, d in zip(args, in_dims)]) for i in range(info.batch_size)]
    if isinstance(results[0], Tensor):
        return torch.stack(results), 0
    stacked = [torch.stack([r[j] for r in results]) for j in range(len(results[0]))]
    return stacked, [0] * len(stacked)


def _only_x(in_dims: Sequence[Any]) -> bool:
    """Whether x (the first input) alone is mapped."""
    def mapped(d: Any) -> bool:
        return any(mapped(e) for e in d) if isinstance(d, (list, tuple)) else d is not None
    return in_dims[0] is not None and not any(mapped(d) for d in in_dims[1:])


def _fold(op: Callable[..., Any], info: Any, in_dims: Sequence[Any], args: Sequence[Any]) -> tuple[Any, Any]:
    """The op called once with the mapped axis of x folded into x's batch axis (axis 0)."""
    x = args[0].movedim(in_dims[0], 0)
    size = info.batch_size
    result = op(x.reshape(size * x.shape[1], *x.shape[2:]), *args[1:])

    def unfold(t: Tensor) -> Tensor:
        return t.reshape(size, t.shape[0] // size, *t.shape[1:])
    if isinstance(result, Tensor):
        return unfold(result), 0
    return [unfold(t) for t in result], [0] * len(result)


def forward_rule(name: str) -> Callable[..., tuple[Any, Any]]:
    """The batching rule of the typed forward op ``name``."""
    spec = SPECS[name]
    op = getattr(torch.ops.dnnbind, name).default

    def rule(info: Any, in_dims: Sequence[Any], *args: Any) -> tuple[Any, Any]:
        # x's own rank (the mapped axis not counted) must have a batch axis to fold into
        if spec.samples_independent and _only_x(in_dims) and args[0].dim() >= 2:
            return _fold(op, info, in_dims, args)
        return map_over(op, info, in_dims, args)
    return rule


def backward_rule(name: str) -> Callable[..., tuple[Any, Any]]:
    """The batching rule of the typed backward op of ``name``: per entry (a parameter's gradient is one
    sample's, as torch.func.vmap(grad(...)) asks for per-sample gradients)."""
    op = getattr(torch.ops.dnnbind, f"{name}_backward").default

    def rule(info: Any, in_dims: Sequence[Any], *args: Any) -> tuple[Any, Any]:
        return map_over(op, info, in_dims, args)
    return rule
