"""A run of consecutive dnnbind layers as one typed custom op, for the graphs torch.compile builds.

Eager mode runs such a run as one autograd node (:mod:`dnnbind.torch.fused`). A compiled graph holding one
typed op per layer pays the dispatcher, the custom op's wrappers and a tensor per result for each layer,
between kernels that leave the caches cold: the compiled small CNN of ``make bench`` took about 45% longer
than the same run fused. So while torch.compile traces (not torch.export, whose programs keep one typed op
per layer), :class:`~dnnbind.torch.sequential.Sequential` calls one op per run, whose schema is its layers'
typed schemas (:mod:`dnnbind.torch.typed`) one after the other, each argument named with its layer's index::

    dnnbind::sequence__conv__batchnorm__activation(Tensor x, Tensor w_0, Tensor? b_0, SymInt[] stride_0, ...,
        Tensor gamma_1, ..., str mode_2, float? alpha_2) -> Tensor[]

(the result, then the updated running statistics of each batch norm that has them), with ``_training``
(results and every layer's residuals) and ``_pullback`` (gradients from them) beside it, as each op has.
An op is registered the first time a compiled model traces a run of its sequence of ops: its name is
the sequence, so a graph torch.compile cached on disk calls the same op in the next process. The kernels
run the fused run's loops on arrays (:func:`dnnbind.torch.fused.forward_arrays`, ``backward_arrays``) on a
run planned from the layers' calls alone, kept in the one plan cache.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any, Sequence

import torch

from dnnbind.highlevel.plans import kept
from dnnbind.highlevel.specs import SPECS
from dnnbind.torch import calls, fused, typed
from dnnbind.torch.convert import to_array, to_tensor

Tensor = torch.Tensor

#: registered sequences: op name -> its ops
_REGISTERED: dict[str, tuple[str, ...]] = {}


def name_of(ops: Sequence[str]) -> str:
    """The op of a run of these ops: ``sequence__`` and the ops' names, two underscores between."""
    return "sequence__" + "__".join(ops)


def _inputs(ops: Sequence[str]) -> str:
    """x, then each layer's typed inputs after its x, named with the layer's index."""
    parts = ["Tensor x"]
    for i, op in enumerate(ops):
        parts += [f"{declaration}_{i}" for declaration in typed._inputs(SPECS[op])[1:]]
    return ", ".join(parts)


def schemas(ops: Sequence[str]) -> tuple[str, str, str]:
    """(the run's schema, its training forward's, its pullback's), without the op's name."""
    inputs = _inputs(ops)
    return (f"({inputs}) -> Tensor[]", f"({inputs}, str saves) -> (Tensor[] results, Tensor[] residuals)",
            f"(Tensor[] residuals, Tensor?[] cotangents, {inputs}, bool[] needs) -> Tensor[]")


@torch.compiler.assume_constant_result
def register(ops: tuple[str, ...]) -> str:
    """The name of the run's op, registered (with its training forward and pullback) on first use; run
    while torch.compile traces, as a constant of the graph."""
    name = name_of(ops)
    if name in _REGISTERED:
        return name
    run, training, pullback = schemas(ops)
    for suffix, schema, kernel, fake, differentiable in (
            ("", run, _run_kernel, _fake_run, False),
            ("_training", training, _training_kernel, _fake_training, True),
            ("_pullback", pullback, _pullback_kernel, _fake_pullback, False)):
        typed.define(f"{name}{suffix}", schema, functools.partial(kernel, ops), functools.partial(fake, ops),
                     differentiable)
    torch.library.register_autograd(f"{typed.NAMESPACE}::{name}_training", functools.partial(_backward, ops),
                                    setup_context=functools.partial(_setup_context, ops), lib=typed.LIBRARY)
    _REGISTERED[name] = tuple(ops)
    return name


def call(fusions: Sequence[fused.Fusion], x: Tensor) -> list[Tensor]:
    """The run's result, then the updated running statistics of each layer whose op has them (in the
    layers' order), computed by the run's op: its training forward where a gradient may be asked for."""
    ops = tuple(f.op for f in fusions)
    name = register(ops)
    inputs = [x]
    for fusion in fusions:
        inputs += typed.typed_arguments(fusion.op, x, fusion.tensors, fusion.arguments)[1:]
    # (the layers' tensors as the fusions hold them: what runs here is traced, the kernels' helpers are not)
    tensors = [x, *[t for fusion in fusions for t in fusion.tensors]]
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        results, _ = getattr(torch.ops.dnnbind, f"{name}_training")(*inputs, typed.saves_tag(x.device.type))
        return list(results)
    return list(getattr(torch.ops.dnnbind, name)(*inputs))


# -- the run's layers among the inputs ------------------------------------------------------------

