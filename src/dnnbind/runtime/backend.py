"""The base of the generated typed backend descriptors (``dnnbind.gen.cudnn_backend``).

A generated class names its descriptor type and its attributes (element type, count, the descriptor
classes a handle-valued attribute takes); this base turns ``TensorDescriptor(dimensions=[...], ...)``
into cudnnBackendCreateDescriptor and one cudnnBackendSetAttribute per attribute, checks each value in
Python first (a wrong type, a count, a range, a descriptor of the wrong class: cuDNN crashes on some),
keeps the descriptors it was given alive as long as it is, and reads attributes back with
cudnnBackendGetAttribute. It calls only the generated cudnnBackend* functions of ``_api``.
"""
from __future__ import annotations

import collections.abc
import ctypes
import enum
import fractions
import math
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

from dnnbind.runtime import deviceless
from dnnbind.runtime.errors import DnnRangeError, LibraryError
from dnnbind.runtime.pointers import checked_address, device_address, type_name


@dataclass(frozen=True)
class Attribute:
    """One attribute of a descriptor class, as the generator classified it."""
    name: str                  # the keyword: dimensions
    attr: int                  # CUDNN_ATTR_TENSOR_DIMENSIONS
    attr_type: int             # CUDNN_TYPE_INT64
    kind: str                  # int, float, bool, char, pointer, enum, struct, handle, descriptor
    ctype: Any                 # the element's ctypes type (enums: their IntEnum class; storage int32)
    count: str | int           # "scalar", "array" or a fixed number
    elements: tuple[type, ...] = ()     # descriptor-valued: the classes it takes
    settable: bool = True

    @property
    def storage(self) -> Any:
        return ctypes.c_int32 if self.kind == "enum" else self.ctype

    def describe(self) -> str:
        what = " or ".join(c.__name__ for c in self.elements) if self.elements else getattr(self.ctype, "__name__", "")
        count = {"scalar": "one", "array": "a sequence of"}.get(self.count, f"{self.count} x") \
            if isinstance(self.count, str) else f"{self.count} x"
        return f"{count} {what}" + ("" if self.settable else " (read-only)")


