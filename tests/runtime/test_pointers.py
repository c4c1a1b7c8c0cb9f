"""The pointer kinds as ctypes parameter types, exercised through a real C function (libc's memcpy)."""
from __future__ import annotations

import ctypes
from ctypes import byref, c_double, c_float, c_int, c_void_p

import numpy as np
import pytest

from dnnbind.runtime import pointers as p


class FakeDeviceArray:
    """The one allowed test double: an object exposing __cuda_array_interface__ like CuPy or PyTorch."""

    def __init__(self, address: int) -> None:
        self.__cuda_array_interface__ = {"data": (address, False), "shape": (1,), "typestr": "<f4", "version": 3}


def as_address(value) -> int | None:
    if value is None:
        return None
    return ctypes.cast(value, c_void_p).value


@pytest.mark.parametrize("obj, address", [(None, None), (0, None), (0x1234, 0x1234),
                                          (FakeDeviceArray(0xABC0), 0xABC0)])
def test_device_pointer_accepts_device_forms(obj, address):
    assert as_address(p.DevicePointer.from_param(obj)) == address


@pytest.mark.parametrize("obj, shown", [(np.zeros(3), "numpy.ndarray (host memory)"), (b"abc", "bytes (host memory)"),
                                        (bytearray(4), "bytearray (host memory)"),
                                        (c_float(1.0), "ctypes.c_float (host memory)"),
                                        (byref(c_int()), "CArgObject (host memory)"), ("text", "str"),
                                        (-5, "the negative address -5"), (True, "bool")])
def test_device_pointer_refuses_host_memory(obj, shown):
    with pytest.raises(TypeError, match="needs device memory") as info:
        p.DevicePointer.from_param(obj)
    assert shown in str(info.value)


def test_host_pointers_take_ctypes_numpy_and_buffers():
    value = c_double(2.5)
    assert p.HostPointer.from_param(value)._obj is value                 # byref of the object
    arr = np.arange(4, dtype=np.float32)
    assert as_address(p.HostPointer.from_param(arr)) == arr.ctypes.data
    buf = bytearray(b"abcd")
    assert p.HostPointer.from_param(buf) is not None
    assert as_address(p.ConstHostPointer.from_param(b"xyz")) is not None
    with pytest.raises(TypeError, match="writable"):
        p.HostPointer.from_param(b"xyz")
    frozen = np.zeros(2)
    frozen.setflags(write=False)
    with pytest.raises(TypeError, match="read-only numpy.ndarray"):
        p.HostPointer.from_param(frozen)
    assert as_address(p.ConstHostPointer.from_param(frozen)) == frozen.ctypes.data
    with pytest.raises(TypeError, match="C-contiguous"):
        p.HostPointer.from_param(np.zeros((4, 4))[:, 1])


def test_host_pointer_refuses_device_memory_and_bare_ints():
    with pytest.raises(TypeError, match="cannot take the host address of a .*FakeDeviceArray"):
        p.HostPointer.from_param(FakeDeviceArray(0x100))
    with pytest.raises(TypeError, match="needs host memory"):
        p.HostPointer.from_param(1234)


def test_either_pointer_takes_both():
    assert as_address(p.EitherPointer.from_param(FakeDeviceArray(0x5000))) == 0x5000
    arr = np.ones(2)
    assert as_address(p.EitherPointer.from_param(arr)) == arr.ctypes.data


def test_strings():
    assert p.HostString.from_param("héllo").value == "héllo".encode()
    assert p.HostString.from_param(None).value is None
    with pytest.raises(TypeError, match="str or bytes"):
        p.HostString.from_param(3)


def test_either_pointer_takes_an_int_as_an_address_of_either_memory():
    """An int is an address (host or device alike): passed on unchanged, never taken as host data."""
    assert as_address(p.EitherPointer.from_param(0x1234)) == 0x1234
    with pytest.raises(TypeError, match="negative address"):
        p.EitherPointer.from_param(-1)


@pytest.mark.parametrize("convert", [p.DevicePointer.from_param, p.EitherPointer.from_param,
                                     p.address_handle("cudaStream_t").from_param])
def test_addresses_that_do_not_fit_a_pointer_are_refused(convert):
    """ctypes would take 2**64 + 16 as 16: refused with OverflowError instead."""
    assert as_address(convert(2**64 - 1)) == 2**64 - 1
    with pytest.raises(OverflowError, match="18446744073709551632, which does not fit a 64-bit address"):
        convert(2**64 + 16)


def test_address_handle_accepts_stream_objects():
    stream_t = p.address_handle("cudaStream_t")

    class Stream:
        ptr = 0x77

    class TorchStream:
        cuda_stream = 0x88
    assert stream_t.from_param(Stream()).value == 0x77
    assert stream_t.from_param(TorchStream()).value == 0x88
    assert stream_t.from_param(None) is None
    with pytest.raises(TypeError, match="needs a cudaStream_t"):
        stream_t.from_param("default")


@pytest.mark.gpu
def test_device_pointer_accepts_cupy_arrays_and_memory_pointers():
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() < 1:
        pytest.skip("no GPU")
    array = cupy.zeros(4, cupy.float32)
    assert as_address(p.DevicePointer.from_param(array)) == array.data.ptr
    assert as_address(p.DevicePointer.from_param(array.data)) == array.data.ptr
    with pytest.raises(TypeError, match="cannot take the host address of a cupy.ndarray"):
        p.HostPointer.from_param(array)


@pytest.mark.parametrize("convert", [p.DevicePointer.from_param, p.EitherPointer.from_param])
@pytest.mark.parametrize("value", [1, 5, 4095])
def test_ints_in_the_unmapped_first_page_are_not_addresses(convert, value):
    with pytest.raises(TypeError, match=rf"needs an address, got {value}: nothing is ever mapped below 0x1000"):
        convert(value)
    assert convert(0).value is None and convert(4096).value == 4096


def test_numpy_scalars_and_object_arrays_are_not_host_memory():
    for convert in (p.HostPointer.from_param, p.ConstHostPointer.from_param, p.EitherPointer.from_param):
        with pytest.raises(TypeError, match=r"got a numpy.float32 scalar: its __array_interface__ points at a "
                                            r"temporary copy"):
            convert(np.float32(1.0))
        with pytest.raises(TypeError, match=r"needs an array of plain values, got a numpy.ndarray of dtype object"):
            convert(np.array([None], dtype=object))


@pytest.mark.parametrize("offset", [0, 4, 12])
def test_byref_offset_is_read_back(offset):
    assert p.byref_offset(byref((c_int * 4)(), offset)) == offset
