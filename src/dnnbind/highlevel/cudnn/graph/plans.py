"""Engine heuristics -> engine configs -> execution plans for one graph, filtered by the settings.

:func:`build_plans` asks the heuristics (mode A, then the fallback mode when no mode-A config gives a
plan) for engine configs, finalizes an execution plan per config, and keeps those the settings allow:
``deterministic`` drops engines with CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, float32 without
``allow_tf32`` drops convolution engines on tensor cores (TENSOR_CORE or DOWN_CONVERT_INPUTS: TF32), ``workspace_limit``
drops plans that need more scratch memory. The plans keep the heuristics' order; :func:`autotune`
reorders the first few by measured time when a device can run them. When no plan is left the graph is
unsupported: :class:`GraphUnsupported` says why, and the caller falls back to the legacy API.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from dnnbind.gen import cudnn as c, cudnn_backend as b
from dnnbind.highlevel.cudnn.graph.device import Device
from dnnbind.highlevel.cudnn.graph.graphs import Graph, GraphSpec, build
from dnnbind.highlevel.gpu.settings import Settings
from dnnbind.runtime import trace
from dnnbind.runtime.backend import Descriptor
from dnnbind.runtime.errors import CudnnError

HEURISTIC_MODES = (c.CUDNN_HEUR_MODE_A, c.CUDNN_HEUR_MODE_FALLBACK)


class GraphUnsupported(RuntimeError):
    """cuDNN builds no usable execution plan for this graph; ``reason`` says why (for the trace)."""

    def __init__(self, spec: GraphSpec, reason: str) -> None:
        super().__init__(f"the graph API has no plan for {spec.op} {spec.dims} ({spec.layout}): {reason}")
        self.spec = spec
        self.reason = reason


@dataclass
class Plan:
    """One finalized execution plan and what its engine says about itself."""

    descriptor: Descriptor
    workspace: int
    engine: int = -1                                   # the engine's global index (-1: loaded, not asked)
    numerical_notes: tuple[str, ...] = ()
    behavior_notes: tuple[str, ...] = ()

    def json(self) -> str:
        """The plan's serialized form (CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION)."""
        return self.descriptor.get("json_representation")


@dataclass
class PlanSet:
    """The usable plans of one graph on one device, best first, and how they were found."""

    spec: GraphSpec
    graph: Graph | None                                # None when loaded from the persistent cache
    plans: list[Plan]
    configs: int = 0                                   # engine configs the heuristics returned
    rejected: list[str] = field(default_factory=list)  # why the other configs give no plan
    source: str = "heuristics"                         # or "cache": loaded from the persistent cache
    tuned: bool = False                                # reordered by measured time (autotune)

    @property
    def workspace(self) -> int:
        """The first (preferred) plan's workspace in bytes."""
        return self.plans[0].workspace if self.plans else 0


def _status(exc: CudnnError) -> str:
    return str(getattr(exc.status, "name", exc.status))


def _names(values: Sequence[Any]) -> tuple[str, ...]:
    return tuple(getattr(v, "name", str(v)).rsplit("_NOTE_", 1)[-1] for v in values)


def why_not(plan: Plan, spec: GraphSpec, settings: Settings) -> str | None:
    """Why the settings refuse ``plan`` of ``spec`` (None: they allow it). TF32 concerns convolutions only
    (the products it rounds); pooling and normalization engines carry tensor-core notes too."""
    if settings.deterministic and "NONDETERMINISTIC" in plan.numerical_notes:
        return f"engine {plan.engine} is nondeterministic (deterministic=True)"
    if spec.op.startswith("conv") and spec.dtype == "float32" and not settings.allow_tf32 and {"TENSOR_CORE", "DOWN_CONVERT_INPUTS"} & set(
            plan.numerical_notes):
        return f"engine {plan.engine} runs float32 on TF32 tensor cores (allow_tf32=False)"
    if plan.workspace > settings.workspace_limit:
        return f"engine {plan.engine} needs {plan.workspace} bytes of workspace (workspace_limit=" \
               f"{settings.workspace_limit})"
    return None


def engine_configs(graph: Graph, device: Device, mode: Any) -> list[Descriptor]:
    """The heuristics' engine configs for ``graph`` on ``device``, best first."""
    heuristics = b.EngineHeurDescriptor(operation_graph=graph.descriptor, mode=mode,
                                        deviceprop=device.descriptor()).finalize()
    return heuristics.get("results")


def make_plan(config: Descriptor, device: Device) -> Plan:
    """Finalize the execution plan of one engine config (CudnnError when the engine cannot run the graph)."""
    descriptor = b.ExecutionPlanDescriptor(engine_config=config, deviceprop=device.descriptor()).finalize()
    engine = config.get("engine")
    return Plan(descriptor, descriptor.get("workspace_size"), engine.get("global_index"),
                _names(engine.get("numerical_note")), _names(engine.get("behavior_note")))


def build_plans(spec: GraphSpec, device: Device, settings: Settings, *, graph: Graph | None = None,
                limit: int | None = None) -> PlanSet:
    """The usable plans of ``spec`` on ``device`` (at most ``limit``); GraphUnsupported when none is."""
    try:
        graph = graph or build(spec)
    except CudnnError as exc:
        raise GraphUnsupported(spec, f"the operation graph does not finalize ({_status(exc)})") from None
    except ValueError as exc:           # what the graph API cannot express (pooling with dilation)
        raise GraphUnsupported(spec, str(exc)) from None
    rejected: list[str] = []
    configs_seen = 0
    for mode in HEURISTIC_MODES:
        try:
            configs = engine_configs(graph, device, mode)
        except CudnnError as exc:
            rejected.append(f"heuristics {c.cudnnBackendHeurMode_t(mode).name}: {_status(exc)}")
            continue
        configs_seen += len(configs)
        plans: list[Plan] = []
        for index, config in enumerate(configs):
            try:
                plan = make_plan(config, device)
            except CudnnError as exc:
                rejected.append(f"{c.cudnnBackendHeurMode_t(mode).name} config {index}: {_status(exc)}")
                continue
            refusal = why_not(plan, spec, settings)
            if refusal:
                rejected.append(refusal)
                continue
            plans.append(plan)
            if limit is not None and len(plans) >= limit:
                break
        if plans:
            return PlanSet(spec, graph, plans, configs_seen, rejected)
    summary = "; ".join(rejected[:6]) + (f"; ... ({len(rejected)} in all)" if len(rejected) > 6 else "")
    raise GraphUnsupported(spec, f"{configs_seen} engine config(s), none usable" + (f": {summary}" if summary
                                                                                    else ""))


def autotune(plan_set: PlanSet, time_plan: Callable[[Plan], float], top: int = 4) -> PlanSet:
    """Reorder the first ``top`` plans by ``time_plan(plan)`` (seconds, measured on a device: see
    :func:`dnnbind.highlevel.cudnn.graph.execute.timer`); the rest keep the heuristics' order. A plan
    whose run raises CudnnError goes last."""
    head, tail = plan_set.plans[:top], plan_set.plans[top:]
    times = {}
    for plan in head:
        try:
            times[id(plan)] = time_plan(plan)
        except CudnnError:
            times[id(plan)] = float("inf")
    plan_set.plans = sorted(head, key=lambda p: times[id(p)]) + tail
    plan_set.tuned = True
    return plan_set


def note_fallback(what: str, reason: str) -> None:
    """Record in the trace that ``what`` leaves the graph API for the legacy one, and why."""
    trace.note("cuDNN", "graph API -> legacy API", f"{what}: {reason}")
