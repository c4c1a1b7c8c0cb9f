"""Checks the generated wrappers run before a foreign call: integer ranges, enum classes, array lengths.

ctypes wraps out-of-range integers silently and knows nothing of how many elements a C function will
read or write through a pointer. The generator knows, for every parameter, its C type, whether None is
allowed and where an array's length comes from; the wrappers pass that knowledge here. The fast paths
(:func:`values_ok` for all integers and enums at once, one converter call per array) keep a checked call
close to the bare ctypes function; the slow paths below run only to name what is wrong.
"""
from __future__ import annotations

import ctypes
import struct
import sys
from ctypes import c_void_p
from enum import IntEnum
from functools import lru_cache

from dnnbind import compiled
from dnnbind.runtime.errors import DnnArgumentError, DnnRangeError
from dnnbind.runtime.pointers import (_buffer_address, _ByrefType, _CData, _host_refusal, byref_offset, device_address,
                                      type_name)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Sequence

_NOTHING = object()
#: numpy.ndarray once numpy has been seen (the generated modules must not import numpy themselves)
_ndarray: list[Any] = [_NOTHING]

#: struct/array format letter -> (C type name, lowest, highest)
RANGES: dict[str, tuple[str, int, int]] = {
    "b": ("int8", -2**7, 2**7 - 1), "B": ("uint8", 0, 2**8 - 1),
    "h": ("int16", -2**15, 2**15 - 1), "H": ("uint16", 0, 2**16 - 1),
    "i": ("int", -2**31, 2**31 - 1), "I": ("unsigned int", 0, 2**32 - 1),
    "q": ("int64", -2**63, 2**63 - 1), "Q": ("uint64", 0, 2**64 - 1),
    "n": ("ssize_t", -2**63, 2**63 - 1), "N": ("size_t", 0, 2**64 - 1),
}
_CTYPE_CODES = {ctypes.c_byte: "b", ctypes.c_ubyte: "B", ctypes.c_short: "h", ctypes.c_ushort: "H",
                ctypes.c_int: "i", ctypes.c_uint: "I", ctypes.c_longlong: "q", ctypes.c_ulonglong: "Q",
                ctypes.c_long: "q", ctypes.c_ulong: "Q", ctypes.c_size_t: "N", ctypes.c_ssize_t: "n"}


def _values_ok_python(spec: tuple, *values: Any) -> bool:
    """:func:`values_ok` without the compiled module: one struct pack of every value (spec[2], the packer
    of spec[0]'s letters) and a type test per enum parameter."""
    try:
        spec[2](*values)
    except struct.error:
        return False
    return all(e is None or type(v) is int or type(v) is e for v, e in zip(values, spec[1]))


_compiled = compiled.module("_values")     # the optional package dnnbind-native; else the same answers, slower
values_ok = _values_ok_python if _compiled is None else _compiled.values_ok
#: ``values_ok(spec, *values)``: whether every value fits its C integer type (spec[0]: a struct format
#: letter per value, native sizes; anything with ``__index__`` counts, as for struct) and every enum
#: parameter got an int or a member of its own class (spec[1]: per value its enum class or None); a
#: generated wrapper's spec is (letters as bytes, enum classes, the letters' struct packer). False sends
#: the wrapper to :func:`check_values`. In C (dnnbind_native._values, see dnnbind.compiled) where installed: 1.28x a bare ctypes call for
#: cudnnSetTensor4dDescriptor against 1.42x with the Python function (measured on the 2-core CI machine).
VALUES_OK_COMPILED = values_ok is not _values_ok_python


def struct_code(ctype: Any) -> str | None:
    """The struct format letter that range-checks a ctypes integer type (None: not an integer type)."""
    code = _CTYPE_CODES.get(ctype)
    if code in ("q", "Q", "n", "N") and ctypes.sizeof(ctype) == 4:     # 32-bit long
        return {"q": "i", "Q": "I", "n": "i", "N": "I"}[code]
    return code


