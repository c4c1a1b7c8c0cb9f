"""Result shapes of a fake kernel whose input sizes are symbolic (torch.export's dynamic dims).

dnnbind's shape logic (ConvDims, PoolDims, RNNDims, the residual specs) computes with ints. A symbolic
size turned into an int would make torch specialize it to the example's value (and torch.export with a
dynamic batch refuses that). Every size dnnbind computes is affine in each input size (a batch passes
through, a residual holds N or T*N rows), so the shapes are computed at the example's sizes and at each
symbolic size plus one, solved for their multilinear coefficients, checked at a further point, and
written as expressions in the symbolic sizes. Where that does not hold, the sizes are specialized as
before (the caller's torch then reports which constraint broke).
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import torch

#: at most this many distinct symbolic sizes are solved for (2**n + 1 evaluations of the shape logic)
MAX_SYMBOLS = 4

Evaluate = Callable[[Callable[[Any], tuple[int, ...]]], list[Any]]


def shapes(evaluate: Evaluate, tensors: Sequence[Any]) -> list[Any]:
    """``evaluate(size_of)`` (a list of shapes or None, from each tensor's sizes as ``size_of(t)`` gives
    them) with the symbolic sizes of ``tensors`` kept symbolic in the shapes it returns. Where the shapes
    are not affine in every symbolic size (a pooled height, under torch.compile(dynamic=True)), the sizes
    they are affine in alone (the batch) stay symbolic and the others are specialized."""
    symbols = _symbols(tensors)
    if not symbols or len(symbols) > MAX_SYMBOLS:
        return evaluate(_concrete)
    found = _solve(evaluate, symbols)
    if found is None and len(symbols) > 1:
        kept = {k: v for k, v in symbols.items() if _solve(evaluate, {k: v}, trial=True) is not None}
        if kept:
            found = _solve(evaluate, kept)
            if found is not None:
                for k, (size, _) in symbols.items():
                    if k not in kept:
                        int(size)                   # specialized: torch guards it
    return found if found is not None else evaluate(_concrete)


def _solve(evaluate: Evaluate, symbols: dict[Any, tuple[torch.SymInt, int]], trial: bool = False) -> list[Any] | None:
    """The shapes with ``symbols`` kept symbolic, or None where they are not multilinear in them (other
    symbolic sizes read at their example values; ``trial``: as plain values only, nothing returned)."""
    hints = [hint for _, hint in symbols.values()]
    try:
        corners = {bits: evaluate(_at(symbols, [h + b for h, b in zip(hints, bits)]))
                   for bits in itertools.product((0, 1), repeat=len(symbols))}
        check = evaluate(_at(symbols, [h + 2 for h in hints]))
    except Exception:               # the shape logic refuses a size besides the example's
        return None
    sizes = [size for size, _ in symbols.values()]
    result: list[Any] = []
    for i, found in enumerate(corners[(0,) * len(symbols)]):
        if found is None:
            result.append(None)
            continue
        dims = []
        for d in range(len(found)):
            coefficients = _monomials(_coefficients({bits: shape[i][d] for bits, shape in corners.items()}), hints)
            if _value(coefficients, [h + 2 for h in hints]) != check[i][d]:
                return None
            dims.append(None if trial else _value(coefficients, sizes))
        result.append(tuple(dims))
    return result


def _symbols(tensors: Sequence[Any]) -> dict[Any, tuple[torch.SymInt, int]]:
    """Each distinct symbolic size of the tensors (by its expression) -> (one SymInt of it, its hint)."""
    found: dict[Any, tuple[torch.SymInt, int]] = {}
    for t in tensors:
        for size in () if t is None else t.shape:
            if isinstance(size, torch.SymInt):
                node = size.node
                if node.expr.is_number:
                    continue
                if node.hint is None:               # unbacked: no example value to start from
                    return {}
                found.setdefault(node.expr, (size, int(node.hint)))
    return found


def _concrete(t: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


def _at(symbols: dict[Any, tuple[torch.SymInt, int]], values: list[int]) -> Callable[[Any], tuple[int, ...]]:
    """size_of for evaluate: each symbolic size at its value in ``values``."""
    by_expr = dict(zip(symbols, values))

    def size_of(t: Any) -> tuple[int, ...]:
        return tuple(_size(s, by_expr) for s in t.shape)
    return size_of


def _size(s: Any, by_expr: dict[Any, int]) -> int:
    """A size as ``size_of`` gives it: a solved-for symbol at its value, another symbolic size at its
    example value (no guard: whether it is specialized is decided after), an int as it is."""
    if not isinstance(s, torch.SymInt):
        return int(s)
    expr = s.node.expr
    if expr in by_expr:
        return by_expr[expr]
    return int(expr) if expr.is_number else int(s.node.hint)


def _coefficients(values: dict[tuple[int, ...], int]) -> dict[tuple[int, ...], int]:
    """The multilinear polynomial through the corners: per subset of symbols (as bits) its coefficient of
    the product of (size - hint) over the subset (inclusion-exclusion)."""
    out = {}
    for subset in values:
        total = 0
        for inner in values:
            if all(i <= s for i, s in zip(inner, subset)):
                total += (-1) ** (sum(subset) - sum(inner)) * values[inner]
        if total:
            out[subset] = total
    return out


def _monomials(coefficients: dict[tuple[int, ...], int], hints: list[int]) -> dict[tuple[int, ...], int]:
    """The same polynomial with coefficients of the products of the sizes themselves (each product of
    (size - hint) expanded), so that the expressions read as torch writes sizes (2*s0 + 1, s0*s1)."""
    out: dict[tuple[int, ...], int] = {}
    for subset, c in coefficients.items():
        for inner in itertools.product(*[(0, 1) if bit else (0,) for bit in subset]):
            term = c
            for bit, kept, hint in zip(subset, inner, hints):
                if bit and not kept:
                    term *= -hint
            out[inner] = out.get(inner, 0) + term
    return {subset: c for subset, c in out.items() if c}


def _value(coefficients: dict[tuple[int, ...], int], sizes: list[Any]) -> Any:
    """The polynomial at ``sizes`` (ints, or SymInts for the expression)."""
    value: Any = 0
    for subset, c in sorted(coefficients.items(), key=lambda item: -sum(item[0])):
        term: Any = 1
        for bit, size in zip(subset, sizes):
            if bit:
                term = term * size
        value = term * c + value if c != 1 else term + value
    return value
