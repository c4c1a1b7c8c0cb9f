"""Batch normalisation per channel (axis 1), training and inference, in float64.

Training normalises with the batch statistics (biased variance) and, when running statistics are given,
updates them in place, in their own dtype: ``running = (1 - momentum) * running + momentum * batch`` with
the UNBIASED batch variance, as PyTorch does. Inference normalises with the running statistics (as they
are at the call) and its backward differentiates that affine map. Saves x normalised and gamma * invstd.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.reference._arrays import F64, as64, cast, channel_shape, channel_sum, cotangent
from dnnbind.highlevel.residual import ArraySpec


def batchnorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, running_mean: np.ndarray | None,
                      running_var: np.ndarray | None, training: bool, momentum: float,
                      eps: float) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """y = (x - mean) / sqrt(var + eps) * gamma + beta."""
    x64, shape = as64(x), channel_shape(x)
    if training:
        count = x.size // x.shape[1]
        mean = channel_sum(x64) / count
        var = channel_sum((x64 - mean.reshape(shape)) ** 2) / count
        if running_mean is not None and running_var is not None:
            _update(running_mean, mean, momentum)
            _update(running_var, var * count / (count - 1), momentum)
    else:
        assert running_mean is not None and running_var is not None, "inference needs them (the op checks)"
        mean, var = as64(running_mean), as64(running_var)
    with np.errstate(divide="ignore", invalid="ignore"):   # eps = 0 and a zero variance: inf, as in torch
        invstd = 1.0 / np.sqrt(var + eps)
        xhat = (x64 - mean.reshape(shape)) * invstd.reshape(shape)
    y = xhat * as64(gamma).reshape(shape) + as64(beta).reshape(shape)
    return cast(y, x.dtype), (xhat, as64(gamma) * invstd)


def _update(running: np.ndarray, batch: np.ndarray, momentum: float) -> None:
    np.copyto(running, (1.0 - momentum) * as64(running) + momentum * batch, casting="unsafe")


def batchnorm_backward(saved: tuple, cotangents: tuple, training: bool, momentum: float,
                       eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dgamma, dbeta); in training the batch statistics depend on x too."""
    (xhat, scale), (dy,) = saved, cotangents
    d, shape = cotangent("dy", dy, xhat.shape, F64), channel_shape(xhat)
    count = xhat.size // xhat.shape[1]
    dbeta, dgamma = channel_sum(d), channel_sum(d * xhat)
    if training:
        dx = (d - (dbeta / count).reshape(shape) - xhat * (dgamma / count).reshape(shape)) * scale.reshape(shape)
    else:
        dx = d * scale.reshape(shape)
    return cast(dx, dy.dtype), cast(dgamma, dy.dtype), cast(dbeta, dy.dtype)


def batchnorm_residuals(x: ArraySpec, gamma: ArraySpec, beta: ArraySpec, running_mean: Any, running_var: Any,
                        training: bool, momentum: float, eps: float) -> tuple[ArraySpec, ArraySpec]:
    return ArraySpec(tuple(x.shape), F64), ArraySpec((x.shape[1],), F64)