def _problem(cls: type, index: int, detail: str) -> Exception:
    exc = cls(detail)
    exc.index = index
    return exc


def _range_text(value: Any, code: str) -> str:
    name, low, high = RANGES[code]
    return f"is {value}, outside the range of {name} ({low} to {high})"


def check_values(function: str, params: Sequence[str], checked: Sequence[tuple]) -> None:
    """Name the first integer or enum argument the fast check refused; return if all are fine after all.

    ``checked`` holds ``(index, value, struct code, enum class or None)`` for each checked parameter.
    """
    for index, value, code, enum in checked:
        name = params[index]
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise DnnArgumentError(f"{function}: parameter {name!r} needs an int"
                                   f"{f' or a {enum.__name__} member' if enum else ''}, got {type_name(value)}")
        if enum is not None and isinstance(value, IntEnum) and not isinstance(value, enum):
            raise DnnArgumentError(f"{function}: parameter {name!r} needs a {enum.__name__}, got "
                                   f"{type(value).__name__}.{value.name} (a member of another enum)")
        try:
            number = value.__index__()
        except TypeError:                    # a numpy array of several elements, or of floats
            raise DnnArgumentError(f"{function}: parameter {name!r} needs an int"
                                   f"{f' or a {enum.__name__} member' if enum else ''}, got {type_name(value)}"
                                   ) from None
        _, low, high = RANGES[code]
        if not low <= number <= high:
            if code == "N" and number < 0:
                raise DnnRangeError(f"{function}: parameter {name!r} needs a non-negative byte count, got {number}")
            raise DnnRangeError(f"{function}: parameter {name!r} {_range_text(number, code)}")


def at_most(count: Any, most: int, function: str, param: str, limit: str) -> Any:
    """A count parameter as is, or DnnRangeError above what the library takes (``limit``: the macro that says
    so): cuDNN copies a tensor's dimensions onto its stack, so 2000 of them overflowed it."""
    if isinstance(count, int) and count > most:          # an IntEnum member too (it passes as an int)
        raise DnnRangeError(f"{function}: parameter {param!r} is {count}, more than {limit or 'the limit'} ({most})")
    return count


def _negative_count(count: int, index: int) -> Exception:
    return _problem(DnnRangeError, index, f"has a negative element count ({count}): the count parameter beside it "
                                          "must not be negative")


def flag(value: Any, index: int) -> bool:
    """A C ``bool`` argument: True/False, 0/1 or a numpy bool; anything else is refused (ctypes' ``c_bool``
    would take any object by its truth value, a string or None included)."""
    if value is True or value is False:
        return value
    if type(value) is int and value in (0, 1) or type(value).__module__ == "numpy" \
            and type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    raise _problem(DnnArgumentError, index, f"needs a bool (True, False, 0 or 1), got {value!r}"
                   if type(value) is int else f"needs a bool (True, False, 0 or 1), got {type_name(value)}")


