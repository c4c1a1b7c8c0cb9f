"""The argument checks generated wrappers run before a foreign call (runtime/checks.py), against libc's
memcpy as a real C function that reads and writes through the converted pointers."""
from __future__ import annotations

import ctypes
import struct
from ctypes import POINTER, byref, c_char, c_int, c_int64, c_size_t, c_uint, c_void_p
from enum import IntEnum

import numpy as np
import pytest

from dnnbind.runtime import DnnArgumentError, DnnRangeError
from dnnbind.runtime import checks
from native_parts import require


class FakeDeviceArray:
    """Stands for a CuPy/PyTorch CUDA array on a machine without a GPU."""
    __cuda_array_interface__ = {"data": (0x7F000000, False), "shape": (4,), "typestr": "<i4", "version": 3}


class Colour(IntEnum):
    RED = 0


class Shape(IntEnum):
    SQUARE = 0


def memcpy() -> ctypes._CFuncPtr:
    fn = ctypes.CDLL(None).memcpy
    fn.restype = c_void_p
    fn.argtypes = [c_void_p, c_void_p, c_size_t]          # as the generated wrappers declare host arrays
    return fn


def test_converted_arrays_round_trip_through_c():
    out_array, in_array = checks.host_array(c_int, False), checks.host_array(c_int, True)
    copy = memcpy()
    out = np.zeros(3, np.int32)
    copy(out_array(out, 3, 0), in_array([7, 8, 9], 3, 1), 12)
    assert out.tolist() == [7, 8, 9]
    copy(out_array(out, 3, 0), in_array((1, 2, 3), 3, 1), 12)
    assert out.tolist() == [1, 2, 3]
    target = (c_int * 3)()
    readonly = np.array([4, 5, 6], np.int32)
    readonly.flags.writeable = False
    copy(out_array(target, 3, 0), in_array(readonly, 3, 1), 12)
    assert list(target) == [4, 5, 6]
    single = c_int()
    copy(out_array(byref(single), 1, 0), in_array([42], 1, 1), 4)
    assert single.value == 42


@pytest.mark.parametrize("obj, holding", [
    ([1, 2], "list holding 2"), ((1,), "tuple holding 1"), (np.zeros(2, np.int32), "numpy.ndarray holding 2"),
    ((c_int * 2)(), "c_int_Array_2 holding 2"), (byref(c_int()), "CArgObject holding 1"), (c_int(), "c_int holding 1")])
def test_too_short_for_the_count_is_refused_naming_what_was_given(obj, holding):
    converter = checks.host_array(c_int, True, cname="int")
    with pytest.raises(DnnArgumentError, match=rf"needs at least 3 int elements, got a .*{holding}") as info:
        converter(obj, 3, 4)
    assert info.value.index == 4 and isinstance(info.value, TypeError)


def test_outputs_refuse_sequences_read_only_arrays_and_none_unless_nullable():
    out = checks.host_array(c_int, False)
    with pytest.raises(DnnArgumentError, match="is an output"):
        out([0, 0], 2, 0)
    readonly = np.zeros(2, np.int32)
    readonly.flags.writeable = False
    with pytest.raises(DnnArgumentError, match="writable"):
        out(readonly, 2, 0)
    with pytest.raises(DnnArgumentError, match=r"None \(NULL\) is not allowed"):
        out(None, 1, 0)
    assert out(None, 0, 0) is None                                   # nothing to write: NULL is fine
    assert checks.host_array(c_int, False, nullable=True)(None, 1, 0) is None


def test_element_ranges_and_types_of_sequences():
    converter = checks.host_array(c_int, True)
    with pytest.raises(DnnRangeError, match=r"element \[1\] is 4294967298, outside the range of int") as info:
        converter([1, 2**32 + 2], 2, 0)
    assert isinstance(info.value, OverflowError)
    with pytest.raises(DnnArgumentError, match=r"element \[0\] needs an int, got float"):
        converter([1.5], 1, 0)
    with pytest.raises(DnnRangeError, match=r"element \[0\] is -1, outside the range of size_t"):
        checks.host_array(c_size_t, True, code="N")([-1], 1, 0)
    assert checks.host_array(c_uint, True)([2**32 - 1], 1, 0) == struct.pack("I", 2**32 - 1)


