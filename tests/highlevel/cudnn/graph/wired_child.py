"""Run as a child process (see child.py): the ops wired to the graph path, without a GPU. For each call
signature, the op's own graph specs get plans on the device, the op's operands match the graph's tensors
(roles, element counts, element sizes) and make a variant pack that finalizes (device arrays stand in as
objects with ``__cuda_array_interface__``). One JSON object per line on stdout.

layer_norm DEVICE       layer norm forward and backward signatures x float16/bfloat16/float32, and float64
pool DEVICE             max and mean pooling (count_include_pad both ways) x dtypes x NCHW/NHWC, and what
                        falls back to the legacy path (with the trace's reason)
fused DEVICE            conv + bias + activation signatures x dtypes x NCHW/NHWC, an alpha, what cuDNN cannot plan
"""
from __future__ import annotations

import importlib
import json
import sys

import numpy as np

from dnnbind.runtime import deviceless

deviceless.enable()

import dnnbind  # noqa: E402
from dnnbind.highlevel.cudnn import fused, pool_graph  # noqa: E402
from dnnbind.highlevel.cudnn.graph import execute  # noqa: E402
from dnnbind.highlevel.cudnn.graph.device import Device  # noqa: E402
from dnnbind.highlevel.cudnn.graph.plans import PlanSet  # noqa: E402
from dnnbind.highlevel.dims import ConvDims, PoolDims  # noqa: E402
from dnnbind.highlevel.dims.checks import numpy_dtype  # noqa: E402
from dnnbind.highlevel.gpu import layout as _layout  # noqa: E402

layer_norm = importlib.import_module("dnnbind.highlevel.cudnn.layer_norm")
pool = importlib.import_module("dnnbind.highlevel.cudnn.pool")
DTYPES = ("float16", "bfloat16", "float32")


class DeviceArray:
    """The one allowed test double: a device array's interface (shape, dtype, an address), no memory."""

    def __init__(self, a: np.ndarray, address: int) -> None:
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "data": (address, False),
                                         "version": 3}


def check(plans: PlanSet, arrays: dict, epsilon: float | None = None) -> dict:
    """The plans and how the operands fit the graph: {plans, configs, roles, graph_roles, refused}."""
    execute.check_arrays(plans.graph, arrays)
    execute.variant_pack({r: DeviceArray(a, 256 * (i + 1)) for i, (r, a) in enumerate(arrays.items())}, None,
                         epsilon)
    role = sorted(arrays)[0]                 # one operand one element short must be refused, naming its role
    try:
        execute.check_arrays(plans.graph, {**arrays, role: arrays[role].reshape(-1)[1:]})
        refused = ""
    except ValueError as exc:
        refused = str(exc)
    return {"plans": len(plans.plans), "configs": plans.configs, "roles": sorted(arrays),
            "graph_roles": sorted(plans.graph.uids()), "refused": refused, "checked": role}


LAYER_NORM_CALLS = [((3, 4, 5), 2, True, True), ((8,), 1, False, False), ((2, 3, 16), 1, True, False)]


def layer_norm_rows(device: Device) -> None:
    for dtype in DTYPES:
        for shape, ndim, weight, bias in LAYER_NORM_CALLS:
            x = np.linspace(-1, 1, int(np.prod(shape))).reshape(shape).astype(numpy_dtype(dtype))
            normalized = shape[len(shape) - ndim:]
            w = np.ones(normalized, x.dtype) if weight else None
            b = np.zeros(normalized, x.dtype) if bias else None
            forward, backward = layer_norm.specs(shape, ndim, dtype)
            fwd = layer_norm.forward_operands(np, x, w, b, forward.dims)
            y, mean, inv = fwd["y"], fwd["mean"], fwd["inv_variance"]
            batch = shape[:len(shape) - ndim]
            saved = (x, mean.reshape(batch), inv.reshape(batch)) + ((w,) if weight else ())
            bwd = layer_norm.backward_operands(np, saved, y, backward.dims)
            call = {"dtype": dtype, "shape": list(shape), "ndim": ndim, "dims": list(forward.dims.x_shape)}
            print(json.dumps({"graph": "forward", **call, **check(layer_norm.plans(forward, device), fwd, 1e-5)}))
            print(json.dumps({"graph": "backward", **call, **check(layer_norm.plans(backward, device), bwd, 1e-5)}))
    try:
        layer_norm.plans(layer_norm.specs((4, 6), 1, "float64")[0], device)
        print(json.dumps({"graph": "float64", "error": ""}))
    except NotImplementedError as exc:
        print(json.dumps({"graph": "float64", "error": str(exc)}))


def fallback_notes(make) -> tuple[object, list[str]]:
    """make()'s result and the trace's "graph API -> legacy API" reasons while it ran."""
    with dnnbind.trace(file=None) as calls:
        result = make()
    return result, [dict(r.arguments)["reason"] for r in calls if r.function == "graph API -> legacy API"]


