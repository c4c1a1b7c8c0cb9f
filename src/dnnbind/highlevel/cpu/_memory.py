"""Fail at once, with the size, when a problem cannot fit in the machine's memory.

A huge convolution or pooling would otherwise spend seconds building offset lists and buffers and then
raise a bare MemoryError (or, without a memory cap, fill the machine). The dims objects estimate a lower
bound of what a call needs (``working_bytes``); this module compares it with the memory available.
"""
from __future__ import annotations

import functools
import os
import resource
from typing import Any, Callable

from dnnbind.highlevel.residual import passes_when


def available_bytes() -> int:
    """Memory this process can still get: the kernel's MemAvailable (physical memory elsewhere), capped
    by an address-space limit (``ulimit -v``) when one is set."""
    available = None
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        available = min(available, soft)
    return available


def gib(n: int) -> str:
    """n bytes in GiB, as the memory errors give them."""
    return f"{n / 2**30:.1f} GiB"


#: problems needing less than this are not checked (reading /proc/meminfo costs more than a small op)
CHECK_FROM_BYTES = 1 << 30


def check_fits(op: str, dims: Any, itemsize: int, x_shape: tuple[int, ...] | None = None,
               columns: bool = True) -> None:
    """MemoryError saying how much ``op`` would need when ``dims.working_bytes`` exceeds what is available;
    ``x_shape``: the shape of the op's own input (a transposed convolution's dims describe the convolution it
    transposes, whose x is the transposed one's output); ``columns``: False where the call builds no
    im2col columns (a convolution's C kernels)."""
    need = dims.working_bytes(itemsize) if columns else dims.working_bytes(itemsize, columns=False)
    if need < CHECK_FROM_BYTES:
        return
    have = available_bytes()
    if need > have:
        shape = dims.x_shape if x_shape is None else tuple(x_shape)
        raise MemoryError(f"{op} on x of shape {shape} would need at least {gib(need)} of memory "
                          f"({need} bytes) but {gib(have)} is available")


def fits_in_memory(op: Callable[..., Any], columns: Callable[[str, Any], bool] | None = None) -> Callable[..., Any]:
    """Check, before ``op`` allocates anything (half-precision casts included), that the problem its dims
    argument (the one with ``working_bytes``) describes fits; half precision is computed in float32.
    ``columns(op name, dims)``: whether the call builds im2col columns (None: always counted)."""
    # (a plan skips the check where the problem is too small for it: see residual.passes_when)
    @passes_when(lambda x, *args, **kwargs: _dims_of(args) is None
                 or _dims_of(args).working_bytes(max(x.dtype.itemsize, 4)) < CHECK_FROM_BYTES)
    @functools.wraps(op)
    def checked(x: Any, *args: Any, **kwargs: Any) -> Any:
        dims = _dims_of(args)
        if dims is not None:
            check_fits(op.__name__, dims, max(x.dtype.itemsize, 4), x.shape,
                       True if columns is None else columns(op.__name__, dims))
        return op(x, *args, **kwargs)
    return checked


def _dims_of(args: tuple) -> Any:
    """The first of an op's arguments that describes its problem (has ``working_bytes``), or None."""
    return next((a for a in args if hasattr(a, "working_bytes")), None)
