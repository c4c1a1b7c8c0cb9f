"""One ``torch.autograd.Function`` for every op, built from the op's ``(result, pullback)``.

:func:`apply` runs ``run(*arrays, **inplace_arrays)`` on array views of the tensors in ``inputs`` (a dict
of tensors, None, or nested lists/tuples of them) and returns its result as tensors whose backward is
the pullback. The contract an op must follow (every dnnbind op does):

- the result is an array, or a tuple of arrays and None;
- the pullback takes one cotangent per differentiable output (None for a None output; outputs named in
  ``nondiff`` and non-float outputs get none, and no gradient) and returns one
  gradient per input in ``inputs`` order, nested like it; trailing gradients may be missing, a single
  input's gradient may come bare; a gradient for a None input is ignored.

Torch's in-place check covers everything the pullback keeps: the inputs and outputs are saved with
``save_for_backward``, so modifying one of them before ``backward()`` raises torch's usual error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping

import torch
from torch.autograd.function import once_differentiable

from dnnbind.torch.convert import check_same_dtype, common_device, device_scope, to_array, to_tensor

Nested = Any   # a tensor, None, or a list/tuple of Nested
Structure = Any  # None for a leaf, else (list or tuple, [child structures])


def _flatten(tree: Nested, name: str, leaves: list[Any], names: list[str]) -> Structure:
    if isinstance(tree, (list, tuple)):
        return type(tree), [_flatten(item, f"{name}[{i}]", leaves, names) for i, item in enumerate(tree)]
    leaves.append(tree)
    names.append(name)
    return None


def _unflatten(structure: Structure, leaves: Any) -> Nested:
    """Rebuild a nest from an iterator of leaves."""
    if structure is None:
        return next(leaves)
    kind, children = structure
    return kind(_unflatten(child, leaves) for child in children)


def _align(structure: Structure, grads: Any, out: list[Any]) -> None:
    """Append to ``out`` one gradient per leaf of ``structure`` (None where ``grads`` has none)."""
    if structure is None:
        out.append(grads)
        return
    _, children = structure
    grads = () if grads is None else grads
    for i, child in enumerate(children):
        _align(child, grads[i] if i < len(grads) else None, out)


@dataclass
class _Call:
    """What one op call needs besides its tensors: the run function and how to map the arrays."""
    run: Callable[..., tuple[Any, Callable[..., Any]]]
    structure: list[Structure]
    inplace: Mapping[str, torch.Tensor | None]
    nondiff: Collection[int]
    device: torch.device
    tuple_result: bool = field(default=False)


class _OpFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, call: _Call, *leaves: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        with device_scope(call.device):
            arrays = iter([None if t is None else to_array(t) for t in leaves])
            inplace = {k: None if t is None else to_array(t, inplace=True, name=k) for k, t in call.inplace.items()}
            result, pullback = call.run(*(_unflatten(s, arrays) for s in call.structure), **inplace)
            call.tuple_result = isinstance(result, tuple)
            outputs = tuple(None if a is None else to_tensor(a)
                            for a in (result if call.tuple_result else (result,)))
        # outputs the pullback takes no cotangent for: those named, and non-float ones (masks, counts)
        ctx.skip = {i for i, o in enumerate(outputs)
                    if o is not None and (i in call.nondiff or not o.is_floating_point())}
        ctx.mark_non_differentiable(*(outputs[i] for i in ctx.skip))
        ctx.call, ctx.pullback = call, pullback
        ctx.save_for_backward(*leaves, *outputs)
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        call: _Call = ctx.call
        ctx.saved_tensors  # noqa: B018 - raises if an input or output was modified in place since forward
        with device_scope(call.device):
            cotangents = [None if g is None else to_array(g) for i, g in enumerate(grads) if i not in ctx.skip]
            grads_in = ctx.pullback(*cotangents)
            if not isinstance(grads_in, (tuple, list)):
                grads_in = (grads_in,)
            flat: list[Any] = []
            for i, structure in enumerate(call.structure):
                _align(structure, grads_in[i] if i < len(grads_in) else None, flat)
            needs = ctx.needs_input_grad[1:]
            return (None, *(to_tensor(g) if g is not None and need else None for g, need in zip(flat, needs)))


def apply(run: Callable[..., tuple[Any, Callable[..., Any]]], inputs: Mapping[str, Nested], *,
          inplace: Mapping[str, torch.Tensor | None] | None = None,
          nondiff: Collection[int] = ()) -> Any:
    """Call ``run`` on arrays and return tensors differentiable through its pullback (see the module doc).

    ``inputs``: name -> tensor, None or nest, passed positionally in this order; ``inplace``: name ->
    tensor passed as a keyword array that ``run`` may update in place (never differentiated, any float
    dtype; the tensors in ``inputs`` share one dtype, else TypeError in torch's terms);
    ``nondiff``: indices of outputs that get no gradient. Returns a tensor, or a tuple when ``run``
    returns a tuple.
    """
    inplace = dict(inplace or {})
    leaves: list[Any] = []
    names: list[str] = []
    structure = [_flatten(tree, name, leaves, names) for name, tree in inputs.items()]
    device = common_device({**dict(zip(names, leaves)), **inplace})
    check_same_dtype(dict(zip(names, leaves)))
    call = _Call(run, structure, inplace, frozenset(nondiff), device)
    outputs = _OpFunction.apply(call, *leaves)
    return outputs if call.tuple_result else outputs[0]
