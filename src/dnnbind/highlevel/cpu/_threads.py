"""One shared thread pool for work that numpy runs without the GIL (BLAS calls, large copies)."""
from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from dnnbind.highlevel.cpu._blas import openblas

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def workers() -> int:
    """Threads available to the pool: the CPUs this process may run on, read again at most every
    :data:`WORKERS_REFRESH` seconds (an op asks a few dozen times, and the system call took about 2 us a
    time beside torch's spinning threads: 1.7% of an LSTM's forward and backward), and at once after
    :func:`forget_workers`."""
    global _workers, _workers_until
    now = time.monotonic()
    if now < _workers_until:
        return _workers
    try:
        count = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        count = max(1, os.cpu_count() or 1)
    _workers, _workers_until = count, now + WORKERS_REFRESH
    return count


#: how long :func:`workers` keeps its count (a change of the process's CPUs shows within this time)
WORKERS_REFRESH = 0.1
_workers, _workers_until = 1, float("-inf")


def forget_workers() -> None:
    """Make the next :func:`workers` read the CPUs again (after changing the process's affinity)."""
    global _workers_until
    _workers_until = float("-inf")


_BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def blas_single_threaded() -> bool:
    """Whether numpy's BLAS runs on one thread: inside :func:`one_blas_thread`, or limited through the
    usual environment variables.

    Only then do our own threads pay: a multi-threaded BLAS already keeps every core busy, and two
    callers competing for its thread pool run slower than one (see bench/bench_reference.py).
    """
    if _one_thread_depth:
        return True
    for name in _BLAS_THREAD_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return value == "1"
    return False


_one_thread_depth = 0
_saved_threads = 0


class _OneBlasThread:
    """The context manager :func:`one_blas_thread` returns (a class: entered on every adapter call, where
    a generator-based one costs more than the bookkeeping it wraps)."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _one_thread_depth, _saved_threads
        blas = openblas()
        with _lock:
            if _one_thread_depth == 0 and blas.set_threads is not None and blas.get_threads is not None:
                _saved_threads = blas.get_threads()
                if _saved_threads != 1:
                    blas.set_threads(1)
            _one_thread_depth += 1

    def __exit__(self, *exc: object) -> None:
        global _one_thread_depth
        blas = openblas()
        with _lock:
            _one_thread_depth -= 1
            if _one_thread_depth == 0 and blas.set_threads is not None and _saved_threads not in (0, 1):
                blas.set_threads(_saved_threads)


_ONE_BLAS_THREAD = _OneBlasThread()


def one_blas_thread() -> contextlib.AbstractContextManager[None]:
    """Run numpy's BLAS (OpenBLAS) on one thread inside the block, and let the pool split big problems.

    For hosts that own the cores with a thread pool of their own that spin-waits between its parallel
    regions (PyTorch's OpenMP threads): a multi-threaded BLAS competing with those spinning threads
    loses badly (measured in bench/bench_reference.py), while our pool's threads block instead of
    spinning. Process-wide while any thread is inside (a counter restores the setting on the last
    exit); does nothing where numpy's BLAS is not OpenBLAS.
    """
    return _ONE_BLAS_THREAD


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="dnnbind")
        return _pool


def split(count: int, parts: int) -> list[tuple[int, int]]:
    """``range(count)`` cut into ``parts`` contiguous, nearly equal (start, stop) pieces."""
    parts = max(1, min(count, parts))
    bounds = [count * i // parts for i in range(parts + 1)]
    return list(zip(bounds, bounds[1:]))


def run(task: Callable[..., None], chunks: Sequence[tuple]) -> None:
    """Call ``task(*chunk)`` for every chunk: the first on the calling thread (which would only wait
    otherwise), the others on the pool, each in a copy of the caller's context (numpy's floating-point
    state: the backends' quiet one). Returns once every chunk is done, also when one raised (the first
    error is raised then)."""
    if len(chunks) == 1:
        task(*chunks[0])
        return
    futures = [_get_pool().submit(contextvars.copy_context().run, task, *chunk) for chunk in chunks[1:]]
    try:
        task(*chunks[0])
    finally:
        errors = [future.exception() for future in futures]     # waits for each
    for error in errors:
        if error is not None:
            raise error
