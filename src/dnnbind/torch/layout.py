"""Results laid out as torch's CPU kernels lay them out (an op spec's ``results_layout``): channels last
where a convolution's input or filter, a pooling's or a batch norm's input is, an elementwise op's like
its input. The backends compute on C-ordered arrays: a result is copied into its layout only where that
differs (never for C-ordered inputs, the common case). The eager calls, the registered ops' kernels and
their fake kernels all lay out through :func:`lay_out`, so that a compiled graph's strides are the real ones.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch._prims_common import suggest_memory_format

from dnnbind.highlevel.specs import SPECS

Tensor = torch.Tensor

_RANKS = {torch.channels_last: 4, torch.channels_last_3d: 5}
_FORMATS = {rank: layout for layout, rank in _RANKS.items()}

#: the elementwise ops, whose gradients' layout follows the cotangent's too (:func:`of_gradients`)
ELEMENTWISE = frozenset(op for op, spec in SPECS.items() if spec.results_layout is not None and spec.results_layout.like_x)


def of(op: str, x: Tensor, named: Callable[[str], Tensor | None]) -> Any:
    """How a call's results of x's rank, and the gradients of its inputs of that rank, are laid out (as
    torch's are: a channels-last convolution's dx and dw are channels last too): None (C order, as the
    backends give them), torch.channels_last or channels_last_3d, or a tensor on the meta device laid
    out as x (an elementwise op on x that is not C-ordered). ``named(name)``: the call's array of that
    name (None where not given)."""
    layout = SPECS[op].results_layout
    if layout is None:
        return None
    if layout.like_x:
        return None if x.is_contiguous() else torch.empty_like(x, device="meta")
    if x.dim() not in layout.ranks or (x.dim() == 5 and layout.volume_dtypes is not None
                                       and str(x.dtype).removeprefix("torch.") not in layout.volume_dtypes):
        return None
    for name in layout.channels_last_from:
        t = x if name == "x" else named(name)
        if t is not None and t.dim() == x.dim() and _maybe_channels_last(t):
            found = suggest_memory_format(t)
            if found in _RANKS:
                return found
    return None


def of_gradients(op: str, laid: Any, x: Tensor, dy: Tensor | None, arguments: dict[str, Any]) -> Any:
    """How a call's gradients are laid out (as :func:`of` says), given the results' layout ``laid`` and
    the first cotangent: as the results, except an elementwise op's, which follow the operands of torch's
    backward kernel, x and the cotangent, in its order (the spec's ``gradient_from``): C-ordered ones
    give C order."""
    if op not in ELEMENTWISE or dy is None or dy.shape != x.shape:
        return laid
    if laid is None and dy.is_contiguous():
        return None
    rule = SPECS[op].results_layout.gradient_from
    operands = [x if name == "x" else dy for name in (("dy", "x") if rule is None else rule(arguments))]
    # torch's own rule for an elementwise op's operands, on their strides alone (the meta device; an
    # expanded cotangent, a sum's, keeps its zero strides, which decide nothing)
    found = -_meta(operands[0]) if len(operands) == 1 else _meta(operands[0]) + _meta(operands[1])
    return None if found.is_contiguous() else found


def _meta(t: Tensor) -> Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def _maybe_channels_last(t: Tensor) -> bool:
    """Whether t may be channels last: not C-ordered, or both (a size-1 dimension makes the two agree:
    a 1x1 filter, one input channel) with strides other than C order's own, which torch's
    suggest_memory_format then tells apart (2.8 us: not on a plain 1x1 filter's every call)."""
    if not t.is_contiguous():
        return True
    return t.is_contiguous(memory_format=_FORMATS[t.dim()]) and tuple(t.stride()) != _c_strides(t.shape)


def _c_strides(shape: Sequence[Any]) -> tuple[Any, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step = step * size
    return tuple(reversed(strides))


def lay_out(tensors: Sequence[Any], layout: Any) -> list[Any]:
    """``tensors`` (C-ordered; None or placeholders among them) laid out as :func:`of`'s ``layout`` says,
    those it concerns copied: of its rank for a memory format, of the template's shape for a template."""
    if layout is None:
        return list(tensors)
    if isinstance(layout, Tensor):
        return [_like(t, layout) if isinstance(t, Tensor) and t.shape == layout.shape else t for t in tensors]
    rank = _RANKS[layout]
    return [t.contiguous(memory_format=layout) if isinstance(t, Tensor) and t.dim() == rank else t for t in tensors]


def _like(t: Tensor, template: Tensor) -> Tensor:
    return torch.empty_strided(template.shape, template.stride(), dtype=t.dtype, device=t.device).copy_(t)
