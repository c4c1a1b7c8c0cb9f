"""Result shapes of a fake kernel whose input sizes are symbolic (torch.export's dynamic dims).

dnnbind's shape logic (ConvDims, PoolDims, RNNDims, the residual specs) computes with ints. A symbolic
size turned into an int would make torch specialize it to the example's value (and torch.export with a
dynamic batch refuses that). Most sizes dnnbind computes are affine in each input size (a batch passes
through, a residual holds N or T*N rows), so the shapes are computed at the example's sizes and at each
symbolic size plus one, solved for their multilinear coefficients, checked at a further point and at
far ones (:data:`FAR`), and written as expressions in the symbolic sizes. A size that is not (a strided
convolution's or a pooling's output length, ``(h + 2p - k) // s + 1``) is affine in ``(h + b) // q``
for one symbolic size h: found from where it steps after the example's size and where it steps next
(:func:`_quasi_affine`, by bisection: periods up to the last far offset), checked at the far points too,
and written with torch's floor division.
Where neither holds, the sizes are specialized as before (the caller's torch then reports which
constraint broke). The far points keep a size that steps only every s sizes from passing for a
constant: a stride-16 convolution's output length is the same at h, h + 1 and h + 2.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import torch

#: at most this many distinct symbolic sizes are solved for (2**n + 1 evaluations of the shape logic, while
#: a graph is traced): a 5-d input's five, with room for a symbolic weight's or a second input's
MAX_SYMBOLS = 8

#: offsets from the example's sizes of the points every expression found is checked at: a stride (or a
#: pooling step) up to the largest steps at least once between the example and them
FAR = (37, 1031)

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
    """The shapes with ``symbols`` kept symbolic, or None where a size is neither multilinear in them nor
    quasi-affine in one of them (other symbolic sizes read at their example values; ``trial``: as plain
    values only, nothing returned)."""
    hints = [hint for _, hint in symbols.values()]
    try:
        corners = {bits: evaluate(_at(symbols, [h + b for h, b in zip(hints, bits)]))
                   for bits in itertools.product((0, 1), repeat=len(symbols))}
        check = evaluate(_at(symbols, [h + 2 for h in hints]))
        far_points = [[h + offset + 7 * j for j, h in enumerate(hints)] for offset in FAR]
        far = [evaluate(_at(symbols, point)) for point in far_points]
    except Exception:               # the shape logic refuses a size besides the example's
        return None
    sizes = [size for size, _ in symbols.values()]
    alone = _Alone(evaluate, symbols, corners)
    result: list[Any] = []
    for i, found in enumerate(corners[(0,) * len(symbols)]):
        if found is None:
            result.append(None)
            continue
        dims = []
        for d in range(len(found)):
            coefficients = _monomials(_coefficients({bits: shape[i][d] for bits, shape in corners.items()}), hints)
            checks = [([h + 2 for h in hints], check[i][d]), *((point, at[i][d]) for point, at in zip(far_points, far))]
            if all(_value(coefficients, point) == value for point, value in checks):
                dims.append(None if trial else _value(coefficients, sizes))
                continue
            size = _periodic(alone, i, d, checks, sizes)
            if size is None:
                return None
            dims.append(None if trial else size)
        result.append(tuple(dims))
    return result


class _Alone:
    """The shapes with one symbolic size moved from its example value, the others at theirs: each
    evaluated once (None where the shape logic refuses that size)."""

    def __init__(self, evaluate: Evaluate, symbols: dict[Any, tuple[torch.SymInt, int]],
                 corners: dict[tuple[int, ...], Any]) -> None:
        self.evaluate, self.symbols = evaluate, symbols
        self.hints = [hint for _, hint in symbols.values()]
        # the corners already evaluated: every symbol at its hint, and one of them at its hint + 1
        n = len(symbols)
        self.cache: dict[tuple[int, int], Any] = {(j, 0): corners[(0,) * n] for j in range(n)}
        self.cache.update({(j, 1): corners[tuple(int(m == j) for m in range(n))] for j in range(n)})

    def __call__(self, j: int, k: int) -> Any:
        """The shapes with symbol j at its hint + k."""
        if (j, k) not in self.cache:
            try:
                self.cache[j, k] = self.evaluate(_at(self.symbols, [h + (k if n == j else 0)
                                                                   for n, h in enumerate(self.hints)]))
            except Exception:
                self.cache[j, k] = None
        return self.cache[j, k]


def _periodic(alone: _Alone, i: int, d: int, checks: list[tuple[list[int], int]], sizes: list[Any]) -> Any:
    """Dimension d of shape i where it changes with one symbolic size alone, quasi-affine in it
    (:func:`_quasi_affine`) and right at the check points too (each a size per symbol and the value
    there): its expression in that size; else None."""
    def value(j: int, k: int) -> int | None:
        shapes = alone(j, k)
        return None if shapes is None or shapes[i] is None else shapes[i][d]

    base = value(0, 0)
    moving = [j for j in range(len(sizes)) if any(value(j, k) != base for k in (1, 2, FAR[-1]))]
    if base is None or len(moving) != 1:
        return None
    j = moving[0]
    hint = int(sizes[j].node.hint)
    form = _quasi_affine(lambda k: value(j, k), hint)
    if form is None or any(_floor_form(form, point[j]) != v for point, v in checks):
        return None
    return _floor_form(form, sizes[j])


def _quasi_affine(at: Callable[[int], int | None], hint: int) -> tuple[int, int, int, int] | None:
    """(q, b, a, c) with at(k) == a * ((hint + k + b) // q) + c, where ``at`` is a size at hint + k: read
    from where it first steps after the example and where it steps next (found by bisection, as a
    stride's output length never steps back), q at most the last far offset (:data:`FAR`), then checked
    around both steps and at a run of sizes; or None."""
    limit = FAR[-1]
    first = _next_step(at, 0, limit)
    if first is None:
        return None
    second = _next_step(at, first, first + limit)
    if second is None:
        return None
    start, jump = at(0), at(first)
    assert start is not None and jump is not None
    q, a = second - first, jump - start
    b = -(hint + first) % q
    c = start - a * ((hint + b) // q)
    ks = {*range(2 * min(q, 8) + 2), first - 1, first, first + 1, second - 1, second, second + 1,
          second + q, 3 * q + second // 2}
    if all(at(k) == a * ((hint + k + b) // q) + c for k in ks):
        return q, b, a, c
    return None


def _next_step(at: Callable[[int], int | None], k0: int, limit: int) -> int | None:
    """The smallest k in (k0, limit] where at(k) differs from at(k0), by bisection (assuming it stays
    different once it has changed), or None where at(limit) does not differ (or is refused)."""
    start = at(k0)
    end = at(limit)
    if start is None or end is None or end == start:
        return None
    low, high = k0, limit               # at(low) == start != at(high)
    while high - low > 1:
        middle = (low + high) // 2
        if at(middle) == start:
            low = middle
        else:
            high = middle
    return high


def _floor_form(form: tuple[int, int, int, int], size: Any) -> Any:
    """a * ((size + b) // q) + c for form (q, b, a, c), at an int or a SymInt."""
    q, b, a, c = form
    inner = size + b if b else size
    step = inner // q if q != 1 else inner
    value = step * a if a != 1 else step
    return value + c if c else value


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
