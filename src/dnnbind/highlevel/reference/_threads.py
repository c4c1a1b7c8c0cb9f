"""One shared thread pool for work that numpy runs without the GIL (BLAS calls, large copies)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def workers() -> int:
    """Threads available to the pool: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="dnnbind")
        return _pool


def run_chunks(count: int, task: Callable[[int, int], None], threaded: bool) -> None:
    """Call ``task(start, stop)`` over ``range(count)``: once serially, or split over the pool.

    Chunks are contiguous and there is one per worker, so each thread gets one large piece of work.
    """
    parts = min(count, workers()) if threaded else 1
    if parts <= 1:
        task(0, count)
        return
    bounds = [count * i // parts for i in range(parts + 1)]
    futures = [_get_pool().submit(task, lo, hi) for lo, hi in zip(bounds, bounds[1:])]
    for future in futures:
        future.result()
