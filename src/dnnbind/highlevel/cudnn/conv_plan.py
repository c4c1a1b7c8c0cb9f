"""The plan of one convolution problem: cuDNN descriptors, geometry and chosen algorithms.

A :class:`ConvPlan` is built from a ConvDims, a memory layout and the settings, without arrays or a
handle (descriptors are host objects); its algorithms are chosen on the first run of each direction
and kept. :func:`plan_for` caches plans keyed by everything that defines them.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

from dnnbind.highlevel.cudnn import algos
from dnnbind.highlevel.cudnn._lib import DTYPES, lib
from dnnbind.highlevel.cudnn.descriptors import ConvolutionDescriptor, FilterDescriptor, TensorDescriptor
from dnnbind.highlevel.cudnn.graph import choose, execute
from dnnbind.highlevel.cudnn.graph.device import Device
from dnnbind.highlevel.cudnn.graph.graphs import GraphSpec
from dnnbind.highlevel.cudnn.graph.plans import PlanSet
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.geometry import ConvGeometry, padded_shape
from dnnbind.highlevel.gpu.layout import check_layout, lift
from dnnbind.highlevel.gpu.settings import Settings
from dnnbind.highlevel.gpu.workspace import WorkspaceTooLarge, allocate, is_out_of_memory
from dnnbind.runtime.errors import CudnnError

PLANS: PlanCache["ConvPlan"] = PlanCache("cudnn.conv", maxsize=512)
#: direction -> (graph primitive, tensor roles of run()'s a, b, out)
GRAPH_OPS = {algos.FORWARD: ("conv_forward", ("x", "w", "y")),
             algos.BACKWARD_DATA: ("conv_backward_data", ("w", "dy", "dx")),
             algos.BACKWARD_FILTER: ("conv_backward_filter", ("x", "dy", "dw"))}


def plan_key(dims: ConvDims, layout: str, settings: Settings, device: int) -> tuple:
    """Everything that defines a convolution plan: the problem (shapes, dtype, stride, padding, dilation,
    groups, flip, output padding), the memory layout, the math type, how algorithms are chosen
    (heuristic/benchmark, determinism, workspace limit) and the device they were chosen on."""
    math, _ = algos.math_types(DTYPES[dims.dtype], settings.allow_tf32)
    return (dims, layout, math, settings.algo, settings.deterministic, settings.workspace_limit, device)


def plan_for(dims: ConvDims, layout: str, settings: Settings, device: int) -> "ConvPlan":
    """The cached plan for this problem (built on a miss)."""
    return PLANS.get(plan_key(dims, layout, settings, device), lambda: ConvPlan(dims, layout, settings))


class ConvPlan:
    """Descriptors of x (explicitly padded), w, y, the bias and the convolution, plus algorithm choices."""

    def __init__(self, dims: ConvDims, layout: str, settings: Settings) -> None:
        self.dims = dims
        self.layout = check_layout(layout)
        self.settings = settings
        self.geometry = g = ConvGeometry.of(dims)
        self.dtype = DTYPES[dims.dtype]
        self.y_shape = dims.y_shape                                          # unlifted, computed once
        self.padded_x_shape = padded_shape(dims.x_shape, g.extra_low, g.extra_high)
        self.x = TensorDescriptor(g.x_shape, dims.dtype, layout=layout)
        self.w = FilterDescriptor(g.w_shape, dims.dtype, layout)
        self.y = TensorDescriptor(g.y_shape, dims.dtype, layout=layout)
        self.bias = TensorDescriptor(g.bias_shape, dims.dtype)
        # the transposed convolution's output (and the gradient of conv's input) before explicit padding
        self.x_user = self.x if not g.explicit_padding else TensorDescriptor(lift(dims.x_shape), dims.dtype,
                                                                              layout=layout)
        # the transposed convolution's bias has one value per output channel
        self.bias_transposed = TensorDescriptor((1, dims.in_channels) + (1,) * (len(g.x_shape) - 2), dims.dtype)
        self.requested_math, self.allowed_math = algos.math_types(self.dtype, settings.allow_tf32)
        self._convs: dict[int, ConvolutionDescriptor] = {}
        self.conv = self.conv_descriptor(self.requested_math)
        self._choices: dict[str, list[algos.Candidate]] = {}
        self._lock = threading.Lock()

    def conv_descriptor(self, math: int) -> ConvolutionDescriptor:
        """The convolution descriptor with math type ``math`` (cuDNN runs an algorithm with the math type
        its perf result names, so a plan may need one per math type)."""
        desc = self._convs.get(math)
        if desc is None:
            g = self.geometry
            desc = ConvolutionDescriptor(g.padding, g.stride, g.dilation, flip=g.flip, compute=self.dtype.compute,
                                         groups=g.groups, math=math)
            self._convs[math] = desc
        return desc

    def descriptors(self, direction: str) -> tuple[Any, Any, Any]:
        """(a, b, out) descriptors of ``direction`` (see :mod:`algos`)."""
        if direction == algos.FORWARD:
            return self.x.handle, self.w.handle, self.y.handle
        if direction == algos.BACKWARD_DATA:
            return self.w.handle, self.y.handle, self.x.handle
        return self.x.handle, self.y.handle, self.w.handle

    def choices(self, direction: str) -> list[algos.Candidate] | None:
        """The candidates chosen for ``direction`` so far (None before its first run)."""
        return self._choices.get(direction)

    def drop(self, direction: str, candidate: algos.Candidate) -> None:
        """Remove ``candidate`` from ``direction``'s choices (cuDNN answered NOT_SUPPORTED when it ran).

        The list is replaced, not edited, so a run iterating over the old one is not disturbed.
        """
        with self._lock:
            chosen = self._choices.get(direction)
            if chosen is not None and candidate in chosen:
                self._choices[direction] = [c for c in chosen if c != candidate]

    def _choose(self, d: algos.Direction, handle: Any, a: int, b: int, out: int) -> list[algos.Candidate]:
        with self._lock:
            chosen = self._choices.get(d.name)
            if chosen is not None:
                return chosen
            s = self.settings
            a_desc, b_desc, out_desc = self.descriptors(d.name)
            if s.algo == "benchmark":
                perfs, count = algos.benchmark(d, handle, a_desc, a, b_desc, b, self.conv.handle, out_desc, out,
                                               s.workspace_limit)
            else:
                perfs, count = algos.heuristic(d, handle, a_desc, b_desc, self.conv.handle, out_desc)
            chosen = algos.usable(perfs, count, deterministic=s.deterministic, allowed_math=self.allowed_math,
                                  workspace_limit=s.workspace_limit)
            if not chosen:
                raise RuntimeError(self._none_usable(d.name, perfs, count))
            self._choices[d.name] = chosen
            return chosen

    def _none_usable(self, direction: str, perfs: Any, count: int) -> str:
        s = self.settings
        seen = ", ".join(f"algo {p.algo} (status {p.status}, math {p.mathType}, determinism {p.determinism}, "
                         f"{p.memory} bytes)" for p in list(perfs)[:count])
        return (f"cuDNN offers no {direction.replace('_', ' ')} convolution algorithm for {self.dims} "
                f"(layout {self.layout}) with deterministic={s.deterministic}, workspace_limit={s.workspace_limit}, "
                f"allow_tf32={s.allow_tf32}; it reported: {seen or 'nothing'}")

    def graph_plans(self, direction: str, device: Device) -> PlanSet | None:
        """The graph API's plans of ``direction`` for the problem as run() hands it to cuDNN (x explicitly
        padded, lifted), or None: the legacy API runs it, and the trace says why."""
        g = self.geometry
        dims = ConvDims(g.x_shape, g.w_shape, stride=g.stride, padding=g.padding, dilation=g.dilation,
                        groups=g.groups, flip=g.flip, dtype=self.dims.dtype)
        return choose.graph_or_legacy(GraphSpec(GRAPH_OPS[direction][0], dims, self.layout), device, self.settings)

    def run(self, direction: str, handle: Any, a: Any, b: Any, out: Any) -> None:
        """out <- the convolution ``direction`` of CuPy arrays a and b (laid out as the descriptors say).

        With $DNNBIND_CUDNN_GRAPH=1 the graph API's first plan runs when cuDNN has one (see
        :mod:`.graph.choose`). Otherwise, tries the chosen legacy candidates in order: the first whose
        workspace (asked for now) fits the limit and the memory pool, and which cuDNN supports, runs.
        """
        if choose.enabled():
            plans = self.graph_plans(direction, choose.device_of(handle))
            if plans is not None:
                execute.run_best(handle, plans, dict(zip(GRAPH_OPS[direction][1], (a, b, out))), self.settings)
                return
        d = algos.direction(direction)
        pa, pb, pout = a.data.ptr, b.data.ptr, out.data.ptr
        a_desc, b_desc, out_desc = self.descriptors(direction)
        limit = self.settings.workspace_limit
        size = ctypes.c_size_t()
        failures: list[str] = []
        for algo, math in self._choose(d, handle, pa, pb, pout):
            conv = self.conv_descriptor(math).handle
            try:
                d.workspace(handle, a_desc, b_desc, conv, out_desc, algo, ctypes.byref(size))
                memory = allocate(size.value, limit)
                d.run(handle, self.dtype.one, a_desc, pa, b_desc, pb, conv, algo,
                      0 if memory is None else memory.ptr, size.value, self.dtype.zero, out_desc, pout)
                return
            except WorkspaceTooLarge as exc:
                failures.append(f"algo {algo}: {exc}")
            except CudnnError as exc:
                if not _not_supported(exc):
                    raise
                failures.append(f"algo {algo}: {exc}")
                self.drop(direction, (algo, math))      # it will not run this problem: never retry it
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                failures.append(f"algo {algo}: out of memory for a workspace of {size.value} bytes")
        raise RuntimeError(f"no {direction.replace('_', ' ')} convolution algorithm could run for {self.dims}: "
                           + ("; ".join(failures) or "every algorithm cuDNN offered answered NOT_SUPPORTED on an "
                              "earlier call"))

    def add_bias(self, handle: Any, bias: Any, out: Any, transposed: bool = False) -> None:
        """out += bias (one value per channel) through cudnnAddTensor; ``out`` is y, or the transposed convolution's
        output (shaped like x before explicit padding) when ``transposed``."""
        bias_desc, out_desc = (self.bias_transposed, self.x_user) if transposed else (self.bias, self.y)
        lib().cudnnAddTensor(handle, self.dtype.one, bias_desc.handle, bias.data.ptr, self.dtype.one,
                             out_desc.handle, out.data.ptr)

    def bias_grad(self, handle: Any, dy: Any, db: Any, transposed: bool = False) -> None:
        """db <- the sum of dy over every axis but channels, through cudnnConvolutionBackwardBias."""
        bias_desc, dy_desc = (self.bias_transposed, self.x_user) if transposed else (self.bias, self.y)
        lib().cudnnConvolutionBackwardBias(handle, self.dtype.one, dy_desc.handle, dy.data.ptr, self.dtype.zero,
                                           bias_desc.handle, db.data.ptr)


def _not_supported(exc: CudnnError) -> bool:
    """cuDNN's NOT_SUPPORTED family (3000-3999): this algorithm cannot run this problem; try the next."""
    return isinstance(exc.status, int) and 3000 <= exc.status < 4000
