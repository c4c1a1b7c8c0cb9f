"""Type aliases for what the generated functions accept; the generated stubs (.pyi) use them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, Union


class SupportsCudaArrayInterface(Protocol):
    """CuPy arrays, PyTorch CUDA tensors, Numba device arrays."""

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...


class SupportsArrayInterface(Protocol):
    """numpy arrays."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...


class HasDevicePtr(Protocol):
    """CuPy's MemoryPointer."""

    @property
    def ptr(self) -> int: ...


if TYPE_CHECKING:
    from ctypes import _CArgObject, _CData
    CData = Union[_CData, _CArgObject]
else:
    CData = Any

#: A device parameter: an address, a device array, a CuPy MemoryPointer, or None for NULL.
DevicePointerLike = Union[int, SupportsCudaArrayInterface, HasDevicePtr, None]
#: A host parameter: a ctypes object or byref(), a numpy array, a buffer, or None.
HostPointerLike = Union[CData, SupportsArrayInterface, bytearray, memoryview, bytes, None]
#: A host or device parameter.
EitherPointerLike = Union[DevicePointerLike, HostPointerLike]
#: A typed host array input (const int dims[]): also lists and tuples.
HostArrayLike = Union[Sequence[int], Sequence[float], Sequence[Any], HostPointerLike]
#: A const char* input.
StringLike = Union[str, bytes, None]
#: A callback parameter (with its CFUNCTYPE type beside it in the stub): a plain function, or None for NULL.
CallbackLike = Union[Callable[..., Any], None]
