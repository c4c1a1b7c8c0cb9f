"""The generated fixture module calling the compiled fixture library: real C on the other side."""
from __future__ import annotations

import ctypes
import pickle
import warnings
from ctypes import byref, c_float, c_int, c_int64, c_size_t
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import fixture_build as fb
from dnnbind.runtime.errors import (CudnnError, DnnArgumentError, LibraryError, LibraryVersionError,
                                    SymbolNotFoundError)
from dnnbind.runtime.pointers import type_name
from generator import render

FAKE_DEVICE_ADDRESS = 0x7F00_1234_5000


class FakeDeviceArray:
    """The only test double: an object exposing ``__cuda_array_interface__`` (as CuPy arrays do)."""

    def __init__(self, address: int = FAKE_DEVICE_ADDRESS) -> None:
        self.address = address

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (4,), "typestr": "<f4", "data": (self.address, False), "version": 3}


def test_library_found_through_the_env_variable(fxlib: ModuleType, fixture_library: Path) -> None:
    """The first call loads the library named by the config's library_env variable; version read."""
    assert not fxlib._lib.loaded
    assert fxlib.fxGetVersion() == 90102
    assert fxlib.library_path() == str(fixture_library)
    assert fxlib.library_version() == (9, 1, 2)


def test_status_failure_raises_library_error(fxlib: ModuleType) -> None:
    """A failing status raises the config's error class with the enum member, function and message."""
    with pytest.raises(LibraryError) as info:
        fxlib.fxFail(fxlib.FX_STATUS_BAD_PARAM)
    err = info.value
    assert type(err) is CudnnError
    assert err.status is fxlib.fxStatus_t.FX_STATUS_BAD_PARAM
    assert err.function == "fxFail"
    assert err.message == "fixture: bad parameter"
    assert str(err) == "fxFail failed: FX_STATUS_BAD_PARAM (2000): fixture: bad parameter"
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.status, copy.function, copy.message) == (err.status, err.function, err.message)


def test_success_returns_none_and_unchecked_returns_the_status(fxlib: ModuleType) -> None:
    """Success raises nothing; ``unchecked.<name>`` returns the raw status instead of raising."""
    assert "fxFail" in dir(fxlib.unchecked) and "fxSumDims" in dir(fxlib.unchecked)
    assert fxlib.fxFail(0) is None
    assert fxlib.unchecked.fxFail(3000) == 3000
    assert "fxFail" in dir(fxlib.unchecked)            # bound by now: still listed
    with pytest.raises(AttributeError, match="no generated function named 'fxNothing'"):
        fxlib.unchecked.fxNothing


