"""glibc's heap, kept from handing every freed megabyte back to the kernel: an explicit opt-in.

The cpu backend's ops return fresh arrays of megabytes and free as many a moment later. With
glibc's defaults the top of the heap is trimmed as soon as it is free and grown again on the next
call, so every call pays for new pages: measured on a 2-core VM, batch norm's forward and backward on
a (32, 16, 32, 32) float32 array took 6.8 ms with the defaults and 0.74 ms with 64 MiB of top padding,
of which 0.3 ms was the work itself; a small CNN's forward and backward went from 21-28 ms to 15.5.
The settings are the whole process's (one allocator, every library's), so dnnbind never makes them by
itself: a program that wants them calls ``dnnbind.highlevel.cpu.keep_heap_padding()`` once, early.

Three settings, because setting any of them turns glibc's own adaptive mmap threshold off:
``M_TOP_PAD`` keeps (and grows each heap by) :data:`TOP_PAD` bytes of free memory at its top, so a
workload's steady state reuses its pages; ``M_TRIM_THRESHOLD`` trims only beyond that;
``M_MMAP_THRESHOLD`` puts blocks up to :data:`MMAP_THRESHOLD` (the most glibc's adaptive threshold
ever reaches by itself) on the heap instead of in fresh mappings. At most about TOP_PAD bytes of freed
memory stay resident. ``DNNBIND_HEAP_PADDING=0``, or any ``MALLOC_*_`` tuning variable of the user's
own, makes the call leave glibc as it is, and other C libraries (musl, macOS) are left alone.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

#: bytes of free memory glibc keeps at the top of a heap (and adds when it grows one)
TOP_PAD = 64 << 20
#: blocks up to this size come from the heap (glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems)
MMAP_THRESHOLD = 32 << 20
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3        # glibc's <malloc.h>
_USER_TUNING = ("MALLOC_TOP_PAD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")

_applied: bool | None = None


def keep_heap_padding() -> bool:
    """Opt in: apply the three settings (process-wide) unless turned off or tuned by the user; whether
    they are in force. Later calls change nothing and give the first one's answer."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("DNNBIND_HEAP_PADDING", "").strip() == "0" or any(v in os.environ for v in _USER_TUNING):
        return False          # off, or the user tunes glibc's heap themselves
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version      # glibc's own function: mallopt's parameters are glibc's
    except (OSError, AttributeError):      # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = all(mallopt(param, value) == 1 for param, value in
                   ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TOP_PAD), (_M_TOP_PAD, TOP_PAD)))
    return _applied
