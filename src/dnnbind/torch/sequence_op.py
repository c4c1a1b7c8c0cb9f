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

from dnnbind.highlevel.residual import SKIPPABLE
from dnnbind.torch import library
from dnnbind.torch.fused import Fusion
from dnnbind.torch.library import _encode, decode, encode

Tensor = torch.Tensor

_SCHEMA = "(Tensor x, Tensor[] others, str params, float[] reals) -> (Tensor[], Tensor[])"
_BACKWARD_SCHEMA = "(Tensor[] residuals, Tensor[] cotangents, str params, float[] reals) -> Tensor[]"


def run(fusions: Sequence[Fusion], x: Tensor) -> Tensor:
    """The layers' calls (``fusions``) on x as one ``dnnbind::sequence`` call; their num_batches_tracked
    counted and running statistics copied back as the layers' own calls do."""
    for fusion in fusions:
        if fusion.counted is not None:
            fusion.counted.add_(1)
    outputs, _ = torch.ops.dnnbind.sequence(x, *arguments(fusions, x.device.type))
    statistics = iter(outputs[1:])
    for fusion in fusions:
        if fusion.op != "batchnorm":
            continue
        given = [t for t in fusion.tensors[2:4] if t is not None]
        updated = [next(statistics) for _ in given]
        if fusion.arguments["training"]:
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


def _steps(params: str) -> list[tuple]:
    """Per step: its fields and where its others and reals start."""
    out, o, r = [], 0, 0
    for op, step_params, n_others, n_reals in decode(params)["steps"]:
        out.append((op, step_params, o, n_others, r, n_reals))
        o, r = o + n_others, r + n_reals
    return out


def _chain(forward: Any, x: Tensor, others: Sequence[Tensor], params: str,
           reals: Sequence[float]) -> tuple[list[Tensor], list[Tensor]]:
    h, statistics, residuals = x, [], []
    for op, step_params, o, n_others, r, n_reals in _steps(params):
        outputs, saved = forward(op, h, others[o:o + n_others], step_params, reals[r:r + n_reals])
        h = outputs[0]
        statistics += outputs[1:]
        residuals += saved
    return [h, *statistics], residuals


def _backward_chain(backward: Any, residuals: Sequence[Tensor], cotangents: Sequence[Tensor], params: str,
                    reals: Sequence[float]) -> list[Tensor]:
    steps = decode(params)["steps"]
    starts, s, r = [], 0, 0
    for _, _, n_residuals, n_reals, _, _ in steps:
        starts.append((s, r))
        s, r = s + n_residuals, r + n_reals
    like = cotangents[0]
    d: Tensor | None = like
    per_step: list[list[Tensor]] = [[] for _ in steps]
    for i in range(len(steps) - 1, -1, -1):
        op, step_params, n_residuals, n_reals, n_grads, runs = steps[i]
        s, r = starts[i]
        if not runs or d is None:            # nothing before this step wants a gradient
            per_step[i] = [like.new_empty((0,)) for _ in range(n_grads - 1)]
            d = None
            continue
        grads = backward(op, residuals[s:s + n_residuals], [d], step_params, reals[r:r + n_reals])
        d, per_step[i] = grads[0], grads[1:]
    return [like.new_empty((0,)) if d is None else d] + [g for grads in per_step for g in grads]


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, others, params, reals = inputs
    outputs, residuals = output
    ctx.save_for_backward(*residuals)
    ctx.mark_non_differentiable(*residuals, *outputs[1:])
    # per step the backward op's params (library._call_record), from the shapes the steps pass on
    h: Any = SimpleNamespace(shape=tuple(x.shape), dtype=x.dtype, device=x.device)
    ctx.records = []
    for op, step_params, o, n_others, r, n_reals in _steps(params):
        step_others, step_reals = others[o:o + n_others], list(reals[r:r + n_reals])
        _, record, diff, _ = library._call_record(op, h, step_others, decode(step_params), step_reals)
        shapes, saved, _ = library.result_specs(op, h, step_others, step_params, step_reals)
        ctx.records.append((op, record, diff, o, n_others, r, n_reals, len(saved)))
        h = SimpleNamespace(shape=tuple(shapes[0]), dtype=x.dtype, device=x.device)
    ctx.reals = list(reals)
    ctx.first = (outputs[0].shape, outputs[0].dtype, outputs[0].device)


def _autograd_backward(ctx: Any, d_outputs: Sequence[Tensor | None], d_residuals: Any) -> tuple:
    d_y = d_outputs[0]
    if d_y is None:
        shape, dtype, device = ctx.first
        d_y = torch.zeros(shape, dtype=dtype, device=device)
    flags = ctx.needs_input_grad                 # (x, others, params, reals), others' one per tensor
    need_x, need_others = bool(flags[0]), [bool(f) for f in flags[1]]
    steps, wanted = [], need_x
    for op, record, diff, o, n_others, r, n_reals, n_residuals in ctx.records:
        own = need_others[o:o + n_others]
        extra: dict[str, Any] = {"given": [True]}
        if op in SKIPPABLE:                      # x, w, b: whether each is wanted (b False when not given)
            slots = iter(own)
            extra["needs"] = [wanted] + [bool(next(slots)) if slot else False for slot in record["slots"]]
        step_params = _encode(tuple({**record, **extra}.items()))
        steps.append([op, step_params, n_residuals, n_reals, 1 + sum(diff), wanted or any(own)])
        wanted = wanted or any(own)
    grads = _backward_op(list(ctx.saved_tensors), [d_y], _encode((("steps", steps),)), ctx.reals)
    it = iter(grads)
    dx = next(it)
    d_others: list[Tensor | None] = []
    for op, record, diff, o, n_others, r, n_reals, n_residuals in ctx.records:
        for has_gradient, need in zip(diff, need_others[o:o + n_others]):
            grad = next(it) if has_gradient else None
            d_others.append(grad if need else None)
    return (dx if need_x else None), d_others, None, library._no_gradient(ctx.reals)


def _backward_op(residuals: list[Tensor], cotangents: list[Tensor], params: str, reals: list[Any]) -> Any:
    return torch.ops.dnnbind.sequence_backward(residuals, cotangents, params, reals)


def _register() -> None:
    forward = torch.library.custom_op("dnnbind::sequence", functools.partial(_chain, library._forward),
                                      mutates_args=(), schema=_SCHEMA)
    forward.register_fake(functools.partial(_chain, library._fake_forward))
    backward = torch.library.custom_op("dnnbind::sequence_backward",
                                       functools.partial(_backward_chain, library._backward), mutates_args=(),
                                       schema=_BACKWARD_SCHEMA)
    backward.register_fake(functools.partial(_backward_chain, library._fake_backward))
    forward.register_autograd(_autograd_backward, setup_context=_setup_context)


_register()
