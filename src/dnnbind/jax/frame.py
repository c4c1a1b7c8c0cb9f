"""Reading an XLA FFI call frame with the generated bindings (:mod:`dnnbind.gen.xla_ffi`).

A handler is a C function pointer XLA calls with an ``XLA_FFI_CallFrame*``. This module turns one into
what Python needs: the buffers (address, shape, dtype), the attributes by name, typed, and the API table
to create errors with; and it answers XLA's metadata query (the FFI API version the handler speaks),
which XLA sends before the first real call. Nothing here knows any op.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, NamedTuple

import numpy as np

from dnnbind.gen import xla_ffi as X
from dnnbind.highlevel.dims.checks import numpy_dtype

#: XLA_FFI_DataType -> numpy dtype name, for the types dnnbind's arrays and attributes use
_DTYPES: dict[int, str] = {
    X.XLA_FFI_DataType_PRED: "bool", X.XLA_FFI_DataType_S8: "int8", X.XLA_FFI_DataType_S16: "int16",
    X.XLA_FFI_DataType_S32: "int32", X.XLA_FFI_DataType_S64: "int64", X.XLA_FFI_DataType_U8: "uint8",
    X.XLA_FFI_DataType_U16: "uint16", X.XLA_FFI_DataType_U32: "uint32", X.XLA_FFI_DataType_U64: "uint64",
    X.XLA_FFI_DataType_F16: "float16", X.XLA_FFI_DataType_F32: "float32", X.XLA_FFI_DataType_F64: "float64",
    X.XLA_FFI_DataType_BF16: "bfloat16"}


def dtype_of(code: int) -> np.dtype:
    """The numpy dtype of an XLA_FFI_DataType; TypeError for the ones dnnbind has no use for."""
    name = _DTYPES.get(code)
    if name is None:
        raise TypeError(f"XLA FFI data type {X.XLA_FFI_DataType(code).name} has no dnnbind array type")
    return numpy_dtype(name)


class Buffer(NamedTuple):
    """One argument or result buffer: its address (host or device memory), shape and dtype."""
    address: int
    shape: tuple[int, ...]
    dtype: np.dtype


def host_view(buffer: Buffer, writable: bool) -> np.ndarray:
    """A numpy array over a host buffer's memory, no copy (read-only unless ``writable``)."""
    count = int(np.prod(buffer.shape, dtype=np.int64))
    if count == 0 or not buffer.address:
        return np.empty(buffer.shape, buffer.dtype)          # empty work: XLA may give no memory at all
    raw = (ctypes.c_char * (count * buffer.dtype.itemsize)).from_address(buffer.address)
    array = np.frombuffer(memoryview(raw), buffer.dtype).reshape(buffer.shape)
    array.flags.writeable = writable
    return array


def _buffers(count: int, pointers: Any) -> list[Buffer]:
    out = []
    for i in range(count):
        b = ctypes.cast(pointers[i], ctypes.POINTER(X.XLA_FFI_Buffer)).contents
        out.append(Buffer(b.data or 0, tuple(b.dims[j] for j in range(b.rank)), dtype_of(b.dtype)))
    return out


def _attribute(kind: int, pointer: int) -> Any:
    if kind == X.XLA_FFI_AttrType_STRING:
        span = ctypes.cast(pointer, ctypes.POINTER(X.XLA_FFI_ByteSpan)).contents
        return ctypes.string_at(span.ptr, span.len).decode()
    if kind == X.XLA_FFI_AttrType_SCALAR:
        scalar = ctypes.cast(pointer, ctypes.POINTER(X.XLA_FFI_Scalar)).contents
        dtype = dtype_of(scalar.dtype)
        return np.frombuffer(ctypes.string_at(scalar.value, dtype.itemsize), dtype)[0].item()
    if kind == X.XLA_FFI_AttrType_ARRAY:
        array = ctypes.cast(pointer, ctypes.POINTER(X.XLA_FFI_Array)).contents
        dtype = dtype_of(array.dtype)
        return np.frombuffer(ctypes.string_at(array.data, dtype.itemsize * array.size), dtype).copy()
    raise TypeError(f"XLA FFI attribute type {X.XLA_FFI_AttrType(kind).name} is not one dnnbind sends")


class Frame(NamedTuple):
    """What a handler reads from one call frame."""
    api: Any                      # the XLA_FFI_Api table (its function pointers)
    context: int                  # XLA_FFI_ExecutionContext* (the CUDA stream is asked through it)
    args: list[Buffer]
    rets: list[Buffer]
    attrs: dict[str, Any]


