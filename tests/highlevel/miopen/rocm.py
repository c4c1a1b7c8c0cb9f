"""Whether this machine can run the MIOpen backend's GPU tests: CuPy built for ROCm and a visible AMD GPU."""
from __future__ import annotations

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
