"""A run of consecutive dnnbind layers as one custom op, for the graphs torch.compile builds.

Eager mode runs such a run as one autograd node (:mod:`dnnbind.torch.fused`). A compiled graph holding one
typed op per layer pays the dispatcher, the custom op's wrappers and a tensor per result for each layer,
between kernels that leave the caches cold: the compiled small CNN of ``make bench`` took about 45% longer
than the same run fused. So while torch.compile traces (not torch.export, whose programs keep one typed op
per layer), :class:`~dnnbind.torch.sequential.Sequential` calls one op for the run::

    dnnbind::sequence(Tensor x, Tensor[] tensors, str layers, float[] reals) -> Tensor[]

``tensors`` are the layers' tensors in order (each layer's given arrays after x, in its spec's order),
``layers`` names each layer's op, its given arrays and its typed arguments (as its own typed op takes
them), as JSON, and ``reals`` are the values of their float arguments, which torch.compile may trace as
symbolic ones (``dynamic=True`` makes a batch norm's momentum one), whose places ``layers`` names::

    sequence_training(x, [w_0, b_0, gamma_1, ...], '[{"op": "conv", "given": ["w", "b"], "stride": [1, 1], ...},
        {"op": "batchnorm", ..., "momentum": "reals[0]", "eps": "reals[1]"}, ...]', [0.1, 1e-05], saves)

It returns the result, then the updated running statistics of each batch norm that has them, and has
``sequence_training`` (results and every layer's residuals; with ``str saves``) and ``sequence_pullback``
(gradients from them) beside it, as each op has. The layers travel as one string rather than as typed
arguments: the dispatcher converts every argument of a call, 45 of them for the small CNN of ``make
bench`` (measured, a do-nothing kernel: 21-24 us a call with the layers' typed arguments, 5-8 us so),
and the string, a constant of the graph, keys the run's plan without reading them. The kernels run the
fused run's loops on arrays (:func:`dnnbind.torch.fused.forward_arrays`, ``backward_arrays``) on a run
planned from the layers' calls alone, kept in the one plan cache.
"""
from __future__ import annotations

import functools
import json
import re
from types import SimpleNamespace
from typing import Any, NamedTuple, Sequence, TypeVar

import torch

from dnnbind.highlevel.plans import kept
from dnnbind.highlevel.residual import declared, without
from dnnbind.highlevel.specs import SPECS
from dnnbind.torch import calls, fused, typed
from dnnbind.torch.convert import to_array, to_tensor
from dnnbind.torch.spec_functions import set_in_place
from dnnbind.torch.tracers import untraced

Tensor = torch.Tensor
_T = TypeVar("_T")


def schemas() -> tuple[str, str, str]:
    """(the run's schema, its training forward's, its pullback's), without the op's name."""
    inputs = "Tensor x, Tensor[] tensors, str layers, float[] reals"
    return (f"({inputs}) -> Tensor[]", f"({inputs}, str saves) -> (Tensor[] results, Tensor[] residuals)",
            f"(Tensor[] residuals, Tensor? result, Tensor?[] cotangents, {inputs}, bool[] needs) -> Tensor[]")


# -- the layers' description ----------------------------------------------------------------------

#: per layer that copies back: (its index, where its updated values start among the run's outputs, the
#: places among its arrays after x of the arrays it updates)
CopiedBack = tuple[tuple[int, int, tuple[int, ...]], ...]


@torch.compiler.assume_constant_result
def describe(layers: tuple[tuple[str, int, tuple[bool, ...], tuple[tuple[str, Any], ...]], ...]) -> tuple[str,
                                                                                                        CopiedBack]:
    """(the ``layers`` argument, per layer whose call updates arrays in place (batch norm's running
    statistics, training) where the values are among the run's outputs and which of its arrays take them)
    for layers given as (op, the input's spatial rank, whether each of its spec's arrays after x is given,
    its public arguments by name, ``"reals[i]"`` for a float argument's). Run while torch.compile traces,
    as a constant of the graph: what it reads of the specs is guarded by nothing (a traced read of each
    kind and array would be a guard the compiled model checks on every call)."""
    out: list[dict[str, Any]] = []
    copied, at = [], 1
    for i, (op, dims, given, arguments) in enumerate(layers):
        spec, kwargs = SPECS[op], dict(arguments)
        out.append({"op": op, "given": [a.name for a, g in zip(spec.arrays[1:], given) if g],
                    **{name: typed._to_kind(name, kind, kwargs[name], dims) for name, kind in spec.kinds.items()}})
        places = _updated_places(op, given)
        if places and spec.updates_in_place(kwargs):
            copied.append((i, at, places))
        at += len(places)
    return json.dumps(out), tuple(copied)


