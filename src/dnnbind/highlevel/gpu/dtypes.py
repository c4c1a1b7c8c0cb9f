"""Array dtypes -> a library's data types, compute types and scaling factors.

Half-precision data (float16, bfloat16) are stored as such but accumulated in float32, as the
reference backend does; float64 is computed in float64. The libraries read their alpha/beta scaling
factors as double for double data and as float otherwise, and keep batch-norm parameters and
statistics in float32 for half-precision data.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

_HALF = ("float16", "bfloat16")


@dataclass(frozen=True)
class DataType:
    """One dtype as a library sees it."""

    name: str            # numpy/CuPy dtype name
    library: int         # the library's data-type enum value for the data
    compute: int         # the data type it accumulates in
    param: str           # dtype of per-channel parameters and statistics (batch norm)
    one: Any             # ctypes scaling factors 1 and 0 of the right C type
    zero: Any

    @property
    def half(self) -> bool:
        return self.name in _HALF


class DataTypes:
    """The dtypes one library supports: ``table[dtype]`` -> :class:`DataType`."""

    def __init__(self, library: str, codes: Mapping[str, int]) -> None:
        """``codes``: dtype name -> the library's data-type value (float32 must be present)."""
        self.library = library
        self._types: dict[str, DataType] = {}
        for name, code in codes.items():
            double = name == "float64"
            scale = ctypes.c_double if double else ctypes.c_float
            self._types[name] = DataType(name, code, code if double else codes["float32"],
                                         "float64" if double else "float32", scale(1.0), scale(0.0))

    def __getitem__(self, dtype: Any) -> DataType:
        found = self._types.get(dtype) if isinstance(dtype, str) else None    # the hot path: dims.dtype
        if found is not None:
            return found
        name = dtype_name(dtype)
        try:
            return self._types[name]
        except KeyError:
            raise TypeError(f"the {self.library} backend has no data type for {name}; it supports "
                            f"{', '.join(self._types)}") from None

    def __contains__(self, dtype: Any) -> bool:
        return dtype_name(dtype) in self._types

    def names(self) -> tuple[str, ...]:
        return tuple(self._types)


def dtype_name(dtype: Any) -> str:
    """"float32" for np.float32, np.dtype("float32"), "float32", a CuPy dtype; "bfloat16" and other
    names numpy does not know pass through as strings."""
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)
