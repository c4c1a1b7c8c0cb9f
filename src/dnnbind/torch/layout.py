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
ELEMENTWISE = frozenset(op for op, spec in SPECS.items()
                        if spec.results_layout is not None and spec.results_layout.like_x)


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


def of_gradients(op: str, laid: Any, x_strides: tuple[int, ...] | None, dy: Tensor | None,
                 arguments: dict[str, Any]) -> Any:
    """How a call's gradients are laid out (as :func:`of` says), given the results' layout ``laid`` and
    the first cotangent: as the results, except an elementwise op's, which follow the operands of torch's
    backward kernel, x and the cotangent, in its order (the spec's ``gradient_from``): C-ordered ones
    give C order. ``x_strides``: x's, None for a C-ordered x (whose ``laid`` is None: an elementwise op's
    results are laid out as x), so that a call keeps nothing of x for this in the usual case."""
    if op not in ELEMENTWISE or dy is None or (laid is not None and dy.shape != laid.shape):
        return laid
    if laid is None and (dy.is_contiguous() or not any(dy.stride())):   # (a sum's cotangent decides nothing)
        return None
    shape = dy.shape                           # (the cotangent of a result of x's shape)
    x_strides = _c_strides(shape) if x_strides is None else tuple(x_strides)
    rule = SPECS[op].results_layout.gradient_from
    operands = [x_strides if name == "x" else dy.stride() for name in (("dy", "x") if rule is None else rule(arguments))]
    strides = iterator_strides(shape, operands)
    if strides == _c_strides(shape):
        return None
    return torch.empty_strided(shape, strides, dtype=dy.dtype, device="meta")


def iterator_strides(shape: Sequence[Any], operands: Sequence[Sequence[Any]]) -> tuple[Any, ...]:
    """The strides of the result torch's TensorIterator gives an elementwise op on operands of ``shape``
    with these strides, in its order (its ``reorder_dimensions``; a meta tensor's op runs the same rule
    through Python references, 100 us a call): operands that agree on dense strides give those; else
    its dimensions sorted from fastest to slowest, each pair by the first operand whose strides tell
    them apart (a zero stride, an expanded dimension, tells nothing; equal strides put the smaller size
    first), the result dense in that order."""
    ndim = len(shape)
    # its fast set-ups first: all C order, all channels last (2-d images), all the same dense strides
    for order in ([*range(ndim)], *_CHANNELS_LAST_ORDERS.get(ndim, ())):
        if all(_in_order(shape, strides, order) for strides in operands):
            return _dense_in(shape, order)
    first = tuple(operands[0])
    if all(tuple(o) == first for o in operands[1:]) and _dense(shape, first):
        return first

    def swap(d0: int, d1: int) -> int:
        for strides in operands:
            s0, s1 = strides[d0], strides[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    order = list(range(ndim - 1, -1, -1))          # fastest first
    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            found = swap(order[d0], order[d1])
            if found > 0:
                order[d0], order[d1] = order[d1], order[d0]
                d1 = d0
            elif found < 0:
                break
    return _dense_in(shape, order[::-1])


#: the channels-last orders (slowest first) of TensorIterator's fast set-up: NHWC only (a 5-d tensor dense
#: in NDHWC order takes its set-up for any one dense order, its strides kept)
_CHANNELS_LAST_ORDERS = {4: ([0, 2, 3, 1],)}


def _dense_in(shape: Sequence[Any], order: Sequence[int]) -> tuple[Any, ...]:
    """Dense strides with the dimensions in ``order``, slowest first."""
    result: list[Any] = [0] * len(shape)
    step: Any = 1
    for d in reversed(order):
        result[d] = step
        step = step * shape[d]
    return tuple(result)


def _in_order(shape: Sequence[Any], strides: Sequence[Any], order: Sequence[int]) -> bool:
    """Whether strides are dense in ``order`` but for size-1 dimensions (torch's is_contiguous, for that
    memory format)."""
    step: Any = 1
    for d in reversed(order):
        if shape[d] != 1:
            if strides[d] != step:
                return False
            step = step * shape[d]
    return True


def _dense(shape: Sequence[Any], strides: Sequence[Any]) -> bool:
    """Whether strides address every element of shape once, without gaps (some order of C's)."""
    step = 1
    for size, stride in sorted(zip(shape, strides), key=lambda pair: pair[1]):
        if size != 1 and stride != step:
            return False
        step = step * size
    return True


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
