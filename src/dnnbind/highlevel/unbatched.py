"""Unbatched inputs of the public ops: one sample without its batch axis, as torch.nn.functional takes it.

Which inputs count as one sample (the rules the public ops' docstrings state):

* ``conv`` and ``conv_transpose``: x with one dimension fewer than w, (C, *spatial);
* ``maxpool`` and ``meanpool``: x (C, *spatial) when the spatial rank n is known from an argument given
  per spatial dimension (window, stride, padding or dilation as a sequence, all of length n) and x has
  n + 1 dimensions. With ints only, the spatial rank is x.ndim - 2 as for a batch: an x of 3 dimensions
  with ``window=2`` is a batch of 1-d signals, never one 2-d sample;
* ``rnn``: x (seq, input), with h0 and c0 (num_layers * num_directions, hidden) when given.

The op runs on the batched problem: the batch axis, of size 1, is added to those inputs with
``reshape`` (a view for numpy and CuPy arrays alike), and dropped again from every result and from the
gradients of the inputs that had it; the pullback takes cotangents without it. Nothing here depends on a
backend. The dims objects (:class:`ConvDims` and friends) and the residual form describe the batched
problem only: a framework adds the batch axis itself, as dnnbind.torch's layers do.

A batched call pays nothing for this: the decision is made once per distinct call signature, when the
public op builds its plan (:mod:`dnnbind.highlevel.plans`), or is one comparison of x's rank (rnn).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

#: numbers of dimensions of a batched x (N, C, 1 to 3 spatial dimensions) for conv and pooling
BATCHED_RANKS = (3, 4, 5)
_SPATIAL = (1, 2, 3)


def _dims(shape: Sequence[int]) -> str:
    return f"{tuple(shape)} ({len(shape)} dimension{'s' if len(shape) != 1 else ''})"


def conv_is_unbatched(x_shape: Sequence[int], w_shape: Sequence[int]) -> bool:
    """Whether conv's (or conv_transpose's) x is one sample: one dimension fewer than w. A ValueError
    naming x when its rank is neither; other mismatches are left to ConvDims' checks."""
    xr, wr = len(x_shape), len(w_shape)
    if wr in BATCHED_RANKS and xr == wr - 1:
        return True
    if xr in BATCHED_RANKS:
        return False                          # batched: ConvDims checks w against it
    if wr in BATCHED_RANKS:
        raise ValueError(f"x has shape {_dims(x_shape)} but w has {wr} dimensions: x must have {wr} dimensions "
                         f"(N, C, {wr - 2} spatial) or, unbatched, {wr - 1} (C, {wr - 2} spatial)")
    raise ValueError(f"x has shape {_dims(x_shape)} but must have 3 to 5 dimensions (N, C, 1 to 3 spatial "
                     f"dimensions) or, unbatched, 2 to 4 (C, 1 to 3 spatial dimensions), one fewer than w")


def pool_spatial_rank(**arguments: Any) -> tuple[str, Any, int] | None:
    """(name, value, length) of the first argument given per spatial dimension (a list or tuple), when
    every such argument has that length; None when there is none, or when they disagree (the shape
    checks then name the argument that is wrong)."""
    found: tuple[str, Any, int] | None = None
    for name, value in arguments.items():
        if isinstance(value, (list, tuple)):
            if found is None:
                found = (name, value, len(value))
            elif len(value) != found[2]:
                return None
    return found


def pool_is_unbatched(x_shape: Sequence[int], **arguments: Any) -> bool:
    """Whether a pooling's x is one sample (C, *spatial): its spatial rank n comes from ``arguments``
    given per spatial dimension (:func:`pool_spatial_rank`) and x has n + 1 dimensions. A ValueError
    naming x when its rank fits neither a batch nor one sample."""
    xr = len(x_shape)
    known = pool_spatial_rank(**arguments)
    if known is not None and known[2] in _SPATIAL and xr == known[2] + 1:
        return True
    if xr in BATCHED_RANKS and (known is None or known[2] not in _SPATIAL or xr == known[2] + 2):
        return False                          # batched: PoolDims checks the arguments against it
    if known is not None and known[2] in _SPATIAL:
        name, value, n = known
        spatial = f"{n} spatial dimension{'s' if n != 1 else ''}"
        raise ValueError(f"x has shape {_dims(x_shape)} but {name}={value!r} gives {spatial}: x must have {n + 2} "
                         f"dimensions (N, C, *spatial) or, unbatched, {n + 1} (C, *spatial)")
    raise ValueError(f"x has shape {_dims(x_shape)} but must have 3 to 5 dimensions (N, C, 1 to 3 spatial "
                     f"dimensions) or, unbatched, 2 to 4 (C, *spatial) with window, stride, padding or dilation "
                     f"given per spatial dimension (a sequence), which tells the spatial rank")