def _updated_places(op: str, given: Sequence[bool]) -> tuple[int, ...]:
    """The places among the op's arrays after x of the given ones it updates in place (batch norm's
    running statistics)."""
    return tuple(j for j in range(len(given))[SPECS[op].updated] if given[j])


@torch.compiler.assume_constant_result
def _floats(op: str) -> tuple[str, ...]:
    """The op's float arguments (a constant while torch.compile traces, its read of the spec unguarded)."""
    return tuple(name for name, kind in SPECS[op].kinds.items() if _is_float(kind))


def _is_float(kind: Any) -> bool:
    return kind.schema in ("float", "float?")


_REAL = re.compile(r"reals\[(\d+)\]")


class _Real(NamedTuple):
    """A float argument given among the reals, at this place."""

    place: int


class _Layer(NamedTuple):
    """A layer of a described run: its op, whether each of its spec's arrays after x is given, its typed
    arguments in its spec's order (a float's as its place among the reals)."""

    op: str
    given: tuple[bool, ...]
    arguments: tuple[Any, ...]

    def typed(self, reals: Sequence[float]) -> list[Any]:
        """Its typed arguments, the floats' values read from ``reals``."""
        return [reals[v.place] if type(v) is _Real else v for v in self.arguments]


@functools.lru_cache(maxsize=256)
def _layers(layers: str) -> tuple[_Layer, ...]:
    """The layers a ``layers`` argument describes (:func:`describe`), checked."""
    try:
        found = json.loads(layers)
        out = []
        for entry in found:
            spec = SPECS[entry["op"]]
            names = [a.name for a in spec.arrays[1:]]
            if not set(entry["given"]) <= set(names) or set(entry) != {"op", "given", *spec.kinds}:
                raise ValueError(entry)
            if any(kind.tensor for kind in spec.kinds.values()) or any(a.nested for a in spec.arrays):
                raise ValueError(f"{entry['op']} cannot be a layer of a run")
            arguments = []
            for name, kind in spec.kinds.items():
                value = entry[name]
                if _is_float(kind) and isinstance(value, str):
                    place = _REAL.fullmatch(value)
                    if place is None:
                        raise ValueError(f"{name}={value!r} is not a number, nor a place among the reals ('reals[0]')")
                    value = _Real(int(place.group(1)))
                arguments.append(value)
            out.append(_Layer(entry["op"], tuple(n in entry["given"] for n in names), tuple(arguments)))
    except (TypeError, KeyError, ValueError) as e:
        raise ValueError(f"dnnbind.sequence: layers={layers!r} does not describe a run of layers ({e})") from None
    return tuple(out)


def _split(layers: Sequence[_Layer], tensors: Sequence[_T]) -> list[list[_T | None]]:
    """Per layer its spec's arrays after x: the next of ``tensors`` where given, else None."""
    if len(tensors) != sum(sum(layer.given) for layer in layers):
        raise ValueError(f"dnnbind.sequence: {len(tensors)} tensors for layers that give "
                         f"{sum(sum(layer.given) for layer in layers)}")
    it = iter(tensors)
    return [[next(it) if g else None for g in layer.given] for layer in layers]


def _public(layer: _Layer, x: Any, arrays: Sequence[Any], reals: Sequence[float]) -> dict[str, Any]:
    """The layer's public arguments by name for an input of x's rank (every layer of a run keeps it)."""
    return typed.public_arguments(layer.op, [x, *arrays, *layer.typed(reals)])[2]