class HostArray:
    """Converts what a user passes for a typed host pointer ``T*`` into what the call's ``c_void_p`` takes,
    after checking that it holds at least ``count`` elements (None: nothing known) and, for integer inputs
    given as sequences, that every element fits ``T``.

    Accepts ctypes arrays, ``byref`` and instances of ``T``, numpy arrays of ``T``'s dtype and, for
    ``const T*`` inputs, lists and tuples. None is accepted when ``nullable`` or when no element is
    needed (``count == 0``).
    """

    def __init__(self, ctype: Any, const: bool, nullable: bool, code: str | None = None,
                 cname: str | None = None) -> None:
        self.ctype = ctype
        self.cname = cname or ctype.__name__
        self.const = const
        self.nullable = nullable
        self.code = code if code is not None else struct_code(ctype)
        self.itemsize = ctypes.sizeof(ctype)
        self._dtype: Any = _NOTHING                         # numpy's dtype for T (None: it has none), once asked
        self._array_types: dict[int, Any] = {}
        self._packers: dict[int, Any] = {}

    def __repr__(self) -> str:
        return f"<HostArray {'const ' if self.const else ''}{self.cname}*{' nullable' if self.nullable else ''}>"

    def dtype(self) -> Any:
        """numpy's dtype for ``T`` (computed on first use: importing the bindings must not import numpy)."""
        if self._dtype is _NOTHING:
            try:
                self._dtype = sys.modules["numpy"].dtype(self.ctype)
            except (TypeError, ValueError, AttributeError, NotImplementedError):   # opaque structs, callbacks
                self._dtype = None
        return self._dtype

    def convert(self, obj: Any, count: int | None, index: int) -> Any:
        """What the foreign call's ``c_void_p`` takes for ``obj`` (packed bytes, a ctypes array or byref, a view
        of a numpy array); raises naming parameter ``index`` when ``obj`` cannot serve. The element type is
        checked here, since ``c_void_p`` itself would take any pointer."""
        if count is not None and count < 0:
            raise _negative_count(count, index)
        kind = type(obj)
        if kind is _ndarray[0]:                                  # the hot forms first, inline
            if obj.dtype is self._dtype:                           # numpy's builtin dtypes are singletons
                size = obj.size
                if count is None or size >= count:
                    if self.const:                               # C only reads: a C-ordered copy is cheapest
                        return obj.tobytes()
                    try:
                        return self._array_type(size).from_buffer(obj)
                    except (TypeError, ValueError, BufferError):
                        pass                                     # read-only or not contiguous: the slow path says
            return self._from_numpy(obj, count, index)
        if kind is list or kind is tuple:
            size = len(obj)
            if self.const and (count is None or size >= count) and self.code is not None:
                pack = self._packers.get(size)
                if pack is None:
                    pack = self._packers[size] = struct.Struct(f"{size}{self.code}").pack
                try:
                    return pack(*obj)                            # C reads the packed bytes in place
                except struct.error:
                    raise self._element_problem(obj, index) from None
            return self._from_sequence(obj, count, index)
        if obj is None:
            if self.nullable or count == 0:
                return None
            role = "an input the library reads" if self.const else "an output the library writes"
            raise _problem(DnnArgumentError, index, f"is {role} ({self.cname}*): None (NULL) is not allowed here")
        if kind is _ByrefType:
            held = self._holding(obj._obj, obj, index) * self.itemsize
            self._need(self._after_offset(held, byref_offset(obj), index), count, index, obj)
            return obj
        if isinstance(obj, _CData):
            if isinstance(obj, ctypes._Pointer) and obj._type_ is self.ctype:   # a bare T*: extent unknown
                if count is not None and count > 1:
                    raise _problem(DnnArgumentError, index,
                                   f"needs {count} elements, and a bare ctypes pointer does not say how many it "
                                   "holds: pass a ctypes array or a numpy array (or call through .unchecked)")
                return obj
            self._need(self._holding(obj, obj, index), count, index, obj)
            data: Any = obj
            return data if isinstance(data, ctypes.Array) else ctypes.byref(data)
        if device_address(obj) is not None:
            raise _problem(DnnArgumentError, index, str(_host_refusal(obj)))
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.ndarray):
            if kind is numpy.ndarray:
                _ndarray[0] = kind
            return self._from_numpy(obj, count, index)
        return self._from_buffer(obj, count, index)

    __call__ = convert

    def _array_type(self, size: int) -> Any:
        array_type = self._array_types.get(size)
        if array_type is None:
            array_type = self._array_types[size] = self.ctype * size
        return array_type

    # -- the forms -------------------------------------------------------------------------------
    def _holding(self, target: Any, obj: Any, index: int) -> int:
        """How many ``T`` a ctypes object holds; another type is refused (a ``size_t*`` takes no ``c_int``)."""
        if isinstance(target, self.ctype):
            return 1
        if isinstance(target, ctypes.Array) and target._type_ is self.ctype:
            return len(target)
        raise _problem(DnnArgumentError, index, f"needs {self.cname} elements ({self.ctype.__name__}: an array of "
                                                f"them, one, or byref of either), got {type_name(obj)}"
                                                + (f" of {type_name(target)}" if target is not obj else ""))

    def _after_offset(self, held_bytes: int, offset: int, index: int) -> int:
        """How many elements a ``byref(obj, offset)`` reaches: the bytes from the offset to the object's end."""
        if offset:
            if not 0 <= offset <= held_bytes:
                raise _problem(DnnArgumentError, index, f"is a byref with offset {offset} into an object of "
                                                        f"{held_bytes} bytes: it points outside the object")
            if offset % ctypes.alignment(self.ctype):
                raise _problem(DnnArgumentError, index, f"is a byref with offset {offset}, not aligned for "
                                                        f"{self.cname} elements")
        return (held_bytes - offset) // self.itemsize

    def _need(self, available: int, count: int | None, index: int, obj: Any) -> None:
        if count is not None and available < count:
            raise _problem(DnnArgumentError, index, f"needs at least {count} {self.cname} element"
                                                    f"{'s' if count != 1 else ''}, got a {type_name(obj)} holding "
                                                    f"{available}")

    def _from_sequence(self, obj: Any, count: int | None, index: int) -> Any:
        if not self.const:
            raise _problem(DnnArgumentError, index,
                           f"is an output ({self.cname}*): pass a ctypes array or numpy array "
                           f"to receive it, not a {type(obj).__name__}")
        self._need(len(obj), count, index, obj)
        try:                                  # integer sequences are packed by convert() itself
            return (self.ctype * len(obj))(*obj)
        except TypeError as exc:
            raise _problem(DnnArgumentError, index, f"has an element of the wrong type: {exc}") from None

    def _element_problem(self, obj: Sequence[Any], index: int) -> Exception:
        assert self.code is not None
        _, low, high = RANGES[self.code]
        for i, value in enumerate(obj):
            if isinstance(value, bool) or not hasattr(value, "__index__"):
                return _problem(DnnArgumentError, index, f"element [{i}] needs an int, got {type_name(value)}")
            if not low <= value.__index__() <= high:
                return _problem(DnnRangeError, index, f"element [{i}] {_range_text(value.__index__(), self.code)}")
        return _problem(DnnArgumentError, index, "could not be converted")           # pragma: no cover

    def _from_numpy(self, obj: Any, count: int | None, index: int) -> Any:
        dtype = self.dtype()
        if dtype is None:
            raise _problem(DnnArgumentError, index, f"needs {self.cname} values, which no numpy dtype holds: pass a "
                                                    f"{self.cname} object (or a ctypes array of them, or byref)")
        if obj.dtype is not dtype and obj.dtype != dtype:
            raise _problem(DnnArgumentError, index, f"needs a numpy array of dtype {dtype} ({self.cname}), "
                                                    f"got dtype {obj.dtype}")
        self._need(obj.size, count, index, obj)
        if self.const:                                  # C only reads: its bytes, in C order
            return obj.tobytes()
        if not obj.flags.c_contiguous:
            raise _problem(DnnArgumentError, index, f"needs a C-contiguous {type_name(obj)} (the library writes it)")
        if not obj.flags.writeable:
            raise _problem(DnnArgumentError, index, f"needs writable host memory, got a read-only {type_name(obj)}")
        return self._array_type(obj.size).from_buffer(obj)

    def _from_buffer(self, obj: Any, count: int | None, index: int) -> Any:
        try:
            address = _buffer_address(obj, writable=not self.const)
        except TypeError as exc:
            raise _problem(DnnArgumentError, index, str(exc)) from None
        if address is None:
            raise _problem(DnnArgumentError, index,
                           f"needs host memory holding {self.cname} values (a ctypes array or byref, a numpy "
                           f"array{', a list or tuple' if self.const else ''}), got {type_name(obj)}")
        if self.itemsize != 1:
            raise _problem(DnnArgumentError, index, f"needs {self.cname} values, got a byte buffer "
                                                    f"({type_name(obj)}); use a ctypes or numpy array")
        self._need(memoryview(obj).nbytes, count, index, obj)
        return address


