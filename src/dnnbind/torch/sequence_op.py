"""A run of consecutive dnnbind layers as one custom op pair, for torch.compile and torch.export.

``dnnbind::sequence(Tensor x, Tensor[] others, str params, float[] reals) -> (Tensor[] outputs, Tensor[] residuals)``
    Runs each step's op (:func:`dnnbind.torch.library._forward`) on the result of the step before.
    ``params``: ``{"steps": [[op, the op's params text, its number of others, of reals], ...]}``;
    ``others`` and ``reals`` are the steps' own, concatenated. Outputs: the last step's result, then the
    updated running statistics of the batch norm steps (copied back by the caller, as for the single
    op); residuals: every step's, concatenated.
``dnnbind::sequence_backward(Tensor[] residuals, Tensor[] cotangents, str params, float[] reals) -> Tensor[]``
    The steps' backward ops in reverse order: dx, then per step one gradient per differentiable tensor
    it was given (empty where not wanted). ``params``: ``{"steps": [[op, its backward params text,
    its number of residuals, of reals, of gradients, whether it runs], ...]}``.

A graph then holds one node (and one backward node) per run instead of two per layer, with the same
backend calls (:class:`dnnbind.torch.sequential.Sequential` calls it while tracing). Fake kernels chain
the single ops' fake kernels.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any, Sequence

import torch

from dnnbind.highlevel.grad_mode import saving_residuals
from dnnbind.highlevel.specs import SPECS
from dnnbind.torch import library
from dnnbind.torch.convert import to_array, to_tensor
from dnnbind.torch.fused import Fusion, count_batches
from dnnbind.torch.library import _encode, decode, encode

Tensor = torch.Tensor

# (the single ops' schemas: a run of steps takes and returns what one step does)
_SCHEMA, _BACKWARD_SCHEMA = library._FORWARD_SCHEMA, library._BACKWARD_SCHEMA


def run(fusions: Sequence[Fusion], x: Tensor) -> Tensor:
    """The layers' calls (``fusions``) on x as one ``dnnbind::sequence`` call; their num_batches_tracked
    counted and running statistics copied back as the layers' own calls do."""
    count_batches(fusions)
    outputs, _ = torch.ops.dnnbind.sequence(x, *arguments(fusions, x.device.type))
    statistics = iter(outputs[1:])
    for fusion in fusions:
        if not SPECS[fusion.op].updated_in_place:
            continue
        given = [t for t in fusion.tensors[SPECS[fusion.op].updated] if t is not None]
        updated = [next(statistics) for _ in given]
        if SPECS[fusion.op].updates_in_place(fusion.arguments):
            with torch.no_grad():
                for stat, new in zip(given, updated):
                    stat.copy_(new)
    return outputs[0]


def arguments(fusions: Sequence[Fusion], device_type: str) -> tuple[list[Tensor], str, list[Any]]:
    """(others, params, reals) of the ``dnnbind::sequence`` call running ``fusions``."""
    steps, others, reals = [], [], []
    for fusion in fusions:
        step_others, step_params, step_reals = library.op_params(fusion.op, device_type, fusion.tensors,
                                                                 fusion.arguments)
        steps.append([fusion.op, step_params, len(step_others), len(step_reals)])
        others += step_others
        reals += list(step_reals.values())
    return others, encode(steps=steps), reals


@functools.lru_cache(maxsize=library._SIGNATURES_MAX)
def _steps(params: str) -> tuple[tuple, ...]:
    """Per step of either op's params: its fields (op, its params, its number of arrays (others or
    residuals), of reals, ...) and where its arrays and its reals start."""
    out, a, r = [], 0, 0
    for step in decode(params)["steps"]:
        out.append((*step, a, r))
        a, r = a + step[2], r + step[3]
    return tuple(out)


def _chain(x: Tensor, others: Sequence[Tensor], params: str, reals: Sequence[float]) -> tuple[list[Tensor], list[Tensor]]:
    """The real kernel: each step's backend forward on the array the step before returned. Nothing in
    between becomes a tensor: the tensors become arrays before the first call and the residuals tensors
    after the last (see dnnbind.torch.fused: torch's code between two kernels runs on cold caches).
    Batch norm steps update copies of their running statistics (the op mutates none of its inputs); a
    step given a statistic an earlier step of the run updated (one layer called twice) reads that
    step's copy, as the layers' own calls do."""
    chain = _Chain.of(x, others, params, reals)
    with library.off_cpu_scope(x.device), saving_residuals(True):
        arrays = [to_array(t) for t in others]
        copies: dict[int, Any] = {}             # a running statistic's tensor (id) -> its latest copy
        statistics: list[Any] = []
        residuals: list[Any] = []
        h = to_array(x)
        with library.once_scope(chain.scopes):
            for sig, places, updated in chain.steps:
                given = ([None if i is None else arrays[i] for i in places] if type(places) is tuple
                         else library._map(arrays.__getitem__, places))
                for slot in updated:
                    i = places[slot]
                    key = id(others[i])
                    given[slot] = copies[key] = copies.get(key, arrays[i]).copy()
                    statistics.append(given[slot])
                result, saved = sig.forward(h, *given, *sig.static)
                h = result[0] if type(result) is tuple else result
                residuals += saved
        return [to_tensor(h), *[to_tensor(s) for s in statistics]], [to_tensor(r) for r in residuals]


