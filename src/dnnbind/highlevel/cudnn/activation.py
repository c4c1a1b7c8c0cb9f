"""Pointwise activations on cuDNN: cudnnActivationForward / cudnnActivationBackward.

relu, sigmoid, tanh, clipped_relu (coefficient: the ceiling), elu (coefficient: alpha) and swish
(swish beta) run on cuDNN, with NaN propagation. identity is a copy (cuDNN's IDENTITY mode works only
inside cudnnConvolutionBiasActivationForward). leaky_relu has no cuDNN mode and runs as a CuPy
elementwise kernel computing in float32 (float64 for float64 data), like the reference
(:mod:`dnnbind.highlevel.gpu.elementwise`).

The arrays are treated as one flat block, so any dense layout (C, Fortran, channels-last) runs
without copying and y has x's strides; blocks of 2**30 elements or more run in chunks
(:mod:`dnnbind.highlevel.gpu.chunks`). The pullback keeps its own copies of x and y.
"""
from __future__ import annotations

from typing import Any, Callable

from dnnbind.highlevel.cudnn._lib import DTYPES, handle, lib
from dnnbind.highlevel.cudnn.descriptors import ActivationDescriptor, TensorDescriptor
from dnnbind.highlevel.gpu import elementwise
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.chunks import chunk_plan
from dnnbind.highlevel.gpu.pullback import cotangent, like
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.gpu.views import flat_dense
from dnnbind.highlevel.ops import ACTIVATION_DEFAULTS

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


def activation(x: Any, mode: str, alpha: float | None) -> tuple[Any, Callable]:
    """y = f(x) for one of the public modes; alpha None means the mode's default, as in the public op."""
    cp = cupy()
    if alpha is None:
        alpha = ACTIVATION_DEFAULTS[mode]
    with Call("activation", {"mode": mode, "alpha": alpha}, x=x) as call:
        x = call["x"]
        if mode == "identity":
            return _identity(cp, x, call.device)
        if mode == "leaky_relu":
            return _leaky_relu(cp, x, float(alpha or 0.0), call.device)
        user_x = x
        x, y = flat_dense(cp, x)
        device, item = call.device, x.itemsize
        chunks = [(chunk, PLANS.get((mode, alpha, chunk.size, x.dtype.name, device),
                                    lambda: ActivationPlan(mode, alpha, chunk.size, x.dtype.name)))
                  for chunk in chunk_plan(x.size)]
        c = lib()
        h = handle(device, current_stream())
        for chunk, plan in chunks:
            t, at = plan.tensor.handle, chunk.offset(item)
            c.cudnnActivationForward(h, plan.activation.handle, plan.dtype.one, t, x.data.ptr + at, plan.dtype.zero,
                                     t, y.data.ptr + at)
        x = private(cp, x, user_x)
        saved_y = y.copy(order="K")

    def pullback(dy: Any) -> Any:
        with Call("activation pullback", {"mode": mode, "alpha": alpha}, device=device, dy=dy) as back:
            dy = like(cp, cotangent("dy", back["dy"], saved_y.shape, saved_y.dtype, None, device), saved_y)
            dx = cp.empty_like(saved_y)
            h = handle(device, current_stream())
            for chunk, plan in chunks:
                t, at = plan.tensor.handle, chunk.offset(item)
                c.cudnnActivationBackward(h, plan.activation.handle, plan.dtype.one, t, saved_y.data.ptr + at, t,
                                          dy.data.ptr + at, t, x.data.ptr + at, plan.dtype.zero, t, dx.data.ptr + at)
            return dx

    return y, pullback


def _identity(cp: Any, x: Any, device: int) -> tuple[Any, Callable]:
    y = x.copy()

    def pullback(dy: Any) -> Any:
        with Call("activation pullback", {"mode": "identity"}, device=device, dy=dy) as back:
            return cotangent("dy", back["dy"], y.shape, y.dtype, None, device).copy()

    return y, pullback


def _leaky_relu(cp: Any, x: Any, slope: float, device: int) -> tuple[Any, Callable]:
    y, derivative = elementwise.apply(cp, "leaky_relu", x, slope)

    def pullback(dy: Any) -> Any:
        with Call("activation pullback", {"mode": "leaky_relu", "alpha": slope}, device=device, dy=dy) as back:
            return derivative(cotangent("dy", back["dy"], y.shape, y.dtype, None, device))

    return y, pullback
