"""Run as a child process with DNNBIND_LIBCUDA / DNNBIND_CUBLASLT set: build, without a GPU and through the typed
descriptors only, one NHWC float16 convolution's operation graph for the device-properties JSON named by argv[1],
run engine heuristics (mode A; first, without a device's properties, for a graph they find no engine for), finalize every execution plan, read workspace sizes, serialize one plan to JSON;
and read back each read-only attribute of the finalized descriptors with its declared type and with another.
Prints one JSON object."""
from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import dnnbind
from dnnbind.gen import cudnn as c, cudnn_backend as b
from dnnbind.runtime import deviceless

N, C, H, W, K, R, S = 8, 64, 56, 56, 64, 3, 3


def nhwc(n: int, ch: int, h: int, w: int) -> dict:
    """A float16 tensor of logical shape (n, ch, h, w) laid out NHWC."""
    return dict(dimensions=[n, ch, h, w], strides=[h * w * ch, 1, w * ch, ch], data_type=c.CUDNN_DATA_HALF,
                byte_alignment=16)


def read_back(objects: list[b.BackendDescriptor]) -> dict[str, str]:
    """For each read-only, non-descriptor attribute: 'ok' when get() reads it and another element type is refused."""
    out = {}
    for obj in objects:
        for name, a in obj.attributes.items():
            if a.settable or a.kind == "descriptor":
                continue
            key = f"{type(obj).__name__}.{name}"
            try:
                obj.get(name)
            except dnnbind.CudnnError as exc:
                out[key] = f"get failed: {exc.status.name}"
                continue
            other = c.CUDNN_TYPE_INT32 if a.attr_type != c.CUDNN_TYPE_INT32 else c.CUDNN_TYPE_INT64
            try:
                c.cudnnBackendGetAttribute(obj.handle, a.attr, other, 1, ctypes.c_int64(), bytearray(16))
                out[key] = f"{other.name} accepted"
            except dnnbind.CudnnError as exc:
                out[key] = "ok" if exc.status.name.startswith("CUDNN_STATUS_BAD_PARAM") else exc.status.name
    return out


def no_engine() -> dict:
    """Heuristics for a pointwise graph in a process that has seen no device's properties find no engine:
    the count and the (empty) list of configurations read back."""
    def tensor(uid: int) -> b.TensorDescriptor:
        return b.TensorDescriptor(unique_id=uid, dimensions=[1, 8, 4, 4], strides=[128, 16, 4, 1],
                                  data_type=c.CUDNN_DATA_FLOAT, byte_alignment=16).finalize()
    relu = b.PointwiseDescriptor(mode=c.CUDNN_POINTWISE_RELU_FWD, math_prec=c.CUDNN_DATA_FLOAT).finalize()
    op = b.OperationPointwiseDescriptor(pw_descriptor=relu, xdesc=tensor(1), ydesc=tensor(2)).finalize()
    graph = b.OperationGraphDescriptor(ops=[op]).finalize()
    heuristics = b.EngineHeurDescriptor(operation_graph=graph, mode=c.CUDNN_HEUR_MODE_A).finalize()
    return {"count": heuristics.count("results"), "results": heuristics.get("results")}


def main(path: str) -> dict:
    deviceless.enable()
    empty = no_engine()
    device = b.DevicePropDescriptor(json_representation=Path(path).read_text()).finalize()
    x = b.TensorDescriptor(unique_id=1, **nhwc(N, C, H, W)).finalize()
    w = b.TensorDescriptor(unique_id=2, **nhwc(K, C, R, S)).finalize()
    y = b.TensorDescriptor(unique_id=3, **nhwc(N, K, H, W)).finalize()
    conv = b.ConvolutionDescriptor(comp_type=c.CUDNN_DATA_FLOAT, conv_mode=c.CUDNN_CROSS_CORRELATION, spatial_dims=2,
                                   dilations=[1, 1], filter_strides=[1, 1], pre_paddings=[1, 1],
                                   post_paddings=[1, 1]).finalize()
    op = b.OperationConvolutionForwardDescriptor(conv_desc=conv, x=x, w=w, y=y, alpha=[1.0], beta=[0.0]).finalize()
    graph = b.OperationGraphDescriptor(ops=[op]).finalize()
    heuristics = b.EngineHeurDescriptor(operation_graph=graph, mode=c.CUDNN_HEUR_MODE_A, deviceprop=device).finalize()
    configs = heuristics.get("results")
    plans, failures, workspaces = [], [], []
    for config in configs:
        try:
            plan = b.ExecutionPlanDescriptor(engine_config=config, deviceprop=device).finalize()
        except dnnbind.CudnnError as exc:
            failures.append(exc.status.name)
            continue
        plans.append(plan)
        workspaces.append(plan.get("workspace_size"))
    text = plans[0].get("json_representation") if plans else ""
    return {"device": json.loads(device.get("json_representation"))["deviceName"], "configs": len(configs),
            "plans": len(plans), "failures": failures, "workspaces": workspaces, "plan_json": text,
            "graph_repr": repr(graph), "tensor_repr": repr(x), "without_deviceprop": empty,
            "read_back": read_back([device, x, conv, op, graph, heuristics, configs[0].get("engine")] + configs[:1]
                                   + plans[:1])}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
