"""Layer normalization on the cuDNN backend, through cuDNN's graph API (its legacy API has none).

x of shape (*batch, *normalized) runs as the graph's per-sample layer norm over an (N, C, 1, 1) tensor:
N = prod(batch) samples of C = prod(normalized) values (:func:`norm_dims`), x packed in C order, so any
rank and any ``normalized_shape`` fold onto it without a copy. Weight and bias are (1, C, 1, 1) in x's
dtype (ones or zeros stand in for an absent one: the graph always takes both). The forward saves
(x, mean, inv_variance) as the graph writes them (float32, one per sample, reshaped to x's batch
shape) and weight when given; the backward graph gives dx, dweight and dbias.

Available only when the graph path is on (``$DNNBIND_CUDNN_GRAPH=1``, see :mod:`.graph.choose`) and cuDNN
builds a plan for the graph; otherwise every entry point raises NotImplementedError saying which of the
two is missing (cuDNN's own reason for the second). NEVER EXECUTED on a GPU yet: the plans, the operands
and the variant pack are tested without one (tests/highlevel/cudnn/graph/test_wired_ops.py).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from dnnbind.highlevel.cudnn._lib import handle
from dnnbind.highlevel.cudnn.graph import choose, execute
from dnnbind.highlevel.cudnn.graph.device import Device
from dnnbind.highlevel.cudnn.graph.graphs import GraphSpec, NormDims
from dnnbind.highlevel.cudnn.graph.plans import PlanSet
from dnnbind.highlevel.cudnn.settings import settings
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.grad_mode import saving
from dnnbind.highlevel.reference.layer_norm import saved_specs
from dnnbind.highlevel.residual import ALL_NEEDED, ArraySpec

#: why the backend may not run a layer norm (the support matrix's note)
WHY = ("cuDNN's legacy API has no layer normalization; its graph API runs it when DNNBIND_CUDNN_GRAPH=1 "
       "(not yet run on a GPU)")
OFF = (f"layer_norm is not available on the cuDNN backend: the graph API path is off (${choose.ENV} is not 1) "
       "and cuDNN's legacy API has no layer normalization")
#: the saved statistics' dtype: what the graph's mean and inv_variance tensors hold
STATS_DTYPE = np.dtype(np.float32)


def norm_dims(x_shape: tuple[int, ...], normalized_ndim: int, dtype: str) -> NormDims:
    """The graph's (N, C, 1, 1) problem for x of ``x_shape`` normalized over its trailing ``normalized_ndim``
    dims."""
    split = len(x_shape) - normalized_ndim
    return NormDims((math.prod(x_shape[:split]), math.prod(x_shape[split:]), 1, 1), dtype)


def specs(x_shape: tuple[int, ...], normalized_ndim: int, dtype: str) -> tuple[GraphSpec, GraphSpec]:
    """The forward and backward graphs of one call signature."""
    dims = norm_dims(tuple(x_shape), normalized_ndim, dtype)
    return GraphSpec("layer_norm_forward", dims), GraphSpec("layer_norm_backward", dims)


def supports(*args: Any, **kwargs: Any) -> str | None:
    """Why this backend cannot run a layer norm before any plan is asked for (the graph path is off), else
    None (whether cuDNN plans the graph is known when it runs)."""
    return None if choose.enabled() else OFF


def _require_graph() -> None:
    if not choose.enabled():
        raise NotImplementedError(OFF)


def plans(spec: GraphSpec, device: Device) -> PlanSet:
    """The plans of ``spec`` on ``device`` under the current settings, or NotImplementedError with cuDNN's
    reason."""
    found = choose.plans_or_reason(spec, device, settings.current())
    if isinstance(found, str):
        raise NotImplementedError(f"layer_norm is not available on the cuDNN backend for {choose.what(spec)}: "
                                  f"cuDNN has no engine for this graph: {found}")
    return found


def forward_operands(xp: Any, x: Any, weight: Any, bias: Any, dims: NormDims) -> dict[str, Any]:
    """The forward graph's arrays by role, ``xp`` the array module (CuPy; numpy in host tests): x as given
    (packed), weight and bias as (C,) in x's dtype (ones / zeros when absent), y, mean and inv_variance
    allocated."""
    n, inner = dims.x_shape[:2]
    return {"x": x, "scale": _param(xp, weight, inner, x.dtype, 1.0), "bias": _param(xp, bias, inner, x.dtype, 0.0),
            "y": xp.empty(x.shape, x.dtype), "mean": xp.empty(n, STATS_DTYPE),
            "inv_variance": xp.empty(n, STATS_DTYPE)}


def backward_operands(xp: Any, saved: tuple, dy: Any, dims: NormDims) -> dict[str, Any]:
    """The backward graph's arrays by role: the saved x, mean, inv_variance (and weight, else ones), dy,
    and dx, dscale, dbias allocated."""
    x, mean, inv_variance = saved[:3]
    inner = dims.x_shape[1]
    return {"x": x, "dy": dy, "mean": mean, "inv_variance": inv_variance,
            "scale": _param(xp, saved[3] if len(saved) > 3 else None, inner, x.dtype, 1.0),
            "dx": xp.empty(x.shape, x.dtype), "dscale": xp.empty(inner, x.dtype), "dbias": xp.empty(inner, x.dtype)}


def _param(xp: Any, a: Any, inner: int, dtype: Any, fill: float) -> Any:
    if a is None:
        return xp.full(inner, fill, dtype)
    return xp.ascontiguousarray(a.reshape(inner), dtype=dtype)


def layer_norm_forward(x: Any, weight: Any, bias: Any, normalized_ndim: int, eps: float,
                       **options: Any) -> tuple[Any, tuple[Any, ...]]:
    """y = (x - mean) * inv_variance * weight + bias over the trailing ``normalized_ndim`` dims (see
    :func:`dnnbind.layer_norm`) through the graph's layer norm; saves (x, mean, inv_variance) and weight."""
    _require_graph()
    cp = cupy()
    with Call("layer_norm", {"normalized_ndim": normalized_ndim, "eps": eps}, x=x, weight=weight,
              bias=bias) as call:
        x = cp.ascontiguousarray(call["x"])
        spec = specs(tuple(x.shape), normalized_ndim, x.dtype.name)[0]
        h = handle(call.device, current_stream())
        assert isinstance(spec.dims, NormDims)
        arrays = forward_operands(cp, x, call["weight"], call["bias"], spec.dims)
        execute.run_best(h, plans(spec, choose.device_of(h)), arrays, settings.current(), epsilon=float(eps))
        if not saving():
            return arrays["y"], ()
        batch = tuple(x.shape[:x.ndim - normalized_ndim])
        saved: tuple[Any, ...] = (private(cp, x, call["x"]), arrays["mean"].reshape(batch),
                                  arrays["inv_variance"].reshape(batch))
        if call["weight"] is not None:
            saved += (private(cp, arrays["scale"].reshape(call["weight"].shape), call["weight"]),)
        return arrays["y"], saved


