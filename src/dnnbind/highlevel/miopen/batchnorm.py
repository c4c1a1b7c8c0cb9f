"""Batch normalisation per channel on MIOpen (miopenBNSpatial).

Training: miopenBatchNormalizationForwardTraining normalises with the batch statistics and saves the
batch mean and inverse variance (really the inverse standard deviation, 1/sqrt(var + eps)), which
the backward hands to miopenBatchNormalizationBackward. Inference:
miopenBatchNormalizationForwardInference with copies of the running statistics (so later updates do
not change the backward); its backward differentiates that affine map with CuPy (MIOpen's backward is
the training one). Either way the residuals are (x, gamma, mean, invstd): x packed, the others per
channel in the parameters' dtype (see :func:`batchnorm_residuals`).

MIOpen wants x packed: x is made C-contiguous (NCHW) first, and (N, C) / (N, C, L) inputs are
described as (N, C, 1, 1) / (N, C, 1, L). Running statistics follow PyTorch's rule (momentum, the
unbiased batch variance), which is MIOpen's too. MIOpen keeps gamma, beta and the statistics in the
dtype of the descriptor it derives, float32 for every data type in MIOpen 3.4 (float64 data too):
statistics of another dtype go through a copy that is written back in place.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.batchnorm import affine_pullback, as_param, write_back
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.layout import lift
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.miopen._lib import dtype_name, handle, lib, scaling
from dnnbind.highlevel.miopen.descriptors import TensorDescriptor
from dnnbind.highlevel.residual import ArraySpec

PLANS: PlanCache["BatchNormPlan"] = PlanCache("miopen.batchnorm", maxsize=128)


class BatchNormPlan:
    """The packed descriptor of x (4-d or 5-d), the per-channel descriptor MIOpen derives from it, and
    the dtype of gamma, beta and the statistics that MIOpen's derived descriptor asks for."""

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.mode = lib.miopenBNSpatial
        self.x = TensorDescriptor(lift(shape), dtype)
        self.param = TensorDescriptor((1,), dtype)
        lib.miopenDeriveBNTensorDescriptor(self.param.handle, self.x.handle, self.mode)
        self.param_dtype = dtype_name(self.param.read()[0])


def plan_for(shape: tuple[int, ...], dtype: str) -> BatchNormPlan:
    return PLANS.get((shape, dtype), lambda: BatchNormPlan(shape, dtype))


def batchnorm_forward(x: Any, gamma: Any, beta: Any, running_mean: Any, running_var: Any, training: bool,
                      momentum: float, eps: float) -> tuple[Any, tuple[Any, Any, Any, Any]]:
    """y = (x - mean) / sqrt(var + eps) * gamma + beta per channel (see :func:`dnnbind.batchnorm`);
    training updates ``running_mean`` / ``running_var`` in place when given."""
    cp = cupy()
    with Call("batchnorm", _params(training, momentum, eps), dlpack_devices=DLPACK_ROCM, x=x, gamma=gamma,
              beta=beta, running_mean=running_mean, running_var=running_var) as call:
        x = cp.ascontiguousarray(call["x"])
        running_mean, running_var = call["running_mean"], call["running_var"]
        plan = plan_for(tuple(x.shape), x.dtype.name)
        pdt = plan.param_dtype
        scale, bias = as_param(cp, call["gamma"], pdt), as_param(cp, call["beta"], pdt)
        y = cp.empty_like(x)
        h = handle(call.device, current_stream()).ptr
        one, zero = scaling(x.dtype)
        xd, pd = plan.x.handle, plan.param.handle
        if training:
            channels = x.shape[1]
            mean, invstd = cp.empty(channels, pdt), cp.empty(channels, pdt)
            rm = rv = None
            if running_mean is not None:
                rm, rv = as_param(cp, running_mean, pdt), as_param(cp, running_var, pdt)
            lib.miopenBatchNormalizationForwardTraining(
                h, plan.mode, one, zero, xd, x.data.ptr, xd, y.data.ptr, pd, scale.data.ptr, bias.data.ptr,
                float(momentum), None if rm is None else rm.data.ptr, None if rv is None else rv.data.ptr, eps,
                mean.data.ptr, invstd.data.ptr)
            write_back(running_mean, rm)
            write_back(running_var, rv)
        else:
            mean, var = running_mean.astype(pdt), running_var.astype(pdt)     # copies: a snapshot
            lib.miopenBatchNormalizationForwardInference(
                h, plan.mode, one, zero, xd, x.data.ptr, xd, y.data.ptr, pd, scale.data.ptr, bias.data.ptr,
                mean.data.ptr, var.data.ptr, eps)
            invstd = 1.0 / cp.sqrt(var + eps)
        # the backward's own x and gamma (the caller may change theirs)
        return y, (private(cp, x, call["x"]), private(cp, scale, call["gamma"]), mean, invstd)


def batchnorm_backward(saved: tuple, cotangents: tuple, training: bool, momentum: float,
                       eps: float) -> tuple[Any, Any, Any]:
    """(dx, dgamma, dbeta): miopenBatchNormalizationBackward in training, the affine map's gradient else."""
    x, scale, mean, invstd = saved
    cp = cupy()
    device, dtype, pdt = x.device.id, x.dtype, scale.dtype
    with Call("batchnorm backward", _params(training, momentum, eps), device=device, dlpack_devices=DLPACK_ROCM,
              dy=cotangents[0]) as back:
        dy = cotangent("dy", back["dy"], x.shape, dtype, "NCHW", device, DLPACK_ROCM)
        if training:
            plan = plan_for(tuple(x.shape), dtype.name)
            one, zero = scaling(dtype)
            xd, pd = plan.x.handle, plan.param.handle
            dx = cp.empty_like(x)
            dgamma, dbeta = cp.empty(x.shape[1], pdt), cp.empty(x.shape[1], pdt)
            lib.miopenBatchNormalizationBackward(
                handle(device, current_stream()).ptr, plan.mode, one, zero, one, zero, xd, x.data.ptr, xd,
                dy.data.ptr, xd, dx.data.ptr, pd, scale.data.ptr, dgamma.data.ptr, dbeta.data.ptr, eps,
                mean.data.ptr, invstd.data.ptr)
        else:
            dx, dgamma, dbeta = affine_pullback(cp, x, dy, scale, mean, invstd, pdt.name)
            dx = dx.astype(dtype, copy=False)
        return dx, dgamma.astype(dtype, copy=False), dbeta.astype(dtype, copy=False)


def batchnorm_residuals(x: ArraySpec, gamma: ArraySpec, beta: ArraySpec, running_mean: Any, running_var: Any,
                        training: bool, momentum: float, eps: float) -> tuple[ArraySpec, ...]:
    """x (its shape and dtype), then gamma, the mean and the inverse standard deviation: one per channel,
    in the dtype MIOpen derives for the parameters (float32 in MIOpen 3.4; a host-side library call)."""
    param = ArraySpec((x.shape[1],), np.dtype(plan_for(tuple(x.shape), np.dtype(x.dtype).name).param_dtype))
    return (ArraySpec(tuple(x.shape), x.dtype), param, param, param)


def _params(training: bool, momentum: float, eps: float) -> dict[str, Any]:
    return {"training": training, "momentum": momentum, "eps": eps}
