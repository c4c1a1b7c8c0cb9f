"""bench/blas_info.py reports numpy's own BLAS through threadpoolctl (the kernels it runs: what every
benchmark prints beside its figures), and the benchmarks' header warns where OPENBLAS_CORETYPE or
OPENBLAS_L2_SIZE is set."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from bench import blas_info

ROOT = Path(__file__).resolve().parents[2]


def _numpy_blas_name() -> str:
    return str(np.show_config(mode="dicts")["Build Dependencies"]["blas"].get("name", ""))


def test_it_reports_numpys_own_blas_and_its_threads():
    blas = blas_info.numpy_blas()
    assert blas is not None and Path(blas.filepath).is_file()
    assert blas.internal_api in _numpy_blas_name()               # openblas in scipy-openblas
    with threadpool_limits(1, user_api="blas"):
        assert blas_info.numpy_blas().threads == 1
    assert blas_info.numpy_blas().threads == blas.threads
    assert blas_info.kernels() == blas.architecture
    assert blas.describe().startswith(f"{blas.internal_api} {blas.version}")


@pytest.mark.skipif("openblas" not in _numpy_blas_name() or platform.machine() != "x86_64",
                    reason="numpy here is built on another BLAS, or not for x86-64 (whose cores the test names)")
def test_the_kernels_named_are_the_ones_openblas_runs():
    assert blas_info.kernels() not in ("?", "unknown")
    # a chosen core is run as chosen: OPENBLAS_CORETYPE in a fresh child process names the kernels reported
    # (set for that child alone; this process, and every test, keeps the machine's configuration)
    wanted = "Sandybridge"       # the AVX core: every x86-64 OpenBLAS with DYNAMIC_ARCH has it
    env = {**os.environ, "OPENBLAS_CORETYPE": wanted, "PYTHONPATH": str(ROOT)}
    code = "from bench import blas_info; print(blas_info.kernels())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip().lower() == wanted.lower()


def test_the_header_names_the_blas_and_warns_only_where_the_overrides_are_set():
    clean = blas_info.header_lines({})
    assert clean[0].startswith(f"numpy {np.__version__}, BLAS: {blas_info.numpy_blas().describe()}")
    assert clean[1] == "OPENBLAS_CORETYPE=(unset), OPENBLAS_L2_SIZE=(unset)"
    assert not any("WARNING" in line for line in clean)
    for environ in ({"OPENBLAS_CORETYPE": "Haswell"}, {"OPENBLAS_L2_SIZE": "1048576"},
                    {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1048576", "HOME": "/root"}):
        lines = blas_info.header_lines(environ)
        assert blas_info.overrides(environ) == {k: v for k, v in environ.items() if k.startswith("OPENBLAS")}
        warnings = [line for line in lines if line.startswith("WARNING")]
        assert len(warnings) >= 3 and all(f"{k}={v}" in warnings[0] for k, v in blas_info.overrides(environ).items())
        assert any("env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE" in line for line in warnings)


def test_make_bench_prints_the_header_first(capsys, monkeypatch):
    """bench/run.py's first lines are the header (its suites left out here)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import run as bench_run
    finally:
        sys.path.remove(str(ROOT / "bench"))
    monkeypatch.setattr(bench_run, "SUITES", [])
    bench_run.main()
    out = capsys.readouterr().out.splitlines()
    assert out[:len(blas_info.header_lines())] == blas_info.header_lines()
