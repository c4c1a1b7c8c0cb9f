"""Pointwise activations: one op, its mode a static argument."""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.dims.checks import check_dtype, check_real, check_representable
from dnnbind.highlevel.specs import second_order
from dnnbind.highlevel.specs.base import ArrayArg, Layout, OpSpec, Output, Param
from dnnbind.highlevel.specs.softmax import like_x

#: activation modes -> default alpha (None: the mode takes no alpha)
ACTIVATION_DEFAULTS: dict[str, float | None] = {
    "relu": None,
    "sigmoid": None,
    "tanh": None,
    "identity": None,
    "elu": 1.0,            # alpha * (exp(x) - 1) for x <= 0
    "leaky_relu": 0.01,    # negative slope
    "clipped_relu": 6.0,   # ceiling: min(max(x, 0), alpha), relu6 by default
    "swish": 1.0,          # beta: x * sigmoid(beta * x), SiLU by default
}


#: the modes whose derivative is a step, 0 or 1 (relu's, clipped_relu's): their backwards select dy where it
#: is 1 and give 0 elsewhere, as torch's threshold and hardtanh backwards do (an inf or NaN dy where it is 0
#: gives 0, not dy * 0); a backend may save the derivative as a boolean mask
STEP_MODES = ("relu", "clipped_relu")

#: each mode's backward in differentiable operations, (ops, x, y, dy, alpha) -> dx, with PyTorch's
#: derivatives at the kinks (see the op's doc); what its second-order rule differentiates
DERIVATIVES: dict[str, Any] = {
    "relu": lambda ops, x, y, dy, alpha: ops.where(x > 0, dy, ops.zeros_like(dy)),
    "sigmoid": lambda ops, x, y, dy, alpha: dy * y * (1 - y),
    "tanh": lambda ops, x, y, dy, alpha: dy * (1 - y * y),
    "identity": lambda ops, x, y, dy, alpha: dy,
    # alpha e^x for x <= 0 (alpha (y + alpha) cancels), its own derivative 0 at x = 0 (torch's
    # elu_double_backward masks x < 0), NaN at NaN
    "elu": lambda ops, x, y, dy, alpha: ops.where(x > 0, dy, dy * alpha * ops.exp(ops.where(x < 0, x, x * 0))),
    "leaky_relu": lambda ops, x, y, dy, alpha: ops.where(x > 0, dy, dy * alpha),
    "clipped_relu": lambda ops, x, y, dy, alpha: ops.where((x > 0) & (x < alpha), dy, ops.zeros_like(dy)),
    "swish": lambda ops, x, y, dy, alpha: dy * (ops.sigmoid(alpha * x) * (1 + alpha * x * (1 - ops.sigmoid(alpha * x)))),
}


#: per mode, what its backward reads as PyTorch's own function saves it: its result y (relu, sigmoid,
#: tanh), its input x, or nothing (identity)
BACKWARD_READS: dict[str, tuple[str, ...]] = {
    "relu": ("y",), "sigmoid": ("y",), "tanh": ("y",), "identity": (),
    "elu": ("x",), "leaky_relu": ("x",), "clipped_relu": ("x",), "swish": ("x",),
}

#: the modes whose torch backward kernel takes x before the cotangent, so that x's layout decides the
#: gradient's where the two differ (threshold_backward, leaky_relu_backward); the others' take the
#: cotangent first
X_FIRST = frozenset({"relu", "leaky_relu"})


def gradient_from(arguments: dict[str, Any]) -> tuple[str, ...]:
    """Layout.gradient_from: the operands of torch's backward kernel for the mode, in its order."""
    return ("x", "dy") if arguments["mode"] in X_FIRST else ("dy", "x")


def result_stands_for_x(arguments: dict[str, Any]) -> bool:
    """Whether a mode's derivative reads the same from y as from x (OpSpec.result_stands_for_x): where it
    depends on x's sign or range alone, which y keeps (relu, clipped_relu, leaky_relu with a slope >= 0),
    or not on x at all (identity)."""
    mode = arguments["mode"]
    if mode == "leaky_relu":
        return activation_alpha(mode, arguments.get("alpha")) >= 0      # type: ignore[operator]
    return mode in (*STEP_MODES, "identity")


def activation_alpha(mode: Any, alpha: Any, dtype: str | None = None) -> float | None:
    """Check ``mode`` and return the coefficient the backend gets (its default when alpha is None); one
    given must fit the precision x's ``dtype`` (a supported name) is computed in."""
    if mode not in ACTIVATION_DEFAULTS:
        raise ValueError(f"mode={mode!r} must be one of {', '.join(ACTIVATION_DEFAULTS)}")
    default = ACTIVATION_DEFAULTS[mode]
    if default is None:
        if alpha is not None:
            raise ValueError(f"alpha={alpha!r} is not used by mode={mode!r}; leave it None")
        return None
    if alpha is None:
        return default
    alpha = check_real("alpha", alpha)
    if mode == "clipped_relu" and alpha < 0:        # (torch's hardtanh refuses a ceiling below its floor, 0)
        raise ValueError(f"alpha={alpha!r} (clipped_relu's ceiling) must be >= 0")
    return alpha if dtype is None else check_representable("alpha", alpha, dtype)


def _check(x: Any, *, mode: str, alpha: float | None = None) -> tuple:
    return mode, activation_alpha(mode, alpha, check_dtype("x", x.dtype))


ACTIVATION = OpSpec(
    name="activation",
    doc="""Pointwise activation; see :data:`ACTIVATION_DEFAULTS` for each mode's alpha and its default.

    relu, sigmoid, tanh, identity take no alpha; elu alpha=1.0; leaky_relu slope 0.01; clipped_relu
    ceiling 6.0 (relu6); swish beta 1.0 (x * sigmoid(beta * x), SiLU). Derivatives at kinks follow
    PyTorch (relu'(0) = 0, leaky_relu'(0) = slope, clipped_relu' = 0 at 0 and at the ceiling).
    """,
    params=(Param("x"), Param("mode", annotation="str"), Param("alpha", None, True, "float | None")),
    arrays=(ArrayArg("x", gradient="dx"),), static=("mode", "alpha"), outputs=(Output("y", "dy"),),
    check=_check, empty=like_x, pointwise=True, title=lambda arguments: f"activation({arguments['mode']!r})",
    backward_reads=lambda arguments: BACKWARD_READS.get(arguments["mode"], ()),
    result_stands_for_x=result_stands_for_x,
    features=tuple(ACTIVATION_DEFAULTS), samples_independent=True,
    results_layout=Layout(like_x=True, gradient_from=gradient_from),
    second_order=second_order.activation(DERIVATIVES, ACTIVATION_DEFAULTS),
    tensor_doc="Pointwise activation: relu, sigmoid, tanh, elu, leaky_relu, clipped_relu, swish or identity.",
)
