"""The pointer kinds as ctypes parameter types, exercised through a real C function (libc's memcpy)."""
from __future__ import annotations

import ctypes
from ctypes import byref, c_char, c_double, c_float, c_int, c_size_t, c_void_p

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


def test_host_array_round_trip_through_memcpy():
    libc = ctypes.CDLL(None)
    memcpy = libc.memcpy
    memcpy.restype = c_void_p
    memcpy.argtypes = [p.host_array(c_int, False), p.host_array(c_int, True), c_size_t]
    out = np.zeros(3, np.int32)
    memcpy(out, [7, 8, 9], 12)
    assert out.tolist() == [7, 8, 9]
    memcpy(out, (1, 2, 3), 12)
    assert out.tolist() == [1, 2, 3]
    target = (c_int * 3)()
    memcpy(target, np.array([4, 5, 6], np.int32), 12)
    assert list(target) == [4, 5, 6]
    with pytest.raises(ctypes.ArgumentError, match="dtype int32"):
        memcpy(out, np.array([1, 2, 3]), 24)
    with pytest.raises(ctypes.ArgumentError, match="is an output"):
        memcpy([0, 0, 0], out, 12)
    with pytest.raises(ctypes.ArgumentError, match="cannot take the host address"):
        memcpy(FakeDeviceArray(0x10), out, 12)


def test_size_t_pointer_refuses_32_bit_int():
    size_t_ptr = p.host_array(c_size_t, False)
    assert size_t_ptr.from_param(byref(c_size_t())) is not None
    with pytest.raises(TypeError):
        size_t_ptr.from_param(byref(c_int()))


def test_char_buffer_and_strings():
    buffer_type = p.host_array(c_char, False)
    assert buffer_type.from_param(ctypes.create_string_buffer(8)) is not None
    assert buffer_type.from_param(bytearray(8)) is not None
    assert p.HostString.from_param("héllo").value == "héllo".encode()
    assert p.HostString.from_param(None).value is None
    with pytest.raises(TypeError, match="str or bytes"):
        p.HostString.from_param(3)


@pytest.mark.parametrize("value", [0, 1, 2**40, np.int64(12)])
def test_byte_size_accepts_non_negative(value):
    assert p.ByteSize.from_param(value).value == int(value)


@pytest.mark.parametrize("value, message", [(-1, "non-negative byte count, got -1"), (1.5, "int byte count")])
def test_byte_size_refuses_negative_and_float(value, message):
    with pytest.raises(TypeError, match=message):
        p.ByteSize.from_param(value)


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
