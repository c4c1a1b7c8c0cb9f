"""Tracing every raw library call made through the generated modules.

``with dnnbind.trace() as calls:`` (or ``DNNBIND_TRACE=1`` / ``DNNBIND_TRACE=/path/to/log`` in the
environment) logs each call: function, arguments (shapes and dtypes for arrays, names for enums,
addresses for handles), the returned status and the duration. It is there for the vague
``CUDNN_STATUS_BAD_PARAM``: the log shows exactly what reached the library.

It costs nothing when off: tracing swaps the generated modules' bound ctypes functions for wrappers
and swaps them back afterwards, so untraced calls run the very same code as before.
"""
from __future__ import annotations

import contextlib
import ctypes
import enum
import os
import re
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, TextIO

from dnnbind.runtime import loader
from dnnbind.runtime.pointers import device_address, type_name

if TYPE_CHECKING:
    from dnnbind.runtime.loader import Library

_lock = threading.RLock()
_active: list["Tracer"] = []


@dataclass
class TraceRecord:
    """One raw call: what went in, what came out, how long it took."""
    library: str
    function: str
    arguments: list[tuple[str, str]]
    result: str
    seconds: float
    error: str = ""

    def __str__(self) -> str:
        args = ", ".join(f"{name}={value}" for name, value in self.arguments)
        outcome = f"raised {self.error}" if self.error else self.result
        return f"[{self.library}] {self.function}({args}) -> {outcome} [{self.seconds * 1e6:.1f} us]"


@dataclass
class Tracer:
    """Collects records, and writes each to ``file`` (or calls ``sink``) as it happens."""
    file: TextIO | None = None
    sink: Callable[[TraceRecord], None] | None = None
    records: list[TraceRecord] = field(default_factory=list)

    def emit(self, record: TraceRecord) -> None:
        self.records.append(record)
        if self.file is not None:
            print(record, file=self.file, flush=True)
        if self.sink is not None:
            self.sink(record)


def start_from_environment() -> None:
    """DNNBIND_TRACE=1 (stderr) or =PATH (append to a file): trace from import on."""
    setting = os.environ.get("DNNBIND_TRACE", "")
    if setting and not _active:
        target = sys.stderr if setting in ("1", "stderr", "true", "yes") else open(setting, "a")
        _start(Tracer(file=target))


def active() -> bool:
    return bool(_active)


@contextlib.contextmanager
def trace(file: TextIO | None = sys.stderr, sink: Callable[[TraceRecord], None] | None = None) -> Iterator[list[TraceRecord]]:
    """Trace raw calls inside the ``with`` block; yields the list of records as they arrive.

    ``file=None`` only collects. Nested traces all receive every call.
    """
    tracer = Tracer(file=file, sink=sink)
    _start(tracer)
    try:
        yield tracer.records
    finally:
        _stop(tracer)


def _start(tracer: Tracer) -> None:
    with _lock:
        _active.append(tracer)
        if len(_active) == 1:
            loader.trace_hook = wrap
            for library in loader.LIBRARIES:
                for name in library.function_names:
                    current = library.namespace.get("_" + name)
                    if isinstance(current, ctypes.CFUNCTYPE(None).__mro__[1]):   # a bound ctypes function
                        library.namespace["_" + name] = wrap(library, name, current)


def _stop(tracer: Tracer) -> None:
    with _lock:
        _active.remove(tracer)
        if not _active:
            loader.trace_hook = None
            for library in loader.LIBRARIES:
                for name in library.function_names:
                    current = library.namespace.get("_" + name)
                    original = getattr(current, "__wrapped__", None)
                    if original is not None:
                        library.namespace["_" + name] = original


def note(library: str, event: str, detail: str) -> None:
    """Record a decision that is no raw call (the cuDNN backend leaving the graph API for the legacy
    one, and why) in every active trace; nothing when none is active."""
    if not _active:
        return
    record = TraceRecord(library, event, [("reason", detail)], "noted", 0.0)
    for tracer in list(_active):
        tracer.emit(record)


def wrap(library: "Library", name: str, fn: Any) -> Callable[..., Any]:
    """A traced stand-in for one bound ctypes function."""
    describe = _describers(library, name)
    status_enum = library.status_enum

    def traced(*args: Any) -> Any:
        start = time.perf_counter()
        error = ""
        result: Any = None
        try:
            result = fn(*args)
            return result
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            seconds = time.perf_counter() - start
            record = TraceRecord(library.title, name, describe(args), _describe_result(result, fn, status_enum),
                                 seconds, error)
            for tracer in list(_active):
                tracer.emit(record)

    traced.__wrapped__ = fn          # type: ignore[attr-defined]
    traced.__name__ = name
    return traced


