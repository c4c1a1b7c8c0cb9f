"""Plans that survive a restart: serialized execution plans in a cache directory, plus the in-process cache.

A plan is stored as cuDNN's own JSON (CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION) in
``DIR/cudnn-VERSION/DEVICE-FINGERPRINT/KEY.json``, where KEY hashes everything that defines the plans:
the graph (:meth:`GraphSpec.key`), the settings that filter them, the cuDNN version and the device
properties. Loading finalizes an execution plan from that JSON and the device-properties descriptor, with
no heuristics (cuDNN 9.28: a loaded plan needs the device properties or a handle set before finalize;
with neither it crashes, so :func:`load_plan` always sets them). DIR is ``$DNNBIND_PLAN_CACHE``, else
``$XDG_CACHE_HOME/dnnbind/plans``, else ``~/.cache/dnnbind/plans``. Nothing is written unless a caller
asks for a directory.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from dnnbind.gen import cudnn as c, cudnn_backend as b
from dnnbind.highlevel.cudnn.graph.device import Device
from dnnbind.highlevel.cudnn.graph.graphs import GraphSpec
from dnnbind.highlevel.cudnn.graph.plans import GraphUnsupported, Plan, PlanSet, build_plans
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.settings import Settings
from dnnbind.runtime.backend import Descriptor
from dnnbind.runtime.errors import CudnnError

FORMAT = 1
#: this process's plan sets, and the graphs cuDNN has no plan for (so the heuristics are not asked again)
PLANS: PlanCache[PlanSet | GraphUnsupported] = PlanCache("cudnn.graph", maxsize=256)


def default_dir() -> Path:
    """$DNNBIND_PLAN_CACHE, else $XDG_CACHE_HOME/dnnbind/plans, else ~/.cache/dnnbind/plans."""
    if os.environ.get("DNNBIND_PLAN_CACHE"):
        return Path(os.environ["DNNBIND_PLAN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dnnbind" / "plans"


def key(spec: GraphSpec, device: Device, settings: Settings) -> dict[str, Any]:
    """Everything that defines a set of plans, as plain values."""
    return {"format": FORMAT, "cudnn": c.cudnnGetVersion(), "device": device.fingerprint, "graph": list(spec.key()),
            "deterministic": settings.deterministic, "allow_tf32": settings.allow_tf32,
            "workspace_limit": settings.workspace_limit}


def path(spec: GraphSpec, device: Device, settings: Settings, directory: str | os.PathLike[str]) -> Path:
    """Where the plans of ``spec`` on ``device`` under ``settings`` are stored in ``directory``."""
    k = key(spec, device, settings)
    digest = hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()[:32]
    return Path(directory) / f"cudnn-{k['cudnn']}" / device.fingerprint / f"{digest}.json"


def save(plan_set: PlanSet, device: Device, settings: Settings, directory: str | os.PathLike[str]) -> Path:
    """Write ``plan_set``'s plans (their JSON, engine, workspace, notes) to the cache; returns the file."""
    target = path(plan_set.spec, device, settings, directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    record = {"key": key(plan_set.spec, device, settings), "device_name": device.name, "configs": plan_set.configs,
              "tuned": plan_set.tuned,
              "plans": [{"json": p.json(), "workspace": p.workspace, "engine": p.engine,
                         "numerical_notes": list(p.numerical_notes), "behavior_notes": list(p.behavior_notes)}
                        for p in plan_set.plans]}
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(tmp, target)                     # readers see the old file or the new one, never half
    return target


def load_plan(text: str, device: Device) -> Descriptor:
    """An execution plan finalized from its JSON form, for ``device`` (no heuristics, no engine config)."""
    if not text:
        raise ValueError("a serialized plan is an empty string")
    return b.ExecutionPlanDescriptor(deviceprop=device.descriptor(), json_representation=text).finalize()


def load(spec: GraphSpec, device: Device, settings: Settings,
         directory: str | os.PathLike[str]) -> PlanSet | None:
    """The stored plans of ``spec`` (None when there are none, or the file is stale: another key, or
    cuDNN refuses a plan)."""
    source = path(spec, device, settings, directory)
    try:
        record = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("key") != key(spec, device, settings):
        return None
    plans = []
    for entry in record.get("plans", ()):
        try:
            descriptor = load_plan(entry["json"], device)
        except (CudnnError, KeyError, ValueError, TypeError):
            return None
        plans.append(Plan(descriptor, descriptor.get("workspace_size"), entry.get("engine", -1),
                          tuple(entry.get("numerical_notes", ())), tuple(entry.get("behavior_notes", ()))))
    return PlanSet(spec, None, plans, record.get("configs", 0), source="cache",
                   tuned=bool(record.get("tuned"))) if plans else None


def plans_for(spec: GraphSpec, device: Device, settings: Settings,
              directory: str | os.PathLike[str] | None = None) -> PlanSet:
    """The plans of ``spec``: from this process's cache, else from ``directory`` (persistent), else built
    by the heuristics (and then stored in ``directory``). GraphUnsupported when cuDNN has none (remembered
    in this process, like the plans)."""
    def find() -> PlanSet | GraphUnsupported:
        found = load(spec, device, settings, directory) if directory is not None else None
        if found is None:
            try:
                found = build_plans(spec, device, settings)
            except GraphUnsupported as exc:
                return exc
            if directory is not None:
                save(found, device, settings, directory)
        return found
    memory_key = (spec, device.fingerprint, settings.deterministic, settings.allow_tf32, settings.workspace_limit,
                  c.cudnnGetVersion(), None if directory is None else os.fspath(directory))
    result = PLANS.get(memory_key, find)
    if isinstance(result, GraphUnsupported):
        raise result
    return result
