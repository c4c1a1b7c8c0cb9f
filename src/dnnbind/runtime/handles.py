"""Handle lifetimes: each library object is destroyed once, whatever Python objects refer to it.

A generated ``*Destroy*`` wrapper clears the handle object it was given, so that object cannot free the
same memory again. Two things get past that alone: another Python object holding the same address (a
``ctypes.cast`` of it, a handle rebuilt from its int value), and two threads destroying one handle at once
(both see it set, both free it). So destroys run under one lock, and the addresses they freed are
remembered until a ``*Create*`` wrapper hands the address out again: a destroy of a remembered address is
refused. (A handle created around the bindings, by ``unchecked.<name>`` or by another library, at an
address these wrappers freed before, is refused too: destroy such a handle with ``unchecked`` as well.)
"""
from __future__ import annotations

import ctypes
import threading
from ctypes import c_void_p

from dnnbind.runtime.checks import _problem
from dnnbind.runtime.errors import DnnArgumentError
from dnnbind.runtime.pointers import _ByrefType, _CData, type_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

_lock = threading.RLock()        # re-entrant: a library callback may destroy a handle during a destroy
#: addresses a generated destroy freed and no generated create has returned since
_freed: set[int] = set()
#: handles created but not set yet, of the types a library cannot read in that state (``unset_handles`` in
#: pointer_overrides.json: MIOpen's tensor, sequence, activation, pooling and LRN descriptors crash its Get* calls)
UNSET: set[int] = set()


def is_null(handle: Any) -> bool:
    """Whether a handle argument is None or a NULL handle object (a destroyed one is cleared to NULL)."""
    return handle is None or isinstance(handle, ctypes._Pointer) and not handle


def _address(handle: Any) -> int | None:
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, c_void_p).value
    if type(handle) is int:
        return handle
    return None


def clear_handle(handle: Any) -> None:
    """Set a handle object to NULL, so that a later use is refused in Python as a NULL handle."""
    if isinstance(handle, ctypes._Pointer):
        ctypes.memset(ctypes.addressof(handle), 0, ctypes.sizeof(handle))


def destroy_once(library: Any, function: str, param: str, call: Callable[[Any], int], handle: Any) -> None:
    """Destroy ``handle`` with the foreign ``call`` unless it is NULL or its address was freed already; on
    success, remember the address and clear the handle object."""
    with _lock:
        if is_null(handle):
            raise library.null_handle_error(function, param, handle)
        address = _address(handle)
        if address in _freed:
            raise DnnArgumentError(f"{function}: parameter {param!r} holds the address {address:#x}, which a "
                                   "destroy freed already (through another handle object with the same address); "
                                   "destroying it again would free memory twice")
        try:
            status = call(handle)
        except ctypes.ArgumentError as exc:
            raise library.argument_error(function, (param,), exc) from None
        if status:
            raise library.status_error(status, function)
        if address is not None:
            _freed.add(address)
            UNSET.discard(address)
        clear_handle(handle)


def created(out: Any, unset: bool = False) -> None:
    """After a successful create: the address it wrote is live again (``out``: the converted output argument,
    a byref, a ctypes array or a handle object); ``unset``: and unusable until a setter sets it."""
    if not _freed and not unset:
        return
    target = getattr(out, "_obj") if isinstance(out, _ByrefType) else out
    with _lock:
        for item in target if isinstance(target, ctypes.Array) else (target,):
            address = _address(item)
            _freed.discard(address)         # type: ignore[arg-type]
            if unset and address:
                UNSET.add(address)


def was_set(handle: Any) -> None:
    """After a successful setter: the handle may be read now."""
    if UNSET:
        UNSET.discard(_address(handle))     # type: ignore[arg-type]


def check_set(function: str, params: tuple[str, ...], values: tuple[Any, ...]) -> None:
    """Refuse a handle that was created but never set (only called while some handle is in that state)."""
    for param, value in zip(params, values):
        if _address(value) in UNSET:
            raise DnnArgumentError(f"{function}: parameter {param!r} was created but never set; set it first (the "
                                   "library reads an unset descriptor's fields without checking them)")


#: the callbacks libraries hold, by (function, parameter, owner handle's address): the library calls them
#: after the registering call returns, so they must outlive the argument
_callbacks: dict[tuple[str, str, int | None], Any] = {}