class _Chain:
    """What every forward call of a run with the same params, reals and tensor shapes repeats, worked out
    once (a compiled graph repeats the call every step): per step its library._Signature, where its
    arrays are among ``others`` (the spec's order after x, None where not given; nested for rnn's weights)
    and which of those are running statistics it updates; the scopes of the backend calls.
    Remembered per call signature, like the single ops' (bounded the same way); a chain with a step
    whose signature is not remembered (dropout with a seed) is not either."""

    __slots__ = ("steps", "scopes")

    def __init__(self, x: Tensor, others: Sequence[Tensor], params: str, reals: Sequence[float]) -> None:
        self.steps: list[tuple[library._Signature, Any, tuple[int, ...]]] = []
        h: Any = x
        for op, step_params, n_others, n_reals, o, r in _steps(params):
            step_others, step_reals = others[o:o + n_others], [float(v) for v in reals[r:r + n_reals]]
            sig = library._signature(op, h, step_others, step_params, step_reals)
            # the step's spec's arrays after x as indices into others (its own others numbered from o)
            places = sig.tensors(None, list(range(o, o + n_others)))[1:]
            flat = not any(isinstance(p, list) for p in places)
            statistics = range(len(places))[SPECS[op].updated]
            updated = tuple(s for s in statistics if places[s] is not None)
            self.steps.append((sig, tuple(places) if flat else places, updated))
            shapes = library.result_specs(op, h, step_others, step_params, step_reals)[0]
            h = SimpleNamespace(shape=tuple(shapes[0]), dtype=x.dtype, device=x.device)
        self.scopes = [sig.blas_scope for sig, _, _ in self.steps]

    @staticmethod
    def of(x: Tensor, others: Sequence[Tensor], params: str, reals: Sequence[float]) -> _Chain:
        key = library.call_key("sequence", x, others, params, reals)
        found = _CHAINS.get(key)
        if found is not None:
            return found
        chain = _Chain(x, others, params, reals)
        if all(sig.cached for sig, _, _ in chain.steps):
            if len(_CHAINS) >= library._SIGNATURES_MAX:
                _CHAINS.clear()
            _CHAINS[key] = chain
        return chain


_CHAINS: dict[tuple, _Chain] = {}


def _fake_chain(x: Tensor, others: Sequence[Tensor], params: str,
                reals: Sequence[float]) -> tuple[list[Tensor], list[Tensor]]:
    """The fake kernel: the single ops' fake kernels, chained."""
    h, statistics, residuals = x, [], []
    for op, step_params, n_others, n_reals, o, r in _steps(params):
        outputs, saved = library._fake_forward(op, h, others[o:o + n_others], step_params, reals[r:r + n_reals])
        h = outputs[0]
        statistics += outputs[1:]
        residuals += saved
    return [h, *statistics], residuals


def _walk_back(step: Any, start: Any, finish: Any, residuals: Sequence[Tensor], cotangents: Sequence[Tensor],
               params: str, reals: Sequence[float]) -> list[Tensor]:
    """The backward kernels' loop, last step first: ``step(its index, op, its residuals, d, its params,
    its reals)`` gives (d for the step before, the step's other gradients, None where not wanted). ``start`` makes
    what the steps take of the residuals and the cotangent, before the first step; ``finish`` a
    tensor of a gradient, after the last (so that between two steps' kernels runs nothing else). The
    steps before the first one anything wants a gradient of do not run. A gradient not wanted or not
    computed is an empty placeholder like the cotangent, as the single ops' skipped ones."""
    like = cotangents[0]
    saved = [start(t) for t in residuals]
    d: Any = start(like)
    steps = _steps(params)
    per_step: list[list[Any]] = [[None] * (n_grads - 1) for _, _, _, _, n_grads, _, _, _ in steps]
    for i in range(len(steps) - 1, -1, -1):
        op, step_params, n_residuals, n_reals, n_grads, runs, s, r = steps[i]
        if not runs or d is None:
            d = None
            continue
        d, per_step[i] = step(i, op, saved[s:s + n_residuals], d, step_params, reals[r:r + n_reals])
    return [like.new_empty((0,)) if g is None else finish(g) for g in (d, *[g for gs in per_step for g in gs])]


def _real_step(calls: list[tuple], i: int, op: str, residuals: Sequence[Any], d: Any, params: str,
               reals: Sequence[float]) -> tuple:
    """One step of the real kernel: the backend's backward on arrays (``calls``: each step's
    library._backward_call)."""
    given, needs, static, paths, scope, backward = calls[i]
    grads = library.backward_arrays(tuple(residuals), (d,), needs, static, paths, scope, backward)
    return grads[0], grads[1:]


