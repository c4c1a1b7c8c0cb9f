"""Run as a child process (DNNBIND_LIBCUDA / DNNBIND_CUBLASLT set, see tests/deviceless_libs.py): the graph
path's deviceless work, one JSON object per line on stdout. ``argv``: a command and its arguments.

sweep DEVICE            at least one plan (limit 1) for every graph op x float16/bfloat16/float32 x NCHW/NHWC
filters DEVICE          the settings' filters on one convolution's plans
save DEVICE DIR         build the plans of SPECS and store them in the persistent cache DIR
load DEVICE DIR         find SPECS' plans in DIR under a trace: were heuristics run?
fallback DEVICE         ConvPlan.graph_plans and choose.graph_or_legacy on what cuDNN cannot plan
autotune DEVICE DIR     plans.autotune with a measure given here (the plans' workspace, smallest first: no device
                        times them), then the tuned order through the persistent cache in a fresh PlanSet
"""
from __future__ import annotations

import json
import sys
import time

from dnnbind.runtime import deviceless

deviceless.enable()

import dnnbind  # noqa: E402
from dnnbind.highlevel.cudnn.algos import BACKWARD_DATA, BACKWARD_FILTER, FORWARD  # noqa: E402
from dnnbind.highlevel.cudnn.conv_plan import ConvPlan  # noqa: E402
from dnnbind.highlevel.cudnn.graph import cache, choose  # noqa: E402
from dnnbind.highlevel.cudnn.graph.device import Device  # noqa: E402
from dnnbind.highlevel.cudnn.graph.graphs import BUILDERS, GraphSpec, NormDims  # noqa: E402
from dnnbind.highlevel.cudnn.graph.plans import GraphUnsupported, autotune, build_plans  # noqa: E402
from dnnbind.highlevel.dims import ConvDims, PoolDims  # noqa: E402
from dnnbind.highlevel.gpu.settings import Settings  # noqa: E402


def problems(dtype: str) -> dict[str, list]:
    """Small problems per op family (asymmetric padding and a stride for the convolution)."""
    return {"conv": [ConvDims((2, 16, 12, 12), (32, 16, 3, 3), padding=((1, 2), (1, 1)), stride=(1, 2),
                              dtype=dtype)],
            "layer": [NormDims((16, 32, 2, 2), dtype)],
            "pool": [PoolDims((2, 16, 12, 12), 2, dtype=dtype)]}


def specs(dtypes=("float16", "bfloat16", "float32"), layouts=("NCHW", "NHWC")):
    for dtype in dtypes:
        dims = problems(dtype)
        for layout in layouts:
            for op in BUILDERS:
                for d in dims[op.split("_")[0]]:
                    modes = ("max", "mean") if op.startswith("pool") else ("max",)
                    for mode in modes:
                        yield GraphSpec(op, d, layout, mode=mode)


def row(spec: GraphSpec, **more) -> dict:
    return {"op": spec.op, "mode": spec.mode if spec.op.startswith("pool") else "", "dtype": spec.dtype,
            "layout": spec.layout, **more}


def sweep(device: Device) -> None:
    for spec in specs():
        start = time.perf_counter()
        try:
            found = build_plans(spec, device, Settings(), limit=1)
            out = row(spec, plans=len(found.plans), configs=found.configs, workspace=found.workspace,
                      uids=found.graph.uids(), json=len(found.plans[0].json()))
        except GraphUnsupported as exc:
            out = row(spec, plans=0, reason=exc.reason)
        print(json.dumps({**out, "seconds": round(time.perf_counter() - start, 2)}), flush=True)


def filters(device: Device) -> None:
    spec = GraphSpec("conv_backward_filter", ConvDims((8, 64, 28, 28), (64, 64, 3, 3), padding=1,
                                                      dtype="float32"), "NHWC")
    for name, settings in [("default", Settings()), ("deterministic", Settings(deterministic=True)),
                           ("no_workspace", Settings(workspace_limit=0)), ("tf32", Settings(allow_tf32=True))]:
        found = build_plans(spec, device, settings)
        print(json.dumps({"settings": name, "configs": found.configs, "rejected": found.rejected,
                          "plans": [{"engine": p.engine, "workspace": p.workspace, "notes": p.numerical_notes}
                                    for p in found.plans]}), flush=True)


