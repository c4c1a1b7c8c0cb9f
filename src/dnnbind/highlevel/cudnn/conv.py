"""Convolution and transposed convolution on cuDNN.

conv: cudnnConvolutionForward (+ cudnnAddTensor for the bias); its pullback runs BackwardData,
BackwardFilter and BackwardBias. conv_transpose is conv's data gradient: BackwardData forward, and
Forward / BackwardFilter in its pullback. Groups, dilation, flip (CUDNN_CONVOLUTION), 1 to 3 spatial
dims (one as two), NCHW or NHWC memory, float16/bfloat16 (float32 accumulation), float32 (TF32 only
with ``settings(allow_tf32=True)``) and float64. Asymmetric padding pads x explicitly (see
:mod:`dnnbind.highlevel.gpu.geometry`). float64 is computed in NCHW memory whatever the caller's
layout (:func:`compute_layout`), and its results come back in the caller's layout.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable

from dnnbind.highlevel.cudnn._lib import handle
from dnnbind.highlevel.cudnn.algos import BACKWARD_DATA, BACKWARD_FILTER, FORWARD
from dnnbind.highlevel.cudnn.conv_plan import ConvPlan, plan_for
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.geometry import crop, pad
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.views import extend
from dnnbind.highlevel.gpu.saved import private


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


def _plan(call: Call, dims: ConvDims, layout: str) -> ConvPlan:
    return plan_for(dims, layout, settings.current(), call.device)


def conv(x: Any, w: Any, b: Any, dims: ConvDims, *, layout: str | None = None) -> tuple[Any, Callable]:
    """y = conv(x, w) + b (see :func:`dnnbind.conv`); ``layout`` ("NCHW"/"NHWC") picks the memory layout to
    run in, by default x's own. Arrays keep their NCHW-shaped indexing either way."""
    cp = cupy()
    lay = layout
    params = _params(dims, lambda: lay)
    with Call("conv", params, x=x, w=w, b=b) as call:
        x, w, b = call["x"], call["w"], call["b"]
        lay = _layout_for(x, layout)
        run = compute_layout(x.dtype, lay)
        plan = _plan(call, dims, run)
        g = plan.geometry
        xp = pad(cp, x, g.extra_low, g.extra_high, run)
        wl = _layout.in_layout(cp, w, run)
        y = _layout.empty(cp, plan.y_shape, x.dtype, run)
        h = handle(call.device, current_stream())
        plan.run(FORWARD, h, xp, wl, y)
        if b is not None:
            plan.add_bias(h, cp.ascontiguousarray(b), y)
        xp, wl = private(cp, xp, x), private(cp, wl, w)      # the pullback's own
        y = _layout.in_layout(cp, y, lay)
    device, dtype = call.device, y.dtype

    def pullback(dy: Any) -> tuple[Any, ...]:
        with Call("conv pullback", params, device=device, dy=dy) as back:
            dy = cotangent("dy", back["dy"], plan.y_shape, dtype, run, device)
            h = handle(device, current_stream())
            dxp = _layout.empty(cp, plan.padded_x_shape, dtype, run)
            plan.run(BACKWARD_DATA, h, wl, dy, dxp)
            dx = _layout.in_layout(cp, crop(cp, dxp, dims.x_shape, g.extra_low, run), lay)
            dw = _layout.empty(cp, dims.w_shape, dtype, run)
            plan.run(BACKWARD_FILTER, h, xp, dy, dw)
            dw = _layout.in_layout(cp, dw, lay)
            if b is None:
                return dx, dw
            db = cp.empty(dims.bias_shape, dtype)
            plan.bias_grad(h, dy, db)
            return dx, dw, db

    return y, pullback


def conv_transpose(x: Any, w: Any, b: Any, dims: ConvDims, *, layout: str | None = None) -> tuple[Any, Callable]:
    """Transposed convolution (see :func:`dnnbind.conv_transpose`): the data gradient of the convolution
    ``dims`` describes, whose input has this op's output shape (dims.x_shape)."""
    cp = cupy()
    lay = layout
    params = _params(dims, lambda: lay)
    with Call("conv_transpose", params, x=x, w=w, b=b) as call:
        x, w, b = call["x"], call["w"], call["b"]
        lay = _layout_for(x, layout)
        run = compute_layout(x.dtype, lay)
        plan = _plan(call, dims, run)
        g = plan.geometry
        xe = extend(cp, x, plan.y_shape, run)
        wl = _layout.in_layout(cp, w, run)
        yp = _layout.empty(cp, plan.padded_x_shape, x.dtype, run)
        h = handle(call.device, current_stream())
        plan.run(BACKWARD_DATA, h, wl, xe, yp)
        y = crop(cp, yp, dims.x_shape, g.extra_low, run)
        if b is not None:
            plan.add_bias(h, cp.ascontiguousarray(b), y, transposed=True)
        xe, wl = private(cp, xe, x), private(cp, wl, w)      # the pullback's own
        y = _layout.in_layout(cp, y, lay)
    device, dtype, x_shape = call.device, y.dtype, tuple(x.shape)

    def pullback(dy: Any) -> tuple[Any, ...]:
        with Call("conv_transpose pullback", params, device=device, dy=dy) as back:
            dy = cotangent("dy", back["dy"], dims.x_shape, dtype, run, device)
            h = handle(device, current_stream())
            dyp = pad(cp, dy, g.extra_low, g.extra_high, run)
            dxe = _layout.empty(cp, plan.y_shape, dtype, run)
            plan.run(FORWARD, h, dyp, wl, dxe)
            dx = _layout.in_layout(cp, crop(cp, dxe, x_shape, (0,) * len(g.extra_low), run), lay)
            dw = _layout.empty(cp, dims.w_shape, dtype, run)
            plan.run(BACKWARD_FILTER, h, dyp, xe, dw)
            dw = _layout.in_layout(cp, dw, lay)
            if b is None:
                return dx, dw
            db = cp.empty((dims.in_channels,), dtype)
            plan.bias_grad(h, dy, db, transposed=True)
            return dx, dw, db

    return y, pullback
