"""Convolution and transposed convolution on MIOpen.

conv: miopenConvolutionForward; its pullback runs BackwardData and BackwardWeights. conv_transpose is
conv's data gradient: BackwardData forward, Forward and BackwardWeights in its pullback. Each direction
runs after Find on the handle (or in immediate mode, see :mod:`settings`). Groups, dilation, 1 to 3
spatial dims (one as two), float16/float32/float64 as far as MIOpen supports them.

MIOpen computes cross-correlation only: ``flip=True`` runs on the spatially flipped kernel, for the
forward and the data gradient, and flips the weight gradient back. Asymmetric padding pads x
explicitly (see :mod:`dnnbind.highlevel.gpu.geometry`). The bias is added, and its gradient summed,
with CuPy: MIOpen's bias kernels assume NCHW memory and have no float64.

Memory layout: NCHW by default (channels-last arrays are copied); ``layout="NHWC"`` describes
channels-last memory to MIOpen instead, for the solvers that support it.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable

from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.geometry import crop, pad, padded_shape
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.views import extend
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.miopen._lib import handle
from dnnbind.highlevel.miopen.conv_args import BACKWARD_DATA, BACKWARD_WEIGHTS, FORWARD, flip_spatial
from dnnbind.highlevel.miopen.conv_plan import ConvPlan, plan_for
from dnnbind.highlevel.miopen.settings import current


def _params(dims: ConvDims, layout: Callable[[], str | None]) -> Callable[[], dict[str, Any]]:
    """The op's parameters for error messages, computed only when one is raised."""
    def params() -> dict[str, Any]:
        out = {f.name: getattr(dims, f.name) for f in fields(dims) if f.name not in ("x_shape", "w_shape", "dtype")}
        s = current()
        out.update(layout=layout(), algo=s.algo, immediate=s.immediate, deterministic=s.deterministic,
                   workspace_limit=s.workspace_limit)
        return out
    return params


def _plan(call: Call, dims: ConvDims, layout: str | None) -> ConvPlan:
    return plan_for(dims, _layout.check_layout(layout or "NCHW"), current(), call.device)


def _weights(cp: Any, w: Any, dims: ConvDims, layout: str) -> Any:
    """The weights MIOpen runs on: w, spatially flipped for a true convolution, in ``layout``."""
    return _layout.in_layout(cp, flip_spatial(w) if dims.flip else w, layout)


def _weight_grad(cp: Any, dw: Any, dims: ConvDims, layout: str) -> Any:
    """The gradient of the caller's w from MIOpen's (of the flipped weights when flip=True)."""
    return _layout.in_layout(cp, flip_spatial(dw), layout) if dims.flip else dw


def _add_bias(y: Any, b: Any) -> None:
    y += b.reshape((1, -1) + (1,) * (y.ndim - 2))


def _bias_grad(cp: Any, dy: Any) -> Any:
    """Sum of dy over every axis but channels, accumulated in float32 at least."""
    acc = dy.dtype if dy.dtype.itemsize >= 4 else cp.float32
    return dy.sum(axis=(0,) + tuple(range(2, dy.ndim)), dtype=acc).astype(dy.dtype, copy=False)


def conv(x: Any, w: Any, b: Any, dims: ConvDims, *, layout: str | None = None) -> tuple[Any, Callable]:
    """y = conv(x, w) + b (see :func:`dnnbind.conv`); ``layout`` ("NCHW" by default, or "NHWC") is the
    memory layout to run in. Arrays keep their NCHW-shaped indexing either way."""
    cp = cupy()
    lay = layout or "NCHW"
    params = _params(dims, lambda: lay)
    with Call("conv", params, dlpack_devices=DLPACK_ROCM, x=x, w=w, b=b) as call:
        x, w, b = call["x"], call["w"], call["b"]
        plan = _plan(call, dims, layout)
        g = plan.geometry
        xp = pad(cp, x, g.extra_low, g.extra_high, lay)
        wr = _weights(cp, w, dims, lay)
        y = _layout.empty(cp, dims.y_shape, x.dtype, lay)
        plan.run(FORWARD, handle(call.device, current_stream()), y, x=xp, w=wr)
        if b is not None:
            _add_bias(y, b)
        xp, wr = private(cp, xp, x), private(cp, wr, w)      # the pullback's own
    device, dtype = call.device, y.dtype

    def pullback(dy: Any) -> tuple[Any, ...]:
        with Call("conv pullback", params, device=device, dlpack_devices=DLPACK_ROCM, dy=dy) as back:
            dy = cotangent("dy", back["dy"], dims.y_shape, dtype, lay, device, DLPACK_ROCM)
            h = handle(device, current_stream())
            dxp = _layout.empty(cp, padded_shape(dims.x_shape, g.extra_low, g.extra_high), dtype, lay)
            plan.run(BACKWARD_DATA, h, dxp, dy=dy, w=wr)
            dx = crop(cp, dxp, dims.x_shape, g.extra_low, lay)
            dw = _layout.empty(cp, dims.w_shape, dtype, lay)
            plan.run(BACKWARD_WEIGHTS, h, dw, dy=dy, x=xp)
            dw = _weight_grad(cp, dw, dims, lay)
            return (dx, dw) if b is None else (dx, dw, _bias_grad(cp, dy))

    return y, pullback


def conv_transpose(x: Any, w: Any, b: Any, dims: ConvDims, *, layout: str | None = None) -> tuple[Any, Callable]:
    """Transposed convolution (see :func:`dnnbind.conv_transpose`): the data gradient of the convolution
    ``dims`` describes, whose input has this op's output shape (dims.x_shape)."""
    cp = cupy()
    lay = layout or "NCHW"
    params = _params(dims, lambda: lay)
    with Call("conv_transpose", params, dlpack_devices=DLPACK_ROCM, x=x, w=w, b=b) as call:
        x, w, b = call["x"], call["w"], call["b"]
        plan = _plan(call, dims, layout)
        g = plan.geometry
        xe = extend(cp, x, dims.y_shape, lay)
        wr = _weights(cp, w, dims, lay)
        yp = _layout.empty(cp, padded_shape(dims.x_shape, g.extra_low, g.extra_high), x.dtype, lay)
        plan.run(BACKWARD_DATA, handle(call.device, current_stream()), yp, dy=xe, w=wr)
        y = crop(cp, yp, dims.x_shape, g.extra_low, lay)
        if b is not None:
            _add_bias(y, b)
        xe, wr = private(cp, xe, x), private(cp, wr, w)      # the pullback's own
    device, dtype, x_shape = call.device, y.dtype, tuple(x.shape)

    def pullback(dy: Any) -> tuple[Any, ...]:
        with Call("conv_transpose pullback", params, device=device, dlpack_devices=DLPACK_ROCM, dy=dy) as back:
            dy = cotangent("dy", back["dy"], dims.x_shape, dtype, lay, device, DLPACK_ROCM)
            h = handle(device, current_stream())
            dyp = pad(cp, dy, g.extra_low, g.extra_high, lay)
            dxe = _layout.empty(cp, dims.y_shape, dtype, lay)
            plan.run(FORWARD, h, dxe, x=dyp, w=wr)
            dx = crop(cp, dxe, x_shape, (0,) * len(g.extra_low), lay)
            dw = _layout.empty(cp, dims.w_shape, dtype, lay)
            plan.run(BACKWARD_WEIGHTS, h, dw, dy=xe, x=dyp)
            dw = _weight_grad(cp, dw, dims, lay)
            return (dx, dw) if b is None else (dx, dw, _bias_grad(cp, dy))

    return y, pullback
