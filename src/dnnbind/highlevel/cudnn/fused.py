"""The fused convolution + bias + activation as one cuDNN primitive (PyTorch's ``relu(conv2d(x, w, b))``).

:func:`conv_bias_activation` runs cuDNN's graph ``y = activation(conv(x, wf) + b)`` (the convolution's and
the sum's results stay in the compute type inside the fused engine) when the graph path is on
(``$DNNBIND_CUDNN_GRAPH=1``) and cuDNN plans the graph; otherwise it returns None, with the reason in the
trace, and the caller composes the op from the separate primitives. The graph takes padding as pre- and
post-paddings, so asymmetric padding needs no padded copy of x. Activations and their ``alpha`` are the
activation op's (:data:`dnnbind.highlevel.specs.activation.ACTIVATION_DEFAULTS`). NEVER EXECUTED on a GPU
yet: the plans and the operands are tested without one.
"""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.cudnn._lib import handle
from dnnbind.highlevel.cudnn.graph import choose, execute
from dnnbind.highlevel.cudnn.graph.device import Device
from dnnbind.highlevel.cudnn.graph.graphs import ACTIVATIONS, GraphSpec
from dnnbind.highlevel.cudnn.graph.plans import PlanSet, note_fallback
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import cupy, current_stream

OP = "conv_bias_activation"


def _what(dims: ConvDims, mode: str, layout: str) -> str:
    return f"{OP}[{mode}] {dims} ({layout})"


def fused_plans(dims: ConvDims, mode: str, alpha: float | None, layout: str,
                device: Device) -> tuple[GraphSpec, PlanSet] | None:
    """(the fused graph, its plans) on ``device`` under the current settings, or None: the caller composes
    the op, and the trace says why."""
    if mode not in ACTIVATIONS:
        note_fallback(_what(dims, mode, layout), f"the fused graph has no activation mode={mode!r}")
        return None
    spec = GraphSpec(OP, dims, layout, activation=mode, alpha=alpha)
    found = choose.graph_or_legacy(spec, device, settings.current())
    return None if found is None else (spec, found)


def operands(x: Any, wf: Any, b: Any, y: Any) -> dict[str, Any]:
    """The fused graph's arrays by role (bias as its (K,) values)."""
    return {"x": x, "w": wf, "bias": b, "y": y}


def conv_bias_activation(x: Any, wf: Any, b: Any, dims: ConvDims, mode: str, alpha: float | None, *,
                         layout: str | None = None) -> Any:
    """y = activation ``mode`` (with ``alpha``) of conv(x, wf) + b in one cuDNN graph, or None when the graph
    path is off or cuDNN has no plan (the reason is traced; the caller then runs the separate primitives).

    ``x`` and ``wf`` (the filter as the convolution ``dims`` applies it, shape dims.w_shape) are CuPy arrays
    on the current device, ``b`` the (K,) bias or None (zeros); ``layout`` is the memory layout to run in,
    by default x's own; y comes back in it."""
    lay = _layout.check_layout(layout) if layout is not None else _layout.layout_of(x) or "NCHW"
    if not choose.enabled():
        note_fallback(_what(dims, mode, lay), f"the graph path is off (${choose.ENV} is not 1)")
        return None
    cp = cupy()
    h = handle(x.device.id, current_stream())
    found = fused_plans(dims, mode, alpha, lay, choose.device_of(h))
    if found is None:
        return None
    x, wf = _layout.in_layout(cp, x, lay), _layout.in_layout(cp, wf, lay)
    bias = cp.zeros(dims.out_channels, x.dtype) if b is None else cp.ascontiguousarray(b, dtype=x.dtype)
    y = _layout.empty(cp, dims.y_shape, x.dtype, lay)
    execute.run_best(h, found[1], operands(x, wf, bias, y), settings.current())
    return y


def conv_bias_activation_fused(x: Any, w: Any, b: Any, dims: ConvDims, mode: str, alpha: float | None, *,
                               layout: str | None = None) -> Any:
    """The op conv_bias_activation's fused primitive (:mod:`dnnbind.highlevel.chain` runs it where nothing
    is saved for a backward): :func:`conv_bias_activation` with the filter as given, flipped for
    ``dims.flip``; None where it declines."""
    wf = cupy().flip(w, axis=tuple(range(2, w.ndim))) if dims.flip else w
    return conv_bias_activation(x, wf, b, dims, mode, alpha, layout=layout)
