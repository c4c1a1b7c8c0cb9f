"""Batch normalization's shape checks (per channel over axis 1)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from dnnbind.highlevel.dims.checks import check_array_shape, check_shape


def check_batchnorm(x_shape: Sequence[int], gamma_shape: Sequence[int], beta_shape: Sequence[int],
                    running_mean_shape: Sequence[int] | None, running_var_shape: Sequence[int] | None,
                    training: bool) -> int:
    """Check batch-norm shapes (per channel over axis 1) and return the channel count."""
    x_shape = check_array_shape("x", x_shape, (2, 3, 4, 5), "(N, C) or (N, C, 1 to 3 spatial dimensions)",
                                 tuple(range(len(x_shape))))
    channels = x_shape[1]
    check_shape("gamma", gamma_shape, (channels,), "one value per channel of x")
    check_shape("beta", beta_shape, (channels,), "one value per channel of x")
    if (running_mean_shape is None) != (running_var_shape is None):
        raise ValueError("running_mean and running_var must be given together (or both be None)")
    if running_mean_shape is not None and running_var_shape is not None:
        check_shape("running_mean", running_mean_shape, (channels,), "one value per channel of x")
        check_shape("running_var", running_var_shape, (channels,), "one value per channel of x")
    elif not training:
        raise ValueError("training=False needs running_mean and running_var (inference uses the running stats)")
    if training:
        count = int(np.prod(x_shape)) // channels if channels else 0
        if count == 1:
            raise ValueError(f"x has shape {x_shape}: training needs more than one value per channel")
    return channels


# ----------------------------------------------------------------------------------------------
