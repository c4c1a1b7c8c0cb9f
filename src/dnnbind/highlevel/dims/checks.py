"""Argument checks shared by every op and backend: dtype names, scalar validators, per-dimension
arguments and array ranks. Each raises a ValueError/TypeError naming the argument and its value.

Nothing here touches array data; it sees shapes, dtypes and plain Python values only.
"""
from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np

SUPPORTED_DTYPES = ("float16", "bfloat16", "float32", "float64")

Shape = tuple[int, ...]


def check_dtype(name: str, dtype: Any) -> str:
    """Return the canonical name of a supported float dtype; TypeError naming ``name`` otherwise."""
    try:
        known = _NAMES.get(dtype)      # numpy's own float dtypes, by one lookup (dtype.name takes microseconds)
    except TypeError:                  # unhashable
        known = None
    if known is not None:
        return known
    try:
        numpy_form = np.dtype(dtype)
        canonical = numpy_form.name
    except TypeError:
        numpy_form, canonical = None, str(dtype)
    if canonical not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {canonical}; dnnbind supports float16, bfloat16, float32 and float64")
    if numpy_form is not None and not numpy_form.isnative:
        raise TypeError(f"{name} has dtype {numpy_form.str}, {canonical} in non-native byte order, which the kernels "
                        f"cannot read; convert it first, for example {name}.astype({canonical!r})")
    return canonical


#: numpy's float16, float32 and float64 dtype objects -> their names (bfloat16 goes the long way)
_NAMES: dict[Any, str] = {np.dtype(n): n for n in ("float16", "float32", "float64")}


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a supported dtype name; bfloat16's comes from ``ml_dtypes`` (numpy has none)."""
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as exc:
            raise ImportError("bfloat16 needs the ml_dtypes package: pip install ml_dtypes") from exc
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def check_same_dtype(ref_name: str, ref_dtype: Any, **others: Any) -> str:
    """Check that every array in ``others`` (None skipped) has the dtype of ``ref_name``."""
    ref = check_dtype(ref_name, ref_dtype)
    for name, array in others.items():
        if array is None:
            continue
        dtype = check_dtype(name, array.dtype)
        if dtype != ref:
            raise TypeError(f"{name} has dtype {dtype} but {ref_name} has dtype {ref}; "
                            f"convert one of them (for example {name}.astype({ref_name}.dtype))")
    return ref


def check_shape(name: str, shape: Sequence[int], expected: Sequence[int], why: str = "") -> None:
    """ValueError naming ``name`` unless ``shape == expected``."""
    if tuple(shape) != tuple(expected):
        suffix = f" ({why})" if why else ""
        raise ValueError(f"{name} has shape {tuple(shape)} but must have shape {tuple(expected)}{suffix}")


#: numpy's error for an axis out of range: a ValueError and an IndexError (torch raises IndexError there)
AxisError = getattr(getattr(np, "exceptions", np), "AxisError")


def normalize_axis(axis: Any, ndim: int, name: str = "axis") -> int:
    """Return ``axis`` as a non-negative int for an array of ``ndim`` dimensions (:data:`AxisError` when it
    is out of range)."""
    axis = check_int(name, axis)
    if not -ndim <= axis < ndim:
        raise AxisError(f"{name}={axis} is out of range for an array with {ndim} dimensions")
    return axis % ndim


def check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} must be an int, not {type(value).__name__}")
    return int(value)


def check_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={value!r} must be a real number, not {type(value).__name__}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name}={value!r} must be finite")
    return value


def check_probability(name: str, value: Any) -> float:
    """A float in [0, 1] (dropout's p; 1 is allowed and drops everything)."""
    p = check_float(name, value)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}={value!r} must be in [0, 1]")
    return p


def check_positive_float(name: str, value: Any) -> float:
    v = check_float(name, value)
    if v <= 0:
        raise ValueError(f"{name}={value!r} must be positive")
    return v


