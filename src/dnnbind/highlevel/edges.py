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

Every backend's ops are wrapped by :func:`guarded` (in the backend's ``__init__``), so the policy holds
for the public ops and for direct backend calls alike.
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Sequence

import numpy as np

from dnnbind.highlevel.dims import check_dtype, check_shape

Shape = tuple[int, ...]


def _module(like: Any) -> Any:
    """numpy for numpy arrays, cupy for device arrays (a device array exists only once cupy is imported)."""
    return np if isinstance(like, np.ndarray) else sys.modules["cupy"]


def _check_cotangent(name: str, value: Any, like: Any, shape: Shape) -> None:
    if isinstance(like, np.ndarray) != isinstance(value, np.ndarray) or not hasattr(value, "shape"):
        kind = "a numpy array" if isinstance(like, np.ndarray) else "a device array like the forward's"
        raise TypeError(f"{name} must be {kind}, not {type(value).__name__}")
    check_dtype(name, value.dtype)
    check_shape(name, value.shape, shape, "the shape of the forward result")


def empty_call(like: Any, outputs: Sequence[Shape | None], gradients: Callable[[Callable[[Shape], Any]], Any],
               names: Sequence[str] = ("dy",), single: bool = True) -> tuple[Any, Callable[..., Any]]:
    """(result, pullback) of an op whose work is empty, without running any backend.

    ``like`` is the op's main input (it gives the array module and dtype). ``outputs`` are the result
    shapes (None: a None result); the result is the single array when ``single``, else a tuple.
    ``gradients(zeros)`` builds the pullback's return value from ``zeros(shape)``; the pullback takes one
    cotangent per output (``names``), the first required and the others optional.
    """
    xp = _module(like)

    def zeros(shape: Shape) -> Any:
        return xp.zeros(shape, like.dtype)

    results = tuple(None if shape is None else zeros(shape) for shape in outputs)

    def pullback(*cotangents: Any) -> Any:
        if not cotangents or cotangents[0] is None:
            raise TypeError(f"the pullback needs {names[0]}")
        if len(cotangents) > len(names):
            raise TypeError(f"the pullback takes at most {len(names)} cotangents, got {len(cotangents)}")
        for name, value, shape in zip(names, cotangents, outputs):
            if value is not None:
                if shape is None:
                    raise ValueError(f"{name} must be None: the forward returned no such result")
                _check_cotangent(name, value, like, shape)
        return gradients(zeros)

    return (results[0] if single else results), pullback


def _reshape(value: Any, shape: Shape) -> Any:
    return value.reshape(shape) if hasattr(value, "reshape") else value


class _ScalarPullback:
    """The pullback of an op run on a 0-d array as shape (1,): 0-d cotangent in, 0-d gradient out."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self._inner = inner

    def __call__(self, dy: Any) -> Any:
        if hasattr(dy, "shape"):
            check_shape("dy", dy.shape, (), "the shape of the forward result")
        return _reshape(self._inner(_reshape(dy, (1,))), ())

    @property
    def mask(self) -> Any:
        """The backend pullback's mask (dropout), as a 0-d array; AttributeError when it has none."""
        return _reshape(getattr(self._inner, "mask"), ())


