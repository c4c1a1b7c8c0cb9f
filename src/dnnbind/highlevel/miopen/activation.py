"""Pointwise activations on MIOpen: miopenActivationForward / miopenActivationBackward.

MIOpen's activation descriptor carries three double coefficients (alpha, beta, gamma) whose meaning
depends on the mode; :func:`coefficients` maps the public modes onto them: TANH computes
beta * tanh(alpha * x), so both are 1; LEAKYRELU's alpha is the slope, CLIPPEDRELU's the ceiling,
ELU's the usual alpha. identity is a copy; swish, which MIOpen lacks, runs as a CuPy elementwise
kernel (see :mod:`dnnbind.highlevel.gpu.elementwise`).

The arrays are treated as one flat block (a (1, 1, 1, size) tensor), so any dense layout runs without
copying and y has x's strides; blocks of 2**30 elements or more run in chunks
(:mod:`dnnbind.highlevel.gpu.chunks`). Residuals (see :func:`activation_residuals`): nothing for
identity, a copy of x for swish, copies of x and y for MIOpen's modes (its backward reads both), with
equal strides; the backward finds the chunks' plans again from their size.
"""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.gpu import elementwise
from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.chunks import Chunk, chunk_plan
from dnnbind.highlevel.gpu.pullback import cotangent, like
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.gpu.views import flat_dense
from dnnbind.highlevel.miopen._lib import handle, lib, scaling
from dnnbind.highlevel.miopen.descriptors import ActivationDescriptor, TensorDescriptor
from dnnbind.highlevel.residual import ArraySpec

PLANS: PlanCache["ActivationPlan"] = PlanCache("miopen.activation", maxsize=256)

#: public mode -> miopenActivationMode_t name (identity and swish do not use MIOpen)
MIOPEN_MODES = {
    "relu": "miopenActivationRELU",
    "sigmoid": "miopenActivationLOGISTIC",
    "tanh": "miopenActivationTANH",
    "elu": "miopenActivationELU",
    "leaky_relu": "miopenActivationLEAKYRELU",
    "clipped_relu": "miopenActivationCLIPPEDRELU",
}

#: modes computed by CuPy kernels because MIOpen has no such activation
KERNEL_MODES = ("swish",)


def coefficients(mode: str, alpha: float | None) -> tuple[float, float, float]:
    """MIOpen's (alpha, beta, gamma) for a public mode and its resolved coefficient."""
    if mode == "tanh":
        return 1.0, 1.0, 0.0                  # beta * tanh(alpha * x)
    if mode in ("elu", "leaky_relu", "clipped_relu"):
        return _needed(mode, alpha), 0.0, 0.0     # elu's alpha, the slope, the ceiling
    return 0.0, 0.0, 0.0


def _needed(mode: str, alpha: float | None) -> float:
    if alpha is None:
        raise ValueError(f"mode={mode!r} needs its coefficient alpha (the public op resolves the default)")
    return float(alpha)


class ActivationPlan:
    """The activation descriptor and the flat (1, 1, 1, size) tensor descriptor of one problem."""

    def __init__(self, mode: str, alpha: float | None, size: int, dtype: str) -> None:
        self.activation = ActivationDescriptor(getattr(lib, MIOPEN_MODES[mode]), *coefficients(mode, alpha))
        self.tensor = TensorDescriptor((1, 1, 1, size), dtype)


def plan_for(mode: str, alpha: float | None, size: int, dtype: str) -> ActivationPlan:
    return PLANS.get((mode, alpha, size, dtype), lambda: ActivationPlan(mode, alpha, size, dtype))


def _chunks(mode: str, alpha: float | None, size: int, dtype: str) -> list[tuple[Chunk, ActivationPlan]]:
    """The chunks of a flat block of ``size`` elements and each one's plan."""
    return [(chunk, plan_for(mode, alpha, chunk.size, dtype)) for chunk in chunk_plan(size)]


def activation_forward(x: Any, mode: str, alpha: float | None) -> tuple[Any, tuple[Any, ...]]:
    """y = f(x) for one of the public modes (alpha already resolved by the public op)."""
    cp = cupy()
    with Call("activation", {"mode": mode, "alpha": alpha}, dlpack_devices=DLPACK_ROCM, x=x) as call:
        x = call["x"]
        if mode == "identity":
            return x.copy(), ()
        if mode in KERNEL_MODES:
            forward, _ = elementwise.kernels(cp, mode)
            return forward(x, elementwise.coefficient(x.dtype, _needed(mode, alpha))), (x.copy(order="K"),)
        user_x = x
        x, y = flat_dense(cp, x)
        one, zero = scaling(x.dtype)
        h = handle(call.device, current_stream()).ptr
        for chunk, plan in _chunks(mode, alpha, x.size, x.dtype.name):
            t, at = plan.tensor.handle, chunk.offset(x.itemsize)
            lib.miopenActivationForward(h, plan.activation.handle, one, t, x.data.ptr + at, zero, t, y.data.ptr + at)
    return y, (private(cp, x, user_x), y.copy(order="K"))      # the backward's own x and y, y's strides


def activation_backward(saved: tuple, cotangents: tuple, mode: str, alpha: float | None) -> Any:
    """dx = dy * f'(x): a copy for identity, the CuPy kernel for swish, miopenActivationBackward else."""
    (dy,) = cotangents
    cp = cupy()
    device = saved[0].device.id if saved else None
    with Call("activation backward", {"mode": mode, "alpha": alpha}, device=device, dlpack_devices=DLPACK_ROCM,
              dy=dy) as back:
        if mode == "identity":
            dy = back["dy"]
            return cotangent("dy", dy, dy.shape, dy.dtype, None, back.device, DLPACK_ROCM).copy()
        x = saved[0]
        dy = cotangent("dy", back["dy"], x.shape, x.dtype, None, back.device, DLPACK_ROCM)
        if mode in KERNEL_MODES:
            _, backward = elementwise.kernels(cp, mode)
            return backward(x, dy, elementwise.coefficient(x.dtype, _needed(mode, alpha)))
        y = saved[1]
        dy = like(cp, dy, y)
        dx = cp.empty_like(y)
        one, zero = scaling(y.dtype)
        h = handle(back.device, current_stream()).ptr
        for chunk, plan in _chunks(mode, alpha, y.size, y.dtype.name):
            t, at = plan.tensor.handle, chunk.offset(y.itemsize)
            lib.miopenActivationBackward(h, plan.activation.handle, one, t, y.data.ptr + at, t, dy.data.ptr + at,
                                         t, x.data.ptr + at, zero, t, dx.data.ptr + at)
    return dx


def activation_residuals(x: ArraySpec, mode: str, alpha: float | None) -> tuple[ArraySpec, ...]:
    """Nothing for identity; x for swish; x and y for MIOpen's modes (all of x's shape and dtype)."""
    if mode == "identity":
        return ()
    spec = ArraySpec(tuple(x.shape), x.dtype)
    return (spec,) if mode in KERNEL_MODES else (spec, spec)