def check_non_negative_float(name: str, value: Any) -> float:
    """A finite float >= 0 (batch norm's eps in inference, layer norm's eps: 0 is allowed, as in torch)."""
    v = check_float(name, value)
    if v < 0:
        raise ValueError(f"{name}={value!r} must not be negative")
    return v


def check_real(name: str, value: Any) -> float:
    """A finite real number (activation coefficients)."""
    return check_float(name, value)


#: the largest finite number of the precision an op computes a dtype in (float32 for the 16-bit ones)
_LARGEST_COMPUTED = {"float16": 3.4028234663852886e38, "bfloat16": 3.4028234663852886e38,
                     "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}


def check_representable(name: str, value: float, dtype: str) -> float:
    """``value`` (a coefficient) if the precision ``dtype`` is computed in holds it; ValueError otherwise, as
    torch refuses a scalar that cannot be converted to the op's type without overflow."""
    if abs(value) > _LARGEST_COMPUTED[dtype]:
        precision = "float64" if dtype == "float64" else "float32"
        raise ValueError(f"{name}={value!r} does not fit in {precision}, the precision an op on {dtype} computes in")
    return value


def check_divisor_override(value: Any) -> int | None:
    """None, or a non-zero int (negative allowed): mean pooling's ``divisor_override``, checked as
    torch.nn.functional.avg_pool2d checks it (a bool or a float is a TypeError there too; 0 fails there
    with "divisor must be not zero")."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"divisor_override={value!r} must be None or a non-zero int, not {type(value).__name__}")
    if value == 0:
        raise ValueError("divisor_override=0 must be a non-zero int (None: divide by the count of elements averaged)")
    return int(value)


def per_dim(name: str, value: Any, n: int, *, minimum: int) -> Shape:
    """An int, or one int per spatial dimension, each >= minimum."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name}={value!r} must be an int or {n} ints (one per spatial dimension)")
        out = tuple(check_int(name, v) for v in value)
    else:
        out = (check_int(name, value),) * n
    if any(v < minimum for v in out):
        what = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{name}={value!r} must be {what}")
    return out


def padding_pairs(name: str, value: Any, n: int) -> tuple[Shape, Shape]:
    """An int, one int per spatial dim, or one (low, high) pair per spatial dim -> (low, high)."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name}={value!r} must be an int, {n} ints or {n} (low, high) pairs "
                             f"(one per spatial dimension)")
        low, high = [], []
        for item in value:
            if isinstance(item, (list, tuple)):
                if len(item) != 2:
                    raise ValueError(f"{name}={value!r}: each entry must be an int or a (low, high) pair")
                low.append(check_int(name, item[0]))
                high.append(check_int(name, item[1]))
            else:
                low.append(check_int(name, item))
                high.append(check_int(name, item))
        lo, hi = tuple(low), tuple(high)
    else:
        lo = hi = (check_int(name, value),) * n
    if any(v < 0 for v in lo + hi):
        raise ValueError(f"{name}={value!r} must be non-negative")
    return lo, hi


def check_array_shape(name: str, shape: Sequence[int], ranks: Sequence[int], layout: str,
                      empty_axes: Sequence[int] = (), empty_why: str = "") -> Shape:
    """The shape as ints, checked for its rank; a zero-size dimension is allowed on ``empty_axes`` only
    (the zero-size policy: where PyTorch gives an empty result, so does dnnbind, see :mod:`edges`)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) not in ranks:
        raise ValueError(f"{name} has shape {shape} ({len(shape)} dimensions) but must have "
                         f"{ranks[0]} to {ranks[-1]} dimensions {layout}")
    bad = [axis for axis, s in enumerate(shape) if s == 0 and axis not in empty_axes]
    if bad:
        allowed = f"; only {empty_why} may be 0" if empty_why else ""
        raise ValueError(f"{name} has shape {shape}: a zero-size dimension {bad[0]} is not supported{allowed}")
    return shape


def prod(values: Sequence[int]) -> int:
    """The product of ints (1 for none), as a Python int."""
    out = 1
    for v in values:
        out *= int(v)
    return out

