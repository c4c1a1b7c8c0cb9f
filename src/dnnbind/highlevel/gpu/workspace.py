"""Scratch memory for library calls: taken from CuPy's memory pool per call, within a limit.

Workspace sizes are asked for on every call (a backward pass may need more than its forward did, and
another algorithm may be chosen), and the memory goes back to the pool when the call's Python
reference is dropped. CuPy's pool only hands a freed block to later work on the same stream, so
releasing it right after the library call is enqueued is safe.
"""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.gpu.arrays import cupy


class WorkspaceTooLarge(RuntimeError):
    """A call needs more scratch memory than the workspace limit allows."""


def allocate(nbytes: int, limit: int | None = None, what: str = "workspace") -> Any:
    """Device memory of ``nbytes`` from the current allocator (a MemoryPointer), None for 0 bytes.

    Raises :class:`WorkspaceTooLarge` when ``nbytes`` exceeds ``limit``, and CuPy's OutOfMemoryError
    when the pool cannot provide it.
    """
    if nbytes <= 0:
        return None
    if limit is not None and nbytes > limit:
        raise WorkspaceTooLarge(f"{what} of {nbytes} bytes exceeds the workspace limit of {limit} bytes; "
                                f"raise it with settings(workspace_limit=...)")
    return cupy().cuda.alloc(nbytes)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is CuPy's out-of-memory error (without importing CuPy when it is not)."""
    return type(exc).__name__ == "OutOfMemoryError" and type(exc).__module__.startswith("cupy")


def address(memory: Any) -> int:
    """Device address of a MemoryPointer (0 for None)."""
    return 0 if memory is None else int(memory.ptr)
