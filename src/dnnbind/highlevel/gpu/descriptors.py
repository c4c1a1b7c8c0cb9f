"""Ownership of library descriptors: created once, destroyed exactly once.

A descriptor is destroyed by :meth:`OwnedDescriptor.close`, at the end of a ``with`` block, or when the
object is garbage collected (``weakref.finalize``; in CPython that is as soon as the last reference
goes, so a plan evicted from its cache frees its descriptors once no pullback holds it). Nothing is
called into the library while the interpreter shuts down: the process frees host memory anyway.
"""
from __future__ import annotations

import ctypes
import sys
import weakref
from typing import Any, Callable


def _destroy_quietly(destroy: Callable[[Any], None], handle: Any) -> None:
    if sys.is_finalizing():
        return
    try:
        destroy(handle)
    except Exception:       # nothing sensible to do about a failed destroy in a finalizer
        pass


class OwnedDescriptor:
    """Owns one descriptor made by ``create(byref(handle))`` and freed by ``destroy(handle)``.

    Subclasses call ``super().__init__`` with the library's handle type and functions, then set the
    descriptor up through :attr:`handle`.
    """

    __slots__ = ("_handle", "_finalizer", "__weakref__")

    def __init__(self, handle_type: type, create: Callable[[Any], None], destroy: Callable[[Any], None]) -> None:
        handle = handle_type()
        create(ctypes.byref(handle))
        self._handle = handle
        self._finalizer = weakref.finalize(self, _destroy_quietly, destroy, handle)
        self._finalizer.atexit = False

    @property
    def handle(self) -> Any:
        """The library's descriptor (a typed ctypes pointer) to pass to library calls."""
        if not self._finalizer.alive:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Destroy the descriptor now (idempotent)."""
        self._finalizer()

    def __enter__(self) -> "OwnedDescriptor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{' (closed)' if self.closed else ''}>"