def layer_norm_backward(residuals: tuple, cotangents: tuple, normalized_ndim: int, eps: float, *,
                        needs: tuple[bool, bool, bool] = ALL_NEEDED, **options: Any) -> tuple[Any, Any, Any]:
    """(dx, dweight, dbias) through the graph's layer-norm backward; None where ``needs`` is False."""
    _require_graph()
    cp = cupy()
    x = residuals[0]
    with Call("layer_norm backward", {"normalized_ndim": normalized_ndim, "eps": eps}, device=x.device.id,
              dy=cotangents[0]) as back:
        dy = cp.ascontiguousarray(cotangent("dy", back["dy"], x.shape, x.dtype, None, x.device.id))
        spec = specs(tuple(x.shape), normalized_ndim, x.dtype.name)[1]
        h = handle(x.device.id, current_stream())
        assert isinstance(spec.dims, NormDims)
        arrays = backward_operands(cp, tuple(cp.ascontiguousarray(s) for s in residuals), dy, spec.dims)
        execute.run_best(h, plans(spec, choose.device_of(h)), arrays, settings.current(), epsilon=float(eps))
        shape = x.shape[x.ndim - normalized_ndim:]
        return (arrays["dx"] if needs[0] else None, arrays["dscale"].reshape(shape) if needs[1] else None,
                arrays["dbias"].reshape(shape) if needs[2] else None)


def layer_norm_residuals(x: ArraySpec, weight: ArraySpec | None, bias: ArraySpec | None, normalized_ndim: int,
                         eps: float, **options: Any) -> tuple[ArraySpec, ...]:
    """x, then mean and inv_variance (x's batch shape, float32), then weight when given."""
    _require_graph()
    return saved_specs(x, weight, normalized_ndim, STATS_DTYPE)