def _checked(layers: Sequence[_Layer], reals: Sequence[float]) -> None:
    """Refuse ``reals`` whose count is not the layers' floats'."""
    places = sorted(v.place for layer in layers for v in layer.arguments if type(v) is _Real)
    if places != list(range(len(reals))):
        raise ValueError(f"dnnbind.sequence: reals={list(reals)!r} are not the described layers' floats "
                         f"(places {places})")


def _updated(layers: Sequence[_Layer]) -> list[int]:
    """The places among the tensors of the arrays updated in place (batch norm's running statistics)."""
    places = _split(layers, range(sum(sum(layer.given) for layer in layers)))
    return [i for layer, at in zip(layers, places) for i in (at[j] for j in _updated_places(layer.op, layer.given))
            if i is not None]             # (a given array's place: never None)


def call(fusions: Sequence[fused.Fusion], x: Tensor) -> Tensor:
    """The run's result, computed by the run's op (its training forward where a gradient may be asked for),
    and each layer's running statistics copied back where its call updates them, as its own call does."""
    described: list[tuple] = []
    tensors: list[Tensor] = []
    reals: list[Any] = []
    for fusion in fusions:
        arguments = []
        floats = _floats(fusion.op)
        for name, value in fusion.arguments.items():
            if name in floats and value is not None:
                arguments.append((name, f"reals[{len(reals)}]"))
                reals.append(value)
            else:
                arguments.append((name, value))
        described.append((fusion.op, x.dim() - 2, tuple(t is not None for t in fusion.tensors), tuple(arguments)))
        tensors += [t for t in fusion.tensors if t is not None]
    layers, copied = describe(tuple(described))
    if torch.is_grad_enabled() and any(t.requires_grad for t in [x, *tensors]):
        outputs, _ = torch.ops.dnnbind.sequence_training(x, tensors, layers, reals, typed.saves_tag(x.device.type))
    else:
        outputs = torch.ops.dnnbind.sequence(x, tensors, layers, reals)
    for i, at, places in copied:
        for k, j in enumerate(places):
            set_in_place(fusions[i].tensors[j], outputs[at + k])
    return outputs[0]


# -- the planned run ------------------------------------------------------------------------------

class _Planned:
    """A run planned from its layers' calls (:func:`fused.plan_layers`), per step the number of residuals
    the training forward returns and the others' (place, source, shape, dtype) (:func:`_sources`), the
    steps' results it returns too and whether the pullback reads the run's result, per step the places of
    its arrays among the tensors (None where not given) and the places among them of its given arrays
    updated in place (batch norm's statistics)."""

    __slots__ = ("run", "counts", "lent", "between", "reads_result", "places", "updated")

    def __init__(self, layers: Sequence[_Layer], x: Tensor, tensors: Sequence[Tensor], reals: Sequence[float]) -> None:
        _checked(layers, reals)
        arrays = _split(layers, tensors)
        layer_calls = [(layer.op, given, SPECS[layer.op].arguments_function(**_public(layer, x, given, reals)))
                       for layer, given in zip(layers, arrays)]
        self.run = fused.plan_layers(layer_calls, x)
        self.places = _split(layers, range(len(tensors)))
        self.updated = [_updated_places(layer.op, layer.given) for layer in layers]
        self.counts, declared_specs = [], []
        like = SimpleNamespace(shape=tuple(x.shape), dtype=x.dtype, device=x.device)
        for (op, given, kwargs), step in zip(layer_calls, self.run.steps):
            saved = calls.result_specs(op, like, given, kwargs, borrowed=True)[1]
            found = declared(saved)
            self.counts.append(len(saved) - len(found))
            declared_specs.append(found)
            assert step.plan.first is not None          # (plan_layers sets it)
            like = SimpleNamespace(shape=step.plan.first[0], dtype=x.dtype, device=x.device)
        lent, self.between, self.reads_result = _sources(
            layers, self.places, [[(place, key) for place, key, _ in found] for found in declared_specs])
        self.lent = [[(place, source, tuple(s.shape), calls.torch_dtype(s.dtype))
                      for (place, source), (_, _, s) in zip(step, found)] for step, found in zip(lent, declared_specs)]


