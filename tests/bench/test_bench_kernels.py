"""bench/bench_kernels.py compares like with like: on every row the kernel side runs dnnbind's C kernels
and the library side none, and both compute the same result; its table prints the verdicts."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from native_parts import require

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_kernels  # noqa: E402
from dnnbind.highlevel.cpu import native  # noqa: E402

CASES = bench_kernels.cases()


def _flat(result):
    if isinstance(result, (tuple, list)):
        return [a for part in result for a in _flat(part)]
    return [] if result is None else [np.asarray(result)]


@pytest.fixture
def kernels_called(monkeypatch):
    """The names of the C kernels called while the test runs (every kernel is looked up by native._kernel)."""
    require(native.library() is not None, "dnnbind_native._kernels (the C kernels)")
    called = []
    found = native._kernel
    monkeypatch.setattr(native, "_kernel", lambda name, dtype: called.append(name) or found(name, dtype))
    # the products row splits over the pool where the cores are free (no torch threads beside them)
    monkeypatch.setattr(native, "cores_to_spare", lambda: True)
    monkeypatch.setattr(native, "workers", lambda: 2)
    return called


@pytest.mark.parametrize("case", CASES, ids=[f"{c.family}: {c.name}" for c in CASES])
def test_each_row_times_kernels_against_the_library_computing_the_same(case, kernels_called):
    kernel, library = case.build()
    got = _flat(kernel())
    assert kernels_called, f"{case.name}: the kernel side ran no C kernel"
    kernels_called.clear()
    want = _flat(library())
    assert not kernels_called, f"{case.name}: the library side ran C kernels {kernels_called}"
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        scale = float(np.abs(b).max(initial=0)) or 1.0
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * scale)


def test_every_family_has_a_quick_row():
    families = {c.family for c in CASES}
    assert families >= {"direct conv", "depthwise", "pooling", "softmax", "recurrent", "pointwise",
                        "vmath", "channel sums"}
    assert families == {c.family for c in CASES if c.quick}


def test_the_table_prints_ratio_verdict_and_blas_kernels(capsys):
    require(native.library() is not None, "dnnbind_native._kernels (the C kernels)")
    assert bench_kernels.main(["--quick", "--repeats", "1", "--family", "softmax"]) == []
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("softmax: ")]
    assert len(rows) == sum(c.quick for c in CASES if c.family == "softmax")
    for line in rows:
        assert line.split()[-2] in ("keep", "library") and line.split()[-1] == bench_kernels.blas_info.kernels()
        assert line.split()[-3].endswith("x")
    assert "families with a row where the library is faster or within 10%:" in out


def test_make_bench_runs_the_table_before_torch_is_loaded():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import run as bench_run
    assert bench_run.SUITES.index("bench_kernels") < bench_run.SUITES.index("bench_reference")


def test_cpu_time_runs_on_one_core_and_gives_the_process_back(capsys):
    """--cpu-time: one CPU, numpy's BLAS on one thread, the thread's CPU time; all three restored after."""
    require(native.library() is not None, "dnnbind_native._kernels (the C kernels)")
    import os
    import time

    import common
    from threadpoolctl import threadpool_info
    cpus, clock = os.sched_getaffinity(0), common.CLOCK
    blas_threads = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    seen = []
    found = bench_kernels.measure
    bench_kernels.measure = lambda case, repeats: seen.append((os.sched_getaffinity(0), common.CLOCK,
                                                                bench_kernels.blas_info.numpy_blas().threads)) \
        or found(case, repeats)
    try:
        bench_kernels.main(["--quick", "--repeats", "1", "--family", "vmath", "--cpu-time"])
    finally:
        bench_kernels.measure = found
    assert seen and all(len(a) == 1 and c is time.thread_time and t == 1 for a, c, t in seen)
    assert "(1 thread)" in capsys.readouterr().out
    assert os.sched_getaffinity(0) == cpus and common.CLOCK is clock
    assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == blas_threads
