"""Extra memory of a convolution's forward + backward on the CPU, ours against torch's.

Measured as the peak resident memory during one call above the resident memory just before it: Linux
resets the peak (VmHWM) when "5" is written to /proc/self/clear_refs, so each call is measured from
its own start. glibc's malloc is first told to serve every block from 64 KiB up with mmap and to give
it back on free (a fixed M_MMAP_THRESHOLD; by default the threshold grows after the first large free
and later blocks come from heap memory that stays resident, which would hide them from the peak).
The peak then shows what each library needed at most: outputs, gradients, and scratch (column buffers,
padded copies). numpy's own allocations are also counted exactly with tracemalloc (numpy reports them
to it).
"""
from __future__ import annotations

import ctypes
import gc
import tracemalloc
from pathlib import Path
from typing import Callable

GOAL = 2.0
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


_M_MMAP_THRESHOLD = -3


def available() -> bool:
    """Whether peaks can be measured here (Linux with glibc); sets malloc's fixed mmap threshold."""
    try:
        _CLEAR_REFS.write_text("5")
        if "VmHWM" not in _STATUS.read_text():
            return False
        return bool(ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, 64 * 1024))
    except (OSError, AttributeError):
        return False


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def peak_extra_bytes(fn: Callable[[], object], repeats: int = 3) -> int:
    """Smallest over ``repeats`` of (peak RSS during fn() - RSS before it), in bytes."""
    best = None
    for _ in range(repeats):
        gc.collect()
        _CLEAR_REFS.write_text("5")
        before = _status_kib("VmRSS")
        fn()
        extra = (_status_kib("VmHWM") - before) * 1024
        best = extra if best is None else min(best, extra)
    return best


def held_bytes(fn: Callable[[], object], repeats: int = 3) -> int:
    """Smallest over ``repeats`` of the resident memory fn()'s result holds (RSS with it alive - RSS before
    the call), in bytes: a training forward's, the activations autograd keeps for the backward."""
    best = None
    for _ in range(repeats):
        gc.collect()
        before = _status_kib("VmRSS")
        kept = fn()
        extra = (_status_kib("VmRSS") - before) * 1024
        del kept
        best = extra if best is None else min(best, extra)
    return best


def numpy_peak_bytes(fn: Callable[[], object]) -> int:
    """Peak of the memory numpy (and Python) allocated during fn() above what was live before, by tracemalloc."""
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
