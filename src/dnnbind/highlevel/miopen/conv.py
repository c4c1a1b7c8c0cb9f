"""Convolution and transposed convolution on MIOpen.

conv: miopenConvolutionForward; its backward runs BackwardData and BackwardWeights. conv_transpose is
conv's data gradient: BackwardData forward, Forward and BackwardWeights in its backward. Each direction
runs after Find on the handle (or in immediate mode, see :mod:`settings`). Groups, dilation, 1 to 3
spatial dims (one as two), float16/float32/float64 as far as MIOpen supports them.

Residuals: the two arrays the backward's library calls read, in the memory layout they ran in: x as
MIOpen saw it (explicitly padded for conv, zero-extended for conv_transpose) and the weights as MIOpen
ran them (flipped for ``flip=True``); see :func:`conv_residuals`. The backward finds the plan again by
the forward's key: dims, ``layout`` and ``settings`` (both options; settings default to those in force
at the call, and the ``(result, pullback)`` form passes the forward's to its pullback).

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

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.geometry import ConvGeometry, crop, pad, padded_shape
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.views import extend
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.miopen._lib import handle
from dnnbind.highlevel.miopen.conv_args import BACKWARD_DATA, BACKWARD_WEIGHTS, FORWARD, flip_spatial
from dnnbind.highlevel.miopen.conv_plan import plan_for
from dnnbind.highlevel.miopen.settings import MIOpenSettings, current
from dnnbind.highlevel.residual import ALL_NEEDED, ArraySpec


def _params(dims: ConvDims, layout: str, settings: MIOpenSettings) -> Callable[[], dict[str, Any]]:
    """The op's parameters for error messages, computed only when one is raised."""
    def params() -> dict[str, Any]:
        out = {f.name: getattr(dims, f.name) for f in fields(dims) if f.name not in ("x_shape", "w_shape", "dtype")}
        out.update(layout=layout, algo=settings.algo, immediate=settings.immediate,
                   deterministic=settings.deterministic, workspace_limit=settings.workspace_limit)
        return out
    return params


def _setup(dims: ConvDims, layout: str | None,
           settings: MIOpenSettings | None) -> tuple[str, MIOpenSettings, Callable[[], dict[str, Any]]]:
    """(layout, settings, error parameters) of a call: NCHW and the settings in force by default."""
    lay = _layout.check_layout(layout or "NCHW")
    s = current() if settings is None else settings
    return lay, s, _params(dims, lay, s)


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


def conv_forward(x: Any, w: Any, b: Any, dims: ConvDims, *, layout: str | None = None,
                 settings: MIOpenSettings | None = None) -> tuple[Any, tuple[Any, Any]]:
    """y = conv(x, w) + b (see :func:`dnnbind.conv`); ``layout`` ("NCHW" by default, or "NHWC") is the
    memory layout to run in, ``settings`` how to choose algorithms. Arrays keep their NCHW-shaped
    indexing either way. Saves x explicitly padded and the weights as run."""
    cp = cupy()
    lay, s, params = _setup(dims, layout, settings)
    with Call("conv", params, dlpack_devices=DLPACK_ROCM, x=x, w=w, b=b) as call:
        x, w, b = call["x"], call["w"], call["b"]
        plan = plan_for(dims, lay, s, call.device)
        g = plan.geometry
        xp = pad(cp, x, g.extra_low, g.extra_high, lay)
        wr = _weights(cp, w, dims, lay)
        y = _layout.empty(cp, dims.y_shape, x.dtype, lay)
        plan.run(FORWARD, handle(call.device, current_stream()), y, x=xp, w=wr)
        if b is not None:
            _add_bias(y, b)
    return y, (private(cp, xp, x), private(cp, wr, w))        # the backward's own


