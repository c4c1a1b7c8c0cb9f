"""Convolution and transposed convolution on cuDNN, in residual form (see :mod:`dnnbind.highlevel.residual`).

conv: cudnnConvolutionForward (+ cudnnAddTensor for the bias); its backward runs BackwardData,
BackwardFilter and BackwardBias. conv_transpose is conv's data gradient: BackwardData forward, and
Forward / BackwardFilter in its backward. Groups, dilation, flip (CUDNN_CONVOLUTION), 1 to 3 spatial
dims (one as two), NCHW or NHWC memory, float16/bfloat16 (float32 accumulation), float32 (TF32 only
with ``settings(allow_tf32=True)``) and float64. Asymmetric padding pads x explicitly (see
:mod:`dnnbind.highlevel.gpu.geometry`). float64 is computed in NCHW memory whatever the caller's
layout (:func:`compute_layout`), and its results come back in the caller's layout.

Residuals: conv saves x explicitly padded and w; conv_transpose saves x zero-extended to the forward
convolution's output shape and w (private copies where they would be the caller's). The saved x is
stored in the caller's layout (the ``layout=`` option, else x's own), so the backward reads that layout
from its strides; w is stored in the layout cuDNN computes in. The backward takes its plan from the
plan cache by the same key: dims, layout and the settings in force when it runs. db is always computed.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable

from dnnbind.highlevel.cudnn._lib import handle
from dnnbind.highlevel.cudnn.algos import BACKWARD_DATA, BACKWARD_FILTER, FORWARD
from dnnbind.highlevel.cudnn.conv_plan import ConvPlan, plan_for
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.geometry import ConvGeometry, crop, pad, padded_shape
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.gpu.views import extend
from dnnbind.highlevel.residual import ALL_NEEDED, ArraySpec

Shape = tuple[int, ...]


def _params(dims: ConvDims, layout: Callable[[], str | None]) -> Callable[[], dict[str, Any]]:
    """The op's parameters for error messages, computed only when one is raised."""
    def params() -> dict[str, Any]:
        out = {f.name: getattr(dims, f.name) for f in fields(dims) if f.name not in ("x_shape", "w_shape", "dtype")}
        s = settings.current()
        out.update(layout=layout(), algo=s.algo, deterministic=s.deterministic, workspace_limit=s.workspace_limit,
                   allow_tf32=s.allow_tf32)
        return out
    return params


def _layout_for(x: Any, layout: str | None) -> str:
    """The memory layout to run in: the caller's choice, else x's own (NCHW when x is neither)."""
    if layout is not None:
        return _layout.check_layout(layout)
    return _layout.layout_of(x) or "NCHW"


def compute_layout(dtype: Any, layout: str) -> str:
    """The memory layout cuDNN computes in for results wanted in ``layout``: NCHW for float64 (PyTorch
    never sends channels-last float64 to cuDNN, and cuDNN may offer no algorithm for it), else ``layout``."""
    return "NCHW" if str(dtype) == "float64" else layout


def layouts(x: Any, layout: str | None) -> tuple[str, str]:
    """(the caller's layout, the layout cuDNN computes in) for x (or the saved x) and the ``layout`` option."""
    lay = _layout_for(x, layout)
    return lay, compute_layout(x.dtype, lay)


def _plan(device: int, dims: ConvDims, layout: str) -> ConvPlan:
    return plan_for(dims, layout, settings.current(), device)


def _saved(cp: Any, a: Any, source: Any, layout: str) -> Any:
    """``a`` stored in ``layout``, never sharing memory with the caller's ``source``."""
    return private(cp, _layout.in_layout(cp, a, layout), source)


# ------------------------------------------------------------------------------------------------ conv

def conv_forward(x: Any, w: Any, b: Any, dims: ConvDims, *, layout: str | None = None) -> tuple[Any, tuple]:
    """y = conv(x, w) + b (see :func:`dnnbind.conv`); saves (x padded, w). ``layout`` ("NCHW"/"NHWC")
    picks the memory layout to run in, by default x's own; arrays keep their NCHW-shaped indexing."""
    cp = cupy()
    lay = layout
    with Call("conv", _params(dims, lambda: lay), x=x, w=w, b=b) as call:
        x, w, b = call["x"], call["w"], call["b"]
        lay, run = layouts(x, layout)
        plan = _plan(call.device, dims, run)
        g = plan.geometry
        xp = pad(cp, x, g.extra_low, g.extra_high, run)
        wl = _layout.in_layout(cp, w, run)
        y = _layout.empty(cp, plan.y_shape, x.dtype, run)
        h = handle(call.device, current_stream())
        plan.run(FORWARD, h, xp, wl, y)
        if b is not None:
            plan.add_bias(h, cp.ascontiguousarray(b), y)
        return _layout.in_layout(cp, y, lay), (_saved(cp, xp, x, lay), private(cp, wl, w))


