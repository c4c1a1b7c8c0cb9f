"""Batch normalisation per channel (axis 1), training and inference.

Training normalises with the batch statistics (biased variance) and, when running statistics are
given, updates them in place: ``running = (1 - momentum) * running + momentum * batch`` with the
UNBIASED batch variance, as PyTorch does. Inference normalises with the running statistics; its
pullback differentiates that affine formula. The pullback gets its own copies of the mean and inverse
standard deviation used, so later updates of the running statistics do not change it.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from dnnbind.highlevel.reference._precision import cotangent, half_in_float32


def _channel_sums(a: np.ndarray) -> np.ndarray:
    """Sum over every axis but 1, contiguous reductions first."""
    return a.reshape(a.shape[0], a.shape[1], -1).sum(axis=2).sum(axis=0)


@half_in_float32
def batchnorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, *, running_mean: np.ndarray | None,
              running_var: np.ndarray | None, training: bool, momentum: float,
              eps: float) -> tuple[np.ndarray, Callable]:
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, per channel."""
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    dtype = x.dtype
    if training:
        count = x.size // x.shape[1]
        mean = _channel_sums(x) / count
        centered = x - mean.reshape(shape)
        var = _channel_sums(centered * centered) / count
        if running_mean is not None and running_var is not None:
            _update(running_mean, mean, momentum)
            _update(running_var, var * (count / (count - 1)), momentum)
    else:
        assert running_mean is not None and running_var is not None, "inference needs them (the op checks)"
        count = 0
        mean = running_mean.astype(dtype)  # a copy: the running stats may change after this call
        var = running_var.astype(dtype)
        centered = x - mean.reshape(shape)
    invstd = (1.0 / np.sqrt(var + eps)).astype(dtype)
    xhat = centered * invstd.reshape(shape)
    del centered
    y = xhat * gamma.reshape(shape) + beta.reshape(shape)
    scale = (gamma * invstd).reshape(shape)      # the pullback's own: gamma may change after this call

    def pullback(dy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        dy = cotangent("dy", dy, y.shape, dtype)
        dbeta = _channel_sums(dy)
        dgamma = _channel_sums(dy * xhat)
        if training:
            # d/dx of gamma * (x - mean(x)) * invstd(x): the batch statistics depend on x too.
            dx = dy - (dbeta / count).reshape(shape) - xhat * (dgamma / count).reshape(shape)
            dx *= scale
        else:
            dx = dy * scale
        return dx, dgamma, dbeta

    return y, pullback


def _update(running: np.ndarray, batch: np.ndarray, momentum: float) -> None:
    """running <- (1 - momentum) * running + momentum * batch, in place, in running's own dtype."""
    np.copyto(running, (1.0 - momentum) * running.astype(batch.dtype) + momentum * batch, casting="unsafe")
