"""Remember the outcome of argument checking for repeated calls (the per-call overhead path).

A training loop calls the same op with the same array types, shapes, dtypes and arguments thousands
of times; backend selection, the checks and the shape logic (ConvDims and friends) give the same
answer every time. :func:`remember` keys
that answer by the arguments themselves and skips the work on a repeat. Only *plain* values take part
in a key (exact ints, bools, strings, None, numpy dtypes, and tuples or lists of those), so two keys are
equal only when the checks would see equal arguments: ``stride=2.0`` or ``stride=True`` never meets the
entry of ``stride=2`` (hash-equal but rejected by the checks), and arguments of any other type simply
bypass the cache. Failures are never remembered: a bad argument raises its error on every call.

The cache is bounded (the oldest entry goes first; a training loop's few problems never reach the
bound) and holds shapes, descriptors and plans of the problem only, never arrays.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

import numpy as np

T = TypeVar("T")

#: Entries kept; a program with more distinct problems than this only loses the saving for some.
MAX_ENTRIES = 1024

_PLAIN = frozenset({int, str, type(None)})
_BOOL = object()   # tags bools, which compare and hash equal to the ints 0 and 1
_SCALARS = frozenset({int, bool, type(None)})
_entries: dict[tuple, Any] = {}
_lock = threading.Lock()


class NotPlain(Exception):
    pass


def plain(value: Any) -> Any:
    """``value`` as a key part: exact ints, strings, None and dtypes as they are, bools tagged (so that
    True never meets 1), tuples and lists of those as tuples. Raises NotPlain for anything else."""
    kind = type(value)
    if kind in _PLAIN or isinstance(value, np.dtype):
        return value
    if kind is bool:
        return (_BOOL, value)
    if kind is tuple and _PLAIN.issuperset(map(type, value)):
        return value                    # the common case (a stride, a padding): ints only, as it is
    if kind is tuple or kind is list:
        return tuple([plain(v) for v in value])
    raise NotPlain


def key(arrays: tuple, arguments: tuple) -> tuple:
    """The cache key of a call: ``arrays`` as given, ``arguments`` through :func:`plain` (their types
    alongside when all are scalars). Raises NotPlain for an argument of any other type."""
    types = tuple(map(type, arguments))
    if _SCALARS.issuperset(types):      # the common case: ints, bools, None; their types keep 1 from True
        return (arrays, arguments, types)
    return (arrays, tuple([plain(a) for a in arguments]))


def lookup(full: tuple) -> Any:
    """The entry under ``full`` (a :func:`key`), or None. A read needs no lock: dict lookups are atomic."""
    return _entries.get(full)


def entries() -> dict[tuple, Any]:
    """The cache itself, for readers on the per-call path (:mod:`dnnbind.highlevel.plans`); write
    through :func:`store`."""
    return _entries


def store(full: tuple, value: T) -> T:
    """Keep ``value`` under ``full``, dropping the oldest entry past :data:`MAX_ENTRIES`; returns value."""
    with _lock:
        _entries[full] = value
        while len(_entries) > MAX_ENTRIES:
            del _entries[next(iter(_entries))]
    return value


def remember(arrays: tuple, arguments: tuple, build: Callable[[], T]) -> T:
    """``build()``'s result for this call, built once per distinct key.

    ``arrays``: the op's name and what the checks see of its arrays (shapes and dtypes, as the arrays
    report them: equal ones always check alike). ``arguments``: the user's other arguments, passed
    through :func:`plain`; a call with an argument of any other type, or an unhashable shape, calls
    ``build()`` every time.
    """
    try:
        full = key(arrays, arguments)
        value = _entries.get(full)
    except (NotPlain, TypeError):      # an argument that is not plain, a shape that is not hashable
        return build()
    if value is None:
        value = store(full, build())
    return value


def clear() -> None:
    """Forget every entry (tests)."""
    with _lock:
        _entries.clear()


def size() -> int:
    return len(_entries)
