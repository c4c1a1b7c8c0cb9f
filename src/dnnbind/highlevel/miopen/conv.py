"""MIOpen's convolution primitives, from which :mod:`dnnbind.highlevel.conv_composed` builds conv and the
transposed convolution (the data gradient of a convolution).

The forward is miopenConvolutionForward, the data gradient BackwardData, the filter gradient
BackwardWeights. Each direction runs after Find on the handle (or in immediate mode, see
:mod:`settings`). Groups, dilation, 1 to 3 spatial dims (one as two), float16/float32/float64 as far as
MIOpen supports them.

Residuals: the two arrays the backward's library calls read, in the memory layout they ran in: x as
MIOpen saw it (explicitly padded for conv, zero-extended for the transposed convolution) and the weights
as MIOpen ran them (flipped for ``flip=True``). The backward finds the plan again by
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

import contextlib
from dataclasses import fields
from typing import Any, Callable, Iterator

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.conv_call import GpuConvCall, GpuConvPrimitives
from dnnbind.highlevel.gpu.geometry import crop, padded_shape
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.miopen._lib import handle
from dnnbind.highlevel.miopen.conv_args import BACKWARD_DATA, BACKWARD_WEIGHTS, FORWARD, flip_spatial
from dnnbind.highlevel.miopen.conv_plan import plan_for
from dnnbind.highlevel.miopen.settings import MIOpenSettings, current


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


class _Call(GpuConvCall):
    """One call's primitives (:class:`dnnbind.highlevel.conv_composed.ConvCall`) on its plan and handle, in
    one layout (MIOpen computes in the caller's)."""

    def filter(self, w: Any) -> Any:
        return _weights(self.cp, w, self.dims, self.run)

    def forward(self, xi: Any, wf: Any) -> Any:
        y = _layout.empty(self.cp, self.dims.y_shape, xi.dtype, self.run)
        self.plan.run(FORWARD, self.handle, y, x=xi, w=wf)
        return y

    def data_grad(self, dy: Any, wf: Any) -> Any:
        g = self.plan.geometry
        dxp = _layout.empty(self.cp, padded_shape(self.dims.x_shape, g.extra_low, g.extra_high), dy.dtype,
                            self.run)
        self.plan.run(BACKWARD_DATA, self.handle, dxp, dy=dy, w=wf)
        return crop(self.cp, dxp, self.dims.x_shape, g.extra_low, self.run)

    def filter_grad(self, xi: Any, dy: Any, wf: Any) -> Any:
        dw = _layout.empty(self.cp, self.dims.w_shape, xi.dtype, self.run)
        self.plan.run(BACKWARD_WEIGHTS, self.handle, dw, dy=dy, x=xi)
        return dw

    def weight_grad(self, dwf: Any) -> Any:
        return _weight_grad(self.cp, dwf, self.dims, self.run)

    def add_bias(self, y: Any, b: Any, transposed: bool) -> Any:
        _add_bias(y, b)
        return y

    def bias_grad(self, dy: Any, transposed: bool) -> Any:
        return _bias_grad(self.cp, dy)

    def keep(self, a: Any, source: Any, filter: bool = False) -> Any:
        return private(self.cp, a, source)                     # the backward's own


class Primitives(GpuConvPrimitives):
    """MIOpen's convolution primitives (:class:`dnnbind.highlevel.conv_composed.ConvPrimitives`); the options
    ``layout`` ("NCHW" by default, or "NHWC": the memory layout to run in; arrays keep their NCHW-shaped
    indexing either way) and ``settings`` (how to choose algorithms; by default those in force at the call)."""

    OPTIONS = ("layout", "settings")

    @contextlib.contextmanager
    def forward_call(self, op: str, dims: ConvDims, options: dict[str, Any], x: Any, w: Any,
                     b: Any) -> Iterator[_Call]:
        cp = cupy()
        lay, s, params = _setup(dims, options.get("layout"), options.get("settings"))
        with Call(op, params, dlpack_devices=DLPACK_ROCM, x=x, w=w, b=b) as call:
            c = _Call(cp, dims, lay, lay, plan_for(dims, lay, s, call.device), handle, call.device)
            c.x, c.w, c.b = call["x"], call["w"], call["b"]
            yield c

    @contextlib.contextmanager
    def backward_call(self, op: str, dims: ConvDims, options: dict[str, Any], saved: tuple, dy: Any,
                      dy_shape: tuple[int, ...]) -> Iterator[_Call]:
        cp = cupy()
        lay, s, params = _setup(dims, options.get("layout"), options.get("settings"))
        device, dtype = saved[0].device.id, saved[0].dtype
        with Call(f"{op} backward", params, device=device, dlpack_devices=DLPACK_ROCM, dy=dy) as back:
            c = _Call(cp, dims, lay, lay, plan_for(dims, lay, s, device), handle, device)
            c.saved = saved
            c.dy = cotangent("dy", back["dy"], dy_shape, dtype, lay, device, DLPACK_ROCM)
            yield c


PRIMITIVES = Primitives()
