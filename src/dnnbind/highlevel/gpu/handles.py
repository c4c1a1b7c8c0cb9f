"""Library handles: one per (thread, device), created lazily, bound to CuPy's current stream.

cuDNN and MIOpen handles are not thread-safe and carry a stream, so each thread gets its own handle per
device. The stream is set again only when CuPy's current stream differs from the one the handle has.
A thread's handles are destroyed when the thread ends (or when :meth:`HandleRegistry.close_thread`
is called); handles left at interpreter exit are reclaimed with the process.
"""
from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable


class _Handle:
    """One library handle and the stream it is bound to; destroys the handle when collected."""

    __slots__ = ("value", "stream", "_finalizer", "__weakref__")

    def __init__(self, value: Any, destroy: Callable[[Any], None]) -> None:
        self.value = value
        self.stream: int | None = None
        self._finalizer = weakref.finalize(self, _destroy_quietly, destroy, value)
        self._finalizer.atexit = False

    def close(self) -> None:
        self._finalizer()


def _destroy_quietly(destroy: Callable[[Any], None], value: Any) -> None:
    if sys.is_finalizing():
        return
    try:
        destroy(value)
    except Exception:       # a handle that cannot be destroyed (device gone) is only leaked
        pass


@dataclass(frozen=True)
class HandleStats:
    created: int
    stream_changes: int
    live_in_this_thread: int


class HandleRegistry:
    """Per-(thread, device) handles of one library.

    ``create()`` makes a handle for the current device, ``destroy(handle)`` frees it and
    ``set_stream(handle, stream_address)`` binds it; the caller makes the device current first.
    """

    def __init__(self, create: Callable[[], Any], destroy: Callable[[Any], None],
                 set_stream: Callable[[Any, int], None]) -> None:
        self._create = create
        self._destroy = destroy
        self._set_stream = set_stream
        self._local = threading.local()
        self._lock = threading.Lock()
        self._created = 0
        self._stream_changes = 0

    def _handles(self) -> dict[int, _Handle]:
        try:
            return self._local.handles
        except AttributeError:
            handles: dict[int, _Handle] = {}
            self._local.handles = handles
            return handles

    def get(self, device: int, stream: int) -> Any:
        """This thread's handle for ``device`` (current), bound to ``stream``."""
        handles = self._handles()
        entry = handles.get(device)
        if entry is None:
            entry = _Handle(self._create(), self._destroy)
            handles[device] = entry
            with self._lock:
                self._created += 1
        if entry.stream != stream:
            self._set_stream(entry.value, stream)
            entry.stream = stream
            with self._lock:
                self._stream_changes += 1
        return entry.value

    def close_thread(self) -> None:
        """Destroy this thread's handles now (the next call creates new ones)."""
        handles = self._handles()
        for entry in handles.values():
            entry.close()
        handles.clear()

    def stats(self) -> HandleStats:
        with self._lock:
            return HandleStats(self._created, self._stream_changes, len(self._handles()))
