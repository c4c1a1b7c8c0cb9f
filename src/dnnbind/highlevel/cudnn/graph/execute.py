"""Running an execution plan on a GPU: a variant pack of device pointers and cudnnBackendExecute.

NEVER RUN YET: no GPU was available where this was written (the graphs and plans it runs are built and
tested devicelessly; execution is checked by the gpu-marked tests in tests/highlevel/cudnn/graph, run
by ``make gpu-check``). Arrays are CuPy arrays (or anything with ``__cuda_array_interface__``), keyed
by the tensor roles of :data:`graphs.UIDS`; layer norm's epsilon is a host scalar passed by value.
"""
from __future__ import annotations

import ctypes
import importlib
import math
import time
from typing import Any, Callable

import numpy as np

from dnnbind.gen import cudnn as c, cudnn_backend as b
from dnnbind.highlevel.cudnn.graph.graphs import UIDS, Graph, GraphSpec
from dnnbind.highlevel.cudnn.graph.plans import Plan, PlanSet, autotune
from dnnbind.highlevel.gpu.settings import Settings
from dnnbind.highlevel.gpu.workspace import allocate


#: bytes per element of the cuDNN data types the graphs use
_ITEMSIZE = {c.CUDNN_DATA_HALF: 2, c.CUDNN_DATA_BFLOAT16: 2, c.CUDNN_DATA_FLOAT: 4, c.CUDNN_DATA_DOUBLE: 8,
             c.CUDNN_DATA_INT8: 1}


def _size_and_itemsize(a: Any) -> tuple[int, int]:
    """(elements, bytes per element) of an array, or of an object with only ``__cuda_array_interface__``."""
    face = getattr(a, "__cuda_array_interface__", None)
    shape, dtype = (face["shape"], face["typestr"]) if face is not None else (a.shape, a.dtype)
    return math.prod(shape), np.dtype(dtype).itemsize


def check_arrays(graph: Graph, arrays: dict[str, Any]) -> None:
    """ValueError naming the role unless ``arrays`` holds exactly the graph's non-virtual tensors, each with
    the tensor's element count and element size (a mismatch would be read or written out of bounds)."""
    wanted = {role: t for role, t in graph.tensors.items() if role in graph.uids()}
    if set(arrays) != set(wanted):
        raise ValueError(f"arrays has roles {sorted(arrays)} but the {graph.spec.op} graph's tensors are "
                         f"{sorted(wanted)}")
    for role, tensor in wanted.items():
        dims = tuple(tensor.get("dimensions"))
        size, itemsize = _size_and_itemsize(arrays[role])
        if size != math.prod(dims) or itemsize != _ITEMSIZE[tensor.get("data_type")]:
            raise ValueError(f"arrays[{role!r}] has {size} elements of {itemsize} bytes but the {graph.spec.op} "
                             f"graph's tensor {role} has dims {dims} of {_ITEMSIZE[tensor.get('data_type')]} bytes")


def variant_pack(arrays: dict[str, Any], workspace: Any, epsilon: float | None = None) -> tuple[Any, list]:
    """The variant pack for ``arrays`` ({role: device array}) and the host values it points to (keep them
    alive until the run returns)."""
    unknown = sorted(set(arrays) - set(UIDS))
    if unknown:
        raise ValueError(f"arrays has unknown tensor role(s) {unknown}; the roles are {', '.join(UIDS)}")
    roles = sorted(arrays)
    pointers: list[Any] = [arrays[r] for r in roles]
    keep: list[Any] = []
    if epsilon is not None:
        value = ctypes.c_float(epsilon)
        keep.append(value)
        roles.append("epsilon")
        pointers.append(ctypes.addressof(value))
    pack = b.VariantPackDescriptor(unique_ids=[UIDS[r] for r in roles], data_pointers=pointers,
                                   workspace=None if workspace is None else workspace.ptr).finalize()
    return pack, keep


def run(handle: Any, plan: Plan, arrays: dict[str, Any], *, workspace_limit: int | None = None,
        epsilon: float | None = None) -> None:
    """Execute ``plan`` on ``arrays`` with a workspace of the size the plan reports."""
    memory = allocate(plan.workspace, workspace_limit)
    pack, keep = variant_pack(arrays, memory, epsilon)
    c.cudnnBackendExecute(handle, plan.descriptor.handle, pack.handle)
    del keep


def run_graph(spec: GraphSpec, arrays: dict[str, Any], *, settings: Settings | None = None,
              epsilon: float | None = None) -> None:
    """Run the graph of ``spec`` on CuPy arrays of the current device and stream (laid out as
    ``spec.layout`` says): this thread's handle, the device's plans (cached, persistent in
    $DNNBIND_PLAN_CACHE when set), the first plan. GraphUnsupported when cuDNN has no plan."""
    from dnnbind.highlevel.cudnn._lib import handle
    from dnnbind.highlevel.cudnn.graph import cache, choose
    from dnnbind.highlevel.cudnn.settings import settings as current
    from dnnbind.highlevel.gpu.arrays import cupy, current_stream
    settings = settings or current.current()
    h = handle(cupy().cuda.Device().id, current_stream())
    device = choose.device_of(h)
    run_best(h, cache.plans_for(spec, device, settings, choose.cache_dir()), arrays, settings, epsilon=epsilon)


def run_best(handle: Any, plans: PlanSet, arrays: dict[str, Any], settings: Settings,
             epsilon: float | None = None) -> None:
    """Run the preferred plan of ``plans``; with ``algo="benchmark"`` the first few are timed on these
    arrays once per plan set, and the order found is kept (and stored in $DNNBIND_PLAN_CACHE when set).
    The arrays are checked against the graph when the plans were built here (not loaded from the cache)."""
    if plans.graph is not None:
        check_arrays(plans.graph, arrays)
    if settings.algo == "benchmark" and not plans.tuned:
        from dnnbind.highlevel.cudnn.graph import cache, choose
        autotune(plans, timer(handle, arrays, workspace_limit=settings.workspace_limit, epsilon=epsilon))
        directory = choose.cache_dir()
        if directory is not None:
            cache.save(plans, choose.device_of(handle), settings, directory)
    run(handle, plans.plans[0], arrays, workspace_limit=settings.workspace_limit, epsilon=epsilon)


def timer(handle: Any, arrays: dict[str, Any], repeats: int = 3, **kwargs: Any) -> Callable[[Plan], float]:
    """A ``time_plan`` for :func:`plans.autotune`: the best of ``repeats`` synchronized runs, in seconds."""
    cupy = importlib.import_module("cupy")

    def time_plan(plan: Plan) -> float:
        run(handle, plan, arrays, **kwargs)         # warm-up (and the plan's first-run setup)
        best = float("inf")
        for _ in range(repeats):
            cupy.cuda.get_current_stream().synchronize()
            start = time.perf_counter()
            run(handle, plan, arrays, **kwargs)
            cupy.cuda.get_current_stream().synchronize()
            best = min(best, time.perf_counter() - start)
        return best
    return time_plan