def _fake_step(i: int, op: str, residuals: Sequence[Tensor], d: Tensor, params: str,
               reals: Sequence[float]) -> tuple:
    grads = library._fake_backward(op, residuals, [d], params, reals)
    return grads[0], grads[1:]


def _backward_chain(residuals: Sequence[Tensor], cotangents: Sequence[Tensor], params: str,
                    reals: Sequence[float]) -> list[Tensor]:
    """The backward op's real kernel: the backend's backward calls on arrays."""
    calls = _backward_calls(params, tuple(map(float.hex, map(float, reals))))
    with library.off_cpu_scope(cotangents[0].device), library.once_scope([call[4] for call in calls]):
        return _walk_back(functools.partial(_real_step, calls), to_array, to_tensor, residuals, cotangents,
                          params, reals)


@functools.lru_cache(maxsize=library._SIGNATURES_MAX)
def _backward_calls(params: str, exact_reals: tuple[str, ...]) -> list[tuple]:
    """Each step's library._backward_call, worked out once per params and reals (a compiled graph's
    backward repeats them every step); the reals as float.hex, so that 0.0 and -0.0 are two keys."""
    reals = [float.fromhex(r) for r in exact_reals]
    return [library._backward_call(op, step_params, reals[r:r + n_reals])
            for op, step_params, _, n_reals, _, _, _, r in _steps(params)]


#: the backward op's fake kernel: the single ops' fakes
_fake_backward_chain = functools.partial(_walk_back, _fake_step, lambda t: t, lambda t: t)


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, others, params, reals = inputs
    outputs, residuals = output
    ctx.save_for_backward(*residuals)
    ctx.mark_non_differentiable(*residuals, *outputs[1:])
    # the sizes become the backward's params only when a backward runs (see library._remember_call)
    ctx.call = (library.metadata(x), [library.metadata(t) for t in others], params, list(reals))
    ctx.reals = list(reals)
    ctx.first = (outputs[0].shape, outputs[0].dtype, outputs[0].device)


def _records(x: Any, others: Sequence[Any], params: str, reals: Sequence[float]) -> list[tuple]:
    """Per step the backward op's params (library._call_record), from the shapes the steps pass on."""
    h: Any = x
    records = []
    for op, step_params, n_others, n_reals, o, r in _steps(params):
        step_others, step_reals = others[o:o + n_others], list(reals[r:r + n_reals])
        _, record, diff, _ = library._call_record(op, h, step_others, decode(step_params), step_reals)
        shapes, saved, _ = library.result_specs(op, h, step_others, step_params, step_reals)
        records.append((op, record, diff, o, n_others, r, n_reals, len(saved)))
        h = SimpleNamespace(shape=tuple(shapes[0]), dtype=x.dtype, device=x.device)
    return records


def _autograd_backward(ctx: Any, d_outputs: Sequence[Tensor | None], d_residuals: Any) -> tuple:
    d_y = d_outputs[0]
    if d_y is None:
        shape, dtype, device = ctx.first
        d_y = torch.zeros(shape, dtype=dtype, device=device)
    flags = ctx.needs_input_grad                 # (x, others, params, reals), others' one per tensor
    need_x, need_others = bool(flags[0]), [bool(f) for f in flags[1]]
    records = _records(*ctx.call)
    steps, wanted = [], need_x
    for op, record, diff, o, n_others, r, n_reals, n_residuals in records:
        own = need_others[o:o + n_others]
        extra: dict[str, Any] = {"given": [True]}
        if SPECS[op].skippable:                      # x, w, b: whether each is wanted (b False when not given)
            slots = iter(own)
            extra["needs"] = [wanted] + [bool(next(slots)) if slot else False for slot in record["slots"]]
        step_params = _encode(tuple({**record, **extra}.items()))
        steps.append([op, step_params, n_residuals, n_reals, 1 + sum(diff), wanted or any(own)])
        wanted = wanted or any(own)
    grads = _backward_op(list(ctx.saved_tensors), [d_y], _encode((("steps", steps),)), ctx.reals)
    it = iter(grads)
    dx = next(it)
    d_others: list[Tensor | None] = []
    for op, record, diff, o, n_others, r, n_reals, n_residuals in records:
        for has_gradient, need in zip(diff, need_others[o:o + n_others]):
            grad = next(it) if has_gradient else None
            d_others.append(grad if need else None)
    return (dx if need_x else None), d_others, None, library._no_gradient(ctx.reals)


def _backward_op(residuals: list[Tensor], cotangents: list[Tensor], params: str, reals: list[Any]) -> Any:
    return torch.ops.dnnbind.sequence_backward(residuals, cotangents, params, reals)


def _register() -> None:
    forward = torch.library.custom_op("dnnbind::sequence", _chain, mutates_args=(), schema=_SCHEMA)
    forward.register_fake(_fake_chain)
    backward = torch.library.custom_op("dnnbind::sequence_backward", _backward_chain, mutates_args=(),
                                       schema=_BACKWARD_SCHEMA)
    backward.register_fake(_fake_backward_chain)
    forward.register_autograd(_autograd_backward, setup_context=_setup_context)


_register()