SPECS = [GraphSpec("conv_bias_activation", ConvDims((2, 16, 8, 8), (16, 16, 3, 3), padding=1, dtype="float16"),
                   "NHWC", activation="relu"),
         GraphSpec("layer_norm_forward", NormDims((16, 32, 2, 2), "bfloat16"), "NCHW")]


def save(device: Device, directory: str) -> None:
    for spec in SPECS:
        found = build_plans(spec, device, Settings())
        path = cache.save(found, device, Settings(), directory)
        print(json.dumps(row(spec, file=str(path), plans=len(found.plans),
                             workspaces=[p.workspace for p in found.plans],
                             engines=[p.engine for p in found.plans])), flush=True)


def load(device: Device, directory: str) -> None:
    for spec in SPECS:
        with dnnbind.trace(file=None) as calls:
            found = cache.plans_for(spec, device, Settings(), directory)
        created = [dict(r.arguments).get("descriptorType") for r in calls if r.function == "cudnnBackendCreateDescriptor"]
        print(json.dumps(row(spec, source=found.source, plans=len(found.plans),
                             workspaces=[p.workspace for p in found.plans], engines=[p.engine for p in found.plans],
                             heuristics=created.count("CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR"),
                             plans_created=created.count("CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR"))), flush=True)


def fallback(device: Device) -> None:
    dims = ConvDims((2, 8, 9, 9), (8, 8, 3, 3), padding=(1, 2), dtype="float16")
    for direction in (FORWARD, BACKWARD_DATA, BACKWARD_FILTER):
        with dnnbind.trace(file=None) as calls:
            found = ConvPlan(dims, "NHWC", Settings()).graph_plans(direction, device)
        notes = [str(r) for r in calls if r.function == "graph API -> legacy API"]
        print(json.dumps({"what": f"conv {direction}", "plans": len(found.plans) if found else 0, "notes": notes}),
              flush=True)
    with dnnbind.trace(file=None) as calls:         # again: the answer is remembered, the heuristics not asked
        found = ConvPlan(dims, "NHWC", Settings()).graph_plans(FORWARD, device)
    print(json.dumps({"what": "conv forward again", "plans": len(found.plans) if found else 0,
                      "notes": [str(r) for r in calls if r.function == "graph API -> legacy API"],
                      "heuristics": sum(1 for r in calls if r.function == "cudnnBackendCreateDescriptor"
                                        and dict(r.arguments).get("descriptorType")
                                        == "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR")}), flush=True)
    with dnnbind.trace(file=None) as calls:
        found = choose.graph_or_legacy(GraphSpec("pool_forward", PoolDims((2, 8, 8, 8), 2, dtype="float64")),
                                       device, Settings())
    notes = [str(r) for r in calls if r.function == "graph API -> legacy API"]
    print(json.dumps({"what": "pool float64", "plans": len(found.plans) if found else 0, "notes": notes}), flush=True)
    with dnnbind.trace(file=None) as calls:
        found = choose.graph_or_legacy(GraphSpec("pool_forward", PoolDims((2, 8, 8, 8), 2, dilation=2,
                                                                          dtype="float16"), "NHWC"), device, Settings())
    notes = [str(r) for r in calls if r.function == "graph API -> legacy API"]
    print(json.dumps({"what": "pool dilated", "plans": len(found.plans) if found else 0, "notes": notes}), flush=True)


def tune(device: Device, directory: str) -> None:
    spec = GraphSpec("conv_backward_filter", ConvDims((8, 64, 28, 28), (64, 64, 3, 3), padding=1, dtype="float16"),
                     "NHWC")
    found = build_plans(spec, device, Settings())
    before = [(p.engine, p.workspace) for p in found.plans]
    autotune(found, lambda plan: float(plan.workspace), top=4)
    cache.save(found, device, Settings(), directory)
    loaded = cache.load(spec, device, Settings(), directory)
    print(json.dumps({"before": before, "after": [(p.engine, p.workspace) for p in found.plans],
                      "tuned": found.tuned, "loaded": [(p.engine, p.workspace) for p in loaded.plans],
                      "loaded_tuned": loaded.tuned}))


if __name__ == "__main__":
    command, path, *rest = sys.argv[1:]
    {"sweep": sweep, "filters": filters, "save": save, "load": load, "fallback": fallback, "autotune": tune}[command](
        Device.from_file(path), *rest)
