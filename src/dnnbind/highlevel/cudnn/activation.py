"""Pointwise activations on cuDNN: cudnnActivationForward / cudnnActivationBackward.

relu, sigmoid, tanh, clipped_relu (coefficient: the ceiling), elu (coefficient: alpha) and swish
(swish beta) run on cuDNN, with NaN propagation. identity is a copy (cuDNN's IDENTITY mode works only
inside cudnnConvolutionBiasActivationForward). leaky_relu has no cuDNN mode and runs as a CuPy
elementwise kernel computing in float32 (float64 for float64 data), like the reference
(:mod:`dnnbind.highlevel.gpu.elementwise`).

The arrays are treated as one flat block, so any dense layout (C, Fortran, channels-last) runs
without copying and y has x's strides; blocks of 2**30 elements or more run in chunks
(:mod:`dnnbind.highlevel.gpu.chunks`). Residuals (see :mod:`dnnbind.highlevel.residual`): copies of x and
y with x's strides (cuDNN's modes), a copy of x (leaky_relu), nothing (identity).
"""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.cudnn._lib import DTYPES, handle, lib
from dnnbind.highlevel.cudnn.descriptors import ActivationDescriptor, TensorDescriptor
from dnnbind.highlevel.gpu import elementwise
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.chunks import Chunk, chunk_plan
from dnnbind.highlevel.gpu.pullback import cotangent, like
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.gpu.views import flat_dense
from dnnbind.highlevel.specs.activation import ACTIVATION_DEFAULTS
from dnnbind.highlevel.residual import ArraySpec

PLANS: PlanCache["ActivationPlan"] = PlanCache("cudnn.activation", maxsize=256)

#: public mode -> (cudnnActivationMode_t name, how alpha is passed: "coef", "swish" or None)
CUDNN_MODES = {
    "relu": ("CUDNN_ACTIVATION_RELU", None),
    "sigmoid": ("CUDNN_ACTIVATION_SIGMOID", None),
    "tanh": ("CUDNN_ACTIVATION_TANH", None),
    "clipped_relu": ("CUDNN_ACTIVATION_CLIPPED_RELU", "coef"),
    "elu": ("CUDNN_ACTIVATION_ELU", "coef"),
    "swish": ("CUDNN_ACTIVATION_SWISH", "swish"),
}


class ActivationPlan:
    """The activation descriptor and the flat (1, 1, 1, size) tensor descriptor of one problem."""

    def __init__(self, mode: str, alpha: float | None, size: int, dtype: str) -> None:
        name, how = CUDNN_MODES[mode]
        code = getattr(lib(), name)
        coef = alpha if how == "coef" and alpha is not None else 0.0
        self.activation = ActivationDescriptor(code, coef, alpha if how == "swish" else None)
        self.tensor = TensorDescriptor((1, 1, 1, size), dtype)
        self.dtype = DTYPES[dtype]


def _alpha(mode: str, alpha: float | None) -> float | None:
    """alpha, or the mode's default when None (as the public op resolves it)."""
    return ACTIVATION_DEFAULTS[mode] if alpha is None else alpha


def _chunks(mode: str, alpha: float | None, a: Any, device: int) -> list[tuple[Chunk, ActivationPlan]]:
    """The chunks of a's flat block with the plan of each (from the plan cache)."""
    name = a.dtype.name
    return [(chunk, PLANS.get((mode, alpha, chunk.size, name, device),
                              lambda: ActivationPlan(mode, alpha, chunk.size, name)))
            for chunk in chunk_plan(a.size)]


def activation_forward(x: Any, mode: str, alpha: float | None) -> tuple[Any, tuple]:
    """y = f(x) for one of the public modes; alpha None means the mode's default, as in the public op.
    Saves nothing for identity, x for leaky_relu, else x and y (see :func:`activation_residuals`)."""
    cp = cupy()
    alpha = _alpha(mode, alpha)
    with Call("activation", {"mode": mode, "alpha": alpha}, x=x) as call:
        user_x = call["x"]
        if mode == "identity":
            return user_x.copy(), ()
        if mode == "leaky_relu":
            forward, _ = elementwise.kernels(cp, mode)
            return forward(user_x, elementwise.coefficient(user_x.dtype, 0.0 if alpha is None else float(alpha))), \
                (user_x.copy(order="K"),)
        x, y = flat_dense(cp, user_x)
        c, item = lib(), x.itemsize
        h = handle(call.device, current_stream())
        for chunk, plan in _chunks(mode, alpha, x, call.device):
            t, at = plan.tensor.handle, chunk.offset(item)
            c.cudnnActivationForward(h, plan.activation.handle, plan.dtype.one, t, x.data.ptr + at, plan.dtype.zero,
                                     t, y.data.ptr + at)
        return y, (private(cp, x, user_x), y.copy(order="K"))


def activation_backward(residuals: tuple, cotangents: tuple, mode: str, alpha: float | None) -> Any:
    """dx = dy * f'(x), from the saved arrays and dy."""
    cp = cupy()
    alpha = _alpha(mode, alpha)
    (dy,) = cotangents
    if mode == "identity":
        with Call("activation pullback", {"mode": mode}, dy=dy) as back:
            a = back["dy"]
            return cotangent("dy", a, a.shape, a.dtype, None, back.device).copy()
    saved_x = residuals[0]
    device = saved_x.device.id
    with Call("activation pullback", {"mode": mode, "alpha": alpha}, device=device, dy=dy) as back:
        dy = cotangent("dy", back["dy"], saved_x.shape, saved_x.dtype, None, device)
        if mode == "leaky_relu":
            _, backward = elementwise.kernels(cp, mode)
            return backward(saved_x, dy, elementwise.coefficient(saved_x.dtype, 0.0 if alpha is None else float(alpha)))
        y, dx = flat_dense(cp, residuals[1])           # y itself: it has x's strides, one dense block
        x, dy = like(cp, saved_x, y), like(cp, dy, y)
        c, item = lib(), y.itemsize
        h = handle(device, current_stream())
        for chunk, plan in _chunks(mode, alpha, y, device):
            t, at = plan.tensor.handle, chunk.offset(item)
            c.cudnnActivationBackward(h, plan.activation.handle, plan.dtype.one, t, y.data.ptr + at, t,
                                      dy.data.ptr + at, t, x.data.ptr + at, plan.dtype.zero, t, dx.data.ptr + at)
        return dx


def activation_residuals(x: Any, mode: str, alpha: float | None) -> tuple[ArraySpec, ...]:
    """Nothing for identity, x for leaky_relu (a CuPy kernel), x and y for cuDNN's modes; x's shape and dtype."""
    if mode == "identity":
        return ()
    spec = ArraySpec(tuple(x.shape), x.dtype)
    return (spec,) if mode == "leaky_relu" else (spec, spec)