def _layers(ops: Sequence[str], inputs: Sequence[Any]) -> list[tuple[str, list[Any]]]:
    """Per layer: its op and its typed inputs, x (the run's) first."""
    return [(op, [inputs[0], *inputs[start:stop]]) for op, (start, stop) in zip(ops, _spans(tuple(ops)))]


@functools.lru_cache(maxsize=256)
def _spans(ops: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """Per layer: where its typed inputs after x are among the run's inputs (start, stop)."""
    spans, at = [], 1
    for op in ops:
        count = len(typed._inputs(SPECS[op])) - 1
        spans.append((at, at + count))
        at += count
    return tuple(spans)


def _tensors(ops: Sequence[str], inputs: Sequence[Any]) -> list[Tensor | None]:
    """x and each layer's tensors (the spec's arrays after x, None where not given), in order."""
    return [inputs[0], *[t for op, args in _layers(ops, inputs) for t in typed._flat_tensors(op, args)[1:]]]


def _calls(ops: Sequence[str], inputs: Sequence[Any]) -> list[tuple[str, list[Any], dict[str, Any]]]:
    """Per layer: (its op, its spec's arrays after x, its keyword arguments as the eager plans key them)."""
    out = []
    for op, args in _layers(ops, inputs):
        _, arrays, kwargs = typed.public_arguments(op, args)
        out.append((op, arrays, SPECS[op].arguments_function(**kwargs)))
    return out


class _Planned:
    """A run planned from its layers' calls (:func:`fused.plan_layers`), the number of residuals each
    step saves, and per step the places of its arrays updated in place (batch norm's statistics)."""

    __slots__ = ("run", "counts", "updated")

    def __init__(self, ops: Sequence[str], inputs: Sequence[Any]) -> None:
        x = inputs[0]
        layers = _calls(ops, inputs)
        self.run = fused.plan_layers([(op, arrays, kwargs) for op, arrays, kwargs in layers], x)
        self.counts = []
        like = SimpleNamespace(shape=tuple(x.shape), dtype=x.dtype, device=x.device)
        for (op, arrays, kwargs), step in zip(layers, self.run.steps):
            self.counts.append(len(calls.result_specs(op, like, arrays, kwargs)[1]))
            assert step.plan.first is not None          # (plan_layers sets it)
            like = SimpleNamespace(shape=step.plan.first[0], dtype=x.dtype, device=x.device)
        self.updated = [range(len(SPECS[op].arrays) - 1)[SPECS[op].updated] for op in ops]


def _planned(ops: Sequence[str], inputs: Sequence[Any]) -> _Planned:
    """The run of these inputs, kept in the one plan cache by its ops and the inputs' metadata and values."""
    planned: _Planned = kept(("torch sequence", tuple(ops), *[typed.key_part(v) for v in inputs]),
                             lambda: _Planned(ops, inputs))
    return planned


# -- kernels --------------------------------------------------------------------------------------

def _forward(ops: Sequence[str], inputs: Sequence[Any], keep: bool) -> tuple[list[Tensor], list[Tensor]]:
    """(the result and the updated running statistics, the residuals) of the run on the inputs; the
    statistics are updated on copies (the op mutates none of its inputs), one per tensor, so that a layer
    given a tensor an earlier layer updated reads the update."""
    planned = _planned(ops, inputs)
    tensors = [typed._flat_tensors(op, args)[1:] for op, args in _layers(ops, inputs)]
    arrays = fused._arrays(tensors)
    copies: dict[int, Any] = {}
    updated = []
    for given, places in zip(arrays, planned.updated):
        for j in places:
            if given[j] is not None:
                original = id(given[j])
                if original not in copies:
                    copies[original] = given[j].copy()
                given[j] = copies[original]
                updated.append(given[j])
    h, saved = fused.forward_arrays(planned.run, to_array(inputs[0]), arrays, keep)
    seen: set[int] = set()
    statistics = []
    for a in updated:                        # one tensor per place: a repeated one as a copy
        statistics.append(to_tensor(a if id(a) not in seen else a.copy()))
        seen.add(id(a))
    residuals = [to_tensor(r) for step in saved for r in step]
    return typed._own([to_tensor(h), *statistics], inputs), typed._own(residuals, inputs)


def _run_kernel(ops: Sequence[str], *inputs: Any) -> list[Tensor]:
    return _forward(ops, inputs, False)[0]


def _training_kernel(ops: Sequence[str], *inputs_and_saves: Any) -> tuple[list[Tensor], list[Tensor]]:
    return _forward(ops, inputs_and_saves[:-1], True)


def _pullback_kernel(ops: Sequence[str], residuals: Sequence[Tensor], cotangents: Sequence[Tensor | None],
                     *inputs_and_needs: Any) -> list[Tensor]:
    """One gradient per tensor given (x's first), an empty tensor where ``needs`` asks for none or the tensor
    has none (running statistics)."""
    *inputs, needs = inputs_and_needs
    planned = _planned(ops, inputs)
    saved, at = [], 0
    for count in planned.counts:
        saved.append(tuple(to_array(r) for r in residuals[at:at + count]))
        at += count
    given = [t for t in _tensors(ops, inputs) if t is not None]
    d = cotangents[0]
    if d is None:                            # the result's cotangent is required: zeros stand for "unused"
        last = planned.run.steps[-1].plan.first
        assert last is not None
        d = torch.zeros(last[0], dtype=inputs[0].dtype, device=inputs[0].device)
    dx, grads = fused.backward_arrays(planned.run, saved, to_array(d), (False, *[bool(n) for n in needs]))
    found = [dx, *grads]
    return [to_tensor(g) if g is not None and n else t.new_empty((0,)) for g, n, t in zip(found, needs, given)]


def _fake_forward(ops: Sequence[str], inputs: Sequence[Any]) -> tuple[list[Tensor], list[Tensor]]:
    """The fake kernels' results: each layer's fake results in turn (calls.fake), symbolic sizes kept."""
    h: Tensor = inputs[0]
    statistics: list[Tensor] = []
    residuals: list[Tensor] = []
    for op, args in _layers(ops, inputs):
        _, arrays, kwargs = typed.public_arguments(op, [h, *args[1:]])
        outputs, saved = calls.fake(op, h, arrays, kwargs)
        h = outputs[0]
        statistics += outputs[1:]            # (a run's layers have one result each: plan_layers)
        residuals += saved
    return [h, *statistics], residuals


def _fake_run(ops: Sequence[str], *inputs: Any) -> list[Tensor]:
    return _fake_forward(ops, inputs)[0]


def _fake_training(ops: Sequence[str], *inputs_and_saves: Any) -> tuple[list[Tensor], list[Tensor]]:
    return _fake_forward(ops, inputs_and_saves[:-1])


def _fake_pullback(ops: Sequence[str], residuals: Sequence[Tensor], cotangents: Sequence[Tensor | None],
                   *inputs_and_needs: Any) -> list[Tensor]:
    *inputs, needs = inputs_and_needs
    given = [t for t in _tensors(ops, inputs) if t is not None]
    return [t.new_empty(t.shape if n else (0,)) for n, t in zip(needs, given)]


# -- autograd -------------------------------------------------------------------------------------

def _places(ops: Sequence[str]) -> list[int]:
    """The places among the inputs of x and each layer's tensors (as :func:`_tensors` lists them)."""
    return [0, *[start + i for op, (start, _) in zip(ops, _spans(tuple(ops)))
                 for i in range(len(SPECS[op].arrays) - 1)]]


def _kept_places(ops: Sequence[str]) -> list[int]:
    """The places of the arrays updated in place (batch norm's running statistics): kept by reference,
    as typed ops keep them (their update after the forward must not fail the backward's version check)."""
    return [start + i for op, (start, _) in zip(ops, _spans(tuple(ops)))
            for i in range(len(SPECS[op].arrays) - 1)[SPECS[op].updated]]


def _setup_context(ops: Sequence[str], ctx: Any, inputs: tuple, output: Any) -> None:
    inputs = inputs[:-1]                     # (the saves tag)
    results, residuals = output
    places = _places(ops)
    kept = set(_kept_places(ops))
    ctx.statics = [None if i in places else v for i, v in enumerate(inputs)]
    ctx.tensor_places = [i for i in places if inputs[i] is not None]
    ctx.kept = {i: inputs[i] for i in ctx.tensor_places if i in kept}
    ctx.save_for_backward(*[inputs[i] for i in ctx.tensor_places if i not in kept], *residuals)
    ctx.saved_count = len(ctx.tensor_places) - len(ctx.kept)
    ctx.mark_non_differentiable(*results[1:], *residuals)


def _backward(ops: Sequence[str], ctx: Any, d_results: Sequence[Tensor | None], d_residuals: Any) -> tuple:
    if torch.is_grad_enabled():
        raise RuntimeError("dnnbind: a second derivative through a compiled Sequential run is not supported "
                           "(compile the layers without the Sequential, or differentiate twice in eager mode)")
    saved = list(ctx.saved_tensors)
    tensors, residuals = iter(saved[:ctx.saved_count]), saved[ctx.saved_count:]
    inputs = list(ctx.statics)
    for i in ctx.tensor_places:
        inputs[i] = ctx.kept[i] if i in ctx.kept else next(tensors)
    needs = [bool(ctx.needs_input_grad[i]) for i in ctx.tensor_places]
    grads: list[Any] = [None] * (len(inputs) + 1)
    if any(needs) and d_results[0] is not None:
        name = name_of(ops)
        found = getattr(torch.ops.dnnbind, f"{name}_pullback")(residuals, [d_results[0]], *inputs, needs)
        for i, g, n in zip(ctx.tensor_places, found, needs):
            grads[i] = g if n else None
    return tuple(grads)