def callback(kind: Any, obj: Any, index: int, where: tuple[str, str], owner: Any) -> Any:
    """A callback argument as ``kind`` (a CFUNCTYPE): None, an instance of ``kind``, or a Python callable
    wrapped in one; anything else (an address, ``byref`` of an int) is refused. The result is held until the
    same function registers another for the same owner handle, since the library keeps the pointer."""
    if obj is None:
        value = kind()                       # NULL: what ctypes passes for a callback it is given none of
    elif isinstance(obj, kind):
        value = obj
    elif callable(obj) and not isinstance(obj, _CData):
        value = kind(obj)
    else:
        raise _problem(DnnArgumentError, index, "needs a callback (an instance of its CFUNCTYPE type, a Python "
                       f"function to wrap in one, or None), got {type_name(obj)}")
    _callbacks[where + (_address(owner),)] = value
    return value


#: ctypes' type codes -> the kind of number they hold, as numpy's dtype.kind says it
_CTYPES_KINDS = {**dict.fromkeys("bhilq", "i"), **dict.fromkeys("BHILQ", "u"), **dict.fromkeys("fdg", "f"),
                 "?": "b", "c": "S"}


def _element_type(values: Any) -> tuple[str, int] | None:
    """(kind, bytes) of the elements of a numpy array, a ctypes array or number, or byref of one; None for
    anything else (raw memory: bytes, a buffer, an address)."""
    target = getattr(values, "_obj") if isinstance(values, _ByrefType) else values
    dtype = getattr(target, "dtype", None)
    if dtype is not None and hasattr(dtype, "kind"):
        return dtype.kind, dtype.itemsize
    ctype = target._type_ if isinstance(target, ctypes.Array) else type(target)
    code = getattr(ctype, "_type_", None)
    if isinstance(code, str) and code in _CTYPES_KINDS:
        return _CTYPES_KINDS[code], ctypes.sizeof(ctype)
    return None


def element_values(values: Any, selector: Any, element_types: dict[int, tuple[str, int, str]], index: int) -> Any:
    """``values`` as is after checking, where ``selector`` (a backend attribute type) says its elements are
    numbers of one C type (``element_types[selector]``: numpy's kind, the size in bytes, the C name): a
    numpy or ctypes array of another element type is refused, since the library would read (or write) its
    bytes as that type: float64 values given for int64 dimensions become nonsense sizes."""
    entry = element_types.get(int(selector)) if isinstance(selector, int) else None
    if entry is None or values is None:
        return values
    kind, size, name = entry
    found = _element_type(values)
    if found is not None and found != (kind, size) and not (kind == "S" and found in _CHARS):
        raise _problem(DnnArgumentError, index, f"holds {name} values for {getattr(selector, 'name', selector)}: "
                       f"pass an array of {name}, got {type_name(values)} ({found[1]}-byte "
                       f"{_KIND_NAMES.get(found[0], found[0])} elements)")
    return values


#: what a char array may also be given as: bytes as unsigned or signed 8-bit integers
_CHARS = (("u", 1), ("i", 1))

#: numpy's dtype kinds in words
_KIND_NAMES = {"i": "integer", "u": "unsigned integer", "f": "float", "b": "bool", "S": "byte", "c": "complex"}


def handle_values(values: Any, selector: Any, handle_types: dict[int, tuple[type, str]], index: int) -> Any:
    """``values`` as is after checking, where ``selector`` (a backend attribute type) says its elements are
    handles of ``handle_types[selector]`` (the type and its C name): a handle object of that type, a ctypes
    array of them or byref of either, each created and not destroyed. The library dereferences every element,
    so raw memory holding an int, a NULL or a destroyed handle would crash it."""
    entry = handle_types.get(int(selector)) if isinstance(selector, int) else None
    if entry is None or values is None:
        return values
    kind, name = entry
    target = getattr(values, "_obj") if isinstance(values, _ByrefType) else values
    if isinstance(target, kind):
        items: Any = (target,)
    elif isinstance(target, ctypes.Array) and target._type_ is kind:
        items = target
    else:
        raise _problem(DnnArgumentError, index, f"holds {name} values here: pass a {name} (a ctypes array of them, "
                       f"or byref of either), got {type_name(values)}")
    for i, item in enumerate(items):
        problem = "is NULL" if is_null(item) else "was destroyed" if _address(item) in _freed else ""
        if problem:
            raise _problem(DnnArgumentError, index, f"element [{i}] {problem}; every element must be a created {name}")
    return values
