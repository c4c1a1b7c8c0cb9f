"""dnnbind.torch's ops on plain tensors in eager mode: one ``torch.autograd.Function`` per op, no dispatcher.

The registered custom ops (:mod:`dnnbind.torch.typed`) are what ``torch.compile``, ``torch.export``,
tensor subclasses and dispatch modes see. A plain eager call (a training loop's) runs the same backend
functions, static arguments and backward through :class:`_Eager` instead: the dispatcher's custom-op
autograd costs about 0.2 ms per forward and again per backward, more than a small op itself.

Everything such a call repeats (the checks, the static arguments, where each gradient goes) is a
:class:`Plan` on the call's :class:`dnnbind.torch.calls.Call`, built by the first call and found again by
:func:`planned` in one dictionary lookup of the one plan cache (``dnnbind.plan_cache_info()``), keyed by
the tensors' types, shapes, dtypes and devices and the op's keyword arguments (exact values: 1, 1.0 and
True, 0.0 and -0.0 are different keys). Kept short on purpose: the Python that runs between two
kernels runs with caches the kernels just flushed, so each line there costs several times its usual time.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch._C._autograd import _top_saved_tensors_default_hooks as _saved_tensor_hooks
from torch._C._functorch import is_functorch_wrapped_tensor

from dnnbind.highlevel import plans
from dnnbind.highlevel.grad_mode import BORROWED, NOTHING, OWN, residual_mode, saving_residuals
from dnnbind.highlevel.specs import SPECS, second_order
from dnnbind.torch import calls, layout, typed
from dnnbind.torch.calls import NOTHING as _NOTHING
from dnnbind.torch.calls import pick as _pick
from dnnbind.torch.calls import tree_map as _map
from dnnbind.torch.convert import device_scope, to_array, to_tensor
from dnnbind.torch.errors import refuse_gradients
from dnnbind.torch.tracers import untraced

Tensor = torch.Tensor


class Plan:
    """What every eager call of one op with the same tensors' metadata and arguments has in common: the
    backend's functions and static arguments (a :class:`calls.Call`), where the call's tensors go among
    the op's spec's arrays and where each one's gradient comes from among the backward's results."""

    __slots__ = ("op", "call", "forward", "backward", "static", "device", "scoped", "kwargs", "nested", "slots",
                 "positions", "gradients", "skip", "statistics", "integers", "first", "reads", "layout",
                 "elementwise", "result_for_x", "from_result", "without_gradient")

    def __init__(self, op: str, call: calls.Call, slots: list[Any], kwargs: dict[str, Any]) -> None:
        self.op, self.call, self.slots, self.kwargs = op, call, slots, kwargs
        self.forward, self.backward, self.static, self.device = call.forward, call.backward, call.static, call.device
        # whether the call needs its device scope: on the CPU only the ops that call numpy's BLAS
        self.scoped = call.scoped
        # rnn's nested weights and dropout's seed tensor (no array of the op's) take the general mapping
        self.nested = bool(SPECS[op].tensor_arguments) or any(isinstance(s, list) for s in slots)
        # spec array -> its index in (x, *others), None where not given
        counter = iter(range(1, 1 + len(slots)))
        self.positions = (0, *[next(counter) if s else None for s in slots])
        # (name, index in (x, *others)) of each given array the op is not differentiable by
        names = SPECS[op].array_names
        self.without_gradient = tuple((n, self.positions[names.index(n)]) for n in SPECS[op].without_gradient
                                      if self.positions[names.index(n)] is not None)
        # per tensor in (x, *others): where its gradient is among the backward's (dropout's seed: none)
        self.gradients = (*call.paths, *[None] * (_count(slots) + 1 - len(call.paths)))
        # the ops whose gradients may be skipped (conv: x, w, b; rnn: x, weights, h0, c0): the call's tensors
        # per spec array, which calls.needs_of reads the wanted gradients by
        self.skip = call.counts if SPECS[op].skippable else None
        self.statistics = SPECS[op].updates_in_place(kwargs)
        # the tensors among (x, *others) and the outputs the op's backward reads: saved for autograd's
        # version check (the backend reads its own copies)
        self.reads = call.reads
        # whether the results' layout may follow the inputs' (dnnbind.torch.layout)
        self.layout = SPECS[op].results_layout is not None
        # whether the gradients' layout also follows the cotangent's (an elementwise op's, as torch's)
        self.elementwise = op in layout.ELEMENTWISE
        # whether the result stands for x in the backward and in a second one (relu, dropout): then a call
        # keeps its result, not x, as torch's relu does, so x's memory goes once nothing else holds x
        arguments = SPECS[op].arguments_function(**kwargs)
        stands = SPECS[op].result_stands_for_x
        self.result_for_x = stands is not None and stands(arguments)
        # the backward as a function of the result alone, where it reads nothing else (sigmoid, softmax):
        # then a call keeps no x either, and a create_graph backward differentiates it through the result
        self.from_result = second_order.from_result(SPECS[op], arguments)
        self.integers: tuple[int, ...] | None = None     # outputs without gradient (maxpool's indices)
        self.first: tuple | None = None                  # output 0's shape, dtype and device

    def tensors(self, x: Any, others: Sequence[Any]) -> list[Any]:
        """x and others in the spec's order (None where not given; dropout's seed tensor left out): the
        tensors, or whatever stands for them (their indices)."""
        if self.nested:
            arrays = [x, *_unflatten(others, self.slots)]
            return arrays[:len(SPECS[self.op].arrays)]
        inputs = (x, *others)
        return [None if i is None else inputs[i] for i in self.positions]


#: what a call whose backward reads none of its tensors saves: autograd frees a node's saved tensors after
#: its backward unless asked to retain the graph, so the next backward through it is refused (dropout's
#: mask, a residual array, would otherwise give a second, added gradient)
UNREAD = torch.empty(0)

def save_reads(ctx: Any, read: Sequence[Tensor], after: Sequence[Tensor] = ()) -> int:
    """Save what a call's backward reads (then ``after``) for autograd's version check; :data:`UNREAD` where
    it reads none of the call's tensors. Returns how many of the saved tensors stand for ``read``."""
    read = list(read) or [UNREAD]
    ctx.save_for_backward(*read, *after)
    return len(read)


