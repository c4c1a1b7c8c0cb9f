"""Batch normalisation per channel (axis 1), training and inference.

Training normalises with the batch statistics (biased variance) and, when running statistics are
given, updates them in place: ``running = (1 - momentum) * running + momentum * batch`` with the
UNBIASED batch variance, as PyTorch does. Inference normalises with the running statistics; its
backward differentiates that affine formula. The residuals (x normalised, gamma * invstd) are the
forward's own, so later updates of the running statistics or of gamma do not change them; where the
caller lends x (:func:`dnnbind.highlevel.grad_mode.borrowing`), x itself and the statistics that
normalise it instead of x normalised, so that the forward writes and keeps no second array of x's size.

Where dnnbind's C kernels are built (:mod:`native`), the statistics are summed in float64 and the
normalisation and the data gradient are one pass each; numpy otherwise.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from dnnbind.highlevel.cpu import native
from dnnbind.highlevel.grad_mode import borrowing, saving
from dnnbind.highlevel.cpu.channels import channel_sums, native_runs
from dnnbind.highlevel.cpu._precision import cotangent, half_backward, half_forward, half_residuals
from dnnbind.highlevel.residual import ArraySpec


@functools.partial(half_forward, inplace=(3, 4))   # the running statistics are updated in place
def batchnorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, running_mean: np.ndarray | None,
                      running_var: np.ndarray | None, training: bool, momentum: float,
                      eps: float) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, per channel; saves x normalised and gamma * invstd."""
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    dtype = x.dtype
    fast = native_runs(x)
    if fast:
        x = np.ascontiguousarray(x)
    centered = None
    if training:
        count = x.size // x.shape[1]
        if fast:
            mean, var = native.channel_moments(x)
        else:
            mean = channel_sums(x) / count
            centered = x - mean.reshape(shape)
            var = channel_sums(centered * centered) / count
        if running_mean is not None and running_var is not None:
            _update(running_mean, mean, momentum)
            _update(running_var, var * (count / (count - 1)), momentum)
    else:
        assert running_mean is not None and running_var is not None, "inference needs them (the op checks)"
        mean = running_mean.astype(dtype)  # a copy: the running stats may change after this call
        var = running_var.astype(dtype)
    with np.errstate(divide="ignore"):        # eps = 0 and a zero variance (inference): inf, as in torch
        invstd = (1.0 / np.sqrt(var + eps)).astype(dtype)
    mean = mean.astype(dtype)
    lent = borrowing()                    # x itself is saved (the backward normalises it again), not xhat
    if fast:
        keep = saving() and not lent      # xhat is written only where it is saved
        xhat, y = native.batchnorm_normalize(x, mean, invstd, _own(gamma, dtype), _own(beta, dtype), keep_xhat=keep)
    else:
        if centered is None:
            centered = x - mean.reshape(shape)
        xhat = centered * invstd.reshape(shape)
        del centered
        y = xhat * gamma.reshape(shape) + beta.reshape(shape)
    if not saving():
        return y, ()
    # gamma * invstd: the backward's own (gamma may change later)
    if lent:
        return y, (x, mean, invstd, gamma * invstd)
    assert xhat is not None, "written where saved"
    return y, (xhat, np.zeros_like(mean), np.ones_like(invstd), gamma * invstd)


def _own(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A per-channel parameter as the kernels take it: C-contiguous, of the data's dtype."""
    return np.ascontiguousarray(a, dtype=dtype)


@half_backward
def batchnorm_backward(saved: tuple, cotangents: tuple, training: bool, momentum: float,
                       eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # xhat = (a - shift) * invstd: a is x normalised (shift 0, invstd 1) or x itself (see the forward)
    (a, shift, invstd, scale), (dy,) = saved, cotangents
    dy = cotangent("dy", dy, a.shape, a.dtype)
    shape = (1, a.shape[1]) + (1,) * (a.ndim - 2)
    count = a.size // a.shape[1]
    dtype = a.dtype
    if native_runs(a):
        dy = np.ascontiguousarray(dy)
        sums, products = native.channel_sums(dy, a)
        assert products is not None
        # sum(dy * xhat), in float64: the products' sum about the shift
        dot = (products - shift.astype(np.float64) * sums) * invstd.astype(np.float64)
        dbeta, dgamma = sums.astype(dtype), dot.astype(dtype)
        if not training:
            return native.channel_affine(dy, _own(scale, dtype), np.zeros(dy.shape[1], dtype)), dgamma, dbeta
        mean_dy, k = (sums / count).astype(dtype), (dot / count * invstd).astype(dtype)
        return native.batchnorm_data_grad(dy, a, _own(shift, dtype), mean_dy, k, _own(scale, dtype)), dgamma, dbeta
    xhat = (a - shift.reshape(shape)) * invstd.reshape(shape)
    dbeta = channel_sums(dy)
    dgamma = channel_sums(dy * xhat)
    if training:
        # d/dx of gamma * (x - mean(x)) * invstd(x): the batch statistics depend on x too.
        dx = dy - (dbeta / count).reshape(shape) - xhat * (dgamma / count).reshape(shape)
        dx *= scale.reshape(shape)
    else:
        dx = dy * scale.reshape(shape)
    return dx, dgamma, dbeta


@half_residuals
def batchnorm_residuals(x: ArraySpec, gamma: ArraySpec, beta: ArraySpec, running_mean: Any, running_var: Any,
                        training: bool, momentum: float, eps: float) -> tuple[ArraySpec, ...]:
    """x normalised, or x itself where lent (x's shape); the shift and invstd that normalise it and
    gamma * invstd (one per channel each)."""
    channel = ArraySpec((x.shape[1],), x.dtype)
    return ArraySpec(tuple(x.shape), x.dtype, ("x",) if borrowing() else None), channel, channel, channel


def _update(running: np.ndarray, batch: np.ndarray, momentum: float) -> None:
    """running <- (1 - momentum) * running + momentum * batch, in place, in running's own dtype."""
    np.copyto(running, (1.0 - momentum) * running.astype(batch.dtype) + momentum * batch, casting="unsafe")
