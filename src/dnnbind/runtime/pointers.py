"""Parameter types for the pointer kinds of DESIGN.md: device, host and either.

Each class is a ctypes ``argtypes`` entry: ctypes calls its ``from_param`` before the foreign call,
so a host buffer passed where the GPU expects device memory (or the reverse) fails in Python, with
a ``TypeError`` that the generated wrapper extends with the function and parameter name.
"""
from __future__ import annotations

import ctypes
import sys
from ctypes import c_char, c_char_p, c_void_p
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_CData = ctypes.c_int.__mro__[-2]            # ctypes' common base class of every C data type
_ByrefType = type(ctypes.byref(ctypes.c_int()))
_DEVICE_FORMS = "None, an int address, an object with __cuda_array_interface__ or a CuPy MemoryPointer"


#: the address a ``byref(obj, offset)`` passes (CPython's own pointer-to-int, called through ctypes)
_arg_address = ctypes.PYFUNCTYPE(ctypes.py_object, c_void_p)(("PyLong_FromVoidPtr", ctypes.pythonapi))


def byref_offset(arg: Any) -> int:
    """The ``offset`` a ``ctypes.byref(obj, offset)`` was made with, in bytes (ctypes does not expose it)."""
    return int(_arg_address(arg)) - ctypes.addressof(arg._obj)


def type_name(obj: object) -> str:
    """``numpy.ndarray``, ``cupy.ndarray``, ``bytes``: the name a user recognises."""
    cls = type(obj)
    module = cls.__module__.split(".")[0]
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def device_address(obj: Any) -> int | None:
    """The device address behind ``obj``, or None when ``obj`` is not device memory."""
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is not None:
        return int(iface["data"][0])
    if type(obj).__name__ == "MemoryPointer" and type(obj).__module__.startswith("cupy"):
        return int(obj.ptr)
    return None


def _host_refusal(obj: Any) -> TypeError:
    return TypeError(f"cannot take the host address of a {type_name(obj)} (device memory); "
                     "this parameter needs host memory")


def _buffer_address(obj: Any, writable: bool) -> Any:
    """A pointer to the data of a numpy array or Python buffer, or None if ``obj`` is neither."""
    array_iface = getattr(obj, "__array_interface__", None)
    if array_iface is not None:
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.generic):
            raise TypeError(f"needs a numpy array or a ctypes object, got a {type_name(obj)} scalar: its "
                            "__array_interface__ points at a temporary copy that is freed at once")
        if getattr(getattr(obj, "dtype", None), "hasobject", False):
            raise TypeError(f"needs an array of plain values, got a {type_name(obj)} of dtype {obj.dtype} "
                            "(Python object pointers)")
        address, readonly = array_iface["data"]
        if writable and readonly:
            raise TypeError(f"needs writable host memory, got a read-only {type_name(obj)}")
        if not obj.flags.c_contiguous:
            raise TypeError(f"needs a C-contiguous {type_name(obj)}")
        return c_void_p(address)
    if type(obj) is bytes:
        if writable:
            raise TypeError("needs writable host memory, got bytes (use bytearray or ctypes.create_string_buffer)")
        return ctypes.cast(c_char_p(obj), c_void_p)
    try:
        view = memoryview(obj)
    except TypeError:
        return None
    if view.readonly:
        raise TypeError(f"needs writable host memory, got a read-only {type_name(obj)}")
    if not view.c_contiguous:
        raise TypeError(f"needs contiguous host memory, got a non-contiguous {type_name(obj)}")
    return ctypes.byref((c_char * view.nbytes).from_buffer(view))


_ADDRESS_LIMIT = 1 << (8 * ctypes.sizeof(c_void_p))
#: the first page is never mapped, on the host or a GPU: an int below it is a count or a flag, not an address
_LOWEST_ADDRESS = 4096


def checked_address(value: int) -> int:
    """An int address as is, or OverflowError when it does not fit a pointer (ctypes would wrap it)."""
    if value < 0:
        raise TypeError(f"needs an address, got the negative number {value}")
    if value >= _ADDRESS_LIMIT:
        raise OverflowError(f"is {value}, which does not fit a {8 * ctypes.sizeof(c_void_p)}-bit address")
    return value