#: whether the call runs for a layer that writes its result into x (see :func:`overwriting`)
_OVERWRITING = contextvars.ContextVar("dnnbind_overwriting", default=False)


@contextlib.contextmanager
def overwriting() -> Iterator[None]:
    """Calls inside the block are a layer's made with ``inplace=True``, whose result is then written into x:
    an eager call saves nothing of x for autograd's version check (the write would fail it; the backend
    reads its own copy), a call through the typed op (which saves x and may run again on it) takes a copy
    of x. Where torch's own in-place functions save their result instead, a later in-place change of it
    goes unrefused here, but the gradient is the forward's, never computed from the changed values."""
    token = _OVERWRITING.set(True)
    try:
        yield
    finally:
        _OVERWRITING.reset(token)


def _slots(arrays: Sequence[Any]) -> list[Any]:
    """Per array after x: 0 for None, 1 for a tensor, a list of those for a nest (rnn's weights)."""
    def slot(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [slot(v) for v in value]
        return 0 if value is None else 1
    return [slot(a) for a in arrays]


def _count(slots: Any) -> int:
    return sum(_count(s) for s in slots) if isinstance(slots, list) else int(slots)


def _unflatten(leaves: Sequence[Any], slots: Sequence[Any]) -> list[Any]:
    """The arrays :func:`_slots` described, from their non-None leaves in order."""
    it = iter(leaves)

    def take(slot: Any) -> Any:
        if isinstance(slot, list):
            return [take(s) for s in slot]
        return next(it) if slot else None
    return [take(s) for s in slots]


class _Eager(torch.autograd.Function):      # subclassed once per op below, so grad_fn names the op
    """The custom op pair of one op, run without torch's dispatcher on a :class:`Plan`."""

    @staticmethod
    @untraced
    def forward(ctx: Any, plan: Plan, x: Tensor, *others: Tensor) -> tuple[Tensor, ...]:  # type: ignore[override]
        keep = any(ctx.needs_input_grad)         # else no backward can come: the backend saves nothing
        # the backend may save the call's tensors themselves (autograd's version check of what the backward
        # reads guards them), as torch's layers do; not where the result is then written into x
        overwriting = _OVERWRITING.get()
        mode = (OWN if overwriting else BORROWED) if keep else NOTHING
        if plan.scoped or mode != residual_mode():
            with device_scope(plan.device) if plan.scoped else _NOTHING, saving_residuals(keep, mode == BORROWED):
                outputs, residuals, laid = _forward_arrays(plan, x, others)
        else:
            outputs, residuals, laid = _forward_arrays(plan, x, others)
        if len(outputs) > 1:
            ctx.set_materialize_grads(False)     # no zeros for outputs without a gradient (see backward)
        if plan.integers is None:
            plan.integers = tuple(i for i, o in enumerate(outputs) if not o.is_floating_point())
            plan.first = (outputs[0].shape, outputs[0].dtype, outputs[0].device)
        if keep:
            ctx.plan = plan
            ctx.layout = laid                    # the gradients' too
            # what the op's backward reads, saved so that autograd refuses the backward after an in-place
            # change to one of them, as for torch's own layers (none where the call overwrites x: a layer
            # made with inplace=True, see overwriting); the backend's residuals may be those tensors themselves
            tensors = (x, *others)
            inputs, results = plan.reads
            read = [] if overwriting else [tensors[i] for i in inputs] + [outputs[i] for i in results]
            # the inputs, for a create_graph backward, which runs the typed backward op on them: differentiable
            # by the op's second-order rule, or refusing a second derivative naming the op where it has none;
            # the result in x's place where it stands for x, no x where the backward reads the result alone
            ctx.inputs = ((outputs[0], *others) if plan.result_for_x
                          else (None, *others) if plan.from_result is not None and not overwriting else tensors)
            if plan.elementwise:                 # x's strides decide the gradients' (layout.of_gradients)
                ctx.x_strides = None if laid is None else x.stride()
            # residuals stay the backend's arrays, unless saved-tensor hooks (checkpointing, offloading)
            # want to see them as saved tensors
            if _saved_tensor_hooks(False) is None:
                ctx.residual_arrays = residuals
                ctx.reads = save_reads(ctx, read)
            else:
                ctx.residual_arrays = None
                ctx.reads = save_reads(ctx, read, [to_tensor(r) for r in residuals])
            if plan.integers:
                ctx.mark_non_differentiable(*[outputs[i] for i in plan.integers])
        return outputs

    @staticmethod
    @untraced
    def backward(ctx: Any, *d_outputs: Tensor | None) -> tuple:  # type: ignore[override]
        plan: Plan = ctx.plan
        cotangents = list(d_outputs)
        for i in plan.integers or ():            # integer results take no cotangent (eager may hand zeros)
            cotangents[i] = None
        flags = ctx.needs_input_grad             # (plan, x, *others)
        if ctx.residual_arrays is not None:
            # autograd's version check of what the backward reads, and its refusal of a second backward
            # without retain_graph (it freed them after the first)
            ctx.saved_tensors
        if all(d is None for d in cotangents):
            return (None,) * len(flags)
        if cotangents[0] is None:                # the first cotangent is required: zeros stand for "unused"
            shape, dtype, device = plan.first    # type: ignore[misc]
            cotangents[0] = torch.zeros(shape, dtype=dtype, device=device)
        needs = None if plan.skip is None else calls.needs_of(plan.op, plan.skip, flags[1:])
        typed.refuse_batched(plan.op, cotangents[0])
        if torch.is_grad_enabled():
            # autograd records this backward (create_graph): through the typed backward op, so that a second
            # derivative follows the op's second-order rule, or is refused naming the op where it has none
            return (None, *_typed_backward(ctx, plan, cotangents))
        if plan.scoped:
            with device_scope(plan.device):
                grads = _backward_arrays(ctx, plan, cotangents, needs, flags)
        else:
            grads = _backward_arrays(ctx, plan, cotangents, needs, flags)
        laid = ctx.layout
        if plan.elementwise:
            laid = layout.of_gradients(plan.op, laid, ctx.x_strides, cotangents[0], plan.kwargs)
        return (None, *(grads if laid is None else layout.lay_out(grads, laid)))


def _forward_arrays(plan: Plan, x: Tensor, others: Sequence[Tensor]) -> tuple[tuple[Tensor, ...], tuple, Any]:
    """(outputs, the backend's residuals, the outputs' layout: :func:`layout.of`) of the backend's forward
    on the tensors' memory."""
    tensors = plan.tensors(x, others)
    arrays = _map(to_array, tensors) if plan.nested else [None if t is None else to_array(t) for t in tensors]
    result, residuals = plan.forward(*arrays, *plan.static)
    if plan.statistics:                  # updated in place, as torch's own batch norm does
        updated = SPECS[plan.op].updated        # (among the arrays after x)
        _statistics_written(tensors[1:][updated], arrays[1:][updated])
    outputs = [to_tensor(r) for r in (result if type(result) is tuple else (result,)) if r is not None]
    laid = None
    if plan.layout:                      # (a call of an op whose results' layout follows its inputs')
        laid = layout.of(plan.op, x, calls.named_array(plan.op, tensors[1:]))
        outputs = layout.lay_out(outputs, laid)
    return tuple(outputs), residuals, laid


def _backward_arrays(ctx: Any, plan: Plan, cotangents: list[Tensor | None], needs: tuple[bool, ...] | None,
                     flags: tuple[bool, ...]) -> list[Tensor | None]:
    """One gradient per input (x, *others), None where it has none or autograd wants none."""
    cts = tuple([None if d is None else to_array(d) for d in cotangents])
    saved = ctx.residual_arrays
    if saved is None:
        saved = tuple(to_array(r) for r in ctx.saved_tensors[ctx.reads:])
    results = (plan.backward(saved, cts, *plan.static) if needs is None
               else plan.backward(saved, cts, *plan.static, needs=needs))
    if type(results) is not tuple:
        results = (results,)
    return [None if path is None or not flag else _gradient(_pick(results, path))
            for path, flag in zip(plan.gradients, flags[1:])]


def _gradient(value: Any) -> Tensor | None:
    return None if value is None else to_tensor(value)


def _typed_backward(ctx: Any, plan: Plan, cotangents: list[Tensor | None]) -> list[Tensor | None]:
    """The backward through the typed backward op (:mod:`dnnbind.torch.typed`), differentiable again
    by the op's second-order rule: one gradient per input (x, *others), None where none is wanted; for a
    call that kept no x, its backward on its result (:func:`typed.from_result`)."""
    x, *others = ctx.inputs
    if x is None:
        return [typed.from_result(plan.op, plan.from_result, ctx.saved_tensors[0], cotangents,
                                  SPECS[plan.op].arguments_function(**plan.kwargs))]
    tensors = plan.tensors(x, others)
    inputs = typed.typed_arguments(plan.op, tensors[0], tensors[1:], SPECS[plan.op].arguments_function(**plan.kwargs))
    flat = typed._flat_tensors(plan.op, inputs)
    flags = ctx.needs_input_grad[1:]            # one per tensor in (x, *others), the given ones in order
    needs = [bool(f) for f in flags]
    results = typed.backward_function(plan.op).apply(typed._statics(inputs), needs, len(cotangents), *cotangents, *flat)
    return [g if flag else None for g, flag in zip(results, flags)]


def _statistics_written(tensors: Sequence[Tensor | None], arrays: Sequence[Any]) -> None:
    """After batch norm's forward updated the running statistics' arrays: a tensor the array was a copy of
    (not contiguous) gets the new values copied back. Their version counters stay as they were, as
    after torch's own batch norm, which saves them for its backward: a second forward before the first
    one's backward must not fail it."""
    for t, a in zip(tensors, arrays):
        if t is not None and not _shares_memory(t, a):
            t.data.copy_(to_tensor(a))         # (.data: without a version bump)


def _shares_memory(t: Tensor, a: Any) -> bool:
    """Whether the array :func:`to_array` gave for ``t`` is a view of its memory, not a copy."""
    if type(a) is np.ndarray and type(a.base) is Tensor:     # t.numpy()'s view of it (the usual case)
        return True
    address = a.__array_interface__["data"][0] if type(a) is np.ndarray else a.data.ptr
    return bool(address == t.data_ptr())


#: op -> its eager Function (grad_fn ``dnnbind_convBackward`` ...), refusing forward mode naming the op
_EAGER: dict[str, type[_Eager]] = {op: type(f"dnnbind_{op}", (_Eager,), {"jvp": staticmethod(functools.partial(
    typed.refuse_jvp, op))}) for op in SPECS}
#: op -> its eager Function's apply below torch.autograd.Function.apply, which adds only what a call
#: :func:`plain_eager` admits never needs (functorch transforms, dead functorch wrappers, setup_context)
_EAGER_APPLY: dict[str, Any] = {op: super(torch.autograd.Function, cls).apply  # type: ignore[misc]
                                 for op, cls in _EAGER.items()}


def _tracing() -> bool:
    """Whether a compiler, exporter or other tracer, a torch.func transform or a dispatch mode is active."""
    return (torch.compiler.is_compiling() or _dispatch_modes() > 0 or _functorch_transforms() or torch.jit.is_tracing())


_dispatch_modes = torch._C._len_torch_dispatch_stack             # (what _get_current_dispatch_mode reads)
_functorch_transforms = torch._C._are_functorch_transforms_active


#: tensor types an eager call may take the fast path with: layers' weights are Parameters (whose
#: ``__torch_function__`` is torch's own, disabled one); other subclasses (fake, functional, user types with
#: their own ``__torch_function__``) go through the dispatcher
_PLAIN_TENSORS = frozenset({Tensor, torch.nn.Parameter})


def plain_eager(x: Tensor, others: Sequence[Tensor]) -> bool:
    """Whether this call runs eagerly on plain tensors. Everything else goes through the registered op
    (meta tensors too: its fake kernel gives their shapes)."""
    if _tracing() or x.is_meta:
        return False
    return all(type(t) in _PLAIN_TENSORS and not is_functorch_wrapped_tensor(t) for t in (x, *others))


# -- plans of repeated calls ----------------------------------------------------------------------

#: ops whose calls are planned: not dropout (its seed is drawn per call and is one of the static
#: arguments) nor rnn (nested weights and sequence lengths); their calls run through :func:`call`
PLANNED = frozenset(op for op, spec in SPECS.items() if spec.planned)

def _key(op: str, tensors: Sequence[Tensor | None], arguments: tuple) -> tuple:
    """The plan key of a call: each tensor's type, shape, dtype and device (None where not given) and
    the arguments as exact values (floats by their hex text, types alongside; see plans.arguments_key).
    Raises plans.NotPlain for anything that cannot be part of one (a non-plain tensor, a tensor or an
    object among the arguments)."""
    metas: list[tuple | None] = []
    for t in tensors:
        if t is None:
            metas.append(None)
        elif type(t) in _PLAIN_TENSORS and not is_functorch_wrapped_tensor(t):
            metas.append((t.shape, t.dtype, t.device, type(t)))
        else:
            raise plans.NotPlain
    return key_of_metas(op, metas, arguments)


def key_of_metas(op: str, metas: Sequence[tuple | None], arguments: tuple) -> tuple:
    """:func:`_key` from the tensors' (shape, dtype, device, type), None where not given: also for a
    tensor not made yet (dnnbind.torch.fused runs a layer on the array an earlier one returned)."""
    types = tuple(map(type, arguments))
    if float in types:
        arguments = tuple([a.hex() if type(a) is float else a for a in arguments])
    return (op, *metas, (types, plans.arguments_key(arguments)))


def planned(op: str, tensors: tuple, arguments: dict[str, Any]) -> tuple[Tensor, ...] | None:
    """The outputs of an eager call whose plan an earlier call (through :func:`call`) left, or None when
    there is none (first call, traced, not plain): the caller then takes its checked path. ``tensors``:
    the op's spec's arrays as :func:`call` is given them; ``arguments``: its keyword arguments, in the
    order :func:`call` is given them."""
    if _tracing():
        return None
    try:
        plan = _CACHE.entries.get(_key(op, tensors, tuple(arguments.values())))
    except (plans.NotPlain, TypeError):
        return None
    if plan is None:
        return None
    given = [t for t in tensors if t is not None]
    if plan.without_gradient:
        _refuse_gradients(plan, given)
    result: tuple[Tensor, ...] = _EAGER_APPLY[op](plan, *given)
    return result


def _refuse_gradients(plan: Plan, given: Sequence[Tensor]) -> None:
    """RuntimeError where a tensor the op is not differentiable by (:attr:`Plan.without_gradient`) asks
    for a gradient, as torch's batch norm refuses its running statistics (``given``: (x, *others))."""
    if torch.is_grad_enabled():
        refuse_gradients((plan.op, name, given[place]) for name, place in plan.without_gradient)


def _plan(op: str, x: Any, arrays: Sequence[Any], kwargs: dict[str, Any]) -> Plan:
    """The plan of a call given x (a tensor, or anything with its shape, dtype and device), the spec's other
    arrays then its tensor arguments (``arrays``), and the public op's keyword arguments (the tensor
    arguments among them)."""
    call = calls.call_of(op, x, arrays[:len(SPECS[op].arrays) - 1], kwargs)
    plan = call.plan
    if plan is None:
        plan = Plan(op, call, _slots(arrays), kwargs)
        if _remembered(op, kwargs):
            call.plan = plan
    return plan


def _remembered(op: str, kwargs: dict[str, Any]) -> bool:
    """Whether :func:`calls.call_of` keeps this call's Call: not when given a tensor argument (dropout's
    seed tensor, whose value is one of the static arguments)."""
    return not any(isinstance(kwargs.get(name), Tensor) for name in SPECS[op].tensor_arguments)


#: the one plan cache (dnnbind.highlevel.plans), which holds the eager plans by :func:`_key` too
_CACHE = plans.CACHE


def call(op: str, x: Tensor, *arrays: Any, **kwargs: Any) -> list[Tensor]:
    """Run op on x and the op's other spec's arrays (tensors, None, or rnn's nested weights; then its tensor
    arguments, dropout's seed) with the public op's keyword arguments, eagerly or as the registered custom
    op; returns the op's non-None outputs. A plain eager call leaves its plan for :func:`planned` to find."""
    others = calls.leaves(list(arrays))
    if not plain_eager(x, others):
        if not torch.compiler.is_compiling() and _OVERWRITING.get():
            x = x.clone()            # (compiling, the layer clones x: see pointwise.written_back)
        return typed.call(op, x, arrays, kwargs)
    n = len(SPECS[op].arrays) - 1
    spec_kwargs = {**kwargs, **dict(zip(SPECS[op].tensor_arguments, arrays[n:]))}
    plan = _plan(op, x, arrays, spec_kwargs)
    if op in PLANNED and _remembered(op, spec_kwargs):
        try:
            key = _key(op, (x, *arrays), tuple(kwargs.values()))
        except (plans.NotPlain, TypeError):
            key = None
        if key is not None and key not in _CACHE.entries:
            _CACHE.misses += 1
            _CACHE.store(key, plan)
    if plan.without_gradient:
        _refuse_gradients(plan, (x, *others))
    outputs = list(_EAGER_APPLY[op](plan, x, *others))
    if SPECS[op].updated_in_place:        # updated in place (see _Eager.forward), returned as the op does
        outputs += [t for t in arrays[SPECS[op].updated] if t is not None]
    return outputs