def _sources(layers: Sequence[_Layer], places: Sequence[Sequence[int | None]],
             lent: Sequence[Sequence[tuple[int, tuple]]]) -> tuple[list[list[tuple[int, tuple[str, int]]]],
                                                                    tuple[int, ...], bool]:
    """Where what each step declares its residuals the values of (``lent``: per step (place, source key),
    ArraySpec.same_as) is in the run: per step (place, ("h", j)) for the array between steps j - 1 and j
    (0: the run's input, len(layers): its result) or (place, ("t", i)) for the run's tensor i; the j
    strictly between the first and the last step that are referenced (the training forward returns them
    after the steps' residuals, once each); whether the run's result is."""
    out, referenced = [], set()
    for k, (layer, at, found) in enumerate(zip(layers, places, lent)):
        spec, step = SPECS[layer.op], []
        after_x = [a.name for a in spec.arrays[1:]]
        for place, key in found:
            if key == ("x",):
                source = ("h", k)
            elif key[0] in spec.output_names:
                source = ("h", k + 1)
            else:
                index = at[after_x.index(key[0])]
                assert index is not None, f"{layer.op} declares {key} (not given)"
                source = ("t", index)
            if source[0] == "h":
                referenced.add(source[1])
            step.append((place, source))
        out.append(step)
    return out, tuple(sorted(j for j in referenced if 0 < j < len(layers))), len(layers) in referenced


def _planned(x: Tensor, tensors: Sequence[Tensor], layers: str, reals: Sequence[float]) -> _Planned:
    """The run of these inputs, kept in the one plan cache by its layers, their floats and the tensors'
    metadata."""
    key = ("torch sequence", layers, *[calls.exact(r) for r in reals], x.shape, x.dtype, x.device,
           *[(t.shape, t.dtype, t.device) for t in tensors])
    planned: _Planned = kept(key, lambda: _Planned(_layers(layers), x, tensors, reals))
    return planned


# -- kernels --------------------------------------------------------------------------------------

def _forward(x: Tensor, tensors: Sequence[Tensor], layers: str, reals: Sequence[float],
             keep: bool) -> tuple[list[Tensor], list[Tensor]]:
    """(the result and the updated running statistics, the residuals) of the run on the inputs; the
    statistics are updated on copies (the op mutates none of its inputs), one per tensor, so that a layer
    given a tensor an earlier layer updated reads the update."""
    planned = _planned(x, tensors, layers, reals)
    given = fused._arrays([tensors])[0]      # (a tensor given twice is one array)
    arrays: list[list[Any]] = [[None if i is None else given[i] for i in places] for places in planned.places]
    copies: dict[int, Any] = {}
    updated = []
    for step, places in zip(arrays, planned.updated):
        for j in places:
            original = id(step[j])
            if original not in copies:
                copies[original] = step[j].copy()
            step[j] = copies[original]
            updated.append(step[j])
    between: list[Any] = []
    h, saved = fused.forward_arrays(planned.run, to_array(x), arrays, keep, lent=keep, between=between)
    seen: set[int] = set()
    statistics = []
    for a in updated:                        # one tensor per place: a repeated one as a copy
        statistics.append(to_tensor(a if id(a) not in seen else a.copy()))
        seen.add(id(a))
    residuals = [] if not keep else [to_tensor(r) for step, lent in zip(saved, planned.lent)
                                     for r in without(step, lent)]
    residuals += [to_tensor(between[j - 1]) for j in planned.between] if keep else []
    outputs = typed._own([to_tensor(h), *statistics, *residuals], (x, tensors))
    return outputs[:1 + len(statistics)], outputs[1 + len(statistics):]


def _run_kernel(x: Tensor, tensors: Sequence[Tensor], layers: str, reals: Sequence[float]) -> list[Tensor]:
    return _forward(x, tensors, layers, reals, False)[0]


def _training_kernel(x: Tensor, tensors: Sequence[Tensor], layers: str, reals: Sequence[float],
                     saves: str) -> tuple[list[Tensor], list[Tensor]]:
    return _forward(x, tensors, layers, reals, True)