class DevicePointer:
    """``void*`` that the GPU reads or writes: device addresses only."""

    @classmethod
    def from_param(cls, obj: Any) -> Any:
        if obj is None:
            return None
        if type(obj) is int:
            if obj < 0:
                raise TypeError(f"needs device memory, got the negative address {obj}")
            if 0 < obj < _LOWEST_ADDRESS:
                raise TypeError(f"needs an address, got {obj}: nothing is ever mapped below {_LOWEST_ADDRESS:#x} "
                                "(0 or None is NULL)")
            return c_void_p(checked_address(obj))
        address = device_address(obj)
        if address is not None:
            return c_void_p(address)
        if isinstance(obj, (_CData, _ByrefType)) or hasattr(obj, "__array_interface__") \
                or isinstance(obj, (bytes, bytearray, memoryview)):
            raise TypeError(f"needs device memory, got {type_name(obj)} (host memory)")
        raise TypeError(f"needs device memory ({_DEVICE_FORMS}), got {type_name(obj)}")


def _host_from_param(obj: Any, writable: bool) -> Any:
    if obj is None:
        return None
    if isinstance(obj, _ByrefType):
        return obj
    if isinstance(obj, _CData):
        if isinstance(obj, (c_void_p, ctypes._Pointer)):        # an explicit pointer value
            return obj
        data: Any = obj
        return ctypes.byref(data)
    if device_address(obj) is not None:
        raise _host_refusal(obj)
    address = _buffer_address(obj, writable)
    if address is None:
        raise TypeError("needs host memory (a ctypes object, ctypes.byref(...), a numpy array or a "
                        f"writable buffer), got {type_name(obj)}")
    return address


class HostPointer:
    """``void*`` the library writes on the host (out-parameters, host buffers)."""

    @classmethod
    def from_param(cls, obj: Any) -> Any:
        return _host_from_param(obj, writable=True)


class ConstHostPointer:
    """``const void*`` read on the host (alpha/beta scaling factors, attribute values)."""

    @classmethod
    def from_param(cls, obj: Any) -> Any:
        return _host_from_param(obj, writable=False)


class EitherPointer:
    """``void*`` that may live in host or device memory (the library tells them apart)."""

    @classmethod
    def from_param(cls, obj: Any) -> Any:
        if type(obj) is int:
            return DevicePointer.from_param(obj)
        address = device_address(obj)
        if address is not None:
            return c_void_p(address)
        return _host_from_param(obj, writable=False)


class HostString:
    """``const char*`` input: ``str`` (encoded as UTF-8), ``bytes`` or None."""

    @classmethod
    def from_param(cls, obj: Any) -> Any:
        if obj is None or type(obj) is bytes:
            return c_char_p(obj)
        if type(obj) is str:
            return c_char_p(obj.encode())
        if isinstance(obj, (c_char_p, _ByrefType)) or isinstance(obj, ctypes.Array):
            return obj
        raise TypeError(f"needs a str or bytes, got {type_name(obj)}")


def address_handle(name: str) -> type:
    """A handle type from another library's headers (``cudaStream_t``): a plain address.

    Accepts None, an int, a ctypes pointer, or an object carrying its address in ``ptr`` (CuPy
    streams) or ``cuda_stream`` (PyTorch streams).
    """
    def from_param(cls: type, obj: Any) -> Any:
        if obj is None or isinstance(obj, c_void_p):
            return obj
        if type(obj) is int:
            return c_void_p(checked_address(obj))
        for attribute in ("ptr", "cuda_stream"):
            value = getattr(obj, attribute, None)
            if type(value) is int:
                return c_void_p(value)
        raise TypeError(f"needs a {name} (None, an int address or an object with .ptr), got {type_name(obj)}")

    return type(name, (c_void_p,), {"from_param": classmethod(from_param),
                                     "__doc__": f"``{name}``: {(address_handle.__doc__ or '').splitlines()[0]}"})
