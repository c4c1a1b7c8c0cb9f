"""The cpu backend's thread policy: numpy's BLAS limited to one thread inside one_blas_thread; the pool's run."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from dnnbind.highlevel.cpu import _threads
from dnnbind.highlevel.cpu._blas import openblas


class _Threads:
    """The library's thread count, read back."""

    def get(self) -> int:
        blas = openblas()
        if blas.get_threads is None:
            pytest.fail("numpy's BLAS is OpenBLAS in this project's environment (numpy wheels), but it was not found")
        return blas.get_threads()


def _blas() -> _Threads:
    return _Threads()


def test_one_blas_thread_limits_openblas_and_restores_it(monkeypatch):
    for name in _threads._BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    blas = _blas()
    before = blas.get()
    assert not _threads.blas_single_threaded() or before == 1
    with _threads.one_blas_thread():
        assert blas.get() == 1 and _threads.blas_single_threaded()
        with _threads.one_blas_thread():          # nested: still one thread, restored only at the end
            assert blas.get() == 1
        assert blas.get() == 1
        a = np.ones((64, 64))
        np.testing.assert_array_equal(a @ a, np.full((64, 64), 64.0))
    assert blas.get() == before


def test_one_blas_thread_from_several_threads_restores_once():
    blas = _blas()
    before = blas.get()
    inside, release = threading.Barrier(3), threading.Event()
    seen: list[int] = []

    def hold() -> None:
        with _threads.one_blas_thread():
            inside.wait()
            release.wait()
            seen.append(blas.get())

    workers = [threading.Thread(target=hold) for _ in range(2)]
    for t in workers:
        t.start()
    inside.wait()
    assert blas.get() == 1
    release.set()
    for t in workers:
        t.join()
    assert seen == [1, 1] and blas.get() == before


def test_run_calls_every_chunk_once_the_first_on_the_calling_thread():
    seen = []
    lock = threading.Lock()

    def task(a, b):
        with lock:
            seen.append((a, b, threading.get_ident()))

    chunks = _threads.split(10, 3)
    _threads.run(task, chunks)
    assert sorted((a, b) for a, b, _ in seen) == chunks
    assert [t for a, b, t in seen if (a, b) == chunks[0]] == [threading.get_ident()]


def test_the_pools_chunks_run_in_the_callers_context():
    """numpy's floating-point state (the backends' quiet one) reaches the chunks run on the pool: an inf
    times 0 there warns no more than on the calling thread; a context variable set by the caller is seen."""
    import contextvars
    import warnings

    from dnnbind.highlevel.reference._arrays import quiet
    marker = contextvars.ContextVar("marker", default="unset")
    seen = []

    def task(a):
        seen.append(marker.get())
        np.array([np.inf]) * 0

    def caller():
        token = marker.set("caller's")
        try:
            _threads.run(task, [(0,), (1,), (2,)])
        finally:
            marker.reset(token)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet(caller)()
    assert seen == ["caller's"] * 3


@pytest.mark.parametrize("failing", [0, 2])
def test_run_waits_for_every_chunk_and_raises_the_error(failing):
    done = []

    def task(a, b):
        if a == failing:
            raise ValueError(f"chunk {a}")
        time.sleep(0.05)
        done.append(a)

    with pytest.raises(ValueError, match=f"chunk {failing}"):
        _threads.run(task, [(0, 1), (1, 2), (2, 3)])
    assert sorted(done) == [i for i in range(3) if i != failing]      # nothing still running


_SETTINGS_CHILD = """
import json, os, sys
import numpy as np
if sys.argv[1] == "torch":
    import torch
    import torch._inductor.config    # torch's own compiler modules set their cache directory when imported
    torch_threads = (torch.get_num_threads(), torch.get_num_interop_threads())
environ = dict(os.environ)
from dnnbind.highlevel.cpu._blas import openblas
blas = openblas()
before = blas.get_threads() if blas.get_threads is not None else None
import dnnbind
if sys.argv[1] == "torch":
    import dnnbind.torch
rng = np.random.default_rng(0)
x, w = rng.standard_normal((8, 64, 28, 28), np.float32), rng.standard_normal((64, 64, 3, 3), np.float32)
y, pullback = dnnbind.conv(x, w, padding=1)            # big enough for the kernels beside a one-thread BLAS
pullback(y)
seq = rng.standard_normal((20, 4, 32), np.float32)
weights = [(rng.standard_normal((128, 32), np.float32), rng.standard_normal((128, 32), np.float32), None, None)]
(out, _, _), pullback = dnnbind.rnn(seq, weights, hidden_size=32)    # the LSTM time loop on every core
pullback(out)
if sys.argv[1] == "torch":
    t = torch.from_numpy(x)
    dnnbind.torch.conv(t, torch.from_numpy(w), padding=1)
    assert (torch.get_num_threads(), torch.get_num_interop_threads()) == torch_threads
after = blas.get_threads() if blas.get_threads is not None else None
print(json.dumps({"before": before, "after": after, "environ": dict(os.environ) == environ}))
"""


@pytest.mark.parametrize("host", ["numpy", "torch"])
def test_importing_and_running_the_cpu_backend_leaves_other_libraries_thread_settings_alone(host):
    """numpy's BLAS keeps its thread count (one_blas_thread restores it after each call), torch its thread
    counts, and the environment is untouched, after dnnbind is imported and its threaded paths have run."""
    import json
    import subprocess
    import sys
    if host == "torch":
        pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-c", _SETTINGS_CHILD, host], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["before"] == result["after"] and result["environ"], result


def test_workers_counts_the_processs_cpus_and_sees_a_change_after_forget_workers(monkeypatch):
    """workers() is the number of CPUs this process may run on, kept for WORKERS_REFRESH seconds (it is
    asked dozens of times an op) and read again at once after forget_workers()."""
    cpus = os.sched_getaffinity(0)
    _threads.forget_workers()
    assert _threads.workers() == len(cpus)
    monkeypatch.setattr(_threads, "WORKERS_REFRESH", 3600.0)
    _threads.forget_workers()
    _threads.workers()
    try:
        os.sched_setaffinity(0, {min(cpus)})
        assert _threads.workers() == len(cpus)          # kept
        _threads.forget_workers()
        assert _threads.workers() == 1
    finally:
        os.sched_setaffinity(0, cpus)
        _threads.forget_workers()
    assert _threads.workers() == len(cpus)
