"""GPU test support shared by tests/highlevel/gpu and tests/highlevel/cudnn.

``cuda`` (session fixture): the cupy module when CuPy imports and sees a device, else the test is
skipped. ``poisoned``: every allocation from CuPy's pool during the test starts filled with 0xFF bytes
(NaN in every float dtype), so an output element a library call forgets to write shows up as NaN.
Nothing here needs more than CuPy, numpy and pytest (the GPU machine has no hypothesis).
"""
from __future__ import annotations

import importlib

import pytest


def cuda_or_skip():
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as exc:
        pytest.skip(f"no GPU: CuPy is not installed ({exc})")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:       # CUDA driver missing or no device
        pytest.skip(f"no GPU: {exc}")
    if count < 1:
        pytest.skip("no GPU: CuPy sees no device")
    if cupy.cuda.runtime.is_hip:
        pytest.skip("no NVIDIA GPU: CuPy runs on ROCm")
    return cupy


@pytest.fixture(scope="session")
def cuda():
    return cuda_or_skip()


@pytest.fixture
def poisoned(cuda):
    """Allocations from CuPy's pool start as NaN (0xFF bytes) while the test runs."""
    pool = cuda.get_default_memory_pool()

    def allocate(size):
        memory = pool.malloc(size)
        if size:
            memory.memset_async(0xFF, size)
        return memory

    with cuda.cuda.using_allocator(allocate):
        yield cuda