def test_typed_pointers_stay_typed():
    size_t_out = checks.host_array(c_size_t, False, cname="size_t")
    assert size_t_out(byref(c_size_t()), 1, 0) is not None
    with pytest.raises(DnnArgumentError, match=r"needs size_t elements .*got CArgObject of ctypes.c_int"):
        size_t_out(byref(c_int()), 1, 0)
    with pytest.raises(DnnArgumentError, match=r"needs size_t elements .*got .*c_int_Array_2"):
        size_t_out((c_int * 2)(), 1, 0)
    with pytest.raises(DnnArgumentError, match="dtype int32"):
        checks.host_array(c_int, True)(np.zeros(2, np.int64), 2, 0)
    with pytest.raises(DnnArgumentError, match="cannot take the host address"):
        checks.host_array(c_int, True)(FakeDeviceArray(), 1, 0)


def test_a_bare_pointer_is_refused_when_more_than_one_element_is_needed():
    pointer = ctypes.cast((c_int * 4)(), POINTER(c_int))
    converter = checks.host_array(c_int, False)
    assert converter(pointer, 1, 0) is pointer
    with pytest.raises(DnnArgumentError, match="does not say how many it holds"):
        converter(pointer, 4, 0)


def test_byte_buffers():
    buffer = checks.host_buffer(False)
    assert buffer(ctypes.create_string_buffer(8), 8, 0) is not None
    assert buffer(bytearray(8), 8, 0) is not None
    with pytest.raises(DnnArgumentError, match="needs at least 16 bytes, got a numpy.ndarray of 8 bytes"):
        buffer(np.zeros(2, np.float32), 16, 0)
    with pytest.raises(DnnArgumentError, match="needs at least 4 bytes, got a CArgObject of 2 bytes"):
        checks.host_buffer(True)(byref(ctypes.c_int16()), 4, 0)
    with pytest.raises(DnnArgumentError, match="writable"):
        buffer(b"\0" * 8, 8, 0)
    chars = checks.host_array(c_char, False)
    with pytest.raises(DnnArgumentError, match="needs at least 4096 c_char elements"):
        chars(ctypes.create_string_buffer(4), 4096, 0)


def test_check_values_names_the_first_bad_argument():
    params = ("desc", "colour", "n", "size")
    checks.check_values("f", params, ((1, np.int64(0), "i", Colour), (2, 5, "i", None)))   # fine after all
    with pytest.raises(DnnRangeError, match=r"^f: parameter 'n' is 2147483648, outside the range of int "
                                            r"\(-2147483648 to 2147483647\)$"):
        checks.check_values("f", params, ((1, Colour.RED, "i", Colour), (2, 2**31, "i", None)))
    with pytest.raises(DnnArgumentError, match=r"^f: parameter 'colour' needs a Colour, got Shape.SQUARE"):
        checks.check_values("f", params, ((1, Shape.SQUARE, "i", Colour),))
    with pytest.raises(DnnArgumentError, match=r"^f: parameter 'colour' needs an int or a Colour member, got str"):
        checks.check_values("f", params, ((1, "red", "i", Colour),))
    with pytest.raises(DnnRangeError, match=r"^f: parameter 'size' needs a non-negative byte count, got -8"):
        checks.check_values("f", params, ((3, -8, "N", None),))
    with pytest.raises(DnnRangeError, match=r"is 9223372036854775808, outside the range of int64"):
        checks.check_values("f", params, ((2, 2**63, "q", None),))


def test_sized_count_and_query_count():
    assert checks.sized_count({0: 8, 1: 4}, 1, 3, "f", "attributeType") == 12
    with pytest.raises(DnnArgumentError, match="parameter 'attributeType' is 7, which names no type"):
        checks.sized_count({0: 8}, 7, 1, "f", "attributeType")
    libc = ctypes.CDLL(None)
    labs = libc.llabs                                  # a real C function writing nothing: query via a helper

    def query(value: int, out: object) -> None:        # reports a count through an out-parameter, like C
        ctypes.cast(out, POINTER(c_int64))[0] = labs(value)
    labs.argtypes, labs.restype = [c_int64], c_int64
    assert checks.query_count(query, (-5,), c_int64) == 5


# -- values_ok: the wrappers' fast check of integers and enums -----------------------------------------

def _spec(codes: str, enums: tuple) -> tuple:
    return codes.encode(), enums, struct.Struct(codes).pack


def test_the_compiled_values_check_is_built():
    """dnnbind_native._values is part of the development install (make setup builds it), like the kernels."""
    require(checks.VALUES_OK_COMPILED, "dnnbind_native._values")


_EDGES = [0, 1, -1, True, False, np.int32(7), np.int64(-3), np.uint64(2**64 - 1), 2**7 - 1, 2**7, -2**7, -2**7 - 1,
          2**8 - 1, 2**8, 2**15 - 1, 2**15, -2**15 - 1, 2**16 - 1, 2**16, 2**31 - 1, 2**31, -2**31, -2**31 - 1,
          2**32 - 1, 2**32, 2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**64 - 1, 2**64, 10**30, -10**30, 1.0, "1",
          None, Colour.RED, Shape.SQUARE, np.float32(1)]


