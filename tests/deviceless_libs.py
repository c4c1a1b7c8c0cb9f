"""libcuda.so.1 and cuBLASLt as `make setup` fetched them (.cache/deviceless), for the deviceless graph-API tests.

CI runs `make setup`, so they are there; a test skips (saying so) only when the manifest is absent.
"""
from __future__ import annotations

import os

import pytest

from generator import deviceless
from dnnbind.runtime.deviceless import CUBLASLT, LIBCUDA

REASON = ".cache/deviceless/manifest.json is absent: run `make setup` (or `make deviceless`) to fetch libcuda.so.1 and cuBLASLt"


def paths() -> dict[str, str]:
    """{soname: file} of the two libraries; skips the test when make setup has not fetched them."""
    found = {soname: str(path) for soname, path in deviceless.libraries().items()}
    if set(found) != {LIBCUDA, CUBLASLT} or not all(os.path.isfile(p) for p in found.values()):
        pytest.skip(REASON)
    return found


def child_env(libcuda: bool = True, cublaslt: bool = True) -> dict[str, str]:
    """Environment for a child process: DNNBIND_LIBCUDA / DNNBIND_CUBLASLT naming the fetched files, or a
    path that does not exist for a library the child must do without."""
    found = paths()
    return {"DNNBIND_LIBCUDA": found[LIBCUDA] if libcuda else "/nonexistent/libcuda.so.1",
            "DNNBIND_CUBLASLT": found[CUBLASLT] if cublaslt else "/nonexistent/libcublasLt.so.13"}