def rnn_is_unbatched(x_shape: Sequence[int], h0: Any, c0: Any) -> bool:
    """Whether rnn's x is one sequence (seq, input); then h0 and c0, when given, must be unbatched too
    (num_layers * num_directions, size), as torch.nn.LSTM requires. A ValueError naming x when its rank
    fits neither."""
    xr = len(x_shape)
    if xr == 3:
        return False
    if xr != 2:
        raise ValueError(f"x has shape {_dims(x_shape)} but must have 3 dimensions (seq, batch, input) or, "
                         f"unbatched, 2 (seq, input)")
    for name, state in (("h0", h0), ("c0", c0)):
        if state is not None and len(state.shape) != 2:
            raise ValueError(f"{name} has shape {_dims(state.shape)} but x {tuple(x_shape)} is unbatched (seq, "
                             f"input): {name} must be unbatched too, (num_layers * num_directions, "
                             f"{'hidden_size' if name == 'c0' else 'hidden_size or proj_size'})")
    return True


def batch_axis(spec: Any, arrays: Sequence[Any], arguments: dict[str, Any]) -> int | None:
    """Where a framework adds the batch axis of 1 to a call's batched arrays (``arrays`` in the spec's
    order, ``arguments`` the public ones by name, defaults included), and drops it from the op's results:
    the spec's unbatched rule's axis for one sample, None for a batch."""
    rule = spec.unbatched
    if rule is None or not rule.test(dict(zip(spec.array_names, arrays)), arguments):
        return None
    return int(rule.axis)


def with_batch(shape: Sequence[int], axis: int = 0) -> tuple[int, ...]:
    """``shape`` with a batch axis of 1 inserted at ``axis``."""
    shape = tuple(shape)
    return shape[:axis] + (1,) + shape[axis:]


def _add(a: Any, axis: int) -> Any:
    if a is None or not hasattr(a, "reshape"):
        return a                              # None, or an array the backend refuses by name
    return a.reshape(with_batch(a.shape, axis))


def _drop(a: Any, axis: int) -> Any:
    if a is None:
        return None
    shape = tuple(a.shape)
    return a.reshape(shape[:axis] + shape[axis + 1:])


def _drop_all(result: Any, axis: int) -> Any:
    if isinstance(result, tuple):
        return tuple(_drop(r, axis) for r in result)
    return _drop(result, axis)


def problem(build: Callable[[], Any], shape: Sequence[int]) -> Any:
    """``build()`` (the batched problem's checks) with an error saying that the shapes in it are x's with
    a batch axis of 1, where the user passed ``shape``."""
    try:
        return build()
    except (ValueError, TypeError) as exc:
        if type(exc) not in (ValueError, TypeError):
            raise
        raise type(exc)(f"{exc} (x {tuple(shape)} is unbatched: it is checked as a batch of one)") from None


class UnbatchedPullback:
    """A batched pullback for cotangents without the batch axis: it adds the axis to each, and drops it
    from the gradients at the positions ``gradients`` (all gradients when the pullback returns one array)."""

    __slots__ = ("pullback", "axis", "gradients")

    def __init__(self, pullback: Callable[..., Any], axis: int, gradients: tuple[int, ...]) -> None:
        self.pullback, self.axis, self.gradients = pullback, axis, gradients

    def __call__(self, *cotangents: Any) -> Any:
        grads = self.pullback(*(_add(c, self.axis) for c in cotangents))
        if not isinstance(grads, tuple):
            return _drop(grads, self.axis)
        return tuple(_drop(g, self.axis) if i in self.gradients else g for i, g in enumerate(grads))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "pullback"), name)


class Unbatched:
    """A backend's ``(result, pullback)`` form for one sample: ``run(*args)`` adds the batch axis (at
    ``axis``) to the arguments at the positions ``inputs``, runs the batched op and drops the axis from
    every result (all of them carry it: y, maxpool's indices, rnn's hy and cy) and, through
    :class:`UnbatchedPullback`, from the gradients at the positions ``gradients``."""

    __slots__ = ("run", "inputs", "axis", "gradients")

    def __init__(self, run: Callable[..., Any], inputs: tuple[int, ...], gradients: tuple[int, ...],
                 axis: int = 0) -> None:
        self.run, self.inputs, self.gradients, self.axis = run, inputs, gradients, axis

    def __call__(self, *args: Any) -> tuple[Any, UnbatchedPullback]:
        lifted = tuple(_add(a, self.axis) if i in self.inputs else a for i, a in enumerate(args))
        result, pullback = self.run(*lifted)
        return _drop_all(result, self.axis), UnbatchedPullback(pullback, self.axis, self.gradients)
