"""One plan per call signature: the one cache, its one key, its statistics, and the explicit plan object.

A call signature is an op (its spec), the types, shapes and dtypes of its arrays and its other
arguments with their types. The first call of a signature checks everything (the spec's checks, on
the dims objects), picks the backend and builds a :class:`Plan`: the backend's function bound to the
checked static arguments and the description of its pullback. A repeated call builds the key, finds the
plan and runs it: no adoption of device arrays, no checks, no shape logic.

The key (:func:`call_key`) is ``(spec, arguments, their types, then per array its type, shape and
dtype)``: a required array adds those three, an optional one None or a tuple of them, a nested one (rnn's
weights) a tuple of tuples. The public functions (:mod:`dnnbind.highlevel.ops`) build the same tuple
inline, from code generated from the spec, so that a repeated call pays one tuple and one dictionary
lookup (the tests check that both agree). Arguments that hash equal but check differently -- a bool
in a tuple, where 1 would be, and 0.0 beside -0.0 -- are told apart by the plan's :attr:`Plan.tags`
(:func:`tags`), compared after the lookup; such plans are kept under their tagged key as well.

:data:`CACHE` is a bounded, approximately least-recently-used map (second chance: a plan used since
the last eviction pass is kept once more) holding plans, never arrays; :func:`plan_cache_info` reports
its hits, misses and size. Failures are never cached: a bad argument raises its error on every call.
"""
from __future__ import annotations

import math
import threading
from typing import Any, Callable, NamedTuple

import numpy as np

from dnnbind.highlevel.pullback import Cotangent, Pullback, _dtype, _shape
from dnnbind.highlevel.specs import OpSpec


class NotPlain(Exception):
    """An argument that cannot be part of a key (a float array, a Generator)."""


_PLAIN = frozenset({int, str, type(None)})
_SCALARS = frozenset({int, bool, float, str, type(None)})   # the key holds their types: 2.0 never meets 2
_BOOL = object()    # tags bools, which compare and hash equal to the ints 0 and 1
_ZERO = object()    # tags a zero float, with its sign
_FLOAT = object()   # tags another float inside a tuple (the key's types tell only the top level's)


def plain(value: Any) -> Any:
    """``value`` as a key part: exact ints, strings, None and dtypes as they are, bools and floats tagged
    (so that True never meets 1, nor 2.0 meets 2), zero floats with their sign, tuples and lists of
    those as tuples.
    Raises NotPlain for anything else."""
    kind = type(value)
    if kind in _PLAIN or isinstance(value, np.dtype):
        return value
    if kind is bool:
        return (_BOOL, value)
    if kind is float:                   # (tagged: 2.0 in a tuple never meets 2)
        return (_ZERO, math.copysign(1.0, value)) if value == 0.0 else (_FLOAT, value)
    if kind is tuple and _PLAIN.issuperset(map(type, value)):
        return value                    # the common case (a stride, a padding): ints only, as it is
    if kind is tuple or kind is list:
        return tuple([plain(v) for v in value])
    raise NotPlain


def tags(arguments: tuple) -> tuple | None:
    """None when every argument is a scalar (the key's types tell 1 from True) and no float is a zero;
    else the arguments with each zero float tagged with its sign and each tuple or list through
    :func:`plain` (a tuple, its bools tagged). Raises NotPlain for arguments of other types."""
    for a in arguments:
        kind = type(a)
        if kind not in _SCALARS or (kind is float and a == 0.0):
            break
    else:
        return None
    return tuple([(_ZERO, math.copysign(1.0, a)) if type(a) is float and a == 0.0 else a if type(a) in _SCALARS
                  else plain(a) for a in arguments])


def array_key(array: Any) -> Any:
    """An optional array's part of a key: None, or (type, shape, dtype)."""
    return None if array is None else (type(array), array.shape, array.dtype)


def nested_key(entries: Any) -> tuple:
    """A nested array argument's part of a key (rnn's weights): per entry, each array's key."""
    return tuple([tuple([array_key(a) for a in entry]) for entry in entries])