def conv_backward(saved: tuple, cotangents: tuple, dims: ConvDims, *, layout: str | None = None,
                  settings: MIOpenSettings | None = None,
                  needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    """(dx, dw, db) of conv: BackwardData and BackwardWeights on the saved arrays, db dy summed; those
    ``needs`` marks False are None, not computed."""
    (xp, wr), (dy,) = saved, cotangents
    cp = cupy()
    lay, s, params = _setup(dims, layout, settings)
    device, dtype = xp.device.id, xp.dtype
    with Call("conv backward", params, device=device, dlpack_devices=DLPACK_ROCM, dy=dy) as back:
        plan = plan_for(dims, lay, s, device)
        g = plan.geometry
        dy = cotangent("dy", back["dy"], dims.y_shape, dtype, lay, device, DLPACK_ROCM)
        h = handle(device, current_stream())
        dx = dw = None
        if needs[0]:
            dxp = _layout.empty(cp, xp.shape, dtype, lay)
            plan.run(BACKWARD_DATA, h, dxp, dy=dy, w=wr)
            dx = crop(cp, dxp, dims.x_shape, g.extra_low, lay)
        if needs[1]:
            dw = _layout.empty(cp, dims.w_shape, dtype, lay)
            plan.run(BACKWARD_WEIGHTS, h, dw, dy=dy, x=xp)
            dw = _weight_grad(cp, dw, dims, lay)
        return dx, dw, _bias_grad(cp, dy) if needs[2] else None


def conv_residuals(x: ArraySpec, w: ArraySpec, b: ArraySpec | None, dims: ConvDims, *, layout: str | None = None,
                   settings: MIOpenSettings | None = None) -> tuple[ArraySpec, ArraySpec]:
    """x explicitly padded (asymmetric padding's extra part) and w, in x's dtype; no library call."""
    g = ConvGeometry.of(dims)
    return (ArraySpec(padded_shape(dims.x_shape, g.extra_low, g.extra_high), x.dtype),
            ArraySpec(dims.w_shape, x.dtype))


def conv_transpose_forward(x: Any, w: Any, b: Any, dims: ConvDims, *, layout: str | None = None,
                           settings: MIOpenSettings | None = None) -> tuple[Any, tuple[Any, Any]]:
    """Transposed convolution (see :func:`dnnbind.conv_transpose`): the data gradient of the convolution
    ``dims`` describes, whose input has this op's output shape (dims.x_shape). Saves x zero-extended to
    that convolution's output shape, and the weights as run."""
    cp = cupy()
    lay, s, params = _setup(dims, layout, settings)
    with Call("conv_transpose", params, dlpack_devices=DLPACK_ROCM, x=x, w=w, b=b) as call:
        x, w, b = call["x"], call["w"], call["b"]
        plan = plan_for(dims, lay, s, call.device)
        g = plan.geometry
        xe = extend(cp, x, dims.y_shape, lay)
        wr = _weights(cp, w, dims, lay)
        yp = _layout.empty(cp, padded_shape(dims.x_shape, g.extra_low, g.extra_high), x.dtype, lay)
        plan.run(BACKWARD_DATA, handle(call.device, current_stream()), yp, dy=xe, w=wr)
        y = crop(cp, yp, dims.x_shape, g.extra_low, lay)
        if b is not None:
            _add_bias(y, b)
    return y, (private(cp, xe, x), private(cp, wr, w))        # the backward's own


def conv_transpose_backward(saved: tuple, cotangents: tuple, dims: ConvDims, *, layout: str | None = None,
                            settings: MIOpenSettings | None = None,
                            needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    """(dx, dw, db) of conv_transpose: Forward and BackwardWeights on the saved arrays; those ``needs``
    marks False are None, not computed."""
    (xe, wr), (dy,) = saved, cotangents
    cp = cupy()
    lay, s, params = _setup(dims, layout, settings)
    device, dtype = xe.device.id, xe.dtype
    with Call("conv_transpose backward", params, device=device, dlpack_devices=DLPACK_ROCM, dy=dy) as back:
        plan = plan_for(dims, lay, s, device)
        g = plan.geometry
        dy = cotangent("dy", back["dy"], dims.x_shape, dtype, lay, device, DLPACK_ROCM)
        h = handle(device, current_stream())
        dyp = pad(cp, dy, g.extra_low, g.extra_high, lay)
        dx = dw = None
        if needs[0]:
            dxe = _layout.empty(cp, dims.y_shape, dtype, lay)
            plan.run(FORWARD, h, dxe, x=dyp, w=wr)
            dx = crop(cp, dxe, dims.transpose_input_shape, (0,) * len(g.extra_low), lay)
        if needs[1]:
            dw = _layout.empty(cp, dims.w_shape, dtype, lay)
            plan.run(BACKWARD_WEIGHTS, h, dw, dy=xe, x=dyp)
            dw = _weight_grad(cp, dw, dims, lay)
        return dx, dw, _bias_grad(cp, dy) if needs[2] else None


def conv_transpose_residuals(x: ArraySpec, w: ArraySpec, b: ArraySpec | None, dims: ConvDims, *,
                             layout: str | None = None,
                             settings: MIOpenSettings | None = None) -> tuple[ArraySpec, ArraySpec]:
    """x zero-extended to the forward convolution's output shape (dims.y_shape) and w, in x's dtype;
    no library call."""
    return ArraySpec(dims.y_shape, x.dtype), ArraySpec(dims.w_shape, x.dtype)
