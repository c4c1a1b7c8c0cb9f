"""What the geometry objects (ConvDims, PoolDims, RNNDims) share: frozen dataclasses whose identity is
their kind and fields (:meth:`Problem.key`), which keys the GPU backends' plan and layout caches.

The key and its hash are computed once per object: the plan of a call holds its dims object, and a cache
lookup that meets the very object it stored is one identity check.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar, Sequence

Shape = tuple[int, ...]

#: bytes one kernel or window offset costs as a Python tuple in a list (the CPU backends loop over them)
OFFSET_BYTES = 120


class Problem:
    """Identity by :meth:`key` (the kind and every field); equal problems compare and hash equal."""

    _KIND: ClassVar[str] = ""

    def key(self) -> tuple:
        """Hashable identity of the problem, for plan caches."""
        cached = self.__dict__.get("_key")
        if cached is None:
            cached = self.__dict__["_key"] = (self._KIND,) + tuple(getattr(self, f.name) for f in fields(self))  # type: ignore[arg-type]
        return cached

    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = self.__dict__["_hash"] = hash(self.key())
        return cached

    def __getstate__(self) -> dict[str, Any]:
        """The fields without the cached key and hash: a string's hash differs from process to process,
        so a problem pickled in one must hash anew in another."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_key", "_hash")}

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not type(self):
            return NotImplemented
        return self.key() == other.key()  # type: ignore[attr-defined]


def spatial_out(size: Shape, lo: Shape, hi: Shape, extent: Shape, stride: Shape) -> Shape:
    """Output size per spatial dim of a window of ``extent`` sliding with ``stride`` over the padded size."""
    return tuple((s + a + b - e) // st + 1 for s, a, b, e, st in zip(size, lo, hi, extent, stride))