def _pullback_kernel(residuals: Sequence[Tensor], result: Tensor | None, cotangents: Sequence[Tensor | None],
                     x: Tensor, tensors: Sequence[Tensor], layers: str, reals: Sequence[float],
                     needs: Sequence[bool]) -> list[Tensor]:
    """One gradient per tensor given (x's first), an empty tensor where ``needs`` asks for none or the tensor
    has none (running statistics); the steps' residuals the training forward left out put back from the
    run's input, its tensors, the steps' results it returned and its result (``result``)."""
    planned = _planned(x, tensors, layers, reals)
    kept = sum(planned.counts)
    between = {0: x, len(planned.counts): result, **dict(zip(planned.between, residuals[kept:]))}
    saved, at = [], 0
    for count, lent in zip(planned.counts, planned.lent):
        step = list(residuals[at:at + count])
        at += count
        for place, (kind, index), shape, dtype in lent:
            source = between[index] if kind == "h" else tensors[index]
            assert source is not None, "the run's result is saved where a step declares it"
            step.insert(place, typed.as_residual(source, shape, dtype))
        saved.append(tuple(to_array(r) for r in step))
    d = cotangents[0]
    if d is None:                            # the result's cotangent is required: zeros stand for "unused"
        last = planned.run.steps[-1].plan.first
        assert last is not None
        d = torch.zeros(last[0], dtype=x.dtype, device=x.device)
    dx, grads = fused.backward_arrays(planned.run, saved, to_array(d), (False, *[bool(n) for n in needs]))
    return [to_tensor(g) if g is not None and n else t.new_empty((0,))
            for g, n, t in zip([dx, *grads], needs, [x, *tensors])]


def _fake_forward(x: Tensor, tensors: Sequence[Tensor], layers: str,
                  reals: Sequence[float]) -> tuple[list[Tensor], list[Tensor]]:
    """The fake kernels' results: each layer's fake results in turn (calls.fake), symbolic sizes kept."""
    results, residuals, between, sources = _fake_steps(x, tensors, layers, reals)
    _, returned, _ = sources
    return results, residuals + [between[j].new_empty(between[j].shape) for j in returned]


def _fake_steps(x: Tensor, tensors: Sequence[Tensor], layers: str, reals: Sequence[float]) -> tuple[
        list[Tensor], list[Tensor], list[Tensor], tuple[list[list[tuple[int, tuple[str, int]]]], tuple[int, ...], bool]]:
    """(the result and updated statistics, the steps' residuals, the arrays between steps (the run's input
    first), :func:`_sources`) of the run's layers' fake calls in turn (calls.fake), symbolic sizes kept."""
    described = _layers(layers)
    _checked(described, reals)
    h = x
    statistics: list[Tensor] = []
    residuals: list[Tensor] = []
    between, lent = [x], []
    for layer, arrays in zip(described, _split(described, tensors)):
        outputs, saved, found = calls.fake(layer.op, h, arrays, _public(layer, h, arrays, reals), borrowed=True)
        h = outputs[0]
        statistics += outputs[1:]            # (a run's layers have one result each: plan_layers)
        residuals += saved
        between.append(h)
        lent.append(found)
    return [h, *statistics], residuals, between, _sources(described, _split(described, range(len(tensors))), lent)


def _fake_run(x: Tensor, tensors: Sequence[Tensor], layers: str, reals: Sequence[float]) -> list[Tensor]:
    return _fake_forward(x, tensors, layers, reals)[0]


def _fake_training(x: Tensor, tensors: Sequence[Tensor], layers: str, reals: Sequence[float],
                   saves: str) -> tuple[list[Tensor], list[Tensor]]:
    return _fake_forward(x, tensors, layers, reals)


def _fake_pullback(residuals: Sequence[Tensor], result: Tensor | None, cotangents: Sequence[Tensor | None], x: Tensor,
                   tensors: Sequence[Tensor], layers: str, reals: Sequence[float],
                   needs: Sequence[bool]) -> list[Tensor]:
    described = _layers(layers)
    has = [True] + [False] * len(tensors)          # (x has a gradient; a running statistic none)
    for layer, at in zip(described, _split(described, range(len(tensors)))):
        for a, i in zip(SPECS[layer.op].arrays[1:], at):
            if i is not None and a.gradient is not None:
                has[1 + i] = True
    return [t.new_empty(t.shape if n and h else (0,)) for n, h, t in zip(needs, has, [x, *tensors])]


# -- autograd -------------------------------------------------------------------------------------

