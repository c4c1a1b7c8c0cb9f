"""numpy's own OpenBLAS, called directly where numpy has no function for what BLAS can do.

numpy's wheels ship OpenBLAS (``scipy-openblas``, 64-bit integers). Two things the cpu backend
needs are not in numpy's API: the thread count (:mod:`_threads`) and a GEMM that accumulates into its
output (``beta = 1``) and reads its operands with any row pitch, which lets a convolution multiply the
filter of each kernel offset by a shifted view of the padded input where it lies, with no column buffer
(:class:`~dnnbind.highlevel.cpu.conv_paths.Shifted`). Found once among the loaded libraries;
where numpy uses another BLAS, the functions here are None and callers take their numpy paths.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any, Callable

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


class OpenBLAS:
    """The library's thread-count functions and its CBLAS sgemm/dgemm (None, or absent from ``gemm``, where
    it lacks them)."""

    def __init__(self) -> None:
        self.get_threads: Callable[[], int] | None = None
        self.set_threads: Callable[[int], None] | None = None
        self.gemm: dict[np.dtype, Any] = {}
        #: whether the library's integers are 64-bit (OpenBLAS's ILP64 build, numpy's own)
        self.index64 = False
        for lib in loaded_libraries("openblas"):
            for prefix, suffix, index in (("scipy_", "64_", ctypes.c_int64), ("", "64_", ctypes.c_int64),
                                          ("scipy_", "", ctypes.c_int), ("", "", ctypes.c_int)):
                get = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
                set_ = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is None or set_ is None:
                    continue
                get.restype, set_.argtypes = ctypes.c_int, [ctypes.c_int]
                self.get_threads, self.set_threads = get, set_
                self.index64 = index is ctypes.c_int64
                for dtype, name, real in ((np.float32, "sgemm", ctypes.c_float), (np.float64, "dgemm", ctypes.c_double)):
                    fn = getattr(lib, f"{prefix}cblas_{name}{suffix}", None)
                    if fn is not None:
                        fn.restype = None
                        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, index, index, index, real,
                                       ctypes.c_void_p, index, ctypes.c_void_p, index, real, ctypes.c_void_p, index]
                        self.gemm[np.dtype(dtype)] = fn
                return


def loaded_libraries(name: str) -> list[ctypes.CDLL]:
    """The shared libraries already loaded into this process whose path names ``name`` (lower case):
    numpy's OpenBLAS, PyTorch's libgomp. Linux only (/proc/self/maps); elsewhere none."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if name in line.lower() and "/" in line})
    except OSError:
        return []
    libs = []
    for path in paths:
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


@functools.lru_cache(maxsize=1)
def openblas() -> OpenBLAS:
    return OpenBLAS()


def gemm_available(dtype: Any) -> bool:
    return np.dtype(dtype) in openblas().gemm


def gemm(a: np.ndarray, a_offset: int, a_pitch: int, b: np.ndarray, b_offset: int, b_pitch: int,
         c: np.ndarray, c_offset: int, c_pitch: int, m: int, n: int, k: int, *, trans_b: bool = False,
         accumulate: bool = False) -> None:
    """C[m, n] (+)= A[m, k] @ B[k, n] (or B[n, k].T with ``trans_b``), row-major, all three in ``c.dtype``.

    Each operand is given as an array, an element offset into it and a row pitch in elements: rows of a
    matrix may lie anywhere in its array as long as they are ``pitch`` apart, which the caller has
    checked against the array's size (BLAS reads raw memory). ``accumulate`` adds to C (beta = 1).
    """
    fn = openblas().gemm[c.dtype]
    b_rows, b_cols = (n, k) if trans_b else (k, n)
    for name, array, offset, pitch, rows, cols in (("a", a, a_offset, a_pitch, m, k), ("b", b, b_offset, b_pitch, b_rows,
                                                    b_cols), ("c", c, c_offset, c_pitch, m, n)):
        _check_matrix(name, array, offset, pitch, rows, cols, c.dtype)
    item = c.dtype.itemsize
    fn(_ROW_MAJOR, _NO_TRANS, _TRANS if trans_b else _NO_TRANS, m, n, k, 1.0,
       a.ctypes.data + a_offset * item, a_pitch, b.ctypes.data + b_offset * item, b_pitch,
       1.0 if accumulate else 0.0, c.ctypes.data + c_offset * item, c_pitch)


def _check_matrix(name: str, array: np.ndarray, offset: int, pitch: int, rows: int, cols: int, dtype: np.dtype) -> None:
    """That a rows x cols matrix at ``offset`` with row pitch ``pitch`` lies inside ``array``, a C-contiguous
    array of ``dtype`` (writable for the result, ``c``)."""
    if array.dtype != dtype or not array.flags.c_contiguous or (name == "c" and not array.flags.writeable):
        raise ValueError(f"gemm: {name} must be a C-contiguous {dtype} array" + (", writable" if name == "c" else ""))
    if min(rows, cols) > 0 and (offset < 0 or pitch < cols or offset + (rows - 1) * pitch + cols > array.size):
        raise ValueError(f"gemm: {name}'s {rows} x {cols} matrix at offset {offset}, pitch {pitch} runs past its "
                         f"{array.size} elements")


def operand(m: np.ndarray) -> tuple[np.ndarray, bool, int]:
    """2-D ``m`` as a row-major BLAS operand: (an array whose data pointer starts it, whether BLAS reads it
    transposed, its leading dimension in elements). ``m`` itself where its rows or its columns are
    contiguous with a pitch BLAS can take (a transposed view is read in place), else a C-ordered copy."""
    item = m.itemsize
    rows, cols = m.shape
    s0, s1 = m.strides
    if (s1 == item or cols == 1) and s0 % item == 0 and s0 // item >= max(cols, 1):
        return m, False, s0 // item
    if (s0 == item or rows == 1) and s1 % item == 0 and s1 // item >= max(rows, 1):
        return m, True, s1 // item
    copy = np.ascontiguousarray(m)
    return copy, False, max(cols, 1)
