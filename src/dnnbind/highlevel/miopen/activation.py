"""Pointwise activations on MIOpen: miopenActivationForward / miopenActivationBackward.

MIOpen's activation descriptor carries three double coefficients (alpha, beta, gamma) whose meaning
depends on the mode; :func:`coefficients` maps the public modes onto them: TANH computes
beta * tanh(alpha * x), so both are 1; LEAKYRELU's alpha is the slope, CLIPPEDRELU's the ceiling,
ELU's the usual alpha. identity is a copy; swish, which MIOpen lacks, runs as a CuPy elementwise
kernel (see :mod:`dnnbind.highlevel.gpu.elementwise`).

The arrays are treated as one flat block (a (1, 1, 1, size) tensor), so any dense layout runs without
copying and y has x's strides; blocks of 2**30 elements or more run in chunks
(:mod:`dnnbind.highlevel.gpu.chunks`). The pullback keeps its own copies of x and y.
"""
from __future__ import annotations

from typing import Any, Callable

from dnnbind.highlevel.gpu import elementwise
from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.chunks import chunk_plan
from dnnbind.highlevel.gpu.pullback import cotangent, like
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.gpu.views import flat_dense
from dnnbind.highlevel.miopen._lib import handle, lib, scaling
from dnnbind.highlevel.miopen.descriptors import ActivationDescriptor, TensorDescriptor

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


def activation(x: Any, mode: str, alpha: float | None) -> tuple[Any, Callable]:
    """y = f(x) for one of the public modes (alpha already resolved by the public op)."""
    cp = cupy()
    params = {"mode": mode, "alpha": alpha}
    with Call("activation", params, dlpack_devices=DLPACK_ROCM, x=x) as call:
        x = call["x"]
        device = call.device
        if mode == "identity":
            y = x.copy()
            backward: Callable[[Any], Any] = lambda dy: dy.copy()  # noqa: E731
        elif mode in KERNEL_MODES:
            y, backward = elementwise.apply(cp, mode, x, _needed(mode, alpha))
        else:
            user_x = x
            x, y = flat_dense(cp, x)
            item = x.itemsize
            chunks = [(chunk, plan_for(mode, alpha, chunk.size, x.dtype.name)) for chunk in chunk_plan(x.size)]
            one, zero = scaling(x.dtype)
            h = handle(device, current_stream()).ptr
            for chunk, plan in chunks:
                t, at = plan.tensor.handle, chunk.offset(item)
                lib.miopenActivationForward(h, plan.activation.handle, one, t, x.data.ptr + at, zero, t,
                                            y.data.ptr + at)
            saved_x, saved_y = private(cp, x, user_x), y.copy(order="K")

            def backward(dy: Any) -> Any:
                dy = like(cp, dy, saved_y)
                dx = cp.empty_like(saved_y)
                h = handle(device, current_stream()).ptr
                for chunk, plan in chunks:
                    t, at = plan.tensor.handle, chunk.offset(item)
                    lib.miopenActivationBackward(h, plan.activation.handle, one, t, saved_y.data.ptr + at, t,
                                                 dy.data.ptr + at, t, saved_x.data.ptr + at, zero, t,
                                                 dx.data.ptr + at)
                return dx

    def pullback(dy: Any) -> Any:
        with Call("activation pullback", params, device=device, dlpack_devices=DLPACK_ROCM, dy=dy) as back:
            return backward(cotangent("dy", back["dy"], y.shape, y.dtype, None, device, DLPACK_ROCM))

    return y, pullback
