"""CuPy, imported on first use, and the adaptation of device arrays from other libraries.

The GPU backends compute on CuPy arrays. They also take any object that exposes
``__cuda_array_interface__`` (PyTorch CUDA tensors, Numba arrays) or DLPack on a GPU, wrapped without a
copy. CuPy is imported only when an op runs, so the backends import (and build plans) without it.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

_cupy: ModuleType | None = None

#: DLPack device types: CUDA, CUDA host-pinned, CUDA managed; ROCm
DLPACK_CUDA = (2, 3, 13)
DLPACK_ROCM = (10,)

INSTALL_HINT = ("install CuPy for your CUDA version, for example pip install 'dnnbind[cuda13]' (CuPy and "
                "cuDNN for CUDA 13) or 'dnnbind[cuda12]'")


def cupy() -> ModuleType:
    """The cupy module; ImportError saying how to install it when it is missing."""
    global _cupy
    if _cupy is None:
        try:
            import cupy as module  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ImportError(f"the GPU backends of dnnbind need CuPy, which is not installed "
                              f"({exc}); {INSTALL_HINT}", name="cupy") from None
        _cupy = module
    return _cupy


def _type_name(value: Any) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def as_device_array(name: str, value: Any, dlpack_devices: tuple[int, ...] = DLPACK_CUDA) -> Any:
    """``value`` as a CuPy array without copying; TypeError naming ``name`` when it is not device memory."""
    cp = cupy()
    if isinstance(value, cp.ndarray):
        return value
    if hasattr(value, "__cuda_array_interface__"):
        return cp.asarray(value)
    if hasattr(value, "__dlpack_device__") and hasattr(value, "__dlpack__"):
        kind, _ = value.__dlpack_device__()
        if int(kind) not in dlpack_devices:
            raise TypeError(f"{name} is a {_type_name(value)} in host memory (DLPack device type {int(kind)}); "
                            f"the GPU backends need device arrays")
        return cp.from_dlpack(value)
    raise TypeError(f"{name} must be a CuPy array or a device array (__cuda_array_interface__ or DLPack), "
                    f"not {_type_name(value)}")


def common_device(arrays: dict[str, Any]) -> int:
    """The device id shared by the (CuPy) ``arrays``; ValueError naming two that differ."""
    device = None
    first = ""
    for name, a in arrays.items():
        d = a.device.id
        if device is None:
            device, first = d, name
        elif d != device:
            raise ValueError(f"{first} is on device {device} but {name} is on device {d}; "
                             f"move them to one device")
    if device is None:
        raise TypeError("no array arguments given")
    return device


class on_device:
    """Context manager: make ``device`` current if it is not (cheap when it already is)."""

    __slots__ = ("device", "previous")

    def __init__(self, device: int) -> None:
        self.device = device
        self.previous: int | None = None

    def __enter__(self) -> "on_device":
        runtime = cupy().cuda.runtime
        current = runtime.getDevice()
        if current != self.device:
            self.previous = current
            runtime.setDevice(self.device)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.previous is not None:
            cupy().cuda.runtime.setDevice(self.previous)
            self.previous = None


def current_stream() -> int:
    """Address of CuPy's current stream on the current device (0: the legacy default stream)."""
    return int(cupy().cuda.get_current_stream().ptr)
