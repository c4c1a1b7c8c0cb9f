"""Consecutive dnnbind layers run as one autograd node (what :class:`dnnbind.torch.nn.Sequential` runs).

Each layer's op is one an earlier call of the same layer planned (:mod:`dnnbind.torch.eager`): the
node's forward runs the plans' backend functions one after the other on arrays, the backward their
backward functions in reverse order. Between two layers nothing becomes a tensor and autograd records
nothing: one ``Function.apply``, one backward node and two conversions for the whole run instead of
per layer (on the CPU, between kernels that flush the caches, that glue costs more than the work of a
small layer). The results are the layers' own: the same backend calls on the same arrays.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, NamedTuple, Sequence

import torch

from dnnbind.highlevel.grad_mode import saving_residuals
from dnnbind.highlevel.specs import SPECS
from dnnbind.torch import eager, typed
from dnnbind.torch.calls import NOTHING
from dnnbind.torch.convert import device_scope, to_array, to_tensor
from dnnbind.torch.errors import refuse_gradients
from dnnbind.torch.tracers import untraced

Tensor = torch.Tensor


class Fusion(NamedTuple):
    """A layer's op call as a fused run needs it: the op, its spec's arrays after x (the layer's tensors,
    None where not given), its keyword arguments as the eager plans key them, and the counter the call
    increments (batch norm's num_batches_tracked, or None)."""

    op: str
    tensors: tuple[Tensor | None, ...]
    arguments: dict[str, Any]
    counted: Tensor | None = None


class Step(NamedTuple):
    """One layer of a fused run: its plan, its tensors (the spec's order after x), where its non-None tensors
    start among the run's inputs after x, and its counter."""

    plan: eager.Plan
    tensors: tuple[Tensor | None, ...]
    first: int
    counted: Tensor | None


def plan_run(fusions: Sequence[Fusion], x: Tensor) -> Run | None:
    """The run of layers on ``x``, or None unless every layer's call was planned before (by a call of
    the layers one by one, with inputs of the same shapes, dtypes and device: its checks passed) and
    returns one floating-point result. Touches nothing."""
    meta: tuple = (x.shape, x.dtype, x.device, type(x))
    steps, first = [], 0
    for fusion in fusions:
        try:
            metas = [meta] + [None if t is None else (t.shape, t.dtype, t.device, type(t)) for t in fusion.tensors]
            key = eager.key_of_metas(fusion.op, metas, tuple(fusion.arguments.values()))
            plan: eager.Plan | None = eager._CACHE.entries.get(key)
        except (eager.plans.NotPlain, TypeError):
            return None
        if plan is None or plan.first is None or plan.integers != () or plan.nested or plan.gradients[0] is None:
            return None
        steps.append(Step(plan, fusion.tensors, first, fusion.counted))
        first += sum(t is not None for t in fusion.tensors)
        shape, dtype, device = plan.first
        meta = (shape, dtype, device, Tensor)
    return Run(steps)


#: what a step of a run planned from its layers' calls alone (:func:`plan_layers`) holds for a tensor given:
#: the typed sequence op's kernels take the tensors with each call
PLACED: Any = object()


def plan_layers(layers: Sequence[tuple[str, Sequence[Any], dict[str, Any]]], x: Any) -> Run:
    """The run of ``layers`` (per layer: its op, its spec's arrays after x, its keyword arguments as the eager
    plans key them) on an input with x's shape, dtype and device, planned from the calls alone: the specs'
    checks run, nothing is computed (:mod:`dnnbind.torch.typed_sequence`). Each layer must return one
    result, as a fusable layer's call does."""
    like = SimpleNamespace(shape=tuple(x.shape), dtype=x.dtype, device=x.device)
    steps, first = [], 0
    for op, arrays, kwargs in layers:
        plan = eager._plan(op, like, list(arrays), kwargs)
        shapes = [s for s in plan.call.shapes if s is not None]
        if len(shapes) != 1 or plan.nested:
            raise ValueError(f"dnnbind.{op}: a call with {len(shapes)} results cannot be a step of a run")
        if plan.first is None:                   # as the plan's first eager call sets them
            plan.first, plan.integers = (torch.Size(shapes[0]), x.dtype, x.device), ()
        steps.append(Step(plan, tuple(None if a is None else PLACED for a in arrays), first, None))
        first += sum(a is not None for a in arrays)
        like = SimpleNamespace(shape=tuple(shapes[0]), dtype=x.dtype, device=x.device)
    return Run(steps)


class Run:
    """A planned run's steps and what each call of it repeats, worked out once: its tensors, counters,
    running statistics and device scope, and per set of wanted gradients its backward program."""

    __slots__ = ("steps", "tensors", "counted", "statistics", "scope", "programs", "reads", "without_gradient")

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.tensors = [t for step in steps for t in step.tensors if t is not None]
        self.counted = [step.counted for step in steps if step.counted is not None]
        # (step index, where its arrays updated in place are among its arrays, those tensors) of the steps
        # that update them (batch norm's running statistics, training)
        self.statistics = [(i, SPECS[step.plan.op].updated, step.tensors[SPECS[step.plan.op].updated])
                           for i, step in enumerate(steps) if step.plan.statistics]
        self.scope = next((s.plan.device for s in steps if s.plan.scoped), None)
        self.programs: dict[tuple, list[tuple]] = {}
        self.reads = _reads(steps)
        # (op, name, tensor) of the tensors a step's op is not differentiable by (eager.Plan's, placed among
        # the run's tensors)
        self.without_gradient = [(step.plan.op, name, self.tensors[step.first + place - 1])
                                 for step in steps for name, place in step.plan.without_gradient]

    def __len__(self) -> int:
        return len(self.steps)

    def program(self, flags: tuple) -> list[tuple]:
        """The backward steps for ``flags`` (ctx.needs_input_grad: the Function's (run, x, *tensors)),
        last step first: (the step's index, its plan, its ``needs`` (None: the op takes none), (where each
        wanted gradient goes among the tensors', its path among the results), the path of its dx or None
        where nothing before it wants one). Steps before the first one anything wants a gradient of are
        left out."""
        found = self.programs.get(flags)
        if found is not None:
            return found
        # below[i]: whether x or a tensor of a step before step i wants a gradient (then step i's dx is needed)
        below, wanted = [], bool(flags[1])
        for step in self.steps:
            below.append(wanted)
            wanted = wanted or any(flags[2 + step.first:2 + step.first + _given(step)])
        program = []
        for i in range(len(self.steps) - 1, -1, -1):
            step, plan = self.steps[i], self.steps[i].plan
            own = flags[2 + step.first:2 + step.first + _given(step)]
            if not below[i] and not any(own):
                break                            # nothing before this step wants a gradient
            needs = None
            if SPECS[plan.op].skippable:             # conv: x, w and b, each only when wanted
                slots = iter(own)
                needs = SPECS[plan.op].needs((below[i], *[t is not None and bool(next(slots)) for t in step.tensors]))
            picks = tuple((step.first + j, path) for j, (path, flag) in enumerate(zip(plan.gradients[1:], own))
                          if path is not None and flag)
            program.append((i, plan, needs, picks, plan.gradients[0] if below[i] else None))
        self.programs[flags] = program
        return program


def _reads(steps: Sequence[Step]) -> tuple[bool, tuple[int, ...], bool]:
    """What the run's backward reads of its tensors (its steps' ops' ``backward_reads``): (whether the
    run's input, the places among the run's tensors after x, whether its result); what lies between two
    steps is arrays no caller holds."""
    places = []
    for step in steps:
        inputs, _ = step.plan.reads
        places += [step.first + i - 1 for i in inputs if i > 0]      # (i: among the step's x and tensors)
    return 0 in steps[0].plan.reads[0], tuple(places), 0 in steps[-1].plan.reads[1]


def count_batches(calls: Sequence[Fusion] | Sequence[Step]) -> None:
    """Count the batch of each batch norm call among ``calls``, as its layer's own call does."""
    for call in calls:
        if call.counted is not None:
            call.counted.add_(1)


def run(planned: Run, x: Tensor) -> Tensor:
    """The run's result on ``x``: one autograd node over x and every layer's tensors."""
    if planned.without_gradient and torch.is_grad_enabled():
        refuse_gradients(planned.without_gradient)
    for counter in planned.counted:
        counter.add_(1)
    result: Tensor = _SEQUENCE_APPLY(planned, x, *planned.tensors)
    return result


class _Sequence(torch.autograd.Function):      # subclassed once below: grad_fn dnnbind_sequenceBackward
    """The layers' backend calls, forward in order and backward in reverse, on arrays.

    Between two backend calls runs only what passes one's result to the next: the tensors become arrays
    before the first call and the gradients tensors after the last, and the device scope is entered
    once. Torch's code run between two kernels finds the caches cold (the kernels stream megabytes
    through them) and costs ten times what it costs warm: tens of microseconds a layer.
    """

    @staticmethod
    @untraced
    def forward(ctx: Any, planned: Run, x: Tensor, *inputs: Tensor) -> Tensor:  # type: ignore[override]
        keep = any(ctx.needs_input_grad)         # else no backward can come: the backends save nothing
        arrays = _arrays([step.tensors for step in planned.steps])
        h, saved = forward_arrays(planned, to_array(x), arrays, keep, lent=True)
        if planned.statistics:                   # updated in place, as the layer's own call does
            eager._statistics_written([t for _, _, ts in planned.statistics for t in ts],
                                      [a for i, places, _ in planned.statistics for a in arrays[i][places]])
        result = to_tensor(h)
        ctx.run = planned
        if keep:
            ctx.residuals, ctx.x = saved, x
            # what the layers' backwards read of the run's tensors, for autograd's version check (see eager)
            first, places, last = planned.reads
            read = [x] if first else []
            read += [inputs[i] for i in places] + ([result] if last else [])
            eager.save_reads(ctx, read)
        return result

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> Any:
        typed.refuse_jvp(ctx.run.steps[0].plan.op)       # (naming the run's first op)

    @staticmethod
    @untraced
    def backward(ctx: Any, dy: Tensor) -> tuple:  # type: ignore[override]
        flags = ctx.needs_input_grad             # (run, x, *inputs)
        typed.refuse_batched(ctx.run.steps[-1].plan.op, dy)
        ctx.saved_tensors                        # autograd's version check, and a second backward refused
        if torch.is_grad_enabled():              # create_graph: a backward autograd can differentiate again
            return (None, *_recorded_backward(ctx.run, ctx.x, dy, flags))
        d, grads = backward_arrays(ctx.run, ctx.residuals, to_array(dy), flags)
        dx = to_tensor(d) if flags[1] and d is not None else None
        return (None, dx, *[eager._gradient(g) for g in grads])


def _recorded_backward(planned: Run, x: Tensor, dy: Tensor, flags: tuple) -> list[Tensor | None]:
    """The gradients of (x, *the run's tensors) as a graph autograd records (a create_graph backward): the
    layers' typed ops run again on x and the layers' tensors, each differentiable again by its op's
    second-order rule (or refusing, naming the op), and differentiated by autograd. Batch norm's typed op
    returns its running statistics' update rather than making it, so they are not updated twice."""
    h = x
    for step in planned.steps:
        h = typed.call(step.plan.op, h, list(step.tensors), dict(step.plan.kwargs))[0]
    wanted = [(i, t) for i, (t, flag) in enumerate(zip([x, *planned.tensors], flags[1:])) if flag]
    found = torch.autograd.grad(h, [t for _, t in wanted], dy, create_graph=True, allow_unused=True)
    grads: list[Tensor | None] = [None] * (len(flags) - 1)
    for (i, _), g in zip(wanted, found):
        grads[i] = g
    return grads


def forward_arrays(planned: Run, h: Any, arrays: list[list[Any]], keep: bool, lent: bool = False,
                   between: list[Any] | None = None) -> tuple[Any, list[tuple]]:
    """(the last step's result, each step's residuals) of the run's backend calls on the array h, each step
    given its arrays (:func:`_arrays`); residuals saved only where ``keep``, and where ``lent`` they may be
    the run's arrays themselves (autograd guards the run's tensors as it guards an eager call's; the
    arrays between the steps are the run's own). ``between``, where given, gets each step's result."""
    saved = []
    with _scope(planned), saving_residuals(keep, borrowed=lent):
        for step, given in zip(planned.steps, arrays):
            plan = step.plan
            result, residuals = plan.forward(h, *given, *plan.static)
            h = result[0] if type(result) is tuple else result
            saved.append(residuals)
            if between is not None:
                between.append(h)
    return h, saved


def backward_arrays(planned: Run, residuals: Sequence[tuple], d: Any, flags: tuple) -> tuple[Any, list[Any]]:
    """(x's gradient or None, one gradient per tensor of the run, None where none is wanted) of the run's
    backward calls in reverse order, from each step's residuals and the result's cotangent ``d``;
    ``flags``: whether each of (the run, x, *its tensors) wants a gradient (ctx.needs_input_grad)."""
    grads: list[Any] = [None] * (len(flags) - 2)
    with _scope(planned):
        for i, plan, needs, picks, x_path in planned.program(flags):
            if needs is None:
                results = plan.backward(residuals[i], (d,), *plan.static)
            else:
                results = plan.backward(residuals[i], (d,), *plan.static, needs=needs)
            if type(results) is not tuple:
                results = (results,)
            for slot, path in picks:
                grads[slot] = eager._pick(results, path)
            d = None if x_path is None else eager._pick(results, x_path)
    return d, grads


def _arrays(tensors: Sequence[Sequence[Tensor | None]]) -> list[list[Any]]:
    """Per step its tensors as arrays (None where not given); a tensor given to several steps is one
    array, so that what one step updates in place (running statistics) the next one reads, also where
    the array is a copy."""
    converted: dict[int, Any] = {}
    out = []
    for step in tensors:
        given: list[Any] = []
        for t in step:
            if t is None:
                given.append(None)
                continue
            a = converted.get(id(t))
            if a is None:
                a = converted[id(t)] = to_array(t)
            given.append(a)
        out.append(given)
    return out


def _scope(planned: Run) -> Any:
    """The device scope of the run (convert.device_scope), entered once: where any step's call needs it."""
    return NOTHING if planned.scope is None else device_scope(planned.scope)


def _given(step: Step) -> int:
    return sum(t is not None for t in step.tensors)


_SEQUENCE = type("dnnbind_sequence", (_Sequence,), {})
#: its apply below torch.autograd.Function.apply, as eager's (see eager._EAGER_APPLY): plan_run's callers
#: admit no functorch transform, and the Function has no setup_context
_SEQUENCE_APPLY = super(torch.autograd.Function, _SEQUENCE).apply  # type: ignore[misc]
