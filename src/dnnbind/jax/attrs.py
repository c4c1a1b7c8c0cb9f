"""An op's static keyword arguments as typed XLA FFI attributes, and back.

The public op's keyword arguments (stride, padding, mode, eps ...) travel as attributes of the FFI call,
typed: bool as PRED, int as int64, float as float64, str as a string, a (nested) sequence of ints as an
int64 array with its shape beside it (``NAME__shape``). None is left out: the handler then takes the
keyword's default, which is None for every keyword that accepts None. The arrays' nesting (rnn's weights,
optional arrays left out) travels as ``__tree``: the arguments with 1 for an array and None for a missing
one, as Python writes them, read back with :func:`ast.literal_eval`.
"""
from __future__ import annotations

import ast
import numbers
from typing import Any, Sequence

import numpy as np

SHAPE = "__shape"
TREE = "__tree"


#: the range of an int64 attribute
_LOW, _HIGH = -2**63, 2**63 - 1


def _int64(name: str, value: Any, number: int) -> np.int64:
    if not _LOW <= number <= _HIGH:
        raise ValueError(f"{name}={value!r} does not fit in 64 bits")
    return np.int64(number)


def _ints(name: str, value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == object and all(isinstance(v, numbers.Integral) for v in array.reshape(-1)):
        for v in array.reshape(-1):                   # (Python ints beyond 64 bits)
            _int64(name, value, int(v))
    if array.dtype == object or (array.size and array.dtype.kind not in "iub"):
        raise TypeError(f"{name}={value!r} must be an int, float, bool, str, None or a (nested) sequence of ints")
    if array.dtype.kind == "u" and array.size and int(array.max()) > _HIGH:
        _int64(name, value, int(array.max()))
    return array.astype(np.int64)


def _pairs_throughout(value: Sequence[Any]) -> Sequence[Any]:
    """A per-dimension argument mixing ints and (low, high) pairs (``padding=[1, (0, 2)]``, which the
    public op takes) with each int v as the pair (v, v): one rectangular array, as the handlers read it."""
    pairs = [isinstance(v, (tuple, list)) for v in value]
    if any(pairs) and not all(pairs):
        return [v if pair else (v, v) for v, pair in zip(value, pairs)]
    return value


def encode(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The FFI attributes of these keyword arguments (TypeError naming one that cannot travel)."""
    out: dict[str, Any] = {}
    for name, value in kwargs.items():
        if value is None:
            continue
        if isinstance(value, (bool, np.bool_)):
            out[name] = np.bool_(value)
        elif isinstance(value, numbers.Integral):
            out[name] = _int64(name, value, int(value))
        elif isinstance(value, numbers.Real):
            out[name] = np.float64(value)
        elif isinstance(value, str):
            out[name] = value
        elif isinstance(value, (tuple, list)):
            array = _ints(name, _pairs_throughout(value))
            out[name] = array.reshape(-1)
            out[name + SHAPE] = np.asarray(array.shape, np.int64)
        else:
            raise TypeError(f"{name}={value!r} must be an int, float, bool, str, None or a (nested) sequence of ints")
    return out


def is_node(value: Any) -> bool:
    """Whether ``value`` nests arrays (a list or tuple; an ArraySpec, a named tuple, is one array)."""
    return isinstance(value, (list, tuple)) and not hasattr(value, "_fields")


def _nested(value: Any) -> Any:
    return tuple(_nested(v) for v in value) if isinstance(value, list) else value


def decode(attrs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments :func:`encode` made these attributes of (sequences come back as tuples)."""
    out: dict[str, Any] = {}
    for name, value in attrs.items():
        if name.endswith(SHAPE) or name == TREE:
            continue
        if isinstance(value, np.ndarray):
            value = _nested(value.reshape(tuple(attrs[name + SHAPE])).tolist())
        out[name] = value
    return out


def tree(arrays: Sequence[Any]) -> str:
    """The ``__tree`` attribute of the op's array arguments (any array: 1, None: None)."""
    def mark(value: Any) -> Any:
        if is_node(value):
            return type(value)(mark(v) for v in value)
        return None if value is None else 1
    return repr(tuple(mark(a) for a in arrays))


def fill(structure: str, leaves: Sequence[Any]) -> list[Any]:
    """The array arguments again: ``structure`` (from :func:`tree`) with its 1s replaced by ``leaves`` in order."""
    it = iter(leaves)

    def put(value: Any) -> Any:
        if is_node(value):
            return type(value)(put(v) for v in value)
        return None if value is None else next(it)
    return list(put(ast.literal_eval(structure)))


def leaves(arrays: Sequence[Any]) -> list[Any]:
    """The arrays among the arguments, depth first (what the FFI call takes as its buffers)."""
    out: list[Any] = []
    for a in arrays:
        if is_node(a):
            out += leaves(a)
        elif a is not None:
            out.append(a)
    return out