#: C element types whose arrays the wrappers pass as packed bytes, and their struct letters
_PACKED = {"int": "i", "int32_t": "i", "unsigned": "I", "uint32_t": "I", "int64_t": "q", "uint64_t": "Q",
           "size_t": "N"}


def _describers(library: "Library", name: str) -> Callable[[tuple], list[tuple[str, str]]]:
    """Parameter names and enum types, read from the generated wrapper's C prototype."""
    wrapper = library.namespace.get(name)
    prototype = (getattr(wrapper, "__doc__", "") or "").splitlines()[0] if wrapper is not None else ""
    inside = prototype[prototype.find("(") + 1: prototype.rfind(")")]
    params: list[tuple[str, Any, str]] = []
    for part in filter(None, (p.strip() for p in inside.split(","))):
        if part == "void":
            continue
        words = re.findall(r"[A-Za-z_]\w*", part)
        pname = words[-1] if words else f"arg{len(params)}"
        type_words = [w for w in words[:-1] if w != "const"]
        enum_class = library.namespace.get(type_words[-1]) if type_words else None
        is_enum = isinstance(enum_class, type) and issubclass(enum_class, enum.IntEnum) and "*" not in part
        params.append((pname, enum_class if is_enum else None, type_words[-1] if type_words else ""))

    def describe(args: tuple) -> list[tuple[str, str]]:
        out = []
        for i, value in enumerate(args):
            pname, enum_class, c_type = params[i] if i < len(params) else (f"arg{i}", None, "")
            text = describe_value(value, enum_class)
            if isinstance(value, ctypes._Pointer) and c_type:       # a handle: name its C type
                text = c_type + text[text.find("@"):] if "@" in text else f"{c_type}(NULL)"
            elif type(value) is bytes and c_type in _PACKED:         # a list the wrapper packed for C
                values = list(struct.unpack(f"{len(value) // struct.calcsize(_PACKED[c_type])}{_PACKED[c_type]}",
                                            value))
                text = f"{c_type}[{len(values)}]({values[:8]}{'...' if len(values) > 8 else ''})"
            out.append((pname, text))
        return out
    return describe


def describe_value(value: Any, enum_class: Any = None) -> str:
    """A short, readable form of one argument."""
    if enum_class is not None and isinstance(value, int):
        try:
            return enum_class(value).name
        except ValueError:
            return f"{value} (not a {enum_class.__name__})"
    if value is None:
        return "NULL"
    if isinstance(value, (bool, int, float, str, bytes)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return repr(value) if len(value) <= 16 else f"{type(value).__name__}[{len(value)}]"
    address = device_address(value)
    if address is not None:
        shape = getattr(value, "shape", None)
        dtype = getattr(value, "dtype", None)
        detail = f"{dtype}{list(shape)} " if shape is not None else ""
        return f"{type_name(value)}({detail}@{address:#x})"
    if hasattr(value, "__array_interface__"):
        return f"{type_name(value)}({value.dtype}{list(value.shape)}, host)"
    if isinstance(value, ctypes._Pointer):
        target = ctypes.cast(value, ctypes.c_void_p).value
        return f"{type(value).__name__}@{target:#x}" if target else f"{type(value).__name__}(NULL)"
    if isinstance(value, ctypes._SimpleCData):
        return f"{type(value).__name__}({value.value!r})"
    obj = getattr(value, "_obj", None)                    # byref(x)
    if obj is not None:
        return f"byref({describe_value(obj)})"
    if isinstance(value, ctypes.Array):
        if value._type_ is ctypes.c_char:
            return f"char[{len(value)}]"
        return f"{value._type_.__name__}[{len(value)}]({list(value)[:8]}{'...' if len(value) > 8 else ''})"
    return type_name(value)


def _describe_result(result: Any, fn: Any, status_enum: Callable[[int], Any]) -> str:
    if isinstance(result, int) and fn.restype is ctypes.c_int:
        try:
            return status_enum(result).name
        except (ValueError, AttributeError):
            return str(result)
    return repr(result)
