"""The cuDNN backend's convolution primitives, from which :mod:`dnnbind.highlevel.conv_composed` builds
conv and the transposed convolution (the data gradient of a convolution).

The forward is cudnnConvolutionForward, the data gradient BackwardData, the filter gradient
BackwardFilter, the bias cudnnAddTensor and its gradient BackwardBias. Groups, dilation, flip
(CUDNN_CONVOLUTION), 1 to 3 spatial dims (one as two), NCHW or NHWC memory, float16/bfloat16 (float32
accumulation), float32 (TF32 only with ``settings(allow_tf32=True)``) and float64. Asymmetric padding pads
x explicitly (see :mod:`dnnbind.highlevel.gpu.geometry`). float64 is computed in NCHW memory whatever the
caller's layout (:func:`compute_layout`), and its results come back in the caller's layout.

Residuals: conv saves x explicitly padded and w; the transposed convolution saves x zero-extended to the
forward convolution's output shape and w (private copies where they would be the caller's). The saved x is
stored in the caller's layout (the ``layout=`` option, else x's own), so the backward reads that layout
from its strides; w is stored in the layout cuDNN computes in. The backward takes its plan from the
plan cache by the same key: dims, layout and the settings in force when it runs.
"""
from __future__ import annotations

import contextlib
from dataclasses import fields
from typing import Any, Callable, Iterator

from dnnbind.highlevel.cudnn._lib import handle
from dnnbind.highlevel.cudnn.algos import BACKWARD_DATA, BACKWARD_FILTER, FORWARD
from dnnbind.highlevel.cudnn.conv_plan import ConvPlan, plan_for
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import cupy
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.conv_call import GpuConvCall, GpuConvPrimitives
from dnnbind.highlevel.gpu.geometry import crop
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.saved import private

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


class _Call(GpuConvCall):
    """One call's primitives (:class:`dnnbind.highlevel.conv_composed.ConvCall`) on its plan and handle, in
    the layout cuDNN computes in (``run``); results in the caller's layout (``lay``)."""

    def filter(self, w: Any) -> Any:
        return _layout.in_layout(self.cp, w, self.run)

    def forward(self, xi: Any, wf: Any) -> Any:
        y = _layout.empty(self.cp, self.plan.y_shape, xi.dtype, self.run)
        self.plan.run(FORWARD, self.handle, xi, wf, y)
        return y

    def data_grad(self, dy: Any, wf: Any) -> Any:
        dxp = _layout.empty(self.cp, self.plan.padded_x_shape, dy.dtype, self.run)
        self.plan.run(BACKWARD_DATA, self.handle, wf, dy, dxp)
        return crop(self.cp, dxp, self.dims.x_shape, self.plan.geometry.extra_low, self.run)

    def filter_grad(self, xi: Any, dy: Any, wf: Any) -> Any:
        dw = _layout.empty(self.cp, self.dims.w_shape, xi.dtype, self.run)
        self.plan.run(BACKWARD_FILTER, self.handle, xi, dy, dw)
        return dw

    def weight_grad(self, dwf: Any) -> Any:
        return dwf

    def add_bias(self, y: Any, b: Any, transposed: bool) -> Any:
        self.plan.add_bias(self.handle, self.cp.ascontiguousarray(b), y, transposed=transposed)
        return y

    def bias_grad(self, dy: Any, transposed: bool) -> Any:
        db = self.cp.empty((self.dims.in_channels,) if transposed else self.dims.bias_shape, dy.dtype)
        self.plan.bias_grad(self.handle, dy, db, transposed=transposed)
        return db

    def keep(self, a: Any, source: Any, filter: bool = False) -> Any:
        """``a`` never sharing memory with the caller's ``source``; an input stored in the caller's layout."""
        return private(self.cp, a if filter else _layout.in_layout(self.cp, a, self.lay), source)


class Primitives(GpuConvPrimitives):
    """cuDNN's convolution primitives (:class:`dnnbind.highlevel.conv_composed.ConvPrimitives`); the option
    ``layout="NCHW"|"NHWC"`` picks the memory layout to run in, by default x's own."""

    OPTIONS = ("layout",)

    @contextlib.contextmanager
    def forward_call(self, op: str, dims: ConvDims, options: dict[str, Any], x: Any, w: Any,
                     b: Any) -> Iterator[_Call]:
        cp, layout = cupy(), options.get("layout")
        lay = layout
        with Call(op, _params(dims, lambda: lay), x=x, w=w, b=b) as call:
            lay, run = layouts(call["x"], layout)
            c = _Call(cp, dims, lay, run, _plan(call.device, dims, run), handle, call.device)
            c.x, c.w, c.b = call["x"], call["w"], call["b"]
            yield c

    @contextlib.contextmanager
    def backward_call(self, op: str, dims: ConvDims, options: dict[str, Any], saved: tuple, dy: Any,
                      dy_shape: tuple[int, ...]) -> Iterator[_Call]:
        """The saved arrays read in the layout cuDNN computes in; results in the saved x's layout."""
        cp = cupy()
        saved_x, saved_w = saved
        lay, run = layouts(saved_x, options.get("layout"))
        device, dtype = saved_x.device.id, saved_x.dtype
        with Call(f"{op} pullback", _params(dims, lambda: lay), device=device, dy=dy) as back:
            c = _Call(cp, dims, lay, run, _plan(device, dims, run), handle, device)
            c.saved = (_layout.in_layout(cp, saved_x, run), _layout.in_layout(cp, saved_w, run))
            c.dy = cotangent("dy", back["dy"], dy_shape, dtype, run, device)
            yield c


PRIMITIVES = Primitives()
