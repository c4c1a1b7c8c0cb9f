"""dnnbind's own C kernels (``csrc/``), for the problems numpy can only run at memory speed.

They are compiled when dnnbind is installed, into the extension file ``_kernels`` next to this module
(on x86-64 with GCC each kernel three times: for AVX-512, for AVX2 with FMA and for any x86-64; the
library says which of them this CPU runs, :func:`isa`), and loaded here with ctypes, which releases the GIL for the length of a call, so the shared
pool (:mod:`_threads`) can run them on every core. The build is optional: without a compiler the
install goes on, :func:`available` is False and the reference backend runs its numpy paths, which
compute the same sums. ``DNNBIND_NATIVE=0`` turns the kernels off (to compare the two).

The kernels trust their arguments, so every array is checked here against the problem (dtype,
C order, shape) before its address reaches C.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import os
from pathlib import Path
from typing import Any

import numpy as np

from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.reference._threads import run, split, workers

_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
#: dnnbind_isa()'s answers (csrc/dispatch.h) and the suffixes of the kernels compiled for them
_ISA_SUFFIX = {0: "base", 3: "v3", 4: "v4"}
_Triple = ctypes.c_int64 * 3


class Geometry(ctypes.Structure):
    """A convolution's geometry as the kernels read it (csrc/depthwise.c: ``geometry``); spatial ranks
    below 3 have leading dims of size 1."""
    _fields_ = [("in_", _Triple), ("out", _Triple), ("kernel", _Triple), ("stride", _Triple),
                ("dilation", _Triple), ("pad", _Triple), ("channels", ctypes.c_int64)]


def library_path(directory: str | Path = Path(__file__).resolve().parent) -> str | None:
    """Where the kernels' library lies (the extension file ``_kernels`` in ``directory``), or None.
    Found as the import system would find it, without importing it (it is no Python module)."""
    spec = importlib.machinery.PathFinder.find_spec("_kernels", [str(directory)])
    return spec.origin if spec is not None else None


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The kernels' library, or None (not built, or turned off by DNNBIND_NATIVE=0)."""
    if os.environ.get("DNNBIND_NATIVE", "").strip() == "0":
        return None
    path = library_path()
    if path is None:
        return None
    lib = ctypes.CDLL(path)
    lib.dnnbind_isa.restype, lib.dnnbind_isa.argtypes = ctypes.c_int, []
    lib.dnnbind_isa_name.restype, lib.dnnbind_isa_name.argtypes = ctypes.c_char_p, []
    return lib


def isa() -> str | None:
    """The instruction set whose kernels run here, or None without the kernels."""
    lib = library()
    return None if lib is None else lib.dnnbind_isa_name().decode()


def supported_isas() -> list[str]:
    """Suffixes of the instruction sets this CPU runs and the library has, best first (tests run each)."""
    lib = library()
    if lib is None:
        return []
    best = lib.dnnbind_isa()
    return [suffix for level, suffix in sorted(_ISA_SUFFIX.items(), reverse=True)
            if level <= best and hasattr(lib, f"dnnbind_depthwise_forward_f32_{suffix}")]


def _kernel(name: str, dtype: np.dtype) -> Any:
    """The kernel ``dnnbind_<name>`` for ``dtype``, compiled for this CPU's best instruction set."""
    return _typed_kernel(name, dtype, supported_isas()[0])


@functools.lru_cache(maxsize=None)
def _typed_kernel(name: str, dtype: np.dtype, suffix: str) -> Any:
    lib = library()
    assert lib is not None
    fn = getattr(lib, f"dnnbind_{name}_{_SUFFIX[dtype]}_{suffix}")
    pointer, index = ctypes.c_void_p, ctypes.c_int64
    extra = [index] * (3 if name.endswith("filter_grad") else 2)
    fn.restype, fn.argtypes = ctypes.c_int, [pointer, pointer, pointer, ctypes.POINTER(Geometry)] + extra
    return fn


def available(dtype: Any) -> bool:
    """Whether the kernels are there for arrays of ``dtype`` (float32 and float64)."""
    return np.dtype(dtype) in _SUFFIX and library() is not None


@functools.lru_cache(maxsize=256)
def geometry(dims: ConvDims) -> Geometry:
    """``dims`` (1 to 3 spatial dims, as ConvDims allows) as the kernels' geometry."""
    lead = 3 - dims.spatial_rank

    def triple(values: tuple[int, ...], fill: int) -> Any:
        return _Triple(*((fill,) * lead + tuple(values)))

    return Geometry(triple(dims.x_shape[2:], 1), triple(dims.out_size, 1), triple(dims.kernel_size, 1),
                    triple(dims.stride, 1), triple(dims.dilation, 1), triple(dims.pad_low, 0),
                    dims.in_channels)


def _address(a: np.ndarray, name: str, shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The address of ``a`` after checking it is what the kernel will read or write: C-ordered, of
    ``dtype`` and ``shape``."""
    if a.dtype != dtype or a.shape != tuple(shape) or not a.flags.c_contiguous:
        raise ValueError(f"native kernel argument {name}: expected a C-contiguous {dtype} array of shape "
                         f"{tuple(shape)}, got {a.dtype} {a.shape} (contiguous: {a.flags.c_contiguous})")
    return a.ctypes.data


def _call(fn: Any, *args: Any) -> None:
    if fn(*args) != 0:
        raise MemoryError(f"{fn.__name__}: could not allocate its working buffer")


def _parts(count: int, threaded: bool) -> list[tuple[int, int]]:
    return split(count, workers()) if threaded else [(0, count)]


def depthwise_forward(x: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
    """y of a depthwise convolution (groups == in == out channels); planes split over the pool."""
    dtype = x.dtype
    y = np.empty(dims.y_shape, dtype)
    args = (_address(x, "x", dims.x_shape, dtype), _address(w, "w", dims.w_shape, dtype),
            _address(y, "y", dims.y_shape, dtype), ctypes.byref(geometry(dims)))
    fn = _kernel("depthwise_forward", dtype)
    run(lambda p0, p1: _call(fn, *args, p0, p1), _parts(dims.batch * dims.in_channels, threaded))
    return y


def depthwise_data_grad(dy: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
    """dx of a depthwise convolution for output gradient ``dy``."""
    dtype = dy.dtype
    dx = np.empty(dims.x_shape, dtype)
    args = (_address(dy, "dy", dims.y_shape, dtype), _address(w, "w", dims.w_shape, dtype),
            _address(dx, "dx", dims.x_shape, dtype), ctypes.byref(geometry(dims)))
    fn = _kernel("depthwise_data_grad", dtype)
    run(lambda p0, p1: _call(fn, *args, p0, p1), _parts(dims.batch * dims.in_channels, threaded))
    return dx


def depthwise_filter_grad(dy: np.ndarray, x: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
    """dw of a depthwise convolution, summed over the batch; channels split over the pool."""
    dtype = dy.dtype
    dw = np.empty(dims.w_shape, dtype)
    args = (_address(dy, "dy", dims.y_shape, dtype), _address(x, "x", dims.x_shape, dtype),
            _address(dw, "dw", dims.w_shape, dtype), ctypes.byref(geometry(dims)), dims.batch)
    fn = _kernel("depthwise_filter_grad", dtype)
    run(lambda c0, c1: _call(fn, *args, c0, c1), _parts(dims.in_channels, threaded))
    return dw
