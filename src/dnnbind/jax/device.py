"""CUDA buffers for the FFI handlers: XLA's device memory adopted like any ``__cuda_array_interface__``
array (:func:`dnnbind.highlevel.gpu.arrays.as_device_array`), on XLA's stream.

Only the handlers registered for the CUDA platform import this (and CuPy with it). Not run yet: no GPU
was at hand when it was written; the CPU half shares every other line with it.
"""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.gpu.arrays import as_device_array, cupy
from dnnbind.jax.frame import Buffer


class _XlaDeviceBuffer:
    """An XLA device buffer described by the CUDA array interface (XLA owns the memory)."""

    def __init__(self, buffer: Buffer) -> None:
        self.__cuda_array_interface__ = {"shape": buffer.shape, "typestr": buffer.dtype.str, "strides": None,
                                         "data": (buffer.address, False), "version": 3}


def device_array(buffer: Buffer) -> Any:
    """A CuPy array over an XLA device buffer, no copy."""
    return as_device_array("buffer", _XlaDeviceBuffer(buffer))


def stream_scope(stream: int) -> Any:
    """A context in which CuPy (and dnnbind's cuDNN backend, which runs on CuPy's current stream) uses
    XLA's stream for this call."""
    return cupy().cuda.ExternalStream(stream)
