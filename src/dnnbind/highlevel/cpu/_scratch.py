"""Per-thread scratch memory reused from call to call for the cpu backend's temporaries.

Every fresh numpy array of a few megabytes costs page faults: glibc hands large blocks back to the
system when they are freed, so the next call's column buffer is new memory again, and faulting it in
(zeroed pages) cost several times the im2col copy and the matrix product themselves (a 3 -> 16
channel convolution at batch 32: 5.6 ms with fresh buffers, 1.1 ms with reused ones). Temporaries that
never leave a call (column buffers that are not kept, products copied elsewhere) take their memory
from here instead. Each thread keeps one buffer per role, grown to the largest request up to
MAX_BYTES (larger requests, and those below MIN_BYTES, get fresh memory), so the memory held is
bounded: roles x MAX_BYTES per thread that ran a convolution.
"""
from __future__ import annotations

import threading

import math

import numpy as np

#: Largest request served from the reused buffers (the im2col blocks are at most conv.BLOCK_BYTES).
MAX_BYTES = 8 << 20
#: Smaller requests get fresh memory too: glibc serves them from blocks freed before, without page
#: faults, faster than the buffer lookup (0.2 against 0.9 us, which a tiny convolution pays twice).
MIN_BYTES = 1 << 16

_local = threading.local()


def scratch(role: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised array of ``shape`` and ``dtype`` in this thread's buffer for ``role``.

    Valid until the same thread asks for ``role`` again: never return it, or a view of it, to a caller.
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > MAX_BYTES or nbytes < MIN_BYTES:
        return np.empty(shape, dtype)
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    buffer = buffers.get(role)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = buffers[role] = np.empty(max(nbytes, 1), np.uint8)
    return buffer[:nbytes].view(dtype).reshape(shape)


def held_bytes() -> int:
    """Bytes this thread's scratch buffers hold (reported next to memory benchmarks)."""
    return sum(b.nbytes for b in getattr(_local, "buffers", {}).values())