def test_older_library_is_refused_unless_allowed(fixture_built: fb.Built, generated_dir: Path,
                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A library whose major version is older than the header's is refused on first use, every time;
    with DNNBIND_ALLOW_VERSION_MISMATCH=1 it warns once instead, and a missing symbol's error names the
    loaded version."""
    if fb.c_compiler() is None:
        pytest.skip("no C compiler to build the older fixture library")
    older = fb.compile_shared([fb.FIXTURES / "fixture.c"], tmp_path / "libfixture8.so",
                              defines=["FX_BETA_API=1", "FX_REPORTED_VERSION=8907"])
    module = fb.import_text(fixture_built.text, generated_dir)
    monkeypatch.setenv(fb.LIBRARY_ENV, str(older))
    for _ in range(2):
        with pytest.raises(LibraryVersionError, match=r"libfixture8\.so is version 8\.9\.7, a major version "
                                                      r"older than the 9\.1\.2 headers"):
            module.fxFail(0)
    (generated_dir / "allowed").mkdir()
    module = fb.import_text(fixture_built.text, generated_dir / "allowed")
    monkeypatch.setenv("DNNBIND_ALLOW_VERSION_MISMATCH", "1")
    with pytest.warns(RuntimeWarning, match=r"is version 8\.9\.7, a major version older than the 9\.1\.2 "
                                            r"headers.*used anyway"):
        module.fxFail(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module.fxFail(0)
    assert module.library_version() == (8, 9, 7)
    with pytest.raises(SymbolNotFoundError, match=r"^fxMissing is not in libfixture8\.so 8\.9\.7 "):
        module.fxMissing(0)


def test_unknown_status_keeps_the_raw_int(fxlib: ModuleType) -> None:
    """A status the header does not know still raises, carrying the int itself."""
    with pytest.raises(CudnnError) as info:
        fxlib.fxFail(12345)
    assert info.value.status == 12345 and type(info.value.status) is int
    assert "fxFail failed with status 12345: fixture: unknown status" == str(info.value)


def test_last_error_preferred_when_configured(fixture_built: fb.Built, fixture_library: Path,
                                              generated_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``last_error`` configured, its text is the message; when it is empty, the error string is."""
    config = fb.fixture_config(last_error="fxGetLastErrorString")
    text = render.render(fixture_built.module, fixture_built.classification, config)
    module = fb.import_text(text, generated_dir)
    monkeypatch.setenv(fb.LIBRARY_ENV, str(fixture_library))
    with pytest.raises(CudnnError) as info:
        module.fxSumDims(0, None, byref(c_int64()))            # refused by C, which records a last error
    assert info.value.message == "fxSumDims: last error 2000"
    assert info.value.status is module.FX_STATUS_BAD_PARAM
    with pytest.raises(CudnnError) as info:
        module.fxFail(module.FX_STATUS_NOT_SUPPORTED)        # records no last error
    assert info.value.message == "fixture: not supported"


def test_const_char_return_is_str(fxlib: ModuleType) -> None:
    """``const char*`` results come back as str."""
    assert fxlib.fxGetErrorString(fxlib.FX_STATUS_INTERNAL_ERROR) == "fixture: internal error"


def test_const_char_parameter_takes_str_and_bytes(fxlib: ModuleType) -> None:
    """``const char*`` inputs take str (UTF-8) and bytes; anything else names the parameter."""
    length = c_size_t()
    fxlib.fxNameLength("héllo", byref(length))
    assert length.value == 6
    fxlib.fxNameLength(b"abc", byref(length))
    assert length.value == 3
    with pytest.raises(TypeError, match=r"fxNameLength: parameter 'name' needs a str or bytes, got int"):
        fxlib.fxNameLength(5, byref(length))


def test_handles_round_trip_and_refuse_the_wrong_kind(fxlib: ModuleType) -> None:
    """Handles are created through out-params; a handle of the wrong kind fails before the call."""
    handle, tensor = fxlib.fxHandle_t(), fxlib.fxTensorDescriptor_t()
    fxlib.fxCreate(byref(handle))
    fxlib.fxCreateTensorDescriptor(byref(tensor))
    assert handle and tensor
    try:
        with pytest.raises(DnnArgumentError) as info:
            fxlib.fxDestroyTensorDescriptor(handle)
        assert isinstance(info.value, ctypes.ArgumentError) and isinstance(info.value, TypeError)
        assert str(info.value).startswith("fxDestroyTensorDescriptor: parameter 'tensorDesc' ")
        with pytest.raises(DnnArgumentError, match=r"^fxCreate: parameter 'handle' "):
            fxlib.fxCreate(byref(tensor))
        with pytest.raises(DnnArgumentError, match=r"^fxDestroy: parameter 'handle' "):
            fxlib.fxDestroy(12345)
        size = c_size_t()
        fxlib.fxGetWorkspaceSize(handle, byref(size))
        assert size.value == 5 << 32                        # needs all 64 bits
    finally:
        fxlib.fxDestroyTensorDescriptor(tensor)
        fxlib.fxDestroy(handle)
    assert not handle and not tensor                         # a successful destroy clears the handle object
    with pytest.raises(DnnArgumentError, match=r"^fxGetWorkspaceSize: parameter 'handle' is NULL; it needs a "
                                               r"created handle"):
        fxlib.fxGetWorkspaceSize(handle, byref(size))           # used after destroy: refused, never reaches C
    for call in (lambda: fxlib.fxDestroy(None), lambda: fxlib.fxDestroy(handle)):   # never reaches C again
        with pytest.raises(DnnArgumentError, match=r"^fxDestroy: parameter 'handle' is (None|a NULL \w+): the "
                                                   r"handle was destroyed already"):
            call()


def test_size_t_out_param_refuses_a_32_bit_int(fxlib: ModuleType) -> None:
    """A ``size_t*`` stays typed: ``byref(c_int())`` is refused, naming function and parameter."""
    handle = fxlib.fxHandle_t()
    fxlib.fxCreate(byref(handle))
    try:
        with pytest.raises(DnnArgumentError, match=r"^fxGetWorkspaceSize: parameter 'workspaceSizeInBytes' "):
            fxlib.fxGetWorkspaceSize(handle, byref(c_int()))
        out = np.zeros(1, dtype=np.uint64)
        fxlib.fxGetWorkspaceSize(handle, out)
        assert int(out[0]) == 5 << 32
    finally:
        fxlib.fxDestroy(handle)


@pytest.mark.parametrize("dims", [
    [1, 2, 3, 40], (1, 2, 3, 40), (c_int * 4)(1, 2, 3, 40), np.array([1, 2, 3, 40], dtype=np.int32),
], ids=["list", "tuple", "ctypes-array", "numpy-int32"])
def test_array_parameter_read_by_c(fxlib: ModuleType, dims: object) -> None:
    """``const int dimA[]`` takes lists, tuples, ctypes arrays and int32 numpy arrays; C sums them."""
    total = c_int64()
    fxlib.fxSumDims(4, dims, byref(total))
    assert total.value == 46


def test_array_parameter_refusals(fxlib: ModuleType) -> None:
    """A numpy array of another dtype, or a list given for an output, is refused by name."""
    with pytest.raises(DnnArgumentError, match=r"fxSumDims: parameter 'dimA' needs a numpy array of dtype "
                                               r"int32 \(int\), got dtype int64"):
        fxlib.fxSumDims(2, np.array([1, 2], dtype=np.int64), byref(c_int64()))
    with pytest.raises(DnnArgumentError, match=r"fxSumDims: parameter 'sum' is an output"):
        fxlib.fxSumDims(2, [1, 2], [0])


def test_device_pointer(fxlib: ModuleType) -> None:
    """A device parameter passes exactly the ``__cuda_array_interface__`` address (or an int) to C,
    and refuses host memory by function, parameter and type."""
    seen = c_size_t()
    fxlib.fxDeviceAddress(FakeDeviceArray(), byref(seen))
    assert seen.value == FAKE_DEVICE_ADDRESS
    fxlib.fxDeviceAddress(0xDEAD0000, byref(seen))
    assert seen.value == 0xDEAD0000
    fxlib.fxDeviceAddress(None, byref(seen))
    assert seen.value == 0
    with pytest.raises(TypeError) as info:
        fxlib.fxDeviceAddress(np.zeros(4, dtype=np.float32), byref(seen))
    assert str(info.value) == ("fxDeviceAddress: parameter 'x' needs device memory, "
                               "got numpy.ndarray (host memory)")
    with pytest.raises(TypeError, match=r"fxDeviceAddress: parameter 'x' needs device memory, got bytes"):
        fxlib.fxDeviceAddress(b"1234", byref(seen))


def test_device_pointer_by_exception(fxlib: ModuleType) -> None:
    """A parameter no rule matches, made device by a per-function exception, behaves as device."""
    seen = c_size_t()
    fxlib.fxExceptionAddress(FakeDeviceArray(0x1000), byref(seen))
    assert seen.value == 0x1000
    with pytest.raises(TypeError, match=r"fxExceptionAddress: parameter 'buffer' needs device memory"):
        fxlib.fxExceptionAddress(np.zeros(2), byref(seen))


def test_host_pointer(fxlib: ModuleType) -> None:
    """A host ``const void*`` reads ctypes objects and numpy arrays; device memory is refused."""
    result = c_float()
    fxlib.fxScale(c_float(1.5), 2.0, byref(result))
    assert result.value == 3.0
    fxlib.fxScale(np.array([2.5], dtype=np.float32), 2.0, byref(result))
    assert result.value == 5.0
    with pytest.raises(TypeError) as info:
        fxlib.fxScale(FakeDeviceArray(), 2.0, byref(result))
    assert str(info.value).startswith(f"fxScale: parameter 'alpha' cannot take the host address of a "
                                      f"{type_name(FakeDeviceArray())}")


def test_either_pointer(fxlib: ModuleType) -> None:
    """An either parameter takes device objects and host arrays alike, passing their addresses."""
    seen = c_size_t()
    fxlib.fxEitherAddress(FakeDeviceArray(), byref(seen))
    assert seen.value == FAKE_DEVICE_ADDRESS
    host = np.zeros(3, dtype=np.float64)
    fxlib.fxEitherAddress(host, byref(seen))
    assert seen.value == host.ctypes.data


def test_writable_host_pointer(fxlib: ModuleType) -> None:
    """A host ``void*`` the library writes takes writable buffers and refuses read-only ones."""
    buffer = bytearray(4)
    fxlib.fxFillHost(buffer, 3, 7)
    assert buffer == b"\x07\x07\x07\x00"
    array = np.zeros(4, dtype=np.uint8)
    fxlib.fxFillHost(array, 4, 9)
    assert array.tolist() == [9, 9, 9, 9]
    with pytest.raises(TypeError, match=r"fxFillHost: parameter 'hostBuffer' needs writable host memory, got bytes"):
        fxlib.fxFillHost(b"1234", 4, 1)
    array.setflags(write=False)
    with pytest.raises(TypeError, match=r"parameter 'hostBuffer' needs writable host memory, got a read-only "
                                        r"numpy.ndarray"):
        fxlib.fxFillHost(array, 4, 1)
    with pytest.raises(TypeError, match=r"parameter 'hostBuffer' cannot take the host address"):
        fxlib.fxFillHost(FakeDeviceArray(), 4, 1)


def test_byte_size(fxlib: ModuleType) -> None:
    """A byte-size parameter passes 64-bit counts and refuses negative ones (no wrap to 2**64-1);
    its device ``void*`` neighbour (a rule by name) refuses host memory."""
    echoed = c_size_t()
    fxlib.fxWorkspace(FakeDeviceArray(), 3 << 33, byref(echoed))
    assert echoed.value == 3 << 33
    with pytest.raises(TypeError, match=r"^fxWorkspace: parameter 'workSpace' needs device memory, "
                                        r"got numpy.ndarray \(host memory\)$"):
        fxlib.fxWorkspace(np.zeros(8), 8, byref(echoed))
    with pytest.raises(OverflowError, match=r"fxWorkspace: parameter 'workSpaceSizeInBytes' needs a "
                                            r"non-negative byte count, got -1"):
        fxlib.fxWorkspace(None, -1, byref(echoed))
    with pytest.raises(TypeError, match=r"parameter 'workSpaceSizeInBytes' needs an int, got float"):
        fxlib.fxWorkspace(None, 1.5, byref(echoed))


def test_byte_size_refuses_values_that_would_wrap(fxlib: ModuleType) -> None:
    """2**64 does not fit a size_t: refused instead of reaching C as 0; 2**64-1 still passes."""
    echoed = c_size_t()
    with pytest.raises(OverflowError, match=r"fxWorkspace: parameter 'workSpaceSizeInBytes' is "
                                            r"18446744073709551616, outside the range of size_t "
                                            r"\(0 to 18446744073709551615\)"):
        fxlib.fxWorkspace(None, 1 << 64, byref(echoed))
    fxlib.fxWorkspace(None, (1 << 64) - 1, byref(echoed))
    assert echoed.value == (1 << 64) - 1


def test_missing_symbol_fails_only_when_called(fxlib: ModuleType) -> None:
    """A declared function absent from the library fails when called, by name; nothing else does."""
    assert fxlib.fxFail(0) is None                           # library loaded, import was fine
    for _ in range(2):
        with pytest.raises(SymbolNotFoundError) as info:
            fxlib.fxMissing(1)
        assert str(info.value).startswith("fxMissing is not in libfixture.so 9.1.2")
        assert isinstance(info.value, AttributeError)
    out = c_int()
    fxlib.fxKeyword(lambda_=4, result=byref(out))
    assert out.value == 5


def test_deprecated_function_warns_once(fxlib: ModuleType) -> None:
    """A deprecated function warns once (DeprecationWarning naming it, at the caller), then never."""
    out = c_int()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fxlib.fxDouble(4, byref(out))
        fxlib.fxDouble(5, byref(out))
    assert out.value == 10
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1
    assert str(deprecations[0].message) == "fxDouble is deprecated in Fixture: Use fxTriple instead"
    assert deprecations[0].filename == __file__
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fxlib.fxSumDims(1, [1], byref(c_int64()))
    assert caught == []


def test_callback(fxlib: ModuleType) -> None:
    """A CFUNCTYPE callback is called by C, and so is a plain Python function (wrapped in one, and held); an
    address or a byref is refused by name."""
    calls: list[tuple[int, int]] = []

    def reduce(acc: int, value: int) -> int:
        calls.append((acc, value))
        return acc * 10 + value

    result = c_int()
    callback = fxlib.fxReduce_t(reduce)
    fxlib.fxApply(callback, 3, [1, 2, 3], byref(result))
    assert result.value == 123 and calls == [(0, 1), (1, 2), (12, 3)]
    calls.clear()
    fxlib.fxApply(reduce, 2, [4, 5], byref(result))
    assert result.value == 45 and calls == [(0, 4), (4, 5)]
    for wrong in (byref(c_int()), 0x1000):
        with pytest.raises(DnnArgumentError, match=r"^fxApply: parameter 'fn' needs a callback"):
            fxlib.fxApply(wrong, 3, [1, 2, 3], byref(result))


def test_struct_by_value_and_nested(fxlib: ModuleType) -> None:
    """A struct returned by value, and a nested struct (with an unnamed struct type) read by C."""
    point = fxlib.fxMakePoint(3, -4)
    assert type(point) is fxlib.fxPoint_t and (point.x, point.y) == (3, -4)
    rect = fxlib.fxRect_t(origin=fxlib.fxPoint_t(7, 0), extent=fxlib.fxPoint_t(5, 6))
    rect.z.depth, rect.z.layer = 8, b"\x09"
    assert fxlib.fxRectArea(byref(rect)) == 30 * 1000 + 700 + 80 + 9
    assert fxlib.fxRectArea(rect) == 30789


def test_anonymous_union_read_by_c(fxlib: ModuleType) -> None:
    """C reads the anonymous union member where Python wrote it."""
    variant = fxlib.fxVariant_t(kind=2, tag=b"\x03")
    variant.asDouble = 0.25
    assert fxlib.fxVariantDouble(byref(variant)) == 2003.25


def test_bitfields_agree_with_c(fxlib: ModuleType) -> None:
    """Bitfields written by Python read back the same in C, and the other way round."""
    values = {"ready": 1, "mode": 6, "count": 4095, "delta": -16, "tail": 4000000000, "wide": (1 << 40) - 3,
              "top": 0xABCDEF}
    flags = fxlib.fxFlags_t(**values)
    assert [fxlib.fxFlagsField(byref(flags), i) for i in range(7)] == list(values.values())
    filled = fxlib.fxFlags_t()
    fxlib.fxFlagsFill(byref(filled))
    assert [getattr(filled, name) for name in values] == [1, 5, 4000, -9, 3000000000, 0xABCDEF0123,
                                                          0x123456]


def test_fixed_arrays_filled_by_c(fxlib: ModuleType) -> None:
    """Fixed arrays (also two-dimensional and of structs) in a struct filled by C."""
    arrays = fxlib.fxArrays_t()
    fxlib.fxFillArrays(byref(arrays))
    assert list(arrays.dims) == [i * i for i in range(8)]
    assert [list(row) for row in arrays.matrix] == [[0.5, 1.5, 2.5], [10.5, 11.5, 12.5]]
    assert (arrays.corners[1].x, arrays.corners[1].y) == (-4, 44)
    assert arrays.name == b"abcd"


def test_enum_values_through_c(fxlib: ModuleType) -> None:
    """64-bit and unsigned enums pass to C and back unchanged; IntEnum members are accepted."""
    assert fxlib.fxEchoBig(fxlib.FX_BIG_ALL) == 2**64 - 1
    assert fxlib.fxEchoBig(fxlib.FX_BIG_PAST_32) == 2**32
    assert fxlib.fxEchoUnsigned(fxlib.FX_U_HIGH) == 2**31
    assert fxlib.fxModeValue(fxlib.fxMode_t.FX_MODE_ACCURATE) == 10
    assert fxlib.fxModeValue(fxlib.FX_MODE_LEGACY) == 10


def test_beta_function_callable(fxlib: ModuleType) -> None:
    """A function declared only under the beta macro is generated and callable."""
    answer = c_int()
    fxlib.fxBetaAnswer(byref(answer))
    assert answer.value == 42