def _setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
    x, tensors, layers, reals, _ = inputs
    results, residuals = output
    # saved: the inputs the steps declare residuals the values of (which the pullback reads) and the
    # tensors the layers' specs' backward_reads name (as torch's layers keep them); no other (conv's
    # bias, the input of a first tanh): those are kept by reference, as torch's layers keep none of them
    # (changing one in place before the backward fails nothing), and the pullback takes stand-ins of them
    # (typed.standin)
    _, _, between, (lent, _, _) = _fake_steps(x, tensors, layers, reals)
    sources = {source for step in lent for _, source in step}
    described = _layers(layers)
    reads = [SPECS[layer.op].reads(_public(layer, h, arrays, reals))
             for layer, h, arrays in zip(described, between, _split(described, tensors))]
    read = {i for kind, i in sources if kind == "t"} | {
        i for layer, names, places in zip(described, reads, _split(described, range(len(tensors))))
        for a, i in zip(SPECS[layer.op].arrays[1:], places) if a.name in names and i is not None}
    ctx.reads_x = ("h", 0) in sources or "x" in reads[0]
    # the arrays updated in place (running statistics) are kept by reference too, as typed ops keep them:
    # their update after the forward must not fail the backward's version check
    updated = set(_updated(described))
    ctx.layers, ctx.reals, ctx.count = layers, reals, len(tensors)
    ctx.unread = frozenset(range(len(tensors))) - read
    ctx.kept = {i: tensors[i] for i in ctx.unread | updated}
    ctx.x = None if ctx.reads_x else x
    saved = [tensors[i] for i in sorted(read - updated)]
    # the result, where the last layer's backward reads it (relu's, softmax's; not maxpool's, which reads
    # its indices, a result the run does not return): the pullback passes it in place of the residual that
    # is its value
    ctx.reads_result = SPECS[described[-1].op].output_names[0] in reads[-1]
    ctx.save_for_backward(*[x][:1 if ctx.reads_x else 0], *saved, *residuals, *results[:1 if ctx.reads_result else 0])
    ctx.saved_count = int(ctx.reads_x) + len(saved)
    ctx.mark_non_differentiable(*results[1:], *residuals)


def _backward(ctx: Any, d_results: Sequence[Tensor | None], d_residuals: Any) -> tuple:
    if torch.is_grad_enabled():
        raise RuntimeError("dnnbind: a second derivative through a compiled Sequential run is not supported "
                           "(compile the layers without the Sequential, or differentiate twice in eager mode)")
    saved = list(ctx.saved_tensors)
    result = saved.pop() if ctx.reads_result else None
    inputs, residuals = iter(saved[:ctx.saved_count]), saved[ctx.saved_count:]
    x = next(inputs) if ctx.reads_x else typed.standin(ctx.x)
    tensors = [next(inputs) if i not in ctx.kept else typed.standin(ctx.kept[i]) if i in ctx.unread else ctx.kept[i]
               for i in range(ctx.count)]
    x_needs, tensor_needs = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    needs = [bool(x_needs), *[bool(n) for n in tensor_needs]]
    grads: list[Any] = [None] * len(needs)
    if any(needs) and d_results[0] is not None:
        found = torch.ops.dnnbind.sequence_pullback(residuals, result, [d_results[0]], x, tensors, ctx.layers,
                                                    ctx.reals, needs)
        grads = [g if n else None for g, n in zip(found, needs)]
    # (torch.library matches the gradients' structure to the inputs', where an empty list of reals is
    # one of tensors)
    return grads[0], grads[1:], None, None if ctx.reals else [], None


def _register() -> None:
    run, training, pullback = schemas()
    for suffix, schema, kernel, fake, differentiable in (
            ("", run, _run_kernel, _fake_run, False),
            ("_training", training, _training_kernel, _fake_training, True),
            ("_pullback", pullback, _pullback_kernel, _fake_pullback, False)):
        typed.define(f"sequence{suffix}", schema, kernel, fake, differentiable)
    torch.library.register_autograd(f"{typed.NAMESPACE}::sequence_training", untraced(_backward),
                                    setup_context=untraced(_setup_context), lib=typed.LIBRARY)


_register()