@pytest.mark.parametrize("code", list(checks.RANGES))
@pytest.mark.parametrize("value", _EDGES, ids=repr)
def test_compiled_and_python_values_checks_agree_on_each_type(code, value):
    """The C check answers as the Python one (struct's ranges and __index__ rule) for every format letter
    at and past every type's limits, for bools, numpy integers, floats, strings and None."""
    spec = _spec(code, (None,))
    expected = checks._values_ok_python(spec, value)
    assert checks.values_ok(spec, value) is expected
    lo, hi = checks.RANGES[code][1:]
    if type(value) is int:
        assert expected == (lo <= value <= hi)


@pytest.mark.parametrize("value, enum, ok", [(0, Colour, True), (Colour.RED, Colour, True), (Shape.SQUARE, Colour, False),
                                             (True, Colour, False), (np.int32(0), Colour, False), (2**40, Colour, False)])
def test_enum_parameters_take_ints_and_their_own_members_only(value, enum, ok):
    spec = _spec("ii", (None, enum))
    assert checks.values_ok(spec, 5, value) is ok
    assert checks._values_ok_python(spec, 5, value) is ok


def test_the_compiled_check_refuses_a_spec_that_does_not_match():
    from dnnbind import compiled
    module = compiled.module("_values")
    require(module is not None, "dnnbind_native._values")
    values_ok = module.values_ok
    for spec in ((b"ii", (None,)), ("ii", (None, None)), (b"i", (None,)), ()):
        with pytest.raises(TypeError, match="spec"):
            values_ok(spec, 1, 2)


def test_generated_wrappers_check_alike_without_the_compiled_module():
    """Where dnnbind_native._values is not installed, the wrappers take the struct-pack check: a good call
    passes, an out-of-range integer and another enum's member are refused, naming the parameter."""
    from childproc import run_python
    result = run_python("""
        import sys
        sys.modules["dnnbind_native._values"] = None          # as if the package had not been installed
        from dnnbind.runtime import DnnArgumentError, DnnRangeError, checks
        from dnnbind.gen import cudnn
        assert not checks.VALUES_OK_COMPILED
        spec = cudnn._values_cudnnSetTensor4dDescriptor
        assert checks.values_ok(spec, cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_DATA_FLOAT, 1, 2, 3, 4)
        for bad, error, param in (((0, 0, 2**31, 1, 1, 1), DnnRangeError, "'n'"),
                                  ((cudnn.CUDNN_DATA_FLOAT, 0, 1, 1, 1, 1), DnnArgumentError, "'format'")):
            assert not checks.values_ok(spec, *bad)
            try:
                cudnn.cudnnSetTensor4dDescriptor(None, *bad)
            except error as exc:
                assert param in str(exc), exc
            else:
                raise SystemExit("not refused")
        """)
    assert result.returncode == 0, result.stderr


def test_flag_takes_bools_and_refuses_other_objects():
    assert checks.flag(True, 0) is True and checks.flag(0, 0) is False and checks.flag(np.bool_(True), 0) is True
    for value, shown in (("no", "str"), (None, "NoneType"), (2, "2"), (1.0, "float")):
        with pytest.raises(DnnArgumentError, match=rf"needs a bool \(True, False, 0 or 1\), got {shown}") as info:
            checks.flag(value, 3)
        assert info.value.index == 3


def test_byref_offsets_count_against_the_length():
    ints = checks.host_array(c_int, const=True, cname="int")
    storage = (c_int * 6)()
    assert ints.convert(ctypes.byref(storage, 8), 4, 0) is not None
    with pytest.raises(DnnArgumentError, match=r"needs at least 4 int elements, got a CArgObject holding 3"):
        ints.convert(ctypes.byref(storage, 12), 4, 0)
    with pytest.raises(DnnArgumentError, match=r"is a byref with offset 2, not aligned for int elements"):
        ints.convert(ctypes.byref(storage, 2), 1, 0)
    buffer = checks.host_buffer(const=False)
    with pytest.raises(DnnArgumentError, match=r"is a byref with offset 64 into an object of 24 bytes"):
        buffer.convert(ctypes.byref(storage, 64), 1, 0)
    with pytest.raises(DnnArgumentError, match=r"needs at least 24 bytes, got a CArgObject of 16 bytes"):
        buffer.convert(ctypes.byref(storage, 8), 24, 0)
