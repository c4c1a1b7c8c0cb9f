"""Choosing cuDNN convolution algorithms: heuristics, benchmarking, determinism, math types.

The three directions (forward, backward data, backward filter) have the same call shapes in cuDNN's
API, with two inputs ``a``, ``b`` and an output::

    forward          a = x, b = w,  out = y
    backward data    a = w, b = dy, out = dx
    backward filter  a = x, b = dy, out = dw

so one :class:`Direction` table drives all of them. Choosing yields an ordered list of candidates
``(algo, math type)``; each call takes the first candidate whose workspace (asked for again on every
call) fits the limit and the memory pool.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from dnnbind.highlevel.cudnn._lib import lib
from dnnbind.highlevel.gpu.dtypes import DataType
from dnnbind.highlevel.gpu.workspace import allocate, is_out_of_memory

FORWARD, BACKWARD_DATA, BACKWARD_FILTER = "forward", "backward_data", "backward_filter"
DIRECTIONS = (FORWARD, BACKWARD_DATA, BACKWARD_FILTER)

# cudnnMathType_t and cudnnDeterminism_t values (the header's, read from the generated module below)
Candidate = tuple[int, int]   # (algorithm, cudnnMathType_t)


@dataclass(frozen=True)
class Direction:
    """The cuDNN functions of one convolution direction."""

    name: str
    perf: Any                   # cudnnConvolution*AlgoPerf_t (a ctypes Structure)
    max_count: Callable[..., Any]
    heuristic: Callable[..., Any]
    find: Callable[..., Any]
    workspace: Callable[..., Any]
    run: Callable[..., Any]
    algo_count: int             # CUDNN_CONVOLUTION_*_ALGO_COUNT


_TABLE: dict[str, Direction] = {}
_TABLE_LOCK = threading.Lock()


def direction(name: str) -> Direction:
    """The :class:`Direction` for FORWARD, BACKWARD_DATA or BACKWARD_FILTER.

    The table is built once, completely, under a lock, before any thread reads it.
    """
    found = _TABLE.get(name)
    if found is not None:
        return found
    with _TABLE_LOCK:
        if not _TABLE:
            _TABLE.update(_build_table())
    return _TABLE[name]


def _build_table() -> dict[str, Direction]:
    c = lib()
    table: dict[str, Direction] = {}
    table[FORWARD] = Direction(
        FORWARD, c.cudnnConvolutionFwdAlgoPerf_t, c.cudnnGetConvolutionForwardAlgorithmMaxCount,
        c.cudnnGetConvolutionForwardAlgorithm_v7, c.cudnnFindConvolutionForwardAlgorithmEx,
        c.cudnnGetConvolutionForwardWorkspaceSize, c.cudnnConvolutionForward,
        int(c.CUDNN_CONVOLUTION_FWD_ALGO_COUNT))
    table[BACKWARD_DATA] = Direction(
        BACKWARD_DATA, c.cudnnConvolutionBwdDataAlgoPerf_t, c.cudnnGetConvolutionBackwardDataAlgorithmMaxCount,
        c.cudnnGetConvolutionBackwardDataAlgorithm_v7, c.cudnnFindConvolutionBackwardDataAlgorithmEx,
        c.cudnnGetConvolutionBackwardDataWorkspaceSize, c.cudnnConvolutionBackwardData,
        int(c.CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT))
    table[BACKWARD_FILTER] = Direction(
        BACKWARD_FILTER, c.cudnnConvolutionBwdFilterAlgoPerf_t,
        c.cudnnGetConvolutionBackwardFilterAlgorithmMaxCount, c.cudnnGetConvolutionBackwardFilterAlgorithm_v7,
        c.cudnnFindConvolutionBackwardFilterAlgorithmEx, c.cudnnGetConvolutionBackwardFilterWorkspaceSize,
        c.cudnnConvolutionBackwardFilter, int(c.CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT))
    return table


_MATH: dict[tuple[str, bool], tuple[int, frozenset[int]]] = {}


def math_types(dtype: DataType, allow_tf32: bool) -> tuple[int, frozenset[int]]:
    """(math type to request, math types an algorithm may use) for data of ``dtype``.

    float32 stays in full precision (CUDNN_FMA_MATH: cuDNN's default math would allow TF32 tensor cores)
    unless the user allows TF32; half-precision data may use tensor cores with float32 accumulation;
    float64 has no tensor-core math.
    """
    key = (dtype.name, allow_tf32)
    found = _MATH.get(key)
    if found is None:
        found = _MATH[key] = _math_types(dtype, allow_tf32)
    return found


def _math_types(dtype: DataType, allow_tf32: bool) -> tuple[int, frozenset[int]]:
    c = lib()
    fma, default, tensor = int(c.CUDNN_FMA_MATH), int(c.CUDNN_DEFAULT_MATH), int(c.CUDNN_TENSOR_OP_MATH)
    if dtype.name == "float64":
        return default, frozenset({default, fma})
    if dtype.name == "float32" and not allow_tf32:
        return fma, frozenset({fma})
    return tensor, frozenset({tensor, default, fma})


def usable(perfs: Sequence[Any], count: int, *, deterministic: bool, allowed_math: frozenset[int],
           workspace_limit: int) -> list[Candidate]:
    """The candidates among cuDNN's perf results (in cuDNN's order): succeeded, allowed math type,
    deterministic when asked, workspace within the limit; each (algo, math) once."""
    c = lib()
    out: list[Candidate] = []
    for perf in list(perfs)[:count]:
        if perf.status != c.CUDNN_STATUS_SUCCESS or perf.mathType not in allowed_math:
            continue
        if deterministic and perf.determinism != c.CUDNN_DETERMINISTIC:
            continue
        if perf.memory > workspace_limit:
            continue
        candidate = (int(perf.algo), int(perf.mathType))
        if candidate not in out:
            out.append(candidate)
    return out


def _perf_array(d: Direction, handle: Any) -> Any:
    count = ctypes.c_int()
    d.max_count(handle, ctypes.byref(count))
    return (d.perf * max(count.value, d.algo_count))()


def heuristic(d: Direction, handle: Any, a_desc: Any, b_desc: Any, conv_desc: Any,
              out_desc: Any) -> tuple[Any, int]:
    """cuDNN's ranking (cudnnGetConvolution*Algorithm_v7): (perf results, count); no data needed."""
    perfs = _perf_array(d, handle)
    returned = ctypes.c_int()
    d.heuristic(handle, a_desc, b_desc, conv_desc, out_desc, len(perfs), ctypes.byref(returned), perfs)
    return perfs, returned.value


