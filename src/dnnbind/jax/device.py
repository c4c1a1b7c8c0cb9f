"""CUDA buffers for the FFI handlers: XLA's device memory adopted as CuPy arrays, on XLA's stream.

Only the handlers registered for the CUDA platform import this (and CuPy with it). Not run yet: no GPU
was at hand when it was written; the CPU half shares every other line with it.
"""
from __future__ import annotations

from typing import Any

from dnnbind.jax.frame import Buffer


def device_array(buffer: Buffer) -> Any:
    """A CuPy array over an XLA device buffer (no copy; XLA owns the memory)."""
    import cupy
    count = 1
    for n in buffer.shape:
        count *= n
    memory = cupy.cuda.UnownedMemory(buffer.address, count * buffer.dtype.itemsize, None)
    return cupy.ndarray(buffer.shape, buffer.dtype, cupy.cuda.MemoryPointer(memory, 0))


def stream_scope(stream: int) -> Any:
    """A context in which CuPy (and dnnbind's cuDNN backend, which takes CuPy's current stream) runs on
    XLA's stream for this call."""
    import cupy
    return cupy.cuda.ExternalStream(stream)
