"""Activations that a library lacks, as CuPy elementwise kernels (cuDNN: leaky_relu; MIOpen: swish).

Each mode has a forward kernel ``f(x, alpha) -> y`` and a backward kernel ``(x, dy, alpha) -> dx``,
computed in float32 (float64 for float64 data) like the reference backend, and compiled by CuPy once
per dtype. Derivatives follow the reference: leaky_relu'(0) = slope, swish' = s (1 + b x (1 - s)).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

#: mode -> (forward body, backward body); W is the compute type, alpha the mode's coefficient
SOURCES: dict[str, tuple[str, str]] = {
    "leaky_relu": (
        "y = (W)x > (W)0 ? x : (T)((W)x * alpha)",
        "dx = (W)x > (W)0 ? dy : (T)((W)dy * alpha)",
    ),
    "swish": (
        "W z = (W)x; W s = (W)1 / ((W)1 + exp(-alpha * z)); y = (T)(z * s)",
        "W z = (W)x; W s = (W)1 / ((W)1 + exp(-alpha * z)); dx = (T)((W)dy * s * ((W)1 + alpha * z * ((W)1 - s)))",
    ),
}

_KERNELS: dict[str, tuple[Any, Any]] = {}


def kernels(cp: Any, mode: str) -> tuple[Any, Any]:
    """(forward, backward) CuPy ElementwiseKernels of ``mode`` (one of :data:`SOURCES`)."""
    pair = _KERNELS.get(mode)
    if pair is None:
        forward, backward = SOURCES[mode]
        pair = (cp.ElementwiseKernel("T x, W alpha", "T y", forward, f"dnnbind_{mode}"),
                cp.ElementwiseKernel("T x, T dy, W alpha", "T dx", backward, f"dnnbind_{mode}_grad"))
        _KERNELS[mode] = pair
    return pair


def coefficient(dtype: Any, alpha: float) -> Any:
    """alpha as the kernels' compute type: float64 for float64 data, float32 otherwise."""
    return np.float64(alpha) if np.dtype(dtype) == np.float64 else np.float32(alpha)


def apply(cp: Any, mode: str, x: Any, alpha: float) -> tuple[Any, Callable[[Any], Any]]:
    """(y, dy -> dx) for ``mode`` on CuPy array x; the backward function keeps its own copy of x."""
    forward, backward = kernels(cp, mode)
    a = coefficient(x.dtype, alpha)
    saved = x.copy(order="K")
    return forward(x, a), lambda dy: backward(saved, dy, a)
