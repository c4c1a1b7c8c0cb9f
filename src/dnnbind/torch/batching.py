"""Batching rules (``torch.library.register_vmap``) for dnnbind's typed ops, from the specs.

A mapped axis of x alone (every other tensor input the same for all) folds into x's batch axis where
the op's spec says its samples are computed independently (:attr:`OpSpec.samples_independent`): one
call on (B * N, ...) instead of B calls; an elementwise op (results laid out like x) takes x as it is,
the mapped axis moved first. Everything else (a mapped weight, batch norm's statistics over
the batch, the backward ops' per-sample parameter gradients) maps over the axis: one call per entry,
results stacked; over an empty axis, the op's fake kernel gives the entries' shapes (nothing runs). An
op that updates inputs in place (batch norm's running statistics) maps over the axis when they are mapped
too (each entry its own); when they are not, and neither is what the update reads (the spec's
``update_reads``: batch norm's x), every entry's update is the same and the first entry alone makes it
(a vmap over batch norm's parameters only, as torch's own batch norm allows); else it refuses, naming
them: one entry's update cannot be written to a tensor shared by all.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from dnnbind.highlevel.specs import SPECS
from dnnbind.highlevel.specs.base import OpSpec
from dnnbind.torch import layout

Tensor = torch.Tensor


def _entry(value: Any, dim: Any, take: Callable[[Tensor, int], Tensor]) -> Any:
    """``take(tensor, dim)`` of an input mapped along ``dim`` (a list input: per element; an unmapped one
    as it is)."""
    if dim is None or value is None:
        return value
    if isinstance(value, (list, tuple)):
        dims = dim if isinstance(dim, (list, tuple)) else [dim] * len(value)
        return [_entry(v, d, take) for v, d in zip(value, dims)]
    return take(value, dim)


def _pick(value: Any, dim: Any, i: int) -> Any:
    """Entry i of the mapped axis ``dim`` of an input."""
    return _entry(value, dim, lambda t, d: t.select(d, i))


def _meta_entry(value: Any, dim: Any) -> Any:
    """A meta tensor shaped as one entry of the mapped axis ``dim`` of an input."""
    return _entry(value, dim, lambda t, d: t.new_empty([n for a, n in enumerate(t.shape) if a != d], device="meta"))


def _no_entries(op: Callable[..., Any], in_dims: Sequence[Any], args: Sequence[Any]) -> Any:
    """The op's results over an empty mapped axis: shaped by its fake kernel on one entry's shapes."""
    device = next(a.device for a, d in zip(args, in_dims) if isinstance(a, Tensor) and d is not None)
    found = op(*[_meta_entry(a, d) for a, d in zip(args, in_dims)])
    return [torch.empty((0, *t.shape), dtype=t.dtype, device=device)
            for t in ([found] if isinstance(found, Tensor) else found)], isinstance(found, Tensor)


def map_over(op: Callable[..., Any], info: Any, in_dims: Sequence[Any], args: Sequence[Any]) -> tuple[Any, Any]:
    """The op called once per entry of the mapped axis, results stacked along a new axis 0."""
    if info.batch_size == 0:
        stacked, single = _no_entries(op, in_dims, args)
    else:
        results = [op(*[_pick(a, d, i) for a, d in zip(args, in_dims)]) for i in range(info.batch_size)]
        single = isinstance(results[0], Tensor)
        stacked = [torch.stack(results)] if single else [torch.stack([r[j] for r in results])
                                                          for j in range(len(results[0]))]
    return (stacked[0], 0) if single else (stacked, [0] * len(stacked))


def _only_x(in_dims: Sequence[Any]) -> bool:
    """Whether x (the first input) alone is mapped."""
    return in_dims[0] is not None and not any(_mapped(d) for d in in_dims[1:])


def _fold(op: Callable[..., Any], info: Any, in_dims: Sequence[Any], args: Sequence[Any]) -> tuple[Any, Any]:
    """The op called once with the mapped axis of x folded into x's batch axis (axis 0)."""
    x = args[0].movedim(in_dims[0], 0)
    size, batch = info.batch_size, x.shape[1]
    result = op(x.reshape(size * batch, *x.shape[2:]), *args[1:])

    def unfold(t: Tensor) -> Tensor:          # (the op keeps x's batch axis: its samples are independent)
        return t.reshape(size, batch, *t.shape[1:])
    if isinstance(result, Tensor):
        return unfold(result), 0
    return [unfold(t) for t in result], [0] * len(result)


