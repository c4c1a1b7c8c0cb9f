"""Layer normalization on MIOpen: miopenLayerNormForward (a beta API of MIOpen 3.4), gradients with CuPy.

MIOpen's layer norm normalizes a packed x over its dims from ``normalized_dim`` on (the index of the
first normalized dim, not a count). Its kernels only see x as (outer, inner) rows, so x is described as
exactly that 2-d packed tensor with ``normalized_dim = 1``: any rank, unbatched x included (outer = 1).
Weight and bias are passed as (inner,) tensors in x's dtype, always in MIOPEN_WEIGHT_BIAS mode (ones
or zeros stand in for an absent one): MIOpen's composable-kernel solver for 2-d problems reads both
whatever the mode says. mean and rstd come back in MIOpen's accumulation type (float32, float64 for
float64 data: :attr:`DataType.param`), one per row.

MIOpen 3.4 has no layer-norm backward (miopenLayerNormBackward is not in its header; the T5 variant is
RMS norm), so the backward runs the reference's array-method formulas
(:func:`dnnbind.highlevel.reference.layer_norm.gradients`) on the CuPy residuals, as batch norm's
inference backward runs its own formulas in CuPy.

:func:`supports` says which problems MIOpen cannot take. Not verified on AMD hardware (no AMD GPU has
run this code); the plan and the checks are tested against the real libMIOpen on the host.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.batchnorm import as_param
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.saved import private
from dnnbind.highlevel.grad_mode import saving
from dnnbind.highlevel.miopen._lib import DTYPES, handle, lib
from dnnbind.highlevel.miopen.descriptors import TensorDescriptor
from dnnbind.highlevel.reference.layer_norm import gradients as layer_norm_gradients
from dnnbind.highlevel.residual import ALL_NEEDED, ArraySpec

PLANS: PlanCache["LayerNormPlan"] = PlanCache("miopen.layer_norm", maxsize=128)

#: work-items per row in MIOpen's layer-norm kernel (LOCAL_SIZE of its LayernormFwdContiguous)
_ROW_THREADS = 256
_INT32_MAX = 2**31 - 1
#: HIP launches at most 2**32 - 1 work-items along the grid's x, where the kernel puts one block per row
_GRID_MAX = 2**32 - 1


def rows(x_shape: tuple[int, ...], normalized_ndim: int) -> tuple[int, int]:
    """(outer, inner): how many slices x has and how many elements each normalizes over."""
    split = len(x_shape) - normalized_ndim
    return math.prod(x_shape[:split]), math.prod(x_shape[split:])


def supports(x_dtype: Any, x_shape: tuple[int, ...], normalized_ndim: int) -> str | None:
    """None when MIOpen's layer norm can run this problem, else why not ("not available on this
    backend: ..."). Shapes and dtypes only; empty problems never reach the library (the edge policy)."""
    name = getattr(x_dtype, "name", str(x_dtype))
    if name not in DTYPES.names():
        return f"not available on this backend: MIOpen's layer norm has no {name} kernel"
    outer, inner = rows(tuple(x_shape), normalized_ndim)
    if outer > _INT32_MAX or inner > _INT32_MAX:
        return (f"not available on this backend: x of shape {tuple(x_shape)} has {outer} slices of {inner} "
                f"elements, and MIOpen's tensor descriptors take int32 lengths")
    if outer * _ROW_THREADS > _GRID_MAX:
        return (f"not available on this backend: x of shape {tuple(x_shape)} has {outer} normalized slices; "
                f"MIOpen's layer-norm kernel launches {_ROW_THREADS} work-items per slice, at most "
                f"{_GRID_MAX // _ROW_THREADS} slices")
    return None


class LayerNormPlan:
    """The descriptors of one layer-norm problem: x and y as (outer, inner), weight and bias as (inner,),
    mean and rstd as (outer,) in the accumulation dtype."""

    def __init__(self, outer: int, inner: int, dtype: str) -> None:
        self.mode = lib.MIOPEN_WEIGHT_BIAS
        self.normalized_dim = 1
        self.stat_dtype = DTYPES[dtype].param
        self.x = TensorDescriptor((outer, inner), dtype)
        self.param = TensorDescriptor((inner,), dtype)
        self.stat = TensorDescriptor((outer,), self.stat_dtype)


