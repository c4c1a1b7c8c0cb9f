"""The plan of one convolution problem on MIOpen: descriptors, geometry, and running a direction.

A :class:`ConvPlan` is built from a ConvDims, a memory layout and the settings, without arrays or a
handle (MIOpen's descriptors are host objects; weights get a tensor descriptor, MIOpen having no
filter descriptors). Which algorithms run is established per (handle, problem, direction) on first use
and kept on the handle (see :class:`dnnbind.highlevel.miopen._lib.Handle`): Find in the default mode,
GetSolution + CompileSolution in immediate mode. :func:`plan_for` caches plans keyed by everything
that defines them.
"""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.geometry import ConvGeometry
from dnnbind.highlevel.gpu.layout import check_layout
from dnnbind.highlevel.gpu.workspace import WorkspaceTooLarge, is_out_of_memory
from dnnbind.highlevel.miopen import conv_algos, conv_args
from dnnbind.highlevel.miopen._lib import Handle, lib, scaling
from dnnbind.highlevel.miopen.conv_algos import Choice, Problem
from dnnbind.highlevel.miopen.descriptors import ConvolutionDescriptor, TensorDescriptor
from dnnbind.highlevel.miopen.settings import MIOpenSettings
from dnnbind.runtime.errors import MiopenError

PLANS: PlanCache["ConvPlan"] = PlanCache("miopen.conv", maxsize=512)


def plan_key(dims: ConvDims, layout: str, settings: MIOpenSettings, device: int) -> tuple:
    """Everything that defines a convolution plan: the problem (shapes, dtype, stride, padding, dilation,
    groups, flip, output padding), the memory layout, how algorithms are chosen (Find's search or
    immediate mode, determinism, workspace limit) and the device."""
    return (dims, layout, settings.algo, settings.deterministic, settings.workspace_limit, settings.immediate,
            device)


def plan_for(dims: ConvDims, layout: str, settings: MIOpenSettings, device: int) -> "ConvPlan":
    """The cached plan for this problem (built on a miss)."""
    key = plan_key(dims, layout, settings, device)
    return PLANS.get(key, lambda: ConvPlan(dims, layout, settings, key))


def _find_mode(settings: MIOpenSettings) -> int | None:
    """MIOpen's normal find mode (every solver timed) for algo="benchmark"; its default otherwise."""
    return int(lib.miopenConvolutionFindModeNormal) if settings.algo == "benchmark" else None


def _not_supported(exc: MiopenError) -> bool:
    """Statuses that mean "this algorithm cannot run this problem": try the next one."""
    return isinstance(exc.status, int) and exc.status in (lib.miopenStatusNotImplemented, lib.miopenStatusUnsupportedOp)


class ConvPlan:
    """Descriptors of x (explicitly padded), w, y and the convolution; runs the three directions."""

    def __init__(self, dims: ConvDims, layout: str, settings: MIOpenSettings, key: Any = None) -> None:
        self.dims = dims
        self.layout = check_layout(layout)
        self.settings = settings
        self.key = key if key is not None else (dims, layout, settings)
        self.geometry = g = ConvGeometry.of(dims)
        self.x = TensorDescriptor(g.x_shape, dims.dtype, layout=layout)
        self.w = TensorDescriptor(g.w_shape, dims.dtype, layout=layout)
        self.y = TensorDescriptor(g.y_shape, dims.dtype, layout=layout)
        self.conv = ConvolutionDescriptor(g.padding, g.stride, g.dilation, groups=g.groups,
                                          deterministic=settings.deterministic, find_mode=_find_mode(settings))
        self.scaling = scaling(dims.dtype, convolution=True)

    def descriptors(self, direction: str) -> tuple[dict[str, TensorDescriptor], TensorDescriptor]:
        """(inputs by name, output) descriptors of ``direction``: dy and dx are described like y and x."""
        by_name = {"x": self.x, "w": self.w, "y": self.y, "dy": self.y, "dx": self.x, "dw": self.w}
        inputs, out = conv_args.TENSORS[direction]
        return {name: by_name[name] for name in inputs}, by_name[out]

    def problem(self, direction: str, out: Any, inputs: dict[str, Any]) -> Problem:
        """The library's view of ``direction`` on CuPy arrays (laid out as the descriptors say)."""
        descs, out_desc = self.descriptors(direction)
        if set(inputs) != set(descs):
            raise ValueError(f"{direction} takes {tuple(descs)}, got {tuple(inputs)}")
        return Problem(direction, {n: (descs[n].handle, a.data.ptr) for n, a in inputs.items()},
                       (out_desc.handle, out.data.ptr), self.conv.handle)

    def choices(self, handle: Handle, direction: str) -> list[Choice] | None:
        """What Find (or immediate mode) established for ``direction`` on ``handle`` (None: not yet)."""
        return handle.found((self.key, direction))

    def _choose(self, d: conv_algos.Direction, handle: Handle, p: Problem) -> list[Choice]:
        chosen = self.choices(handle, d.name)
        if chosen:                           # none recorded, or every one turned out unsupported: ask again
            return chosen
        s = self.settings
        if s.immediate:
            chosen = conv_algos.solutions(d, handle.ptr, p, limit=s.workspace_limit)
        else:
            chosen = conv_algos.find(d, handle.ptr, p, exhaustive=s.algo == "benchmark", limit=s.workspace_limit)
        if not chosen:
            raise RuntimeError(f"MIOpen offers no {d.name.replace('_', ' ')} convolution algorithm for {self.dims} "
                               f"(layout {self.layout}) within workspace_limit={s.workspace_limit} "
                               f"(immediate={s.immediate}, deterministic={s.deterministic})")
        handle.record((self.key, d.name), chosen)
        return chosen

    def run(self, direction: str, handle: Handle, out: Any, **inputs: Any) -> None:
        """out <- the convolution ``direction`` of CuPy arrays ``inputs`` (named as in
        :data:`conv_args.TENSORS`: x and w, dy and w, or dy and x).

        On a handle where this problem has not run, Find runs first (it writes ``out``) or, in immediate
        mode, the solutions are listed; then the first choice that fits the workspace limit and the
        memory pool, and that MIOpen supports, runs (compiled first on this handle in immediate mode).
        """
        d = conv_algos.direction(direction)
        p = self.problem(direction, out, inputs)
        choices = self._choose(d, handle, p)
        failures: list[str] = []
        for choice in choices:
            try:
                if choice.immediate and handle.found((self.key, direction, choice.algo)) is None:
                    conv_algos.compile_solution(d, handle.ptr, p, choice)
                    handle.record((self.key, direction, choice.algo), True)
                conv_algos.execute(d, handle.ptr, p, choice, self.scaling, self.settings.workspace_limit)
                return
            except WorkspaceTooLarge as exc:
                failures.append(f"algo {choice.algo}: {exc}")
            except MiopenError as exc:
                if not _not_supported(exc):
                    raise
                failures.append(f"algo {choice.algo}: {exc}")
                # MIOpen cannot run it for this problem: later runs on this handle skip it
                choices = [c for c in choices if c != choice]
                handle.record((self.key, direction), choices)
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                failures.append(f"algo {choice.algo}: out of memory for its workspace")
        raise RuntimeError(f"no {direction.replace('_', ' ')} convolution algorithm could run for {self.dims}: "
                           + "; ".join(failures))