def scalar_call(run: Callable[..., tuple[Any, Callable[..., Any]]], x: Any, *args: Any,
                **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """Run a one-input, one-result op on a 0-d ``x`` as shape (1,) and hand back 0-d arrays."""
    y, inner = run(x.reshape(1), *args, **kwargs)
    return y.reshape(()), _ScalarPullback(inner)


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
        dx, dh0, dc0 = zeros(x.shape), zeros(dims.h_shape), zeros(dims.h_shape) if lstm else None
        dweights = [tuple(None if a is None else zeros(a.shape) for a in entry) for entry in weights]
        return dx, dh0, dc0, dweights

    return [dims.y_shape, dims.h_shape, dims.h_shape if lstm else None], gradients, ("dy", "dhy", "dcy"), False


#: op -> what its empty call returns; the pointwise ops also take 0-d arrays
RULES: dict[str, Rule] = {"conv": _conv, "conv_transpose": _conv_transpose, "maxpool": _pool, "meanpool": _pool,
                          "softmax": _like_x, "logsoftmax": _like_x, "activation": _like_x, "dropout": _like_x,
                          "batchnorm": _batchnorm, "rnn": _rnn}
POINTWISE = ("softmax", "logsoftmax", "activation", "dropout")


def guarded(op: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate backend function ``op`` (its arguments already checked) with the edge policy: empty work
    returns :func:`empty_call`'s result without running the backend; a 0-d x of a pointwise op runs as
    shape (1,) (:func:`scalar_call`)."""
    rule, pointwise = RULES[op], op in POINTWISE

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def run(x: Any, *args: Any, **kwargs: Any) -> Any:
            shape = tuple(x.shape)
            if 0 in shape:
                outputs, gradients, names, single = rule((x, *args))
                result, pullback = empty_call(x, outputs, gradients, names, single)
                if op == "dropout":
                    pullback.mask = _module(x).zeros(shape, bool)  # type: ignore[attr-defined]
                return result, pullback
            if not shape and pointwise:
                return scalar_call(fn, x, *args, **kwargs)
            return fn(x, *args, **kwargs)
        run.edge_policy = op  # type: ignore[attr-defined]  # which rule guards it (tests check every backend)
        return run
    return decorate


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
        per_entry = 4 if dims.has_bias else 2
        dweights = [tuple(next(rest) for _ in range(per_entry)) + (None, None) * (not dims.has_bias)
                    for _ in range(dims.num_layers * dims.num_directions)]
        return zeros[0], zeros[1], zeros[2] if lstm else None, dweights
    return zeros[0]


def _flat_shapes(tree: Any) -> list[Any]:
    if isinstance(tree, (list, tuple)):
        return [s for item in tree for s in _flat_shapes(item)]
    return [] if tree is None else [tuple(tree.shape)]


def _empty_shapes(op: str, args: tuple) -> tuple[list[Any], list[tuple[int, ...]]]:
    """(result shapes, gradient shapes flattened) of an empty call, from the forward's arguments."""
    outputs, gradients, _, _ = RULES[op](args)
    shapes: list[Any] = []
    gradients(lambda shape: shapes.append(tuple(shape)) or ())   # records each gradient's shape in order
    return outputs, shapes


def guard(op: str, forward: Callable[..., Any], backward: Callable[..., Any],
          residuals: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """A backend's residual form of ``op`` with the edge policy: an empty call computes nothing and saves
    its zero gradients' shapes as zero arrays; a 0-d x of a pointwise op runs as shape (1,)."""
    pointwise = op in POINTWISE

    @functools.wraps(forward)
    def guarded_forward(x: Any, *args: Any, **options: Any) -> Any:
        shape = tuple(x.shape)
        if 0 in shape:
            outputs, grad_shapes = _empty_shapes(op, (x, *args))
            xp = _module(x)
            results = tuple(None if s is None else xp.zeros(s, x.dtype) for s in outputs)
            saved = tuple(xp.zeros(s, bool if op == "dropout" else x.dtype) for s in grad_shapes)
            return (results[0] if op != "rnn" else results), saved
        if not shape and pointwise:
            y, saved = forward(x.reshape(1), *args, **options)
            return y.reshape(()), saved
        return forward(x, *args, **options)

    @functools.wraps(backward)
    def guarded_backward(saved: tuple, cotangents: tuple, *static: Any, **options: Any) -> Any:
        dy = cotangents[0] if cotangents else None
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
        fn.edge_policy = op  # type: ignore[attr-defined]  # which rule guards it (tests check every backend)
    return guarded_forward, guarded_backward, guarded_residuals