class HostBuffer:
    """The same for an untyped host pointer ``void*``: ``count`` is in bytes."""

    def __init__(self, const: bool, nullable: bool) -> None:
        self.const = const
        self.nullable = nullable

    def __repr__(self) -> str:
        return f"<HostBuffer {'const ' if self.const else ''}void*{' nullable' if self.nullable else ''}>"

    def convert(self, obj: Any, nbytes: int | None, index: int) -> Any:
        """What ``c_void_p`` takes for ``obj``, after checking it holds ``nbytes`` (None: unknown)."""
        if nbytes is not None and nbytes < 0:
            raise _negative_count(nbytes, index)
        if obj is None:
            if self.nullable or nbytes == 0:
                return None
            raise _problem(DnnArgumentError, index, "is dereferenced by the library: None (NULL) is not allowed here")
        if isinstance(obj, _ByrefType):
            held, offset = ctypes.sizeof(getattr(obj, "_obj")), byref_offset(obj)
            if not 0 <= offset <= held:
                raise _problem(DnnArgumentError, index, f"is a byref with offset {offset} into an object of {held} "
                                                        "bytes: it points outside the object")
            self._need(held - offset, nbytes, index, obj)
            return obj
        if isinstance(obj, (c_void_p, ctypes._Pointer)):             # an explicit pointer value
            return obj
        if isinstance(obj, _CData):
            data: Any = obj
            self._need(ctypes.sizeof(data), nbytes, index, obj)
            return ctypes.byref(data)
        if device_address(obj) is not None:
            raise _problem(DnnArgumentError, index, str(_host_refusal(obj)))
        try:
            address = _buffer_address(obj, writable=not self.const)
        except TypeError as exc:
            raise _problem(DnnArgumentError, index, str(exc)) from None
        if address is None:
            raise _problem(DnnArgumentError, index, "needs host memory (a ctypes object, ctypes.byref(...), a numpy "
                                                    f"array or a writable buffer), got {type_name(obj)}")
        self._need(obj.nbytes if hasattr(obj, "__array_interface__") else memoryview(obj).nbytes, nbytes, index, obj)
        return address

    __call__ = convert

    @staticmethod
    def _need(available: int, nbytes: int | None, index: int, obj: Any) -> None:
        if nbytes is not None and available < nbytes:
            raise _problem(DnnArgumentError, index, f"needs at least {nbytes} bytes, got a {type_name(obj)} of "
                                                    f"{available} bytes")


@lru_cache(maxsize=None)
def host_array(ctype: Any, const: bool, nullable: bool = False, code: str | None = None,
               cname: str | None = None) -> HostArray:
    """The shared converter for one (element type, const, nullable) combination; ``cname`` is the C
    type's name for messages (``size_t``, not ctypes' ``c_ulong``)."""
    return HostArray(ctype, const, nullable, code, cname)


@lru_cache(maxsize=None)
def host_buffer(const: bool, nullable: bool = False) -> HostBuffer:
    return HostBuffer(const, nullable)


def sized_count(nbytes_each: dict[int, int], selector: int, count: int, function: str, what: str) -> int:
    """Bytes of ``count`` elements whose size depends on an enum value (backend attribute types)."""
    try:
        return count * nbytes_each[int(selector)]
    except KeyError:
        raise DnnArgumentError(f"{function}: parameter {what!r} is {int(selector)}, which names no type the bindings "
                               "know the size of") from None


def query_count(query: Any, args: tuple, ctype: Any) -> int:
    """The count another function reports (``miopenGetTensorDescriptorSize(desc, &n)``)."""
    out = ctype()
    query(*args, ctypes.byref(out))
    return out.value
