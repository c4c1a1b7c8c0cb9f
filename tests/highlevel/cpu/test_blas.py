"""_blas.py finds numpy's own OpenBLAS: its kernels' name (what the benchmarks print beside their figures)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from dnnbind.highlevel.cpu._blas import openblas


def _numpy_blas() -> str:
    return str(np.show_config(mode="dicts")["Build Dependencies"]["blas"].get("name", ""))


@pytest.mark.skipif("openblas" not in _numpy_blas() or platform.machine() != "x86_64",
                    reason="numpy here is built on another BLAS, or not for x86-64 (whose cores the test names)")
def test_the_core_named_is_the_one_openblas_runs():
    assert openblas().core
    # a chosen core is run as chosen: OPENBLAS_CORETYPE in a fresh process names the core reported
    wanted = "Sandybridge"       # the AVX core: every x86-64 OpenBLAS with DYNAMIC_ARCH has it
    env = {**os.environ, "OPENBLAS_CORETYPE": wanted}
    code = "from dnnbind.highlevel.cpu._blas import openblas; print(openblas().core)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip().lower() == wanted.lower()
