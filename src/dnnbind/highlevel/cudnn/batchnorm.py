"""Batch normalisation per channel on cuDNN (CUDNN_BATCHNORM_SPATIAL, or SPATIAL_PERSISTENT: see
:func:`batchnorm_mode`).

Training: cudnnBatchNormalizationForwardTraining normalises with the batch statistics and returns
the batch mean and inverse standard deviation, which the backward hands to
cudnnBatchNormalizationBackward. Inference: cudnnBatchNormalizationForwardInference with copies of the
running statistics (so later updates do not change the backward); its backward differentiates that
affine map with CuPy (cuDNN's backward pass is the training one).

Residual form (see :mod:`dnnbind.highlevel.residual`): the forward saves x (in the layout it ran in),
gamma, the mean and the inverse standard deviation (per channel, cuDNN's parameter dtype): the same four
arrays in training and inference, all the forward's own. running_mean and running_var are positional
array arguments, updated in place.

Running statistics. cuDNN updates them as ``running = (1 - factor) * running + factor * batch`` with
``factor = momentum`` and, for the variance, the UNBIASED batch variance (count / (count - 1) times the
biased one): the same rule as the reference backend and PyTorch, so no fix-up is needed. cuDNN keeps
them, and gamma and beta, in float32 for half-precision data (float64 for float64); statistics of
another dtype or not contiguous are updated through a float32/float64 copy that is written back in
place, as the reference computes in x's compute dtype and casts back.

epsilon: cuDNN rejects values below CUDNN_BN_MIN_EPSILON (0 in cuDNN 9, 1e-5 in older releases);
smaller values are raised to it with a warning.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from dnnbind.highlevel.cudnn._lib import DTYPES, handle, lib
from dnnbind.highlevel.cudnn.descriptors import TensorDescriptor
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.batchnorm import affine_pullback, as_param, write_back
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.layout import lift
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.residual import ArraySpec

PLANS: PlanCache["BatchNormPlan"] = PlanCache("cudnn.batchnorm", maxsize=128)


def batchnorm_mode(layout: str, training: bool) -> str:
    """The cudnnBatchNormMode_t name for a call: SPATIAL_PERSISTENT for channels-last training (faster;
    what PyTorch uses there), SPATIAL otherwise (inference, and NCHW memory, where PyTorch too keeps
    SPATIAL). PERSISTENT reduces with scaled integer atomics; cuDNN documents that inputs of a very wide
    range may overflow there, which is why PyTorch, and dnnbind, keep it to channels-last training."""
    return "CUDNN_BATCHNORM_SPATIAL_PERSISTENT" if training and layout == "NHWC" else "CUDNN_BATCHNORM_SPATIAL"


class BatchNormPlan:
    """The descriptor of x (4-d or 5-d, in its layout) and the per-channel descriptor cuDNN derives."""

    def __init__(self, shape: tuple[int, ...], layout: str, dtype: str, training: bool = False) -> None:
        c = lib()
        self.mode = getattr(c, batchnorm_mode(layout, training))
        self.x = TensorDescriptor(lift(shape), dtype, layout=layout)
        self.param = TensorDescriptor((1, shape[1], 1, 1), DTYPES[dtype].param)
        c.cudnnDeriveBNTensorDescriptor(self.param.handle, self.x.handle, self.mode)
        self.dtype = DTYPES[dtype]


def epsilon(eps: float, warn: bool = True) -> float:
    """eps, raised to CUDNN_BN_MIN_EPSILON (with a warning, unless ``warn`` is False) when smaller."""
    low = float(lib().CUDNN_BN_MIN_EPSILON)
    if eps < low:
        if warn:
            warnings.warn(f"eps={eps!r} is below cuDNN's minimum CUDNN_BN_MIN_EPSILON={low!r}; using {low!r}",
                          RuntimeWarning, stacklevel=3)
        return low
    return eps


def _layout_of(cp: Any, x: Any) -> tuple[Any, str]:
    """(x, its layout) when cuDNN can describe it, else (a C-order copy, "NCHW")."""
    lay = _layout.layout_of(x) if x.ndim > 2 else ("NCHW" if x.flags.c_contiguous else None)
    return (cp.ascontiguousarray(x), "NCHW") if lay is None else (x, lay)


def _plan(x: Any, lay: str, training: bool, device: int) -> BatchNormPlan:
    return PLANS.get((tuple(x.shape), lay, x.dtype.name, training, device),
                     lambda: BatchNormPlan(tuple(x.shape), lay, x.dtype.name, training))


def batchnorm_forward(x: Any, gamma: Any, beta: Any, running_mean: Any, running_var: Any, training: bool,
                      momentum: float, eps: float) -> tuple[Any, tuple]:
    """y = (x - mean) / sqrt(var + eps) * gamma + beta per channel (see :func:`dnnbind.batchnorm`); updates
    the running statistics in place when training. Saves (x, gamma, mean, invstd), see
    :func:`batchnorm_residuals`."""
    cp = cupy()
    c = lib()
    eps = epsilon(eps)
    params = {"training": training, "momentum": momentum, "eps": eps}
    with Call("batchnorm", params, x=x, gamma=gamma, beta=beta, running_mean=running_mean,
              running_var=running_var) as call:
        x, lay = _layout_of(cp, call["x"])
        running_mean, running_var = call["running_mean"], call["running_var"]
        plan = _plan(x, lay, training, call.device)
        pdt = plan.dtype.param
        scale, bias = as_param(cp, call["gamma"], pdt), as_param(cp, call["beta"], pdt)
        y = _layout.empty(cp, x.shape, x.dtype, lay)
        h = handle(call.device, current_stream())
        one, zero = plan.dtype.one, plan.dtype.zero
        if training:
            mean, invstd = cp.empty(x.shape[1], pdt), cp.empty(x.shape[1], pdt)
            rm = rv = None
            if running_mean is not None:
                rm, rv = as_param(cp, running_mean, pdt), as_param(cp, running_var, pdt)
            c.cudnnBatchNormalizationForwardTraining(
                h, plan.mode, one, zero, plan.x.handle, x.data.ptr, plan.x.handle, y.data.ptr, plan.param.handle,
                scale.data.ptr, bias.data.ptr, float(momentum), 0 if rm is None else rm.data.ptr,
                0 if rv is None else rv.data.ptr, eps, mean.data.ptr, invstd.data.ptr)
            write_back(running_mean, rm)
            write_back(running_var, rv)
        else:
            mean, var = running_mean.astype(pdt), running_var.astype(pdt)   # copies: a snapshot
            c.cudnnBatchNormalizationForwardInference(
                h, plan.mode, one, zero, plan.x.handle, x.data.ptr, plan.x.handle, y.data.ptr, plan.param.handle,
                scale.data.ptr, bias.data.ptr, mean.data.ptr, var.data.ptr, eps)
            invstd = (1.0 / cp.sqrt(var + eps)).astype(pdt, copy=False)
        return y, (private(cp, x, call["x"]), private(cp, scale, call["gamma"]), mean, invstd)


def batchnorm_backward(residuals: tuple, cotangents: tuple, training: bool, momentum: float,
                       eps: float) -> tuple[Any, Any, Any]:
    """(dx, dgamma, dbeta) from the saved (x, gamma, mean, invstd) and dy: cuDNN's backward when training,
    the affine map's gradient (CuPy) for inference."""
    cp = cupy()
    saved_x, scale, mean, invstd = residuals
    (dy,) = cotangents
    device, dtype = saved_x.device.id, saved_x.dtype
    eps = epsilon(eps, warn=False)          # the forward warned
    with Call("batchnorm pullback", {"training": training, "momentum": momentum, "eps": eps}, device=device,
              dy=dy) as back:
        x, lay = _layout_of(cp, saved_x)
        plan = _plan(x, lay, training, device)
        pdt = plan.dtype.param
        dy = cotangent("dy", back["dy"], x.shape, dtype, lay, device)
        if training:
            one, zero = plan.dtype.one, plan.dtype.zero
            dx = _layout.empty(cp, x.shape, dtype, lay)
            dgamma, dbeta = cp.empty(x.shape[1], pdt), cp.empty(x.shape[1], pdt)
            lib().cudnnBatchNormalizationBackward(
                handle(device, current_stream()), plan.mode, one, zero, one, zero, plan.x.handle, x.data.ptr,
                plan.x.handle, dy.data.ptr, plan.x.handle, dx.data.ptr, plan.param.handle, scale.data.ptr,
                dgamma.data.ptr, dbeta.data.ptr, eps, mean.data.ptr, invstd.data.ptr)
        else:
            dx, dgamma, dbeta = affine_pullback(cp, x, dy, scale, mean, invstd, pdt)
            dx = _layout.in_layout(cp, dx, lay, dtype)
        return dx, dgamma.astype(dtype, copy=False), dbeta.astype(dtype, copy=False)


def batchnorm_residuals(x: Any, gamma: Any, beta: Any, running_mean: Any, running_var: Any, training: bool,
                        momentum: float, eps: float) -> tuple[ArraySpec, ...]:
    """x (its shape and dtype), then gamma, the mean and the inverse standard deviation (batch statistics
    when training, running ones for inference), one per channel in cuDNN's parameter dtype (float32 for
    half-precision x, else x's dtype)."""
    param = ArraySpec((x.shape[1],), np.dtype(DTYPES[x.dtype].param))
    return ArraySpec(tuple(x.shape), x.dtype), param, param, param
