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

Every backend's residual form is wrapped by :func:`guard` (through
:func:`dnnbind.highlevel.residual.forms`, in the backend's ``__init__``), so the policy holds for the
public ops, for direct backend calls and for dnnbind.torch's custom ops alike.
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import numpy as np

from dnnbind.highlevel.residual import passes_when


Shape = tuple[int, ...]


def _module(like: Any) -> Any:
    """numpy for numpy arrays, cupy for device arrays (a device array exists only once cupy is imported)."""
    return np if isinstance(like, np.ndarray) else sys.modules["cupy"]


def _reshape(value: Any, shape: Shape) -> Any:
    return value.reshape(shape) if hasattr(value, "reshape") else value


# ---------------------------------------------------------------------------------------------------
# what each op returns for empty work, from its backend arguments (the reference backend's signatures)

Zeros = Callable[[Shape], Any]
Rule = Callable[[tuple[Any, ...]], tuple[list[Any], Callable[[Zeros], Any], tuple[str, ...], bool]]


def _like_x(args: tuple[Any, ...]) -> tuple[list[Any], Callable[[Zeros], Any], tuple[str, ...], bool]:
    x = args[0]
    return [tuple(x.shape)], lambda zeros: zeros(x.shape), ("dy",), True


def _pool(args: tuple[Any, ...]) -> tuple[list[Any], Callable[[Zeros], Any], tuple[str, ...], bool]:
    x, dims = args[0], args[1]
    return [dims.y_shape], lambda zeros: zeros(x.shape), ("dy",), True


def _maxpool(args: tuple[Any, ...]) -> tuple[list[Any], Callable[[Zeros], Any], tuple[str, ...], bool]:
    x, dims = args[0], args[1]
    indices = len(args) > 2 and bool(args[2])         # return_indices: (y, indices)
    return [dims.y_shape] * (1 + indices), lambda zeros: zeros(x.shape), ("dy",), True


def output_dtype(op: str, index: int, x_dtype: Any) -> Any:
    """The dtype of output ``index`` of ``op``: x's, except maxpool's indices (int64)."""
    return np.dtype(np.int64) if op == "maxpool" and index == 1 else x_dtype


def _conv_grads(x: Any, w: Any, b: Any) -> Callable[[Zeros], Any]:
    return lambda zeros: (zeros(x.shape), zeros(w.shape)) + (() if b is None else (zeros(b.shape),))


def _conv(args: tuple[Any, ...]) -> tuple[list[Any], Callable[[Zeros], Any], tuple[str, ...], bool]:
    x, w, b, dims = args[:4]
    return [dims.y_shape], _conv_grads(x, w, b), ("dy",), True


def _conv_transpose(args: tuple[Any, ...]) -> tuple[list[Any], Callable[[Zeros], Any], tuple[str, ...], bool]:
    x, w, b, dims = args[:4]
    return [dims.x_shape], _conv_grads(x, w, b), ("dy",), True


def _batchnorm(args: tuple[Any, ...]) -> tuple[list[Any], Callable[[Zeros], Any], tuple[str, ...], bool]:
    x, gamma, beta = args[:3]
    return [tuple(x.shape)], lambda zeros: (zeros(x.shape), zeros(gamma.shape), zeros(beta.shape)), ("dy",), True


def _rnn(args: tuple[Any, ...]) -> tuple[list[Any], Callable[[Zeros], Any], tuple[str, ...], bool]:
    x, weights, dims = args[0], args[1], args[4]
    lstm = dims.mode == "lstm"

    def gradients(zeros: Zeros) -> tuple[Any, Any, Any, list[tuple[Any, ...]]]:
        # zeros is called in the gradients' order (dx, dh0, dc0, then dweights): the residual form's
        # empty call saves the zeros in that order and _regroup reads them back in it
        dx, dh0, dc0 = zeros(x.shape), zeros(dims.h_shape), zeros(dims.c_shape) if lstm else None
        dweights = [tuple(None if a is None else zeros(a.shape) for a in entry) for entry in weights]
        return dx, dh0, dc0, dweights

    return [dims.y_shape, dims.h_shape, dims.c_shape if lstm else None], gradients, ("dy", "dhy", "dcy"), False