class Descriptor:
    """A cuDNN backend descriptor of one type; subclasses are generated. ``close()`` (or ``with``) frees it."""

    _api: Any                  # the generated raw module
    descriptor_type: ClassVar[int]
    attributes: ClassVar[dict[str, Attribute]] = {}
    needs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **values: Any) -> None:
        if self.needs:          # cuDNN aborts the process setting attributes of this type without them
            deviceless.require(self.needs, f"a {type(self).__name__}")
        api = self._api
        handle = api.cudnnBackendDescriptor_t()
        api.cudnnBackendCreateDescriptor(self.descriptor_type, handle)
        self.handle = handle
        self.finalized = False
        self.filled = False         # filled in by cuDNN (a Get of a descriptor-valued attribute), not built here
        self._refs: dict[str, tuple[Descriptor, ...]] = {}
        self._values: dict[str, Any] = {}
        for name, value in values.items():
            self.set(name, value)

    # ------------------------------------------------------------------ attributes in
    def _attribute(self, name: str) -> Attribute:
        try:
            return self.attributes[name]
        except KeyError:
            raise TypeError(f"{type(self).__name__} has no attribute {name!r}; it has: "
                            f"{', '.join(sorted(self.attributes))}") from None

    def _problem(self, a: Attribute, detail: str, cls: type = TypeError) -> Exception:
        return cls(f"{type(self).__name__}.{a.name} needs {a.describe()}: {detail}")

    def _items(self, a: Attribute, value: Any) -> list[Any]:
        if a.kind == "char":
            if isinstance(value, str):
                value = value.encode()
            if not isinstance(value, (bytes, bytearray)):
                raise self._problem(a, f"got {type_name(value)}")
            return [bytes([b]) for b in value]
        if a.count == "scalar":
            if isinstance(value, (list, tuple)):
                raise self._problem(a, f"got a {type_name(value)} of {len(value)}")
            return [value]
        if isinstance(value, (str, bytes)) or not _ordered(value):
            raise self._problem(a, f"got {type_name(value)} {value!r}")
        items = list(value)
        if not items or (isinstance(a.count, int) and len(items) != a.count):
            raise self._problem(a, f"got {len(items)} element(s)")
        return items

    def _element(self, a: Attribute, item: Any, i: int) -> Any:
        where = "" if a.count == "scalar" else f"element [{i}] "
        if a.kind == "int":
            if isinstance(item, bool) or not isinstance(item, numbers.Integral):
                raise self._problem(a, f"{where}is {type_name(item)} {item!r}, not an int")
            bits = 8 * ctypes.sizeof(a.ctype)
            low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
            if not low <= int(item) <= high:
                raise self._problem(a, f"{where}{int(item)} is outside [{low}, {high}]", DnnRangeError)
            return int(item)
        if a.kind == "float":
            if isinstance(item, bool) or not isinstance(item, numbers.Real):
                raise self._problem(a, f"{where}is {type_name(item)} {item!r}, not a number")
            try:
                number: float | None = float(item)
            except OverflowError:       # an int beyond every float
                number = None
            largest = _LARGEST_FLOAT[ctypes.sizeof(a.ctype)]
            if number is None or math.isfinite(number) and abs(number) > largest:    # (inf given stays inf)
                raise self._problem(a, f"{where}{item!r} is outside the range of a {8 * ctypes.sizeof(a.ctype)}-bit "
                                       f"float (magnitude at most {largest:g})", DnnRangeError)
            return number
        if a.kind == "bool":
            if item not in (True, False, 0, 1) or not isinstance(item, (bool, numbers.Integral)):
                raise self._problem(a, f"{where}is {type_name(item)} {item!r}, not a bool")
            return bool(item)
        if a.kind == "enum":
            if isinstance(item, enum.Enum) and not isinstance(item, a.ctype):
                raise self._problem(a, f"{where}{type(item).__name__}.{item.name} is a member of another enum",
                                    ValueError)
            if isinstance(item, bool) or not isinstance(item, numbers.Integral):
                raise self._problem(a, f"{where}is {type_name(item)} {item!r}, not a member or an int")
            try:
                return int(a.ctype(item))
            except (ValueError, TypeError):
                raise self._problem(a, f"{where}{item!r} is no member of {a.ctype.__name__}", ValueError) from None
        if a.kind == "pointer":         # an address (device memory for a variant pack), an array, or None
            if item is None:
                return None
            address = item if isinstance(item, int) and not isinstance(item, bool) else device_address(item)
            if address is None:
                raise self._problem(a, f"{where}is {type_name(item)}, not an address or a device array")
            try:
                return checked_address(address)
            except (TypeError, OverflowError) as exc:
                raise self._problem(a, f"{where}{exc}", type(exc)) from None
        if a.kind == "struct":          # cudnnFraction_t: a Fraction, a (numerator, denominator) pair or the struct
            if isinstance(item, a.ctype):
                return item
            if isinstance(item, numbers.Rational):
                item = (item.numerator, item.denominator)
            if isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, numbers.Integral) for x in item):
                return a.ctype(*item)
            raise self._problem(a, f"{where}is {type_name(item)} {item!r}")
        if a.kind == "descriptor":
            if not isinstance(item, a.elements) or not isinstance(item, Descriptor):
                what = type(item).__name__ if isinstance(item, Descriptor) else type_name(item)
                raise self._problem(a, f"{where}is {what}")
            if item.handle is None:
                raise self._problem(a, f"{where}was closed")
            return item.handle
        if a.kind == "handle":
            if not isinstance(item, a.ctype):
                raise self._problem(a, f"{where}is {type_name(item)}")
            return item
        return item                 # char

    def set(self, name: str, value: Any) -> "Descriptor":
        """Set one attribute (before finalize); returns self."""
        a = self._attribute(name)
        if not a.settable:
            raise TypeError(f"{type(self).__name__}.{name} is read-only (cuDNN computes it)")
        if self.finalized:
            raise TypeError(f"{type(self).__name__} is finalized: its attributes can no longer be set")
        items = [self._element(a, item, i) for i, item in enumerate(self._items(a, value))]
        element = self._api.cudnnBackendDescriptor_t if a.kind == "descriptor" else a.storage
        array = (element * len(items))(*items)
        self._api.cudnnBackendSetAttribute(self.handle, a.attr, a.attr_type, len(items), array)
        if a.kind == "descriptor":
            self._refs[name] = tuple(value if isinstance(value, (list, tuple)) else (value,))
        self._values[name] = value
        return self

    # ------------------------------------------------------------------ finalize and attributes out
    def finalize(self) -> "Descriptor":
        """cudnnBackendFinalize; returns self. DevicelessError when it failed for want of libcuda (types whose
        attributes make cuDNN load cuBLASLt, engine heuristics, are checked at creation: ``needs``)."""
        what = f"finalizing a {type(self).__name__}"
        try:
            self._api.cudnnBackendFinalize(self.handle)
        except LibraryError as exc:     # every finalize fails this way without libcuda: say so
            if getattr(exc.status, "name", "").endswith("SUBLIBRARY_LOADING_FAILED"):
                deviceless.require((deviceless.LIBCUDA,), what)
            raise
        self.finalized = True
        return self

    def count(self, name: str) -> int:
        """How many elements attribute ``name`` holds (finalized descriptors)."""
        a = self._attribute(name)
        n = ctypes.c_int64()
        self._api.cudnnBackendGetAttribute(self.handle, a.attr, a.attr_type, 0, n, None)
        return n.value

    def get(self, name: str) -> Any:
        """Read attribute ``name`` back (cudnnBackendGetAttribute): a value for scalars, a list for arrays,
        str for characters, descriptor objects (finalized, of the attribute's class) for descriptors."""
        a = self._attribute(name)
        if a.kind == "descriptor" and not self.filled and name not in self._values and a.settable:
            raise TypeError(f"{type(self).__name__}.{name} was not set (cuDNN crashes reading back an unset "
                            "descriptor-valued attribute)")
        n = 1 if a.count == "scalar" else a.count if isinstance(a.count, int) else self.count(name)
        if n == 0:                      # (an engine heuristic that found no engine)
            return "" if a.kind == "char" else []
        if a.kind == "descriptor":
            if len(a.elements) != 1:
                raise TypeError(f"{type(self).__name__}.{name} holds descriptors of several types "
                                f"({', '.join(c.__name__ for c in a.elements)}): cuDNN cannot fill them in untyped")
            out = [a.elements[0]() for _ in range(n)]
            array: Any = (self._api.cudnnBackendDescriptor_t * n)(*[d.handle for d in out])
        else:
            array = (a.storage * n)()
        got = ctypes.c_int64()
        self._api.cudnnBackendGetAttribute(self.handle, a.attr, a.attr_type, n, got, array)
        if a.kind == "descriptor":
            for d in out:
                d.finalized = d.filled = True
            values: list[Any] = out[:got.value]
        elif a.kind == "char":
            return bytes(array[:got.value]).split(b"\0", 1)[0].decode()
        elif a.kind == "enum":
            values = [a.ctype(v) if v in a.ctype._value2member_map_ else v for v in array[:got.value]]
        elif a.kind == "struct":
            values = [fractions.Fraction(v.numerator, v.denominator) if v.denominator else v for v in array[:got.value]]
        else:
            values = list(array[:got.value])
        return values[0] if a.count == "scalar" and values else values

    # ------------------------------------------------------------------ lifetime and display
    def close(self) -> None:
        """Destroy the descriptor (once)."""
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            self._api.cudnnBackendDestroyDescriptor(handle)
        self._refs = {}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:       # interpreter shutdown: the library may be gone
            pass

    def __enter__(self) -> "Descriptor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        """The attributes read back from cuDNN when finalized; the values given so far when not."""
        if self.handle is None:
            return f"<{type(self).__name__} closed>"
        if not self.finalized:
            shown = ", ".join(f"{k}={_short(v)}" for k, v in self._values.items())
            return f"{type(self).__name__}({shown})  # not finalized"
        parts = []
        for name, a in self.attributes.items():
            if a.kind == "descriptor":          # reading back an unset one crashes cuDNN: show what was given
                if name in self._values:
                    parts.append(f"{name}={_short(self._values[name])}")
                continue
            try:
                value = self.get(name)
            except (LibraryError, TypeError):
                continue            # not set, or not readable on this descriptor
            if value != []:
                parts.append(f"{name}={_short(value)}")
        return f"{type(self).__name__}({', '.join(parts)})"


#: the largest finite value of a float attribute's C type, by its size in bytes
_LARGEST_FLOAT = {4: 3.4028234663852886e38, 8: 1.7976931348623157e308}


def _ordered(value: Any) -> bool:
    """Whether ``value`` is a sequence of elements in order (a list, a tuple, a range, a 1-d array): not a
    mapping or a set, whose iteration would set its keys, or its members in any order."""
    if isinstance(value, collections.abc.Sequence):
        return True
    return getattr(value, "ndim", None) == 1 and hasattr(value, "__len__")


def _short(value: Any) -> str:
    if isinstance(value, Descriptor):
        return f"<{type(value).__name__}>"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_short(v) for v in value[:8])
        return f"[{inner}{', ...' if len(value) > 8 else ''}]"
    if isinstance(value, str) and len(value) > 60:
        return repr(value[:57] + "...")
    return repr(value)
