"""The zero-size and 0-d policy, applied once, in the public ops, for every backend.

* **0-d arrays.** The pointwise ops (activation, dropout) and softmax/logsoftmax (over axis 0 or -1,
  as PyTorch allows) take them. The backend runs on the array seen as shape (1,); results and gradients
  come back as 0-d arrays, never as numpy scalars. Ops whose inputs need an (N, C, ...) layout refuse
  0-d arrays through their shape checks.
* **Zero-size arrays.** Where PyTorch returns an empty result, dnnbind does too: results of the shapes
  PyTorch gives, and gradients of the inputs' shapes (empty for empty inputs, zeros for parameters such
  as w, b, gamma, beta and RNN weights). No backend computes: the GPU backends never call the vendor
  library for empty work, and batch norm leaves its running statistics untouched (as PyTorch does). Which
  dimension may be 0 is decided by the shape checks in :mod:`dims` (conv and pooling: the batch N;
  batch norm: any; RNNs: the batch; pointwise ops and softmax: any); everywhere else they refuse with a
  ValueError naming the argument.

What each op's empty call returns is its spec's (``OpSpec.empty``). Every backend's residual form is wrapped by :func:`guard` (through
:func:`dnnbind.highlevel.residual.forms`, in the backend's ``__init__``), so the policy holds for the
public ops, for direct backend calls and for dnnbind.torch's custom ops alike.
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import numpy as np

from dnnbind.highlevel.residual import only_needed, passes_when
from dnnbind.highlevel.specs import SPECS, OpSpec


Shape = tuple[int, ...]


def _module(like: Any) -> Any:
    """numpy for numpy arrays, cupy for device arrays (a device array exists only once cupy is imported)."""
    return np if isinstance(like, np.ndarray) else sys.modules["cupy"]


def _reshape(value: Any, shape: Shape) -> Any:
    return value.reshape(shape) if hasattr(value, "reshape") else value


# ---------------------------------------------------------------------------------------------------
# the policy for the residual form (forward, backward, residuals; see dnnbind.highlevel.residual), from
# each op's spec: what its empty call returns (OpSpec.empty), how its gradients regroup, whether it is
# pointwise (takes 0-d arrays)


def output_dtype(spec: OpSpec, index: int, x_dtype: Any) -> Any:
    """The dtype of output ``index``: x's, unless the spec names another (maxpool's indices: int64)."""
    dtype = spec.outputs[index].dtype if index < len(spec.outputs) else None
    return x_dtype if dtype is None else np.dtype(dtype)


def _optional_gradients(spec: OpSpec) -> tuple[int, ...]:
    """The places among the spec's arrays of the optional arrays that get a gradient, when the spec leaves
    the regrouping of an empty call's gradients to the policy (``OpSpec.regroup`` None): the empty call
    then records which of them were given (see :func:`_given`)."""
    if spec.regroup is not None:
        return ()
    return tuple(i for i, a in enumerate(spec.arrays) if a.optional and a.gradient is not None)


def _given(places: tuple[int, ...], args: tuple) -> tuple[int, ...]:
    """The shape of the zero-size bool residual an empty call saves last when its op has optional arrays
    with gradients: (0, then 1 or 0 per such array: given or None). Its shape alone says which gradients
    the backward returns (which residual arrays are which), so it holds under every framework's tracing."""
    return (0,) + tuple(int(args[i] is not None) for i in places)


def _regroup(spec: OpSpec, zeros: list[Any], static: tuple) -> Any:
    """The gradients of an empty call, from the zero arrays its forward saved, in the op's structure:
    the spec's ``regroup``, or one per gradient in the arrays' order (None for an optional array that
    was not given, as the last residual's shape records)."""
    if spec.regroup is not None:
        return spec.regroup(zeros, static)
    places = _optional_gradients(spec)
    if not places:
        return zeros[0]
    given = dict(zip(places, zeros[-1].shape[1:]))
    present = iter(zeros[:-1])
    out = tuple(next(present) if given.get(i, 1) else None for i, a in enumerate(spec.arrays) if a.gradient)
    return out[0] if len(out) == 1 else out


def _empty_shapes(spec: OpSpec, args: tuple) -> tuple[list[Any], list[tuple[int, ...]]]:
    """(result shapes, gradient shapes flattened) of an empty call, from the forward's arguments."""
    outputs, gradients = spec.empty(args)
    shapes: list[Any] = []

    def record(shape: Shape) -> tuple:          # stands for zeros(shape): records each gradient's shape
        shapes.append(tuple(shape))
        return ()

    gradients(record)
    return outputs, shapes


def guard(op: str, forward: Callable[..., Any], backward: Callable[..., Any],
          residuals: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """A backend's residual form of ``op`` with the edge policy: an empty call computes nothing and saves
    its zero gradients' shapes as zero arrays; a 0-d x of a pointwise op runs as shape (1,)."""
    spec = SPECS[op]
    pointwise = spec.pointwise
    mask = np.dtype(bool) if spec.mask_residuals else None
    optional = _optional_gradients(spec)

    @passes_when(lambda x, *args, **options: 0 not in tuple(x.shape) and (bool(x.shape) or not pointwise))
    @functools.wraps(forward)
    def guarded_forward(x: Any, *args: Any, **options: Any) -> Any:
        shape = tuple(x.shape)
        if 0 in shape:
            outputs, grad_shapes = _empty_shapes(spec, (x, *args))
            xp = _module(x)
            results = tuple(None if s is None else xp.zeros(s, output_dtype(spec, i, x.dtype))
                            for i, s in enumerate(outputs))
            saved = tuple(xp.zeros(s, mask or x.dtype) for s in grad_shapes)
            if optional:
                saved += (xp.zeros(_given(optional, (x, *args)), bool),)
            return (results[0] if len(results) == 1 else results), saved
        if not shape and pointwise:
            y, saved = forward(x.reshape(1), *args, **options)
            return y.reshape(()), saved
        return forward(x, *args, **options)

    @functools.wraps(backward)
    def guarded_backward(saved: tuple, cotangents: tuple, *static: Any, **options: Any) -> Any:
        dy: Any = cotangents[0] if cotangents else None
        shape = getattr(dy, "shape", None)
        if shape is not None and 0 in tuple(shape):
            xp = _module(dy)
            zeros = _regroup(spec, [xp.zeros(r.shape, dy.dtype) for r in saved], static)
            return only_needed(tuple(zeros), options.get("needs")) if spec.skippable else zeros
        if shape is not None and not tuple(shape) and pointwise:
            return _reshape(backward(saved, (dy.reshape(1),) + tuple(cotangents[1:]), *static, **options), ())
        return backward(saved, cotangents, *static, **options)

    @functools.wraps(residuals)
    def guarded_residuals(x: Any, *args: Any, **options: Any) -> Any:
        from dnnbind.highlevel.residual import ArraySpec
        shape = tuple(x.shape)
        if 0 in shape:
            _, grad_shapes = _empty_shapes(spec, (x, *args))
            dtype = mask or x.dtype
            specs = tuple(ArraySpec(s, dtype) for s in grad_shapes)
            return specs + ((ArraySpec(_given(optional, (x, *args)), np.dtype(bool)),) if optional else ())
        if not shape and pointwise:
            return residuals(ArraySpec((1,), x.dtype), *args, **options)
        return residuals(x, *args, **options)

    for fn in (guarded_forward, guarded_backward, guarded_residuals):
        setattr(fn, "edge_policy", op)      # which rule guards it (tests check every backend)
    return guarded_forward, guarded_backward, guarded_residuals