def _independent(op: str, args: Sequence[Any]) -> bool:
    """Whether the typed call's samples along x's axis 0 are computed apart (the spec's
    ``samples_independent``, for its arguments where it depends on them: softmax's axis), ``args[0]``
    holding the mapped axis beside x's own."""
    rule = SPECS[op].samples_independent
    if not callable(rule):
        return bool(rule)
    from dnnbind.torch.typed import public_arguments
    return SPECS[op].independent(public_arguments(op, args)[2], args[0].dim() - 1)


def _mapped(d: Any) -> bool:
    return any(_mapped(e) for e in d) if isinstance(d, (list, tuple)) else d is not None


def _unmapped_updates(spec: OpSpec, in_dims: Sequence[Any], args: Sequence[Any]) -> list[int]:
    """The places among the inputs of the arrays this call updates in place (given, the call's arguments
    asking for the update) when the vmap maps none of them while it maps another input; RuntimeError
    naming the op and those arrays where the entries' updates would differ (another updated array, or
    one the update reads, is mapped); else []."""
    if not spec.updated_in_place:
        return []
    names = [n for a in spec.arrays for n in ([a.name, "", ""] if a.nested else [a.name])] + list(spec.kinds)
    given = dict(zip(names, zip(args, in_dims)))
    if not spec.updates_in_place({n: given[n][0] for n in spec.kinds}):
        return []
    unmapped = [n for n in spec.updated_in_place if given[n][0] is not None and given[n][1] is None]
    if not unmapped:
        return []
    shared = [*spec.updated_in_place, *spec.update_reads]
    if not any(_mapped(given[n][1]) for n in shared):
        return [names.index(n) for n in unmapped]
    one = len(unmapped) == 1
    raise RuntimeError(
        f"dnnbind.{spec.name}: under vmap, {', '.join(unmapped)}, which this call updates in place, "
        f"{'is' if one else 'are'} not mapped while other inputs are: each entry's update cannot be written "
        f"to one tensor shared by all entries. Map {'it' if one else 'them'} too (for a module: "
        f"torch.func.functional_call with its buffers stacked, as torch.func.stack_module_state gives them), "
        f"or call without {'it' if one else 'them'} (None; a layer's track_running_stats=False, as "
        f"torch.func.replace_all_batch_norm_modules_ sets)")


def _map_updating_once(op: Callable[..., Any], info: Any, in_dims: Sequence[Any], args: Sequence[Any],
                       updated: list[int]) -> tuple[Any, Any]:
    """:func:`map_over` where every entry's in-place update is the same (:func:`_unmapped_updates`): the
    first entry makes it (its updated arrays come back unmapped), the others run without the arrays at
    ``updated``. Over an empty axis the update is made all the same (it reads none of the mapped inputs),
    by one call whose mapped inputs are zeros shaped as an entry, as torch's own batch norm makes it."""
    if info.batch_size == 0:
        stacked, _ = _no_entries(op, in_dims, args)
        count = len(stacked) - len(updated)
        zeros = [_entry(a, d, lambda t, n: t.new_zeros([m for k, m in enumerate(t.shape) if k != n]))
                 for a, d in zip(args, in_dims)]
        return [*stacked[:count], *op(*zeros)[count:]], [0] * count + [None] * len(updated)
    first = op(*[_pick(a, d, 0) for a, d in zip(args, in_dims)])
    bare = [None if k in updated else a for k, a in enumerate(args)]
    rest = [op(*[_pick(a, d, i) for a, d in zip(bare, in_dims)]) for i in range(1, info.batch_size)]
    count = len(first) - len(updated)             # the results, before the updated arrays' new values
    stacked = [torch.stack([first[j], *[r[j] for r in rest]]) for j in range(count)]
    return [*stacked, *first[count:]], [0] * count + [None] * len(updated)


def forward_rule(name: str) -> Callable[..., tuple[Any, Any]]:
    """The batching rule of the typed forward op ``name``."""
    spec = SPECS[name]
    op = getattr(torch.ops.dnnbind, name).default
    elementwise = name in layout.ELEMENTWISE

    def rule(info: Any, in_dims: Sequence[Any], *args: Any) -> tuple[Any, Any]:
        updated = _unmapped_updates(spec, in_dims, args)
        if updated:
            return _map_updating_once(op, info, in_dims, args, updated)
        if spec.samples_independent is True and _only_x(in_dims) and elementwise:
            # any shape: one call on x with the mapped axis first, its strides kept (a channels-last x's)
            result = op(args[0].movedim(in_dims[0], 0), *args[1:])
            return (result, 0) if isinstance(result, Tensor) else (list(result), [0] * len(result))
        # x's own rank (the mapped axis not counted) must have a batch axis to fold into
        if _only_x(in_dims) and args[0].dim() >= 2 and _independent(name, args):
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
