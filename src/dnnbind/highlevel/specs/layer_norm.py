"""Layer normalization over the trailing dims (torch.nn.functional.layer_norm)."""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.dims.checks import check_non_negative_float, check_same_dtype
from dnnbind.highlevel.dims.layer_norm import check_layer_norm
from dnnbind.highlevel.specs import second_order
from dnnbind.highlevel.specs.base import ArrayArg, EmptyCall, OpSpec, Output, Param


def _check(x: Any, weight: Any, bias: Any, *, normalized_shape: Any, eps: float = 1e-5) -> tuple:
    check_same_dtype("x", x.dtype, weight=weight, bias=bias)
    ndim = check_layer_norm(x.shape, normalized_shape, None if weight is None else weight.shape,
                            None if bias is None else bias.shape)
    # as torch: eps = 0 is its definition (NaN only where a normalized slice is constant)
    return ndim, check_non_negative_float("eps", eps)


def _normalized(shape: Any) -> tuple:
    """normalized_shape as a tuple (an int is one trailing dim)."""
    return tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)


def _empty(args: tuple) -> EmptyCall:
    x, weight, bias = args[:3]
    return EmptyCall([tuple(x.shape)], lambda zeros: (zeros(x.shape),) + tuple(
        zeros(a.shape) for a in (weight, bias) if a is not None))


LAYER_NORM = OpSpec(
    name="layer_norm",
    doc="""Layer normalization of x over its trailing dims ``normalized_shape`` (an int or a sequence of ints).

    Like torch.nn.functional.layer_norm: ``y = (x - mean) / sqrt(var + eps) * weight + bias`` with the
    mean and the biased variance of each normalized slice; weight and bias (of shape normalized_shape,
    x's dtype) are optional; x of shape normalized_shape is one slice. Returns (y, pullback) with
    pullback(dy) -> (dx,), plus dweight when weight is given and dbias when bias is given, in that order.
    """,
    params=(Param("x"), Param("normalized_shape", kind="ints"), Param("weight", None), Param("bias", None),
            Param("eps", 1e-5, True, "float")),
    arrays=(ArrayArg("x", gradient="dx"),
            ArrayArg("weight", optional=True, gradient="dweight", dropped_when_none=True),
            ArrayArg("bias", optional=True, gradient="dbias", dropped_when_none=True)),
    static=("normalized_ndim", "eps"), outputs=(Output("y", "dy"),), check=_check, empty=_empty,
    skippable=True, features=("weight", "bias"), second_order=second_order.layer_norm,
    backward_reads=("x", "weight", "bias"),
    samples_independent=lambda arguments, ndim: len(_normalized(arguments["normalized_shape"])) < ndim,
    tensor_doc="""Layer normalization over the trailing dims ``normalized_shape`` like ``torch.nn.functional.layer_norm``;
    weight and bias optional.""",
)
