"""Whether this machine can run the MIOpen backend's GPU tests (CuPy built for ROCm and a visible AMD GPU), and
how they watch the backend's library calls."""
from __future__ import annotations

import importlib
import importlib.util


def missing() -> str | None:
    """Why the GPU tests cannot run here, or None when they can."""
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed"
    import cupy
    if not cupy.cuda.runtime.is_hip:
        return "CuPy is built for CUDA: the MIOpen backend needs ROCm and an AMD GPU"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - any runtime failure means no usable device
        count = 0
    return None if count else "no AMD GPU visible"


def count_calls(monkeypatch, name):
    """A list that records every call of MIOpen function ``name`` (through the backend's library module)
    from now until the test ends; the calls still reach the library."""
    lib = importlib.import_module("dnnbind.highlevel.miopen._lib").lib
    calls = []
    original = getattr(lib, name)

    def counted(*args):
        calls.append(name)
        return original(*args)
    monkeypatch.setattr(lib, name, counted)
    return calls