def call_key(spec: OpSpec, arrays: tuple, arguments: tuple) -> tuple:
    """The key of a call: see the module doc. AttributeError for what is not an array, TypeError for
    what does not hash (a list argument)."""
    key: list[Any] = [spec, arguments, tuple(map(type, arguments))]
    for arg, a in zip(spec.arrays, arrays):
        if arg.nested:
            key.append(nested_key(a))
        elif arg.optional:
            key.append(array_key(a))
        else:
            key += (type(a), a.shape, a.dtype)
    out = tuple(key)
    hash(out)
    return out


def find(spec: OpSpec, arrays: tuple, arguments: tuple) -> "Plan | None":
    """The plan a call with these arrays and arguments runs, if one was built (else None): what the
    public functions look up, through :func:`call_key`."""
    try:
        plan = CACHE.entries.get(call_key(spec, arrays, arguments))
        if plan is not None and plan.tags is not None and plan.tags != tags(arguments):
            return None
    except (AttributeError, TypeError, NotPlain):
        return None
    return plan


class Plan:
    """``plan(*arrays) -> (result, Pullback)``: one call signature's backend function and static arguments.

    ``arrays`` in the spec's order (nested ones as the user gave them)."""

    __slots__ = ("spec", "run", "static", "title", "gradients", "cotangents", "tags", "hits", "seen", "why")

    def __init__(self, spec: OpSpec, run: Callable[..., Any], static: tuple, title: str,
                 gradients: tuple[str, ...], why: dict[str, Any]) -> None:
        self.spec, self.run, self.static, self.title, self.gradients = spec, run, static, title, gradients
        self.cotangents: tuple[Cotangent, ...] | None = None   # from the first result: shapes and dtypes
        self.tags: tuple | None = None      # the arguments through tags(), when they need them
        self.hits = self.seen = 0           # calls that found this plan; hits at the last eviction pass
        self.why = why                      # the call's arguments, for the cotangents' why_none texts

    @staticmethod
    def of(spec: OpSpec) -> type["Plan"]:
        """The plan class for ``spec``: :class:`Plan`, or :class:`PreparedPlan` where a call needs more."""
        return PreparedPlan if spec.every_call is not None or spec.parse is not None else Plan

    def __call__(self, *arrays: Any) -> tuple[Any, Pullback]:
        result, backward = self.run(*arrays, *self.static)
        cotangents = self.cotangents
        if cotangents is None:
            cotangents = self.cotangents = self._cotangents(result)
            # the later calls, whose arrays have these shapes and dtypes, skip the backend's wrappers
            # that only call through for them (residual.passes_when)
            for_call = getattr(self.run, "for_call", None)
            if for_call is not None:
                self.run = for_call(*arrays, *self.static)
        return result, Pullback(self.title, backward, cotangents, self.gradients)

    def _cotangents(self, result: Any) -> tuple[Cotangent, ...]:
        parts = result if type(result) is tuple else (result,)
        return tuple(Cotangent(o.cotangent, o.name, None if value is None else _shape(value), _dtype(value),
                               optional=o.optional, why_none=o.why_none.format(**self.why))
                     for o, value in zip(self.spec.outputs, parts) if o.cotangent is not None)


class PreparedPlan(Plan):
    """A plan whose calls need the spec's every-call check (batch norm's writable running statistics)
    or its parsing of a nested array argument (rnn's weights, as lists) before they run."""

    __slots__ = ()

    def __call__(self, *arrays: Any) -> tuple[Any, Pullback]:
        spec = self.spec
        if spec.every_call is not None:
            spec.every_call(arrays, self.static)
        if spec.parse is not None:
            arrays = tuple(spec.parse(a) if arg.nested else a for arg, a in zip(spec.arrays, arrays))
        return Plan.__call__(self, *arrays)


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    size: int
    maxsize: int