#: (kind, PoolDims arguments): max and both means, without and with (symmetric) padding
POOL_CALLS = [("max", dict(window=3, stride=2, padding=1)),
              ("mean_include_pad", dict(window=3, stride=1, padding=1)),
              ("mean_exclude_pad", dict(window=3, stride=2, padding=1))]


def pool_rows(device: Device) -> None:
    for dtype in DTYPES:
        for layout in ("NCHW", "NHWC"):
            for kind, args in POOL_CALLS:
                dims = PoolDims((2, 8, 12, 12), dtype=dtype, **args)
                plan = pool.PoolPlan(dims, kind, False, layout)
                x = _layout.empty(np, dims.x_shape, numpy_dtype(dtype), layout)
                y = _layout.empty(np, dims.y_shape, x.dtype, layout)
                call = {"dtype": dtype, "layout": layout, "kind": kind}
                for op in (pool_graph.FORWARD, pool_graph.BACKWARD):
                    found, notes = fallback_notes(lambda: pool_graph.graph_plans(plan, op, device))
                    if found is None:
                        print(json.dumps({"graph": op, **call, "plans": 0, "notes": notes}))
                        continue
                    spec, plans = found
                    arrays = pool_graph.forward_operands(np, spec, x, y) if op == pool_graph.FORWARD else \
                        pool_graph.backward_operands(spec, x, y, y.copy(), x.copy())
                    print(json.dumps({"graph": op, **call, "notes": notes, **check(plans, arrays)}))
    falls = {"ceil_mode": ("max", PoolDims((2, 8, 13, 13), 2, ceil_mode=True, dtype="float16"), "NCHW", None),
             "divisor_override": ("mean_include_pad", PoolDims((2, 8, 12, 12), 2, dtype="float16"), "NCHW", 3),
             "nhwc max": ("max", PoolDims((2, 8, 12, 12), 2, dtype="float16"), "NHWC", None)}
    for what, (kind, dims, layout, divisor) in falls.items():
        plan = pool.PoolPlan(dims, kind, False, layout, divisor)
        for op in (pool_graph.FORWARD, pool_graph.BACKWARD):
            found, notes = fallback_notes(lambda: pool_graph.graph_plans(plan, op, device))
            print(json.dumps({"graph": op, "fallback": what, "plans": 0 if found is None else len(found[1].plans),
                              "notes": notes}))


#: (ConvDims arguments, activation, alpha): a 3x3 ReLU block, a strided 1x1 projection, asymmetric padding
FUSED_CALLS = [(dict(x_shape=(2, 16, 12, 12), w_shape=(32, 16, 3, 3), padding=1), "relu", None),
               (dict(x_shape=(2, 16, 12, 12), w_shape=(32, 16, 1, 1), stride=2), "identity", None),
               (dict(x_shape=(2, 16, 12, 12), w_shape=(32, 16, 3, 3), padding=((1, 2), (0, 1))), "relu", None)]


def fused_row(dims: ConvDims, mode: str, alpha, layout: str, device: Device) -> dict:
    found, notes = fallback_notes(lambda: fused.fused_plans(dims, mode, alpha, layout, device))
    call = {"dtype": dims.dtype, "layout": layout, "mode": mode, "alpha": alpha, "notes": notes}
    if found is None:
        return {**call, "plans": 0}
    spec, plans = found
    x = _layout.empty(np, dims.x_shape, numpy_dtype(dims.dtype), layout)
    w = _layout.empty(np, dims.w_shape, x.dtype, layout)
    y = _layout.empty(np, dims.y_shape, x.dtype, layout)
    return {**call, "key": list(map(str, spec.key())), **check(plans, fused.operands(x, w, np.zeros(dims.out_channels,
                                                                                                    x.dtype), y))}


def fused_rows(device: Device) -> None:
    for dtype in DTYPES:
        for layout in ("NCHW", "NHWC"):
            for args, mode, alpha in FUSED_CALLS:
                print(json.dumps(fused_row(ConvDims(dtype=dtype, **args), mode, alpha, layout, device)))
    dims = ConvDims((2, 16, 12, 12), (32, 16, 3, 3), padding=1, dtype="float16")
    print(json.dumps({"case": "alpha", **fused_row(dims, "clipped_relu", 4.0, "NHWC", device)}))
    print(json.dumps({"case": "no engine", **fused_row(ConvDims((2, 16, 12, 12), (32, 16, 3, 3), padding=1,
                                                                dtype="float64"), "leaky_relu", 0.2, "NCHW", device)}))
    print(json.dumps({"case": "no mode", **fused_row(dims, "mish", None, "NCHW", device)}))


if __name__ == "__main__":
    command, path = sys.argv[1:3]
    {"layer_norm": layer_norm_rows, "pool": pool_rows, "fused": fused_rows}[command](Device.from_file(path))
