"""Bounded LRU caches of plans (descriptors, chosen algorithms), with statistics, and their registry.

A plan is everything a GPU backend derives from a problem's identity before touching data: library
descriptors, explicit-padding geometry, the algorithm it chose. Building one costs library calls (and,
for ``algo="benchmark"``, timed runs), so backends keep plans in a :class:`PlanCache` keyed by
everything that defines the plan. Caches never hold per-call state (arrays, workspaces).

Evicting or clearing drops the cache's reference only: a pullback that still holds a plan keeps it
alive, and the plan's descriptors are destroyed when the last reference goes (see
:mod:`dnnbind.highlevel.gpu.descriptors`).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")

#: every cache, by name ("cudnn.conv", "miopen.conv", ...)
_REGISTRY: dict[str, "PlanCache"] = {}
_REGISTRY_LOCK = threading.Lock()


@dataclass(frozen=True)
class CacheInfo:
    """Statistics of one cache since it was created or last cleared."""

    name: str
    hits: int
    misses: int
    evictions: int
    size: int
    maxsize: int


class PlanCache(Generic[V]):
    """A thread-safe LRU map ``key -> plan`` holding at most ``maxsize`` plans.

    :meth:`get` builds a missing plan outside the lock (building may call the library), so two threads
    may build the same plan at once; the first one stored wins and both get it.
    """

    def __init__(self, name: str, maxsize: int = 256) -> None:
        self.name = name
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self._maxsize = _check_maxsize(maxsize)
        self._hits = self._misses = self._evictions = 0
        with _REGISTRY_LOCK:
            _REGISTRY[name] = self

    def get(self, key: Hashable, build: Callable[[], V]) -> V:
        """The plan for ``key``, built with ``build()`` on a miss (nothing is stored if it raises)."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
                self._hits += 1
                return value
            self._misses += 1
        value = build()
        with self._lock:
            existing = self._items.get(key)
            if existing is not None:
                self._items.move_to_end(key)
                return existing
            self._items[key] = value
            self._evict()
        return value

    def _evict(self) -> None:
        while len(self._items) > self._maxsize:
            self._items.popitem(last=False)
            self._evictions += 1

    def resize(self, maxsize: int) -> None:
        """Change the bound, evicting the least recently used plans if needed."""
        with self._lock:
            self._maxsize = _check_maxsize(maxsize)
            self._evict()

    def clear(self) -> None:
        """Drop every plan and reset the statistics."""
        with self._lock:
            self._items.clear()
            self._hits = self._misses = self._evictions = 0

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self.name, self._hits, self._misses, self._evictions, len(self._items),
                             self._maxsize)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        i = self.info()
        return (f"<PlanCache {i.name}: {i.size}/{i.maxsize} plans, {i.hits} hits, {i.misses} misses, "
                f"{i.evictions} evictions>")


def _check_maxsize(maxsize: int) -> int:
    if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
        raise ValueError(f"maxsize={maxsize!r} must be a positive int")
    return maxsize


def _selected(prefix: str) -> list[PlanCache]:
    with _REGISTRY_LOCK:
        return [c for name, c in sorted(_REGISTRY.items()) if name.startswith(prefix)]


def cache_info(prefix: str = "") -> dict[str, CacheInfo]:
    """Statistics of every plan cache whose name starts with ``prefix`` ("cudnn." for one backend)."""
    return {c.name: c.info() for c in _selected(prefix)}


def clear_caches(prefix: str = "") -> None:
    """Empty every plan cache whose name starts with ``prefix`` (and reset its statistics)."""
    for c in _selected(prefix):
        c.clear()