def conv_backward(residuals: tuple, cotangents: tuple, dims: ConvDims, *, layout: str | None = None,
                  needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    """(dx, dw, db) from the saved (x padded, w) and dy; results in the saved x's layout; those ``needs``
    marks False are None, not computed."""
    cp = cupy()
    saved_x, saved_w = residuals
    (dy,) = cotangents
    lay, run = layouts(saved_x, layout)
    device, dtype = saved_x.device.id, saved_x.dtype
    with Call("conv pullback", _params(dims, lambda: lay), device=device, dy=dy) as back:
        plan = _plan(device, dims, run)
        g = plan.geometry
        xp, wl = _layout.in_layout(cp, saved_x, run), _layout.in_layout(cp, saved_w, run)
        dy = cotangent("dy", back["dy"], plan.y_shape, dtype, run, device)
        h = handle(device, current_stream())
        dx = dw = db = None
        if needs[0]:
            dxp = _layout.empty(cp, plan.padded_x_shape, dtype, run)
            plan.run(BACKWARD_DATA, h, wl, dy, dxp)
            dx = _layout.in_layout(cp, crop(cp, dxp, dims.x_shape, g.extra_low, run), lay)
        if needs[1]:
            dw = _layout.empty(cp, dims.w_shape, dtype, run)
            plan.run(BACKWARD_FILTER, h, xp, dy, dw)
            dw = _layout.in_layout(cp, dw, lay)
        if needs[2]:
            db = cp.empty(dims.bias_shape, dtype)
            plan.bias_grad(h, dy, db)
        return dx, dw, db


def conv_residuals(x: Any, w: Any, b: Any, dims: ConvDims, *, layout: str | None = None) -> tuple[ArraySpec, ...]:
    """x explicitly padded (asymmetric padding's extra part) and w, in their dtypes."""
    g = ConvGeometry.of(dims)
    return (ArraySpec(padded_shape(dims.x_shape, g.extra_low, g.extra_high), x.dtype),
            ArraySpec(dims.w_shape, w.dtype))


# ------------------------------------------------------------------------------------------------ conv_transpose

def conv_transpose_forward(x: Any, w: Any, b: Any, dims: ConvDims, *,
                           layout: str | None = None) -> tuple[Any, tuple]:
    """Transposed convolution (see :func:`dnnbind.conv_transpose`): the data gradient of the convolution
    ``dims`` describes, whose input has this op's output shape (dims.x_shape). Saves (x extended, w)."""
    cp = cupy()
    lay = layout
    with Call("conv_transpose", _params(dims, lambda: lay), x=x, w=w, b=b) as call:
        x, w, b = call["x"], call["w"], call["b"]
        lay, run = layouts(x, layout)
        plan = _plan(call.device, dims, run)
        g = plan.geometry
        xe = extend(cp, x, plan.y_shape, run)
        wl = _layout.in_layout(cp, w, run)
        yp = _layout.empty(cp, plan.padded_x_shape, x.dtype, run)
        h = handle(call.device, current_stream())
        plan.run(BACKWARD_DATA, h, wl, xe, yp)
        y = crop(cp, yp, dims.x_shape, g.extra_low, run)
        if b is not None:
            plan.add_bias(h, cp.ascontiguousarray(b), y, transposed=True)
        return _layout.in_layout(cp, y, lay), (_saved(cp, xe, x, lay), private(cp, wl, w))


def conv_transpose_backward(residuals: tuple, cotangents: tuple, dims: ConvDims, *, layout: str | None = None,
                            needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    """(dx, dw, db) from the saved (x extended, w) and dy; results in the saved x's layout; those
    ``needs`` marks False are None, not computed."""
    cp = cupy()
    saved_x, saved_w = residuals
    (dy,) = cotangents
    lay, run = layouts(saved_x, layout)
    device, dtype = saved_x.device.id, saved_x.dtype
    with Call("conv_transpose pullback", _params(dims, lambda: lay), device=device, dy=dy) as back:
        plan = _plan(device, dims, run)
        g = plan.geometry
        xe, wl = _layout.in_layout(cp, saved_x, run), _layout.in_layout(cp, saved_w, run)
        dy = cotangent("dy", back["dy"], dims.x_shape, dtype, run, device)
        h = handle(device, current_stream())
        dyp = pad(cp, dy, g.extra_low, g.extra_high, run)
        dx = dw = db = None
        if needs[0]:
            dxe = _layout.empty(cp, plan.y_shape, dtype, run)
            plan.run(FORWARD, h, dyp, wl, dxe)
            dx = _layout.in_layout(cp, crop(cp, dxe, dims.transpose_input_shape, (0,) * len(g.extra_low), run), lay)
        if needs[1]:
            dw = _layout.empty(cp, dims.w_shape, dtype, run)
            plan.run(BACKWARD_FILTER, h, dyp, xe, dw)
            dw = _layout.in_layout(cp, dw, lay)
        if needs[2]:
            db = cp.empty((dims.in_channels,), dtype)
            plan.bias_grad(h, dy, db, transposed=True)
        return dx, dw, db


def conv_transpose_residuals(x: Any, w: Any, b: Any, dims: ConvDims, *,
                             layout: str | None = None) -> tuple[ArraySpec, ...]:
    """x zero-extended to the forward convolution's output shape (dims.y_shape) and w, in their dtypes."""
    return ArraySpec(dims.y_shape, x.dtype), ArraySpec(dims.w_shape, w.dtype)