def plan_for(outer: int, inner: int, dtype: str) -> LayerNormPlan:
    return PLANS.get((outer, inner, dtype), lambda: LayerNormPlan(outer, inner, dtype))


def _checked(x_dtype: Any, x_shape: tuple[int, ...], normalized_ndim: int) -> None:
    reason = supports(x_dtype, x_shape, normalized_ndim)
    if reason is not None:
        raise NotImplementedError(f"layer_norm is {reason}")


def layer_norm_forward(x: Any, weight: Any, bias: Any, normalized_ndim: int,
                       eps: float) -> tuple[Any, tuple[Any, ...]]:
    """y = (x - mean) * rstd * weight + bias over the trailing ``normalized_ndim`` dims (see
    :func:`dnnbind.layer_norm`); saves (x, mean, rstd) and weight when given, like the reference."""
    cp = cupy()
    params = {"normalized_ndim": normalized_ndim, "eps": eps}
    with Call("layer_norm", params, dlpack_devices=DLPACK_ROCM, x=x, weight=weight, bias=bias) as call:
        x = cp.ascontiguousarray(call["x"])
        _checked(x.dtype, tuple(x.shape), normalized_ndim)
        outer, inner = rows(tuple(x.shape), normalized_ndim)
        plan = plan_for(outer, inner, x.dtype.name)
        dtype = x.dtype.name
        w = cp.ones(inner, dtype) if call["weight"] is None else as_param(cp, call["weight"].reshape(inner), dtype)
        b = cp.zeros(inner, dtype) if call["bias"] is None else as_param(cp, call["bias"].reshape(inner), dtype)
        y = cp.empty_like(x)
        mean, rstd = cp.empty(outer, plan.stat_dtype), cp.empty(outer, plan.stat_dtype)
        xd, pd, sd = plan.x.handle, plan.param.handle, plan.stat.handle
        lib.miopenLayerNormForward(handle(call.device, current_stream()).ptr, plan.mode, xd, x.data.ptr, pd,
                                   w.data.ptr, pd, b.data.ptr, float(eps), plan.normalized_dim, xd, y.data.ptr,
                                   sd, mean.data.ptr, sd, rstd.data.ptr)
        if not saving():              # dnnbind.no_grad(): no backward can come, x is not copied
            return y, ()
        batch = tuple(x.shape[:x.ndim - normalized_ndim])
        saved: tuple[Any, ...] = (private(cp, x, call["x"]), mean.reshape(batch), rstd.reshape(batch))
        if call["weight"] is not None:     # the backward's own weight (the caller may change theirs)
            saved += (private(cp, w.reshape(call["weight"].shape), call["weight"]),)
        return y, saved


def layer_norm_backward(saved: tuple, cotangents: tuple, normalized_ndim: int, eps: float, *,
                        needs: tuple[bool, bool, bool] = ALL_NEEDED) -> tuple[Any, Any, Any]:
    """(dx, dweight, dbias) with CuPy (MIOpen 3.4 has no layer-norm backward); None where ``needs`` is False."""
    x = saved[0]
    with Call("layer_norm backward", {"normalized_ndim": normalized_ndim, "eps": eps}, device=x.device.id,
              dlpack_devices=DLPACK_ROCM, dy=cotangents[0]) as back:
        dy = cotangent("dy", back["dy"], x.shape, x.dtype, None, x.device.id, DLPACK_ROCM)
        return layer_norm_gradients(saved, dy, normalized_ndim, needs)


def layer_norm_residuals(x: ArraySpec, weight: ArraySpec | None, bias: ArraySpec | None, normalized_ndim: int,
                         eps: float) -> tuple[ArraySpec, ...]:
    """x, then mean and rstd (x's batch shape, MIOpen's accumulation dtype), then weight when given."""
    shape = tuple(x.shape)
    stat = ArraySpec(shape[:len(shape) - normalized_ndim], np.dtype(DTYPES[np.dtype(x.dtype).name].param))
    saved = (ArraySpec(shape, x.dtype), stat, stat)
    return saved + (() if weight is None else (ArraySpec(tuple(weight.shape), weight.dtype),))
