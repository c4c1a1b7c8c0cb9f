"""What a repeated call of a public op runs: a :class:`Plan`, found by one key in :mod:`arg_cache`.

The first call of a problem (array types, shapes and dtypes, plus the op's other arguments) checks
everything, picks the backend and builds a Plan: the backend's function bound to the checked static
arguments (ConvDims, PoolDims, ...) and the description of its pullback. A repeated call builds the
key, finds the plan and runs it: no adoption of device arrays, no checks, no shape logic. Only calls
whose arrays are numpy or CuPy arrays (or None) get a plan; others (PyTorch CUDA tensors, masked
arrays' first call) take the checked path, which adopts them first.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from dnnbind.highlevel import arg_cache

from dnnbind.highlevel.pullback import Cotangent, Pullback, _dtype, _shape


class Plan:
    """``plan(*arrays) -> (result, Pullback)``: one problem's backend function and static arguments."""

    __slots__ = ("op", "run", "static", "gradients", "first", "cotangents", "plain")

    def __init__(self, op: str, run: Callable[..., Any], static: tuple, gradients: tuple[str, ...],
                 first: bool = False) -> None:
        self.op, self.run, self.static, self.gradients, self.first = op, run, static, gradients, first
        self.cotangents: tuple[Cotangent, ...] | None = None   # from the first result: shape and dtype of y
        self.plain: tuple | None = None     # the arguments tagged by arg_cache.plain, when one is a tuple

    def __call__(self, *arrays: Any) -> tuple[Any, Pullback]:
        result, backward = self.run(*arrays, *self.static)
        cotangents = self.cotangents
        if cotangents is None:
            y = result[0] if self.first and isinstance(result, tuple) else result
            cotangents = self.cotangents = (Cotangent("dy", "y", _shape(y), _dtype(y)),)
            # the later calls, whose arrays have these shapes and dtypes, skip the backend's wrappers
            # that only call through for them (residual.passes_when)
            for_call = getattr(self.run, "for_call", None)
            if for_call is not None:
                self.run = for_call(*arrays, *self.static)
        return result, Pullback(self.op, backward, cotangents, self.gradients)


def _python_key(op: str, arrays: tuple, arguments: tuple) -> tuple:
    """op, the arguments and their types (2.0 and True never meet 2 and 1), each array's type, shape
    and dtype, in one flat tuple."""
    key: list[Any] = [op, arguments]
    key += map(type, arguments)
    for a in arrays:
        if a is None:
            key.append(None)
        else:
            key += (type(a), a.shape, a.dtype)
    return tuple(key)


def _python_find(op: str, arrays: tuple, arguments: tuple) -> Plan | None:
    """The plan of this call if an earlier one built it; None sends the call down the checked path."""
    try:
        plan = _ENTRIES.get(_key(op, arrays, arguments))
    except (AttributeError, TypeError):        # not an array; an unhashable argument (a list)
        return None
    # a plan for tuple arguments also holds them tagged: (1, True) must not meet (1, 1)'s plan
    if plan is not None and plan.plain is not None and plan.plain != _plain(arguments):
        return None
    return plan


def _plain(arguments: tuple) -> tuple | None:
    """None when every argument is a scalar (the key's types tell 1 from True) and no float is a zero;
    else the arguments with each tuple or list through :func:`arg_cache.plain` (a tuple, its bools tagged)
    and each zero float tagged with its sign (0.0 and -0.0 are equal keys but may give other results).
    Raises arg_cache.NotPlain for arguments of other types."""
    if all(type(a) in _SCALARS for a in arguments) and not any(map(_zero, arguments)):
        return None
    return tuple([(_ZERO, math.copysign(1.0, a)) if _zero(a) else a if type(a) in _SCALARS else arg_cache.plain(a)
                  for a in arguments])


def _zero(value: Any) -> bool:
    return type(value) is float and value == 0.0


_ZERO = object()     # tags a zero float in a key, with its sign


_SCALARS = frozenset({int, bool, float, str, type(None)})   # the key holds their types: 2.0 never meets 2
_ENTRIES = arg_cache.entries()     # read directly: a repeated call pays one dictionary lookup

# the key and the lookup in C (csrc/plankey.c), where the optional extension was built: the same results
# in a third of the time
_key: Callable[[str, tuple, tuple], tuple]
find: Callable[[str, tuple, tuple], "Plan | None"]
try:
    from dnnbind.highlevel import _plankey
except ImportError:   # pragma: no cover - built by every development install
    _key, find = _python_key, _python_find
else:
    _plankey.configure(_ENTRIES, _plain)
    _key, find = _plankey.key, _plankey.find


def _plannable(value: Any) -> bool:
    return value is None or type(value).__module__.partition(".")[0] in ("numpy", "cupy")


def build(op: str, arrays: tuple, arguments: tuple, make: Callable[[], Plan]) -> Plan:
    """The plan of this (checked, adopted) call: found, or made by ``make()`` (which runs the checks) and
    kept when every array is numpy's or CuPy's and every argument plain (see :func:`arg_cache.plain`)."""
    try:
        plain = _plain(arguments)
        # a list argument is kept as the tuple it equals: a later call with the tuple finds the plan
        full = _key(op, arrays, arguments if plain is None else plain) if all(map(_plannable, arrays)) else None
    except (TypeError, arg_cache.NotPlain):
        full = None
    plan = None if full is None else arg_cache.lookup(full)
    if plan is None:
        plan = make()
        if full is not None:
            plan.plain = plain
            arg_cache.store(full, plan)
    if full is not None and plain is not None:
        _also_under_the_call_key(op, arrays, arguments, full, plan)
    return plan


def _also_under_the_call_key(op: str, arrays: tuple, arguments: tuple, full: tuple, plan: Plan) -> None:
    """Keep a plan whose key holds tagged arguments (a zero float, a tuple with a bool) under this call's
    own key too, which is what :func:`find` looks up: else such calls never took the per-call path.
    Calls whose arguments differ only in what the tags tell apart (0.0 and -0.0) share that key; find
    compares the tagged arguments, and the call that misses takes this path and points the key at its
    own plan."""
    key = _key(op, arrays, arguments)
    if key != full:               # (equal keys: the plan is there already)
        try:
            arg_cache.store(key, plan)
        except TypeError:         # a list argument: its calls are found under the tuple it equals
            return
