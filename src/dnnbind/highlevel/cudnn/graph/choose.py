"""Graph API or legacy API for one problem: the graph API's plans when cuDNN has any, else None with the
reason in the trace (``dnnbind.trace()`` shows a "graph API -> legacy API" record).

The graph path runs only when ``$DNNBIND_CUDNN_GRAPH=1``: its execution has not yet run on a GPU, so the
legacy API stays the default until ``make gpu-check`` has verified it. With ``$DNNBIND_PLAN_CACHE`` set,
plans persist there across runs.
"""
from __future__ import annotations

import os
from typing import Any

from dnnbind.highlevel.cudnn.graph import cache
from dnnbind.highlevel.cudnn.graph.device import Device
from dnnbind.highlevel.cudnn.graph.graphs import GraphSpec
from dnnbind.highlevel.cudnn.graph.plans import GraphUnsupported, PlanSet, note_fallback
from dnnbind.highlevel.gpu.settings import Settings
from dnnbind.runtime.deviceless import DevicelessError
from dnnbind.runtime.errors import CudnnError

ENV = "DNNBIND_CUDNN_GRAPH"
_DEVICES: dict[int, Device] = {}


def enabled() -> bool:
    """Whether the cuDNN backend tries the graph API first ($DNNBIND_CUDNN_GRAPH=1)."""
    return os.environ.get(ENV, "").lower() in ("1", "true", "yes")


def device_of(handle: Any) -> Device:
    """The properties of the device a cuDNN handle runs on (read once per handle)."""
    import ctypes
    address = ctypes.cast(handle, ctypes.c_void_p).value or 0
    device = _DEVICES.get(address)
    if device is None:
        device = _DEVICES[address] = Device.from_handle(handle)
    return device


def cache_dir() -> str | None:
    """The persistent plan cache the backend uses: $DNNBIND_PLAN_CACHE, or none (plans live in memory)."""
    return os.environ.get("DNNBIND_PLAN_CACHE") or None


def plans_or_reason(spec: GraphSpec, device: Device, settings: Settings) -> PlanSet | str:
    """The plans of ``spec`` (persistent in $DNNBIND_PLAN_CACHE when set), or why cuDNN builds none (the
    op without a legacy path puts the reason in its error)."""
    try:
        return cache.plans_for(spec, device, settings, cache_dir())
    except GraphUnsupported as exc:
        return exc.reason
    except (DevicelessError, CudnnError) as exc:
        return f"{type(exc).__name__}: {exc}"


def what(spec: GraphSpec) -> str:
    """The graph in words, for the trace and errors."""
    return f"{spec.op} {spec.dims} ({spec.layout})"


def graph_or_legacy(spec: GraphSpec, device: Device, settings: Settings) -> PlanSet | None:
    """The plans of ``spec`` (see :func:`plans_or_reason`), or None: the legacy API runs it, and the
    trace says why."""
    found = plans_or_reason(spec, device, settings)
    if isinstance(found, str):
        note_fallback(what(spec), found)
        return None
    return found