def read(pointer: Any) -> Frame:
    """The buffers and attributes of a call frame (an ``XLA_FFI_CallFrame*``)."""
    f = pointer.contents
    attrs = f.attrs
    names = [attrs.names[i].contents for i in range(attrs.size)]
    context = ctypes.cast(f.ctx, ctypes.c_void_p).value or 0
    return Frame(f.api.contents, context, _buffers(f.args.size, f.args.args), _buffers(f.rets.size, f.rets.rets),
                 {ctypes.string_at(n.ptr, n.len).decode(): _attribute(attrs.types[i], attrs.attrs[i])
                  for i, n in enumerate(names)})


def answer_metadata(pointer: Any) -> bool:
    """Whether this call is XLA's metadata query (sent before the first real call); if so, the API version
    the handler was built for is written into it."""
    extension = pointer.contents.extension_start
    while extension:
        base = extension.contents
        if base.type == X.XLA_FFI_Extension_Metadata:
            meta = ctypes.cast(extension, ctypes.POINTER(X.XLA_FFI_Metadata_Extension)).contents.metadata.contents
            meta.api_version.major_version = X.XLA_FFI_API_MAJOR
            meta.api_version.minor_version = X.XLA_FFI_API_MINOR
            meta.traits = 0
            return True
        extension = base.next
    return False


def error(api: Any, message: str, code: int = X.XLA_FFI_Error_Code_INVALID_ARGUMENT) -> int:
    """An XLA_FFI_Error* made by the API's own error function: XLA raises it in Python with ``message``."""
    args = X.XLA_FFI_Error_Create_Args(X.XLA_FFI_Error_Create_Args_STRUCT_SIZE, None, message.encode(), code)
    return api.XLA_FFI_Error_Create(ctypes.byref(args)) or 0


def version_problem(api: Any) -> str | None:
    """Why the calling XLA's FFI API cannot run this handler (another version than the bindings were
    generated for: structs may change between minor versions), or None."""
    v = api.api_version
    ours = (X.XLA_FFI_API_MAJOR, X.XLA_FFI_API_MINOR)
    if (v.major_version, v.minor_version) != ours:
        return (f"XLA's FFI API is {v.major_version}.{v.minor_version}; dnnbind.jax was generated for "
                f"{ours[0]}.{ours[1]} (jaxlib {X.SOURCES['jaxlib']})")
    return None


def handler(body: Callable[[Frame], None]) -> Any:
    """An ``XLA_FFI_Handler`` (a CFUNCTYPE) that answers the metadata query and runs ``body`` on each call's
    frame; an exception becomes an XLA error carrying its message (ValueError/TypeError: INVALID_ARGUMENT),
    a KeyboardInterrupt (Ctrl-C while the op runs) a CANCELLED one: whatever escaped the callback would
    leave XLA reading an unset result as an error and abort the process. Keep the returned object alive
    as long as XLA may call it."""
    def call(pointer: Any) -> int | None:
        api = None
        try:
            if answer_metadata(pointer):
                return None
            api = pointer.contents.api.contents
            problem = version_problem(api)
            if problem:
                return error(api, problem, X.XLA_FFI_Error_Code_FAILED_PRECONDITION)
            body(read(pointer))
            return None
        except BaseException as exc:             # noqa: BLE001 -- every error goes back to XLA, as XLA's
            if api is None:
                raise
            code = (X.XLA_FFI_Error_Code_INVALID_ARGUMENT if isinstance(exc, (ValueError, TypeError))
                    else X.XLA_FFI_Error_Code_CANCELLED if isinstance(exc, KeyboardInterrupt)
                    else X.XLA_FFI_Error_Code_INTERNAL)
            return error(api, f"{type(exc).__name__}: {exc}", code)
    return X.XLA_FFI_Handler(call)


def stream(api: Any, context: int) -> int:
    """The CUDA stream of the call (``XLA_FFI_Stream_Get``), for handlers registered on CUDA."""
    ctx = ctypes.cast(context, ctypes.POINTER(X.XLA_FFI_ExecutionContext))
    args = X.XLA_FFI_Stream_Get_Args(X.XLA_FFI_Stream_Get_Args_STRUCT_SIZE, None, ctx, None)
    failed = api.XLA_FFI_Stream_Get(ctypes.byref(args))
    if failed:
        raise RuntimeError("XLA_FFI_Stream_Get failed")
    return args.stream or 0
