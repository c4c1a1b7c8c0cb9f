"""Pooling through cuDNN's graph API (resample operations), for :mod:`.pool` when the graph path is on.

A pooling problem goes through the graph when its residuals stay what the legacy path saves (x and y),
so that a forward and a backward may take different paths: no explicit padding (asymmetric padding and
``ceil_mode``'s extra high-side padding pad x, and the saved x, in the legacy path) and no mean rescale
(where cuDNN's divisor is not PyTorch's). Max pooling's NHWC backward stays legacy: the graph's routes dy
by the forward's index, which the residuals do not hold. Everything else that cuDNN plans runs on the
graph's first plan; what it cannot plan (float64, an architecture without engines) falls back, and
:func:`graph_plans` puts the reason in the trace in every case. NEVER EXECUTED on a GPU yet.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dnnbind.highlevel.cudnn.graph import choose
from dnnbind.highlevel.cudnn.graph.device import Device
from dnnbind.highlevel.cudnn.graph.graphs import GraphSpec, takes_index
from dnnbind.highlevel.cudnn.graph.plans import PlanSet, note_fallback
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.gpu import layout as _layout

FORWARD, BACKWARD = "pool_forward", "pool_backward"
#: the pool plan's kind -> the graph's pooling mode (:data:`graphs.POOL_MODES`)
MODES = {"max": "max", "mean_include_pad": "mean", "mean_exclude_pad": "mean_exclude_pad"}


def graph_spec(plan: Any, op: str) -> GraphSpec | str:
    """The resample graph of a :class:`.pool.PoolPlan`'s problem for ``op`` (FORWARD or BACKWARD), or why
    the legacy path keeps it."""
    g = plan.geometry
    if any(g.extra_low + g.extra_high):
        return "asymmetric padding (or ceil_mode) is padded explicitly, and the saved x with it, on the legacy path"
    if plan.rescale is not None:
        return "this mean's divisor differs from cuDNN's, which the legacy path rescales"
    spec = GraphSpec(op, plan.dims, plan.layout, mode=MODES[plan.kind])
    if op == BACKWARD and takes_index(spec):
        return "the graph's NHWC max-pooling backward routes dy by the forward's index, which the residuals " \
               "(x, y) do not hold"
    return spec


def graph_plans(plan: Any, op: str, device: Device) -> tuple[GraphSpec, PlanSet] | None:
    """(the graph, its plans) of ``op`` for ``plan``'s problem, or None: the legacy path runs it, and the
    trace says why."""
    spec = graph_spec(plan, op)
    if isinstance(spec, str):
        note_fallback(f"{op} {plan.dims} ({plan.layout}, {plan.kind})", spec)
        return None
    found = choose.graph_or_legacy(spec, device, settings.current())
    return None if found is None else (spec, found)


def forward_operands(xp: Any, spec: GraphSpec, x: Any, y: Any) -> dict[str, Any]:
    """The forward graph's arrays by role (``xp`` the array module: CuPy; numpy in host tests): x and y,
    and for NHWC max pooling the index it writes (int8, shaped like y, discarded)."""
    arrays = {"x": x, "y": y}
    if takes_index(spec):
        arrays["index"] = _layout.empty(xp, y.shape, np.int8, spec.layout)
    return arrays


def backward_operands(spec: GraphSpec, x: Any, y: Any, dy: Any, dx: Any) -> dict[str, Any]:
    """The backward graph's arrays by role: dy and dx, and for max pooling the saved x and y."""
    arrays = {"dy": dy, "dx": dx}
    if spec.mode == "max":
        arrays.update(x=x, y=y)
    return arrays