#: op -> what its empty call returns; the pointwise ops also take 0-d arrays
RULES: dict[str, Rule] = {"conv": _conv, "conv_transpose": _conv_transpose, "maxpool": _maxpool, "meanpool": _pool,
                          "softmax": _like_x, "logsoftmax": _like_x, "activation": _like_x, "dropout": _like_x,
                          "batchnorm": _batchnorm, "rnn": _rnn}
POINTWISE = ("softmax", "logsoftmax", "activation", "dropout")


# ---------------------------------------------------------------------------------------------------
# the same policy for the residual form (forward, backward, residuals; see dnnbind.highlevel.residual)


def _regroup(op: str, zeros: list[Any], static: tuple) -> Any:
    """The gradients of an empty call, from the zero arrays its forward saved, in the op's structure."""
    if op in ("conv", "conv_transpose"):
        return zeros[0], zeros[1], zeros[2] if len(zeros) > 2 else None
    if op == "batchnorm":
        return tuple(zeros)
    if op == "rnn":
        dims = static[0]
        lstm = dims.mode == "lstm"
        rest = iter(zeros[3:] if lstm else zeros[2:])
        # per entry (w_ih, w_hh, b_ih, b_hh[, w_hr]): a zero array each, None for the biases it has not
        given = (True, True, dims.has_bias, dims.has_bias) + (True,) * bool(dims.proj_size)
        dweights = [tuple(next(rest) if has else None for has in given)
                    for _ in range(dims.num_layers * dims.num_directions)]
        return zeros[0], zeros[1], zeros[2] if lstm else None, dweights
    return zeros[0]


def _empty_shapes(op: str, args: tuple) -> tuple[list[Any], list[tuple[int, ...]]]:
    """(result shapes, gradient shapes flattened) of an empty call, from the forward's arguments."""
    outputs, gradients, _, _ = RULES[op](args)
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
    pointwise = op in POINTWISE

    @passes_when(lambda x, *args, **options: 0 not in tuple(x.shape) and (bool(x.shape) or not pointwise))
    @functools.wraps(forward)
    def guarded_forward(x: Any, *args: Any, **options: Any) -> Any:
        shape = tuple(x.shape)
        if 0 in shape:
            outputs, grad_shapes = _empty_shapes(op, (x, *args))
            xp = _module(x)
            results = tuple(None if s is None else xp.zeros(s, output_dtype(op, i, x.dtype))
                            for i, s in enumerate(outputs))
            saved = tuple(xp.zeros(s, bool if op == "dropout" else x.dtype) for s in grad_shapes)
            return (results[0] if op != "rnn" and len(results) == 1 else results), saved
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
            return _regroup(op, [xp.zeros(r.shape, dy.dtype) for r in saved], static)
        if shape is not None and not tuple(shape) and pointwise:
            return _reshape(backward(saved, (dy.reshape(1),) + tuple(cotangents[1:]), *static, **options), ())
        return backward(saved, cotangents, *static, **options)

    @functools.wraps(residuals)
    def guarded_residuals(x: Any, *args: Any, **options: Any) -> Any:
        from dnnbind.highlevel.residual import ArraySpec
        shape = tuple(x.shape)
        if 0 in shape:
            _, grad_shapes = _empty_shapes(op, (x, *args))
            dtype = np.dtype(bool) if op == "dropout" else x.dtype
            return tuple(ArraySpec(s, dtype) for s in grad_shapes)
        if not shape and pointwise:
            return residuals(ArraySpec((1,), x.dtype), *args, **options)
        return residuals(x, *args, **options)

    for fn in (guarded_forward, guarded_backward, guarded_residuals):
        setattr(fn, "edge_policy", op)      # which rule guards it (tests check every backend)
    return guarded_forward, guarded_backward, guarded_residuals