def benchmark(d: Direction, handle: Any, a_desc: Any, a: int, b_desc: Any, b: int, conv_desc: Any,
              out_desc: Any, out: int, workspace_limit: int) -> tuple[Any, int]:
    """Time every algorithm on the data (cudnnFindConvolution*AlgorithmEx); writes ``out``.

    The scratch memory offered is the most any algorithm asks for, within the limit, halved while the
    memory pool cannot provide it.
    """
    perfs = _perf_array(d, handle)
    wanted = 0
    size = ctypes.c_size_t()
    for algo in range(d.algo_count):
        try:
            d.workspace(handle, a_desc, b_desc, conv_desc, out_desc, algo, ctypes.byref(size))
        except Exception:       # an algorithm that does not support this problem
            continue
        if size.value <= workspace_limit:
            wanted = max(wanted, size.value)
    while True:
        try:
            memory = allocate(wanted)
            break
        except Exception as exc:
            if not is_out_of_memory(exc) or wanted == 0:
                raise
            wanted //= 2
    returned = ctypes.c_int()
    d.find(handle, a_desc, a, b_desc, b, conv_desc, out_desc, out, len(perfs), ctypes.byref(returned), perfs,
           0 if memory is None else memory.ptr, wanted)
    del memory
    return perfs, returned.value
