"""The generated MIOpen module as this backend uses it: data types, scaling factors, handles.

Scaling factors. MIOpen runs only alpha = 1, beta = 0 for 2-d convolution, activation, pooling and
batch norm, and reads them through a ``float*`` everywhere except convolution, which reads a
``double*`` for double data (MIOpen's ``Scalar``). :func:`scaling` gives the right pair for a call;
no other values are ever passed.

Handles. One per (thread, device), bound to CuPy's current stream (see
:class:`dnnbind.highlevel.gpu.handles.HandleRegistry`). Each :class:`Handle` also keeps what
MIOpen's Find (or immediate mode's compilation) established on it, per problem: MIOpen must have run
``miopenFindConvolution*Algorithm`` for a problem on a handle before ``miopenConvolution*`` runs it,
so that knowledge belongs to the handle and dies with it.
"""
from __future__ import annotations

from collections import OrderedDict
from ctypes import byref, c_float
from typing import Any, Hashable, cast

from dnnbind.gen import miopen as _gen
from dnnbind.highlevel.gpu.dtypes import DataTypes
from dnnbind.highlevel.gpu.handles import HandleRegistry

lib = _gen

DTYPES = DataTypes("MIOpen", {
    "float16": _gen.miopenHalf,
    "bfloat16": _gen.miopenBFloat16,
    "float32": _gen.miopenFloat,
    "float64": _gen.miopenDouble,
})

_FLOAT_ONE, _FLOAT_ZERO = c_float(1.0), c_float(0.0)


def dtype_name(code: int) -> str:
    """The dtype name of a miopenDataType_t value (one of DTYPES)."""
    for name in DTYPES.names():
        if DTYPES[name].library == code:
            return name
    raise ValueError(f"miopenDataType_t {code} is not one of dnnbind's dtypes ({', '.join(DTYPES.names())})")


def scaling(dtype: Any, convolution: bool = False) -> tuple[Any, Any]:
    """(alpha, beta) = (1, 0) as MIOpen reads them: float, or double for a convolution on double data."""
    if convolution:
        t = DTYPES[dtype]
        return t.one, t.zero
    return _FLOAT_ONE, _FLOAT_ZERO


class Handle:
    """One MIOpen handle (``ptr``, for library calls) and the problems Find has run on it."""

    __slots__ = ("ptr", "_found", "_capacity")

    def __init__(self, ptr: Any, capacity: int = 1024) -> None:
        self.ptr = ptr
        self._found: OrderedDict[Hashable, Any] = OrderedDict()
        self._capacity = capacity

    def found(self, problem: Hashable) -> Any:
        """What was recorded for ``problem`` on this handle (None: Find has not run here yet)."""
        value = self._found.get(problem)
        if value is not None:
            self._found.move_to_end(problem)
        return value

    def record(self, problem: Hashable, value: Any) -> None:
        """Remember ``value`` for ``problem``; the least recently used entries go beyond the capacity
        (a forgotten problem only means Find runs again)."""
        self._found[problem] = value
        self._found.move_to_end(problem)
        while len(self._found) > self._capacity:
            self._found.popitem(last=False)

    def __len__(self) -> int:
        return len(self._found)


def _create() -> Handle:
    ptr = _gen.miopenHandle_t()
    _gen.miopenCreate(byref(ptr))
    return Handle(ptr)


def _destroy(handle: Handle) -> None:
    _gen.miopenDestroy(handle.ptr)


def _set_stream(handle: Handle, stream: int) -> None:
    _gen.miopenSetStream(handle.ptr, cast(Any, stream or None))   # an address; 0: the null stream


HANDLES = HandleRegistry(_create, _destroy, _set_stream)


def handle(device: int, stream: int) -> Handle:
    """This thread's MIOpen handle for ``device`` (which must be current), bound to ``stream``."""
    return HANDLES.get(device, stream)
