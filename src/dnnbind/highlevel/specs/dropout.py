"""Inverted dropout."""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from dnnbind.highlevel.dims.checks import check_dtype, check_probability
from dnnbind.highlevel.specs.base import ArrayArg, Layout, OpSpec, Output, Param
from dnnbind.highlevel.specs.second_order import linear
from dnnbind.highlevel.specs.softmax import like_x


def check_seed(seed: Any) -> Any:
    """None, a non-negative int or a numpy Generator."""
    if seed is None or isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed={seed!r} must be None, a non-negative int or a numpy.random.Generator")
    if seed < 0:
        raise ValueError(f"seed={seed!r} must be non-negative")
    return int(seed)


def _check(x: Any, *, p: float, seed: Any = None) -> tuple:
    check_dtype("x", x.dtype)
    return check_probability("p", p), check_seed(seed)


DROPOUT = OpSpec(
    name="dropout",
    doc="""Inverted dropout: zero each element with probability p, scale the rest by 1/(1 - p).

    p is in [0, 1]; p = 1 gives zeros (as in PyTorch). ``seed`` (an int or a numpy Generator) makes the
    mask reproducible; None draws fresh entropy. Returns (y, pullback) with pullback(dy) -> dx; the
    pullback keeps the mask (``pullback.mask``, read-only, on the reference backend).
    """,
    params=(Param("x"), Param("p", annotation="float"), Param("seed", None, True, kind="tensor?")),
    arrays=(ArrayArg("x", gradient="dx"),), static=("p", "seed"), outputs=(Output("y", "dy"),),
    check=_check, empty=like_x, pointwise=True, mask_residuals=True, tensor_arguments=("seed",),
    features=("seed",), second_order=linear, random=lambda arguments: 0 < arguments["p"] < 1,
    # (torch's p = 1 multiplies by a 0-d zero: its backward reads the cotangent alone)
    results_layout=Layout(like_x=True, gradient_from=lambda arguments: ("dy",) if arguments["p"] == 1 else ("dy", "x")),
    result_stands_for_x=lambda arguments: True,           # (its mask comes from the seed alone)
    tensor_doc="""Inverted dropout with probability ``p``. Without a seed one is drawn from torch's default
    generator, so ``torch.manual_seed`` makes it reproducible.""",
)
