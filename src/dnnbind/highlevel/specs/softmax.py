"""softmax and logsoftmax along one axis."""
from __future__ import annotations

import numbers
from typing import Any

from dnnbind.highlevel.dims.checks import AxisError, check_dtype, normalize_axis
from dnnbind.highlevel.specs import second_order
from dnnbind.highlevel.specs.base import ArrayArg, EmptyCall, OpSpec, Output, Param


def like_x(args: tuple) -> EmptyCall:
    """The empty call of an op whose result and gradient have x's shape (the pointwise ops)."""
    x = args[0]
    return EmptyCall([tuple(x.shape)], lambda zeros: zeros(x.shape))


def _check_axis(x: Any, *, axis: int = 1) -> tuple:
    check_dtype("x", x.dtype)
    ndim = len(x.shape)
    if ndim == 0 and isinstance(axis, numbers.Integral) and axis not in (0, -1):
        raise AxisError(f"axis={axis!r} is out of range for a 0-d array x (it takes axis 0 or -1, as in PyTorch)")
    return (normalize_axis(axis, max(ndim, 1)),)


def _spec(name: str, what: str, rule: Any, torch_name: str) -> OpSpec:
    return OpSpec(
        name=name,
        doc=f"{what} along ``axis`` (any axis, negative allowed). Returns (y, pullback) with pullback(dy) -> dx.",
        params=(Param("x"), Param("axis", 1, True, "int")), arrays=(ArrayArg("x", gradient="dx"),),
        static=("axis",), outputs=(Output("y", "dy"),), check=_check_axis, empty=like_x, pointwise=True,
        features=("any axis",), second_order=rule, backward_reads=("y",),
        samples_independent=lambda arguments, ndim: ndim >= 2 and arguments["axis"] % ndim != 0,
        tensor_doc=f"{what} along ``axis`` (``torch.{torch_name}(x, dim=axis)``).")


SOFTMAX = _spec("softmax", "Softmax", second_order.softmax, "softmax")
LOGSOFTMAX = _spec("logsoftmax", "Log-softmax", second_order.logsoftmax, "log_softmax")
