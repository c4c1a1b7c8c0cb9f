"""Plans built ahead of time, without a GPU, for a standard set of problems (``python -m dnnbind plans``).

:func:`standard_specs` lists every graph primitive over a few common shapes (a ResNet-style 3x3 and 1x1
convolution, also fused with bias and ReLU; a transformer-width layer norm, forward and backward; 2x2
max and mean pooling and a padded 3x3 mean without the padding, forward and backward) in each dtype and
layout: every graph the cuDNN backend's ops run (conv_plan, fused, layer_norm, pool_graph). The
settings (deterministic, workspace limit, TF32) filter the plans as they do at run time, so the plans
stored are the ones the backend would pick; :func:`build_all`
builds their plans for one device, optionally storing them in the persistent cache, and returns one row
per graph for :func:`table`.
"""
from __future__ import annotations

import os
import time
from typing import Any, Iterable, Iterator

from dnnbind.highlevel.cudnn.graph import cache
from dnnbind.highlevel.cudnn.graph.device import Device
from dnnbind.highlevel.cudnn.graph.graphs import BUILDERS, GraphSpec, NormDims
from dnnbind.highlevel.cudnn.graph.plans import GraphUnsupported, build_plans
from dnnbind.highlevel.dims import ConvDims, PoolDims
from dnnbind.highlevel.gpu.settings import Settings

DTYPES = ("float16", "bfloat16", "float32")
LAYOUTS = ("NCHW", "NHWC")
OPS = tuple(BUILDERS)


def standard_specs(dtypes: Iterable[str] = DTYPES, layouts: Iterable[str] = LAYOUTS,
                   ops: Iterable[str] = OPS) -> Iterator[GraphSpec]:
    """The standard problems: each op over its shapes, in each dtype and layout."""
    ops = tuple(ops)
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        raise ValueError(f"ops={unknown} are no graph primitives; they are {', '.join(OPS)}")
    for dtype in dtypes:
        convs = [ConvDims((8, 64, 56, 56), (64, 64, 3, 3), padding=1, dtype=dtype),
                 ConvDims((8, 256, 14, 14), (64, 256, 1, 1), dtype=dtype)]
        norms = [NormDims((2048, 768, 1, 1), dtype)]
        # max and mean (count_include_pad=True) 2x2; mean without the padding's count on ResNet's padded 3x3
        pools = [("max", PoolDims((8, 64, 56, 56), 2, dtype=dtype)), ("mean", PoolDims((8, 64, 56, 56), 2, dtype=dtype)),
                 ("mean_exclude_pad", PoolDims((8, 64, 112, 112), 3, stride=2, padding=1, dtype=dtype))]
        for layout in layouts:
            for op in ops:
                if op.startswith("conv"):
                    yield from (GraphSpec(op, d, layout) for d in convs)
                elif op.startswith("layer_norm"):
                    yield from (GraphSpec(op, d, layout) for d in norms)
                else:
                    yield from (GraphSpec(op, d, layout, mode=m) for m, d in pools)


def build_all(device: Device, specs: Iterable[GraphSpec], settings: Settings | None = None,
              cache_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Build (and with ``cache_dir`` store) the plans of each spec; one row per spec."""
    settings = settings or Settings()
    rows = []
    for spec in specs:
        start = time.perf_counter()
        row: dict[str, Any] = {"op": spec.op + ("" if not spec.op.startswith("pool") else f"[{spec.mode}]"),
                               "dtype": spec.dtype, "layout": spec.layout, "shape": _shape(spec)}
        try:
            plan_set = build_plans(spec, device, settings)
        except GraphUnsupported as exc:
            row.update(configs=0, plans=0, workspace=None, note=exc.reason)
        else:
            row.update(configs=plan_set.configs, plans=len(plan_set.plans), workspace=plan_set.workspace, note="")
            if cache_dir is not None:
                row["file"] = str(cache.save(plan_set, device, settings, cache_dir))
        row["seconds"] = round(time.perf_counter() - start, 3)
        rows.append(row)
    return rows


def _shape(spec: GraphSpec) -> str:
    d = spec.dims
    if isinstance(d, ConvDims):
        return f"x{list(d.x_shape)} w{list(d.w_shape)}"
    if isinstance(d, PoolDims):
        return f"x{list(d.x_shape)} window{list(d.window)}"
    return f"x{list(d.x_shape)}"


COLUMNS = (("op", "op"), ("dtype", "dtype"), ("layout", "layout"), ("shape", "shape"),
           ("configs", "engine configs"), ("plans", "plans built"), ("workspace", "workspace bytes"))


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a fixed-width text table (a graph without plans shows why under it)."""
    cells = [[h for _, h in COLUMNS]] + [["-" if r[k] is None else str(r[k]) for k, _ in COLUMNS] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = []
    for i, row in enumerate(cells):
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
        if i and rows[i - 1].get("note"):
            lines.append(f"    no plan: {rows[i - 1]['note']}")
    return "\n".join(lines)
