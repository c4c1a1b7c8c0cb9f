"""Batch normalization per channel (axis 1)."""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.dims.batchnorm import check_batchnorm
from dnnbind.highlevel.dims.checks import (check_dtype, check_non_negative_float, check_positive_float,
                                           check_real, check_same_dtype)
from dnnbind.highlevel.specs import second_order
from dnnbind.highlevel.specs.base import ArrayArg, EmptyCall, Layout, OpSpec, Output, Param


def _check(x: Any, gamma: Any, beta: Any, running_mean: Any = None, running_var: Any = None, *,
           training: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> tuple:
    check_same_dtype("x", x.dtype, gamma=gamma, beta=beta)
    for name, stat in (("running_mean", running_mean), ("running_var", running_var)):
        if stat is not None:
            check_dtype(name, stat.dtype)
    if not isinstance(training, (bool, np.bool_)):
        raise TypeError(f"training={training!r} must be a bool")
    check_batchnorm(x.shape, gamma.shape, beta.shape, None if running_mean is None else running_mean.shape,
                    None if running_var is None else running_var.shape, bool(training))
    # as torch: any finite momentum (the update is an affine mix either way); eps > 0 in training and
    # eps >= 0 in inference (cuDNN's CUDNN_BN_MIN_EPSILON is 0; a zero variance then gives inf, as in torch)
    momentum = check_real("momentum", momentum)
    if training:
        return True, momentum, check_positive_float("eps", eps)
    return False, momentum, check_non_negative_float("eps", eps)


def check_writable(**arrays: Any) -> None:
    """ValueError naming the first array that cannot be updated in place (a read-only numpy array)."""
    for name, array in arrays.items():
        if not getattr(getattr(array, "flags", None), "writeable", True):
            others = [n for n in arrays if n != name]
            raise ValueError(f"{name} is read-only, but training updates it in place"
                             + (f" (with {', '.join(others)})" if others else "")
                             + f"; pass a writable array such as {name}.copy()")


def _every_call(arrays: tuple, static: tuple) -> None:
    """Writability is no part of a plan's key: checked on every training call with running statistics."""
    if static[0] and arrays[3] is not None:
        check_writable(running_mean=arrays[3], running_var=arrays[4])


def _empty(args: tuple) -> EmptyCall:
    x, gamma, beta = args[:3]
    return EmptyCall([tuple(x.shape)], lambda zeros: (zeros(x.shape), zeros(gamma.shape), zeros(beta.shape)))


BATCHNORM = OpSpec(
    name="batchnorm",
    doc="""Batch normalisation per channel (axis 1) of x (N, C) or (N, C, *spatial).

    training=True: batch statistics; running_mean/running_var, when given, are updated IN PLACE with
    ``momentum`` and the unbiased batch variance. training=False: the running statistics are used (and
    required). gamma and beta have x's dtype; the running statistics may have any float dtype.
    Returns (y, pullback) with pullback(dy) -> (dx, dgamma, dbeta).
    """,
    params=(Param("x"), Param("gamma"), Param("beta"), Param("running_mean", None, True),
            Param("running_var", None, True), Param("training", True, True, "bool"),
            Param("momentum", 0.1, True, "float"), Param("eps", 1e-5, True, "float")),
    arrays=(ArrayArg("x", gradient="dx"), ArrayArg("gamma", gradient="dgamma"), ArrayArg("beta", gradient="dbeta"),
            ArrayArg("running_mean", optional=True, own_dtype=True), ArrayArg("running_var", optional=True, own_dtype=True)),
    static=("training", "momentum", "eps"), outputs=(Output("y", "dy"),), check=_check, empty=_empty,
    regroup=lambda zeros, static: tuple(zeros), every_call=_every_call,
    updated_in_place=("running_mean", "running_var"), updates=lambda arguments: arguments["training"],
    update_reads=("x",),
    # (torch's batch norm saves its running statistics in training too, and its own update of them, like
    # this op's, leaves their version counters alone: two forwards before one backward are fine)
    backward_reads=("x", "gamma", "running_mean", "running_var"),
    features=("training", "inference", "running statistics"), second_order=second_order.batchnorm,
    results_layout=Layout(channels_last_from=("x",)),
    tensor_doc="""Batch normalisation over axis 1 like ``torch.nn.functional.batch_norm``; the running statistics
    are updated in place when training (the op returns the new values; they are copied back here, which
    torch.compile and torch.export trace as buffer updates).""",
)
