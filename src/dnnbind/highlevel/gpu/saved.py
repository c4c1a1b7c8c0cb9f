"""What a GPU forward pass saves for its pullback: its own arrays, never the caller's.

The rule of every op and backend (see :mod:`dnnbind.highlevel.ops`): changing x, the parameters or the
returned result after the forward never changes what the pullback returns. A forward that would keep
a view of one of those keeps a copy instead (a device-to-device copy, cheap next to the op itself).
"""
from __future__ import annotations

from typing import Any


def private(cp: Any, array: Any, *sources: Any) -> Any:
    """``array``, or a copy of it when it may share memory with one of ``sources`` (None skipped)."""
    if any(s is not None and cp.may_share_memory(array, s) for s in sources):
        return array.copy(order="K")      # the same strides: elementwise calls see one flat block
    return array
