"""maxpool and meanpool (PoolDims)."""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.dims.checks import check_divisor_override
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.specs.base import ArrayArg, Autocast, EmptyCall, Layout, OpSpec, Output, Param, Unbatching
from dnnbind.highlevel.specs.second_order import linear, selection
from dnnbind.highlevel.unbatched import pool_is_unbatched

ARRAYS = (ArrayArg("x", gradient="dx", batched=True),)
_PER_DIM = ("window", "stride", "padding", "dilation")
#: x (C, *spatial) is one sample when an argument given per spatial dimension says the spatial rank
UNBATCHED = Unbatching(lambda arrays, arguments: pool_is_unbatched(
    arrays["x"].shape, **{k: arguments[k] for k in _PER_DIM if k in arguments}))

def _runs_in_float32(arguments: dict[str, Any], x_shape: tuple[int, ...], device: str) -> bool:
    """Whether torch.autocast runs the call in float32: CPU max_pool3d and avg_pool3d; every other pooling
    in x's dtype, and a call whose x fits no rank too (the op's checks refuse it, naming x)."""
    if device != "cpu":
        return False
    try:
        unbatched = pool_is_unbatched(x_shape, **{k: arguments[k] for k in _PER_DIM if k in arguments})
    except ValueError:
        return False
    return len(x_shape) - (1 if unbatched else 2) == 3


AUTOCAST = Autocast(float32=_runs_in_float32)


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}={value!r} must be a bool")
    return bool(value)


def _check_maxpool(x: Any, *, window: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                   ceil_mode: bool = False, return_indices: bool = False) -> tuple:
    return_indices = _check_bool("return_indices", return_indices)
    return (PoolDims(x.shape, window, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                     dtype=x.dtype), return_indices)


def _check_meanpool(x: Any, *, window: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True,
                    ceil_mode: bool = False, divisor_override: int | None = None) -> tuple:
    count_include_pad = _check_bool("count_include_pad", count_include_pad)
    divisor_override = check_divisor_override(divisor_override)
    return (PoolDims(x.shape, window, stride=stride, padding=padding, ceil_mode=ceil_mode, dtype=x.dtype),
            count_include_pad, divisor_override)


def _empty_maxpool(args: tuple) -> EmptyCall:
    x, dims = args[0], args[1]
    indices = len(args) > 2 and bool(args[2])         # return_indices: (y, indices)
    return EmptyCall([dims.y_shape] * (1 + indices), lambda zeros: zeros(x.shape))


def _empty_meanpool(args: tuple) -> EmptyCall:
    x, dims = args[0], args[1]
    return EmptyCall([dims.y_shape], lambda zeros: zeros(x.shape))


_UNBATCHED_DOC = """
    Unbatched x: the spatial rank is the length of the arguments given per spatial dimension (window,
    stride, padding, dilation as a list or tuple); x (C, *spatial) with one dimension more than that is
    one sample, and y, indices, dy and dx then have no batch axis. With ints only the spatial rank is
    x.ndim - 2, as for a batch: x of 3 dimensions with ``window=2`` is a batch of 1-d signals (N, C, L);
    ``window=(2, 2)`` makes it one 2-d sample (C, H, W).
    """

MAXPOOL = OpSpec(
    name="maxpool",
    doc="""Max pooling over 1 to 3 spatial dims; stride defaults to the window, padding <= window/2.

    Like torch.nn.functional.max_pool{1,2,3}d: ``dilation`` spreads the window (window position k reads
    k * dilation), ``ceil_mode`` rounds the output size up (the last window must start inside x or its
    low padding). Padding never wins (it acts as -inf). Ties: the gradient goes to the first maximum of
    the window in row-major order, as in PyTorch. Returns (y, pullback) with pullback(dy) -> dx; with
    ``return_indices`` ((y, indices), pullback), indices (int64, y's shape) being torch's: the flat index
    of every window's maximum in its (N, C) plane of x.
    """ + _UNBATCHED_DOC,
    params=(Param("x"), Param("window", kind="per_dim"), Param("stride", None, True, kind="per_dim?"),
            Param("padding", 0, True, kind="padding"), Param("dilation", 1, True, kind="per_dim"), Param("ceil_mode", False, True, "bool"),
            Param("return_indices", False, True, "bool")),
    arrays=ARRAYS, static=("dims", "return_indices"),
    outputs=(Output("y", "dy"), Output("indices", dtype="int64", when="return_indices")),
    check=_check_maxpool, empty=_empty_maxpool, unbatched=UNBATCHED,
    features=("padding", "dilation", "ceil_mode", "return_indices"), samples_independent=True,
    second_order=selection, backward_reads=("x", "indices"), results_layout=Layout(channels_last_from=("x",)),
    autocast=AUTOCAST,
    tensor_doc="""Max pooling like ``torch.nn.functional.max_pool{1,2,3}d`` (stride defaults to the window); with
    ``return_indices`` (y, indices), indices int64 and without gradient, as torch's.""",
)

MEANPOOL = OpSpec(
    name="meanpool",
    doc="""Average pooling (torch's avg_pool); with ``count_include_pad`` the padding counts in the divisor.

    ``ceil_mode`` rounds the output size up as torch does; the windows it adds divide, as in torch, by
    their part inside x and the padding (``count_include_pad``) or inside x alone, never by the part
    past the padding. ``divisor_override`` (a non-zero int, negative allowed) divides every window's
    sum (padding adding zeros) by itself instead, whatever ``count_include_pad`` says, as torch's
    avg_pool2d/3d(divisor_override=...) do (see :meth:`PoolDims.mean_divisor`).

    Unbatched x, as for :func:`maxpool`: with window, stride or padding given per spatial dimension (a
    list or tuple), x (C, *spatial) with one dimension more than their length is one sample (y, dy and
    dx without the batch axis); with ints only, x is a batch (N, C, *spatial) whatever its rank.
    """,
    params=(Param("x"), Param("window", kind="per_dim"), Param("stride", None, True, kind="per_dim?"),
            Param("padding", 0, True, kind="padding"), Param("count_include_pad", True, True, "bool"), Param("ceil_mode", False, True, "bool"),
            Param("divisor_override", None, True, "int | None")),
    arrays=ARRAYS, static=("dims", "count_include_pad", "divisor_override"), outputs=(Output("y", "dy"),),
    check=_check_meanpool, empty=_empty_meanpool, unbatched=UNBATCHED,
    features=("padding", "count_include_pad=False", "ceil_mode", "divisor_override"), samples_independent=True,
    second_order=linear, backward_reads=("x",), autocast=AUTOCAST,
    results_layout=Layout(channels_last_from=("x",), ranks=(4,)),      # (torch's 3-d average pooling: C order)
    tensor_doc="""Average pooling like ``torch.nn.functional.avg_pool{1,2,3}d``; ``divisor_override`` (a non-zero int)
    divides every window's sum by itself, as avg_pool2d/3d's does (here also in 1-d).""",
)