class PlanCache:
    """The bounded map ``key -> Plan`` (see the module doc); readers use :attr:`entries` directly. It also
    holds what :func:`remember` keeps and the frameworks' own plans (dnnbind.torch's eager calls)."""

    def __init__(self, maxsize: int = 1024) -> None:
        self.entries: dict[tuple, Any] = {}
        self.maxsize = maxsize
        self.misses = 0
        self._evicted_hits = 0
        self._lock = threading.Lock()

    def store(self, key: tuple, plan: Any) -> None:
        with self._lock:
            self.entries[key] = plan
            while len(self.entries) > self.maxsize:
                self._evict_one()

    def _evict_one(self) -> None:
        """Drop the oldest entry not used since the last pass; the used ones go to the back once."""
        entries = self.entries
        for _ in range(len(entries)):
            key = next(iter(entries))
            plan = entries.pop(key)
            hits = getattr(plan, "hits", 0)           # (a remembered value other than a plan: 0)
            if hits != getattr(plan, "seen", 0):
                plan.seen = hits
                entries[key] = plan
                continue
            if plan not in entries.values():
                self._evicted_hits += hits
            return

    def info(self) -> CacheInfo:
        plans = {id(p): p for p in self.entries.values() if isinstance(p, Plan)}
        hits = self._evicted_hits + sum(p.hits for p in plans.values())
        return CacheInfo(hits, self.misses, len(self.entries), self.maxsize)

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self.misses = self._evicted_hits = 0


#: the one plan cache of the public ops
CACHE = PlanCache()


def arguments_key(arguments: tuple) -> tuple:
    """Arguments as a key part: with their types when all are scalars (1, True and 1.0 differ), else
    through :func:`plain`. Raises NotPlain for arguments of other types."""
    types = tuple(map(type, arguments))
    if _SCALARS.issuperset(types) and tags(arguments) is None:
        return (arguments, types)
    return tuple([plain(a) for a in arguments])


def remember(parts: tuple, arguments: tuple, build: Callable[[], Any]) -> Any:
    """``build()``'s result for a call described by ``parts`` (hashable: an op and its arrays' types,
    shapes and dtypes) and ``arguments`` (through :func:`arguments_key`), built once per distinct key and
    kept in the one cache (frameworks' checked static arguments: dnnbind.torch). Calls whose arguments
    no key holds call ``build()`` every time."""
    try:
        key = (parts, arguments_key(arguments))
    except (NotPlain, TypeError):
        return build()
    return kept(key, build)


def kept(key: tuple, build: Callable[[], Any]) -> Any:
    """``build()``'s result, kept in the one cache under ``key``: found there, or built, counted as a miss
    and stored. A key that does not hash (an argument of a type no key holds) builds every time."""
    try:
        value = CACHE.entries.get(key)
    except TypeError:
        return build()
    if value is None:
        value = build()
        CACHE.misses += 1
        CACHE.store(key, value)
    return value


def plan_cache_info() -> CacheInfo:
    """(hits, misses, size, maxsize) of the public ops' plan cache: a hit is a call that found its plan,
    a miss one that built it (calls with arrays or arguments that no plan keys count as neither)."""
    return CACHE.info()


def clear_plan_cache() -> None:
    """Forget every plan (and the statistics)."""
    CACHE.clear()


def _plannable(value: Any) -> bool:
    if type(value) in (list, tuple):
        return all(_plannable(v) for entry in value for v in (entry if type(entry) in (list, tuple) else (entry,)))
    return value is None or type(value).__module__.partition(".")[0] in ("numpy", "cupy")


def find_or_build(spec: OpSpec, arrays: tuple, arguments: tuple, make: Callable[[], Plan]) -> Plan:
    """The plan of this (checked, adopted) call: found, or made by ``make()`` (which runs the checks) and
    kept when every array is numpy's or CuPy's and every argument plain (see :func:`plain`)."""
    try:
        tagged = tags(arguments)
        full = call_key(spec, arrays, arguments if tagged is None else tagged) \
            if all(map(_plannable, arrays)) else None
    except (TypeError, AttributeError, NotPlain):
        full = None
    plan = None if full is None else CACHE.entries.get(full)
    if plan is None:
        plan = make()
        if full is not None:
            plan.tags = tagged
            CACHE.misses += 1
            CACHE.store(full, plan)
    else:
        plan.hits += 1
    if full is not None and tagged is not None:
        # also under the call's own key, which the public function looks up (a list argument has none:
        # its calls find the plan here, under the tuple it equals)
        try:
            key = call_key(spec, arrays, arguments)
        except TypeError:
            return plan
        if key != full:
            CACHE.store(key, plan)
    return plan
