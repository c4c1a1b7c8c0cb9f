"""Library failures inside an op, re-raised with what the op was doing.

A generated function raises e.g. :class:`dnnbind.CudnnError` naming the C function, the status and
the library's last-error text. Inside an op that is not enough to find the call that failed, so
:class:`op_errors` re-raises the same exception class with the op, the arrays' shapes and dtypes and
the op's parameters added::

    cudnnConvolutionForward failed: CUDNN_STATUS_BAD_PARAM (2000): <cuDNN's message>
      in conv(x: float32 (8, 64, 56, 56) NHWC, w: float32 (128, 64, 3, 3)); stride=(1, 1), ...
"""
from __future__ import annotations

from typing import Any, Mapping

from dnnbind.runtime.errors import LibraryError


def describe_array(a: Any) -> str:
    """'float32 (8, 64, 56, 56)', or the type name for something that is not an array."""
    shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
    if shape is None or dtype is None:
        return type(a).__name__
    return f"{getattr(dtype, 'name', dtype)} {tuple(shape)}"


def describe_call(op: str, arrays: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    args = ", ".join(f"{name}: {describe_array(a)}" for name, a in arrays.items() if a is not None)
    extra = "; " + ", ".join(f"{k}={v!r}" for k, v in params.items()) if params else ""
    return f"{op}({args}){extra}"


def with_context(exc: LibraryError, context: str) -> LibraryError:
    """A copy of ``exc`` (same class, status and function) whose message ends with ``context``."""
    message = f"{exc.message}\n  in {context}" if exc.message else f"\n  in {context}"
    new = type(exc)(exc.status, exc.function, message)
    new.context = context  # type: ignore[attr-defined]
    return new


class op_errors:
    """Context manager: a :class:`LibraryError` raised inside is re-raised with the op's description.

    ``params`` may be a callable returning the mapping, so that describing costs nothing until needed.
    """

    __slots__ = ("op", "arrays", "params")

    def __init__(self, op: str, arrays: Mapping[str, Any], params: Any = None) -> None:
        self.op = op
        self.arrays = arrays
        self.params = params

    def __enter__(self) -> "op_errors":
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if isinstance(exc, LibraryError) and not hasattr(exc, "context"):
            params = self.params() if callable(self.params) else (self.params or {})
            raise with_context(exc, describe_call(self.op, self.arrays, params)) from None
