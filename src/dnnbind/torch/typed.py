"""dnnbind's ops as typed ``torch.library`` custom ops (namespace ``dnnbind``), their schemas derived from the specs.

For every op NAME (:data:`dnnbind.highlevel.specs.SPECS`) two ops are registered, e.g. for conv::

    dnnbind::conv(Tensor x, Tensor w, Tensor? b, SymInt[] stride, SymInt[] padding, SymInt[] dilation,
                  SymInt groups, bool flip) -> Tensor
    dnnbind::conv_backward(Tensor?[] cotangents, Tensor x, Tensor w, Tensor? b, SymInt[] stride, ...,
                           bool[] needs) -> Tensor[]

The inputs are the spec's arrays (``Tensor``, ``Tensor?`` when optional, a nested one as ``Tensor[]``, the
tensors given, with ``SymInt[] NAME_sizes``, the length of each group, and ``bool[] NAME_given``, whether
each entry is given (rnn's biases may be None)), then its public arguments typed by their
:class:`~dnnbind.highlevel.specs.base.Kind` (a per-dimension argument as one int per spatial dimension,
padding as (low, high) pairs only when uneven). The forward returns the op's results only (``Tensor``
for one result, else ``Tensor[]``; batch norm adds its updated running statistics): no residuals, so a
program exported for inference or training holds nothing a backend or a version of dnnbind decides.
The backward op takes the cotangents of the results (None for those not given) and the forward's inputs
and returns one gradient per tensor given (None entries left out), an empty tensor where ``needs`` (one
flag per tensor given) asks for none or the tensor has no gradient (batch norm's running statistics);
it runs the backend's forward again for the residuals its backward needs, so it is what a differentiable
backward (create_graph, torch.func) records, and the forward op's own gradient formula. Where a call may
be differentiated (grad mode on, a tensor requiring grad, not torch.export), :func:`call` runs
``dnnbind::NAME_training`` instead (``(inputs, str saves) -> (Tensor[] results, Tensor[] residuals)``,
``saves`` naming what decides the residuals' layout, :func:`saves_tag`), whose gradient formula calls
``dnnbind::NAME_pullback(Tensor[] residuals, Tensor?[] cotangents, inputs, bool[] needs)`` on the
residuals it saved: no forward runs twice, and an inference graph or an exported program holds the
residual-free op. The kernels run the backends through
:mod:`dnnbind.torch.calls`.

Fake kernels compute shapes from the dims objects through the specs' checks (:func:`calls.fake`).
Autograd is registered with ``register_autograd`` (``setup_context``), batching rules with
``register_vmap`` (:mod:`dnnbind.torch.batching`), so ``torch.func`` transforms work in eager mode.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
from typing import Any, Iterable, Iterator, Sequence

import torch
from torch._C._autograd import _top_saved_tensors_default_hooks as _saved_tensor_hooks

from dnnbind.highlevel.plans import kept
from dnnbind.highlevel.residual import without
from dnnbind.highlevel.specs import SPECS, second_order
from dnnbind.highlevel.specs.base import Kind, OpSpec
from dnnbind.torch import batching, calls, layout
from dnnbind.torch.errors import refuse_gradients
from dnnbind.torch.tracers import untraced

Tensor = torch.Tensor
NAMESPACE = "dnnbind"


# -- schemas --------------------------------------------------------------------------------------

def _inputs(spec: OpSpec) -> list[str]:
    """The typed inputs of the op's forward: its arrays, then its public arguments."""
    out = []
    for a in spec.arrays:
        if a.nested:
            out += [f"Tensor[] {a.name}", f"SymInt[] {a.name}_sizes", f"bool[] {a.name}_given"]
        else:
            out.append(f"Tensor{'?' if a.optional else ''} {a.name}")
    return out + [f"{kind.schema} {name}" for name, kind in spec.kinds.items()]


def single_result(spec: OpSpec) -> bool:
    """Whether the forward returns one ``Tensor`` (else ``Tensor[]``)."""
    return len(spec.outputs) == 1 and not spec.updated_in_place


def schemas(spec: OpSpec) -> tuple[str, str]:
    """(the forward's schema, the backward's), without the op's name."""
    inputs = ", ".join(_inputs(spec))
    result = "Tensor" if single_result(spec) else "Tensor[]"
    return f"({inputs}) -> {result}", f"(Tensor?[] cotangents, {inputs}, bool[] needs) -> Tensor[]"


def training_schemas(spec: OpSpec) -> tuple[str, str]:
    """(the training forward's schema: results and residuals, the pullback's: gradients from the
    residuals), without the op's name."""
    inputs = ", ".join(_inputs(spec))
    return (f"({inputs}, str saves) -> (Tensor[] results, Tensor[] residuals)",
            f"(Tensor[] residuals, Tensor?[] results, Tensor?[] cotangents, {inputs}, bool[] needs) -> Tensor[]")


# -- typed arguments <-> the public op's ----------------------------------------------------------

def _ints(name: str, value: Any) -> list[Any]:
    if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple, torch.Size)) and all(
            isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool) for v in value):
        return list(value)
    raise TypeError(f"{name}={value!r} must be an int or a sequence of ints")


def _to_kind(name: str, kind: Kind, value: Any, dims: int) -> Any:
    """A public argument's value as its typed schema takes it (``dims``: the spatial rank)."""
    if value is None and kind.optional:
        return None
    if kind.pairs and isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple)) for v in value):
        if len(value) != dims or not all(not isinstance(v, (list, tuple)) or len(v) == 2 for v in value):
            raise ValueError(f"{name}={value!r} must be an int, or one int or (low, high) pair for each of "
                             f"{dims} spatial dimensions")
        flat = [_ints(name, v) * (1 if isinstance(v, (list, tuple)) else 2) for v in value]
        if all(low == high for low, high in flat):
            return [low for low, _ in flat]
        return [i for pair in flat for i in pair]
    if kind.per_dim:
        ints = _ints(name, value)
        if len(ints) == 1 and dims != 1:
            return ints * dims
        if len(ints) != dims:
            raise ValueError(f"{name}={value!r} must be an int or {dims} ints, one per spatial dimension")
        return ints
    if kind.schema.startswith("SymInt[]"):
        return _ints(name, value)
    return value


def _from_kind(kind: Kind, value: Any, dims: int) -> Any:
    """A typed schema's value as the public op takes it."""
    if value is None or not isinstance(value, (list, tuple)):
        return value
    if kind.pairs and len(value) == 2 * dims and dims > 0 and len(value) != dims:
        return tuple((value[2 * i], value[2 * i + 1]) for i in range(dims))
    return tuple(value)


def _spatial(spec: OpSpec, x: Tensor) -> int:
    """The spatial rank per-dimension arguments have: x's rank past (N, C) (x is batched at the op)."""
    return x.dim() - 2


def typed_arguments(op: str, x: Tensor, arrays: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
    """The typed op's inputs for x, the spec's other arrays (rnn's weights nested) and the public
    op's arguments by name (a tensor argument, dropout's seed, among them)."""
    spec = SPECS[op]
    out: list[Any] = [x]
    for a, value in zip(spec.arrays[1:], arrays):
        if a.nested:
            groups = [list(g) for g in value]
            entries = [t for g in groups for t in g]
            out += [[t for t in entries if t is not None], [len(g) for g in groups], [t is not None for t in entries]]
        else:
            out.append(value)
    dims = _spatial(spec, x)
    return out + [_to_kind(name, kind, kwargs[name], dims) for name, kind in spec.kinds.items()]


def public_arguments(op: str, args: Sequence[Any]) -> tuple[Tensor, list[Any], dict[str, Any]]:
    """(x, the spec's other arrays, the public arguments by name) of a typed op call's inputs."""
    spec = SPECS[op]
    it = iter(args)
    x = next(it)
    arrays = []
    for a in spec.arrays[1:]:
        if a.nested:
            given, sizes = next(it), list(next(it))
            flat = _entries(given, next(it))
            starts = [0, *itertools.accumulate(sizes)]
            arrays.append([flat[s:e] for s, e in zip(starts, starts[1:])])
        else:
            arrays.append(next(it))
    dims = _spatial(spec, x)
    kwargs = {name: _from_kind(kind, next(it), dims) for name, kind in spec.kinds.items()}
    return x, arrays, kwargs


def _flat_tensors(op: str, args: Sequence[Any]) -> list[Tensor | None]:
    """The typed call's tensor inputs in order (nested ones flattened, None where not given): the
    backward's gradients follow them."""
    spec = SPECS[op]
    out: list[Tensor | None] = []
    it = iter(args)
    for a in spec.arrays:
        value = next(it)
        if a.nested:
            next(it)
            out += _entries(value, next(it))
        else:
            out.append(value)
    for name, kind in spec.kinds.items():
        value = next(it)
        if kind.tensor:
            out.append(value)
    return out


def _entries(given: Sequence[Tensor], flags: Sequence[bool]) -> list[Tensor | None]:
    """A nested array's entries (None where not given) from the tensors given and the flags."""
    it = iter(given)
    return [next(it) if flag else None for flag in flags]


def _differentiable(op: str, args: Sequence[Any]) -> list[bool]:
    """Per entry of :func:`_flat_tensors`: whether it is given and gets a gradient."""
    spec = SPECS[op]
    flags: list[bool] = []
    it = iter(args)
    for a in spec.arrays:
        value = next(it)
        if a.nested:
            next(it)
            flags += [bool(f) and a.gradient is not None for f in next(it)]
        else:
            flags.append(value is not None and a.gradient is not None)
    flags += [False for kind in spec.kinds.values() if kind.tensor]
    return flags


# -- kernels --------------------------------------------------------------------------------------

def _results(op: str, outputs: list[Tensor]) -> Any:
    return outputs[0] if single_result(SPECS[op]) else outputs


def _kept_call(op: str, args: Sequence[Any]) -> calls.Call:
    """The :class:`calls.Call` of a typed call: kept in the one plan cache by the typed inputs' metadata and
    values, so that a repeated kernel call (a compiled graph's) skips reading the public arguments back and
    the checks. A call given a tensor argument (dropout's seed, whose value is one of the static arguments)
    is built every time."""
    if SPECS[op].tensor_arguments:
        return calls.call_of(op, *public_arguments(op, args))
    call: calls.Call = kept(("torch typed", op, *[key_part(a) for a in args]),
                            lambda: calls.call_of(op, *public_arguments(op, args)))
    return call


def key_part(value: Any) -> Any:
    """A typed input's part of a kernel call's key: a tensor's shape, dtype and device, a list's parts, any
    other value exactly (calls' rule: True is not 1, 1.0 is not 1, 0.0 is not -0.0)."""
    if isinstance(value, Tensor):
        return (value.shape, value.dtype, value.device)
    if isinstance(value, (list, tuple)):
        return tuple([key_part(v) for v in value])
    return calls.exact(value)


def _tensors(op: str, args: Sequence[Any]) -> tuple[Tensor, list[Any]]:
    """(x, the spec's other arrays) of a typed call: its first inputs, or regrouped (rnn's nested weights)."""
    if op in _NESTED:
        x, arrays, _ = public_arguments(op, args)
        return x, arrays
    return args[0], list(args[1:len(SPECS[op].arrays)])


#: the ops with a nested array (rnn's weights), which typed calls take flattened
_NESTED = frozenset(op for op, spec in SPECS.items() if any(a.nested for a in spec.arrays))


def _forward(op: str, *args: Any) -> Any:
    outputs, _ = calls.forward(_kept_call(op, args), *_tensors(op, args))
    return _results(op, _own(outputs, args))


def _fake_forward(op: str, *args: Any) -> Any:
    return _results(op, calls.fake(op, *public_arguments(op, args))[0])


def _own(tensors: Sequence[Tensor], inputs: Sequence[Any]) -> list[Tensor]:
    """``tensors`` as a custom op may return them: a copy of any that shares memory with an input (a tensor,
    or one in a list of them) or with one before it."""
    taken = set()
    for a in inputs:
        for t in (a,) if isinstance(a, Tensor) else a if type(a) is list or type(a) is tuple else ():
            if isinstance(t, Tensor) and t.numel():
                taken.add(t.data_ptr())
    out = []
    for t in tensors:
        if t.numel():
            if t.data_ptr() in taken:
                t = t.clone()
            taken.add(t.data_ptr())
        out.append(t)
    return out


def _training(op: str, *args_and_saves: Any) -> tuple[list[Tensor], list[Tensor]]:
    """The training forward's kernel: the results (as the forward's) and the backend's residuals (``saves``:
    :func:`saves_tag`, the cache key's part), of a forward that borrows the call's tensors, without the
    residuals it declares the values of inputs or results (``Call.lent``): autograd keeps those tensors
    for the pullback (:func:`_setup`), which passes them in their places (:func:`_restored`)."""
    args = args_and_saves[:-1]
    call = _kept_call(op, args)
    outputs, residuals = calls.run_call(call, *_tensors(op, args), borrowed=True)
    residuals = without(residuals, call.lent())
    owned = _own([*outputs, *residuals], args)
    return owned[:len(outputs)], owned[len(outputs):]


def _fake_training(op: str, *args_and_saves: Any) -> tuple[list[Tensor], list[Tensor]]:
    return calls.fake(op, *public_arguments(op, args_and_saves[:-1]), borrowed=True)[:2]


def _restored(op: str, call: calls.Call, residuals: Sequence[Tensor], results: Sequence[Tensor | None],
              args: Sequence[Any]) -> list[Tensor]:
    """The forward's residuals, those the training forward left out (``Call.lent``) put back from the
    inputs or results (``results``: the training forward's, None where autograd kept none) they are the
    values of, C-ordered in the residual's shape and dtype."""
    lent = call.lent()
    if not lent:
        return list(residuals)
    spec = SPECS[op]
    sources = dict(_leaves(_by_name(op, args, _flat_tensors(op, args))))
    returned = [name for name, shape in zip(spec.output_names, call.shapes) if shape is not None]
    sources.update(((name,), t) for name, t in zip(returned, results) if t is not None)
    out = list(residuals)
    for place, key, saved in lent:
        out.insert(place, as_residual(sources[key], saved.shape, calls.torch_dtype(saved.dtype)))
    return out


def as_residual(t: Tensor, shape: Sequence[int], dtype: torch.dtype) -> Tensor:
    """A tensor the forward declared a residual the value of, as that residual: C-ordered, in its shape
    (a 0-d x's is (1,)) and dtype (no copy where it is so already)."""
    t = t.reshape(shape)
    return (t if t.dtype == dtype else t.to(dtype)).contiguous()


def _pullback(op: str, residuals: Sequence[Any], results: Sequence[Tensor | None],
              cotangents: Sequence[Tensor | None], *args_and_needs: Any) -> list[Tensor]:
    """The pullback's kernel: the backend's backward on the training forward's residuals; one gradient
    per tensor given, an empty tensor where ``needs`` asks for none or the tensor has none."""
    *args, needs = args_and_needs
    call = _kept_call(op, args)
    return _gradients_from(op, call, _restored(op, call, residuals, results, args), cotangents, args, needs)


def _gradients_from(op: str, call: calls.Call, residuals: Sequence[Any], cotangents: Sequence[Tensor | None],
                    args: Sequence[Any], needs: Sequence[bool]) -> list[Tensor]:
    """The backward on the forward's residuals (all of them): one gradient per tensor given, an empty tensor
    where ``needs`` asks for none or the tensor has none."""
    given = [(t, d) for t, d in zip(_flat_tensors(op, args), _differentiable(op, args)) if t is not None]
    wanted = [bool(n) and d for n, (_, d) in zip(needs, given)]
    grads = calls.gradients(call, residuals, cotangents, wanted[:len(call.paths)])
    grads += [None] * (len(given) - len(grads))           # (dropout's seed tensor: none)
    return _laid_out(op, args, cotangents, [g if g is not None and w else t.new_empty((0,))
                                            for g, w, (t, _) in zip(grads, wanted, given)])


def _laid_out(op: str, args: Sequence[Any], cotangents: Sequence[Tensor | None], grads: list[Tensor]) -> list[Tensor]:
    """A backward op's gradients laid out as torch's are (dnnbind.torch.layout): as the call's results,
    an elementwise op's as its cotangent and x."""
    x, arrays = _tensors(op, args)
    laid = layout.of(op, x, calls.named_array(op, arrays))
    if op in layout.ELEMENTWISE:
        laid = layout.of_gradients(op, laid, None if laid is None else x.stride(), cotangents[0],
                                   public_arguments(op, args)[2])
    return layout.lay_out(grads, laid)


def _backward(op: str, cotangents: Sequence[Tensor | None], *args_and_needs: Any) -> list[Tensor]:
    """The input-based backward op's kernel: runs the forward again for its residuals (what a
    differentiable backward, create_graph or torch.func, records; a plain backward reads the training
    forward's residuals instead, :func:`_pullback`)."""
    *args, needs = args_and_needs
    call = _kept_call(op, args)
    _, residuals = calls.forward(call, *_tensors(op, args), borrowed=True)
    return _gradients_from(op, call, residuals, cotangents, args, needs)


def _fake_backward(op: str, cotangents: Sequence[Tensor | None], *args_and_needs: Any) -> list[Tensor]:
    *args, needs = args_and_needs
    given = [(t, d) for t, d in zip(_flat_tensors(op, args), _differentiable(op, args)) if t is not None]
    return _laid_out(op, args, cotangents,
                     [t.new_empty(t.shape if bool(n) and d else (0,)) for n, (t, d) in zip(needs, given)])


def _fake_pullback(op: str, residuals: Sequence[Tensor], results: Sequence[Tensor | None],
                   cotangents: Sequence[Tensor | None], *args_and_needs: Any) -> list[Tensor]:
    return _fake_backward(op, cotangents, *args_and_needs)


# -- autograd -------------------------------------------------------------------------------------

def _statics(inputs: Sequence[Any]) -> list[Any]:
    """A typed call's inputs without their tensors (what the backward op repeats besides them)."""
    return [None if isinstance(v, Tensor) or _is_tensor_list(v) else v for v in inputs]


def _result_count(op: str, inputs: Sequence[Any], outputs: Sequence[Tensor]) -> int:
    """How many of the forward's outputs are the op's results (batch norm's running statistics follow)."""
    _, arrays, _ = public_arguments(op, inputs)
    named = dict(zip(SPECS[op].array_names[1:], arrays))
    return len(outputs) - sum(named[n] is not None for n in SPECS[op].updated_in_place)


def _kept(op: str) -> frozenset[int]:
    """The places among :func:`_flat_tensors` of the arrays the public op updates in place (batch norm's
    running statistics): kept by reference, not saved (an update must not fail the backward's version
    check; a training forward's results do not depend on them)."""
    return frozenset(SPECS[op].array_names.index(n) for n in SPECS[op].updated_in_place)


def _setup(op: str, ctx: Any, statics: Sequence[Any], tensors: Sequence[Tensor | None], output: Any,
           residuals: Sequence[Tensor] | None = None) -> None:
    """What the backward reads: the call's tensors (batch norm's running statistics by reference), its
    static inputs and, from the training forward, the residuals (None: the backward op reruns the forward)
    and the results its backward reads (the spec's ``backward_reads``), which the pullback passes in place
    of the residuals the training forward left out (:func:`_restored`)."""
    spec = SPECS[op]
    outputs = [output] if isinstance(output, Tensor) else list(output)
    stands = spec.result_stands_for_x
    arguments = public_arguments(op, _with_tensors(op, statics, tensors))[2]
    reads = spec.reads(arguments) if residuals is not None else ()
    # a training call's arrays its backward does not read (conv's bias, batch norm's beta) are kept by
    # reference, not saved, as torch's layers keep none of them (changing one in place before the backward
    # fails nothing): the pullback takes a stand-in of each (:func:`standin`)
    ctx.unread = _unread(op, statics, reads) if residuals is not None else frozenset()
    kept = _kept(op) | ctx.unread
    # a training call whose backward reads its result alone (sigmoid, softmax): the result stands in x's
    # place (x's shape, dtype and layout), and a graph of the backward differentiates the spec's rule
    # written on the result (from_result), so that x is not kept, as torch's own layers keep none
    ctx.from_result = None if residuals is None else second_order.from_result(spec, arguments)
    if (stands is not None and stands(arguments)) or ctx.from_result is not None:
        # its result stands for x (relu, dropout): kept instead of x, as torch's relu keeps its result, so
        # that a compiled in-place layer's write into x (x's version bumped) fails no backward
        tensors = [outputs[0], *tensors[1:]]
    saved = [t for i, t in enumerate(tensors) if t is not None and i not in kept]
    ctx.read = [name in reads for name in spec.output_names[:len(outputs)]]
    ctx.save_for_backward(*saved, *(residuals or ()), *[o for o, read in zip(outputs, ctx.read) if read])
    ctx.residuals = None if residuals is None else len(residuals)
    ctx.kept = {i: tensors[i] for i in kept}
    ctx.places = [t is not None for t in tensors]
    ctx.statics = list(statics)
    ctx.results = _result_count(op, _with_tensors(op, statics, tensors), outputs)
    constant = [*outputs[ctx.results:], *[o for o in outputs if not o.is_floating_point()], *(residuals or ())]
    if constant:        # (Dynamo's trace of a single-tensor output fails on an empty mark)
        ctx.mark_non_differentiable(*constant)


def _unread(op: str, statics: Sequence[Any], reads: Sequence[str]) -> frozenset[int]:
    """The places among :func:`_flat_tensors` of the arrays other than x that the spec's ``backward_reads``
    does not name (``reads``): a backend declares no residual the value of one of them
    (tests/highlevel/test_residual.py), so that the pullback reads their metadata only."""
    named = _by_name(op, statics, itertools.count())
    return frozenset(i for (name, *_), i in _leaves(named) if name != "x" and name not in reads)


def standin(t: Tensor) -> Tensor:
    """A tensor with ``t``'s shape, dtype and device and no data of its own (one element, expanded): what a
    pullback takes in the place of an input its backward reads only the metadata of. Made from the
    metadata alone (not ``t.new_empty``), so that a traced backward does not take ``t`` itself as an input
    (AOTAutograd would save it, version check and all, where no partitioner moves the stand-in into the
    forward: ``backend="aot_eager"``)."""
    return torch.empty((), dtype=t.dtype, device=t.device).expand(t.shape)


def _training_setup(op: str, ctx: Any, inputs: tuple, output: tuple) -> None:
    inputs = inputs[:-1]                       # (the saves tag)
    results, residuals = output
    _setup(op, ctx, _statics(inputs), _flat_tensors(op, inputs), list(results), list(residuals))


def _training_backward(op: str, ctx: Any, d_results: Sequence[Tensor | None], d_residuals: Any) -> tuple:
    """The training forward's gradient formula: the pullback on its residuals, or where a graph of the
    backward is built (create_graph, torch.func), the differentiable input-based backward op."""
    inputs, gradients = _gradients(op, ctx, (list(d_results),), _needs(op, ctx.needs_input_grad, ctx.statics))
    return (*_per_input(op, inputs, gradients), None)


def saves_tag(device_type: str) -> str:
    """What decides the residuals' layout besides a call's own arguments: dnnbind's version and residual
    revision, and on the CPU whether the cpu backend's C kernels run (they take other paths, which save
    other arrays). The training op takes it as an argument, so that a compiled training graph that
    torch.compile caches on disk (keyed by the traced graph's text) is never reused by a dnnbind that
    saves something else; the forward op, what inference graphs and exported programs hold, has none."""
    return _SAVES.get(device_type, _SAVES_ELSEWHERE)


def _saves_of(device_type: str) -> str:
    from dnnbind import __version__
    from dnnbind.highlevel.cpu import native
    from dnnbind.highlevel.residual import RESIDUAL_REVISION
    kernels = "" if device_type != "cpu" else "/native" if native.library() is not None else "/numpy"
    return f"{__version__}/r{RESIDUAL_REVISION}{kernels}"


# worked out when this module is imported (a compiled graph must not trace it)
_SAVES = {"cpu": _saves_of("cpu")}
_SAVES["meta"] = _SAVES["cpu"]          # meta tensors' residuals are the cpu backend's (see calls.backend)
_SAVES_ELSEWHERE = _saves_of("cuda")


def _setup_context(op: str, ctx: Any, inputs: tuple, output: Any) -> None:
    _setup(op, ctx, _statics(inputs), _flat_tensors(op, inputs), output)


def _is_tensor_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value)


def _with_tensors(op: str, statics: Sequence[Any], tensors: Sequence[Tensor | None]) -> list[Any]:
    """The typed call's inputs again, its tensors put back in the places :func:`_flat_tensors` read."""
    spec = SPECS[op]
    it = iter(tensors)
    out = list(statics)
    i = 0
    for a in spec.arrays:
        if a.nested:
            out[i] = [t for t in [next(it) for _ in statics[i + 2]] if t is not None]
            i += 3
        else:
            out[i] = next(it)
            i += 1
    for kind in spec.kinds.values():
        if kind.tensor:
            out[i] = next(it)
        i += 1
    return out


def _by_name(op: str, statics: Sequence[Any], entries: Iterable[Any]) -> dict[str, Any]:
    """One value per entry of :func:`_flat_tensors` (its arrays' part) by the spec's array names, a
    nested array's as a list per group (None where an entry is not given)."""
    it = iter(entries)
    out: dict[str, Any] = {}
    i = 0
    for a in SPECS[op].arrays:
        if a.nested:
            out[a.name] = [[next(it) for _ in range(size)] for size in statics[i + 1]]
            i += 3
        else:
            out[a.name] = next(it)
            i += 1
    return out


def _entries_of(op: str, statics: Sequence[Any], named: dict[str, Any]) -> list[Any]:
    """The inverse of :func:`_by_name`: values by array name as one per entry of the arrays' part of
    :func:`_flat_tensors` (None where ``named`` has none)."""
    out: list[Any] = []
    i = 0
    for a in SPECS[op].arrays:
        value = named.get(a.name)
        if a.nested:
            out += [None if value is None or value[g] is None else value[g][j]
                    for g, size in enumerate(statics[i + 1]) for j in range(size)]
            i += 3
        else:
            out.append(value)
            i += 1
    return out


def _leaves(named: dict[str, Any]) -> list[tuple[tuple, Any]]:
    """(key, entry) for every entry of values by name: key (name,), or (name, group, index) in a nested
    array (a list of groups)."""
    out: list[tuple[tuple, Any]] = []
    for name, value in named.items():
        if isinstance(value, (list, tuple)):
            out += [((name, g, j), t) for g, group in enumerate(value) for j, t in enumerate(group or ())]
        else:
            out.append(((name,), value))
    return out


def _regrouped(like: dict[str, Any], entries: dict[tuple, Any]) -> dict[str, Any]:
    """Values by name shaped as ``like`` (nested arrays as lists of lists), each entry from ``entries``
    by :func:`_leaves`'s key (None where it has none)."""
    return {name: [[entries.get((name, g, j)) for j in range(len(group or ()))] for g, group in enumerate(value)]
            if isinstance(value, (list, tuple)) else entries.get((name,)) for name, value in like.items()}


def _gradients(op: str, ctx: Any, grads: Sequence[Any], needs: list[bool]) -> tuple[list[Any], list[Any]]:
    """(the typed call's inputs, one gradient per entry of :func:`_flat_tensors`, None where none)."""
    saved = iter(ctx.saved_tensors)
    tensors = [ctx.kept[i] if i in ctx.kept else next(saved) if given else None for i, given in enumerate(ctx.places)]
    residuals = [next(saved) for _ in range(ctx.residuals or 0)]
    results = [next(saved) if read else None for read in ctx.read]
    inputs = _with_tensors(op, ctx.statics, tensors)
    d_outputs = list(grads[0]) if len(grads) == 1 and isinstance(grads[0], (list, tuple)) else list(grads)
    cotangents = [d if d is not None and d.is_floating_point() else None for d in d_outputs[:ctx.results]]
    for d in cotangents:
        refuse_batched(op, d)
    gradients: list[Any] = [None] * len(tensors)
    if any(needs) and any(d is not None for d in cotangents):
        flags = [n for n, given in zip(needs, ctx.places) if given]      # one per tensor given
        result = tensors[0]                                # (in x's place where ctx.from_result)
        if (torch.is_grad_enabled() or _functorch()) and getattr(ctx, "from_result", None) is not None:
            assert result is not None
            found = iter([from_result(op, ctx.from_result, result, cotangents, public_arguments(op, inputs)[2])])
        elif torch.is_grad_enabled() or _functorch():      # a graph of the backward is built: refusable
            found = iter(backward_function(op).apply(_statics(inputs), flags, len(cotangents), *cotangents, *tensors))
        elif getattr(ctx, "residuals", None) is not None:
            stood = [standin(t) if t is not None and i in ctx.unread else t for i, t in enumerate(tensors)]
            found = iter(getattr(torch.ops.dnnbind, f"{op}_pullback")(residuals, results, cotangents,
                                                                       *_with_tensors(op, ctx.statics, stood), flags))
        else:
            found = iter(getattr(torch.ops.dnnbind, f"{op}_backward")(cotangents, *inputs, flags))
        gradients = [next(found) if given else None for given in ctx.places]
        gradients = [g if n and g is not None else None for g, n in zip(gradients, needs)]
    return inputs, gradients


def _autograd_backward(op: str, ctx: Any, *grads: Any) -> tuple:
    """The registered op's gradient formula (register_autograd): through its backward op."""
    inputs, gradients = _gradients(op, ctx, grads, _needs(op, ctx.needs_input_grad, ctx.statics))
    return _per_input(op, inputs, gradients)


def _call_forward(op: str, statics: list[Any], *tensors: Tensor | None) -> Any:
    """One op's call for torch.func (the forward of :func:`function`): its tensors are positional, so a
    nested array's get gradients too."""
    result = getattr(torch.ops.dnnbind, op)(*_with_tensors(op, statics, tensors))
    return result if isinstance(result, Tensor) else tuple(result)


def _call_setup(op: str, ctx: Any, inputs: tuple, output: Any) -> None:
    _setup(op, ctx, inputs[0], inputs[1:], output)


def _call_backward(op: str, ctx: Any, *grads: Any) -> tuple:
    # Dynamo's ctx knows needs_input_grad only from its own view of the arguments (a torch.func
    # transform's tensors look constant there): while compiling, every gradient is computed
    flags = [True] * (len(ctx.places) + 1) if torch.compiler.is_compiling() else ctx.needs_input_grad
    needs = [bool(n) and given for n, given in zip(flags[1:], ctx.places)]
    return (None, *_gradients(op, ctx, grads, needs)[1])


def _backward_forward(op: str, statics: list[Any], needs: list[bool], count: int, *tensors: Tensor | None) -> tuple:
    """One op's backward op (the forward of :func:`backward_function`). Its own gradient (double
    backward) follows the op spec's second-order rule (:mod:`dnnbind.highlevel.specs.second_order`),
    built from the op's typed forward and backward, so it is differentiable again; an op without one
    refuses, naming itself."""
    cotangents, inputs = list(tensors[:count]), tensors[count:]
    return tuple(getattr(torch.ops.dnnbind, f"{op}_backward")(
        cotangents, *_with_tensors(op, statics, inputs), needs))


def _backward_setup(op: str, ctx: Any, inputs: tuple, output: Any) -> None:
    if SPECS[op].second_order is None:
        return
    statics, needs, count, *tensors = inputs
    ctx.statics, ctx.needs, ctx.count = statics, needs, count
    ctx.places = [t is not None for t in tensors]
    kept = {count + i for i in _kept(op)}      # batch norm's running statistics: by reference
    ctx.kept = {i: tensors[i] for i in kept}
    ctx.save_for_backward(*[t for i, t in enumerate(tensors) if t is not None and i not in kept])


def _backward_backward(op: str, ctx: Any, *grads: Any) -> tuple:
    for g in grads:
        refuse_batched(op, g)
    rule = SPECS[op].second_order
    if rule is None:
        raise RuntimeError(f"dnnbind.{op}: its backward is not differentiable (no double backward, no "
                           f"gradient of a gradient through dnnbind.{op})")
    saved = iter(ctx.saved_tensors)
    tensors = [ctx.kept[i] if i in ctx.kept else next(saved) if given else None
               for i, given in enumerate(ctx.places)]
    cotangents, inputs = tensors[:ctx.count], tensors[ctx.count:]
    ops = _Ops(op, ctx.statics, inputs)
    given = iter(zip(grads, ctx.needs))               # one per tensor given
    per_entry = [next(given) if t is not None else (None, False) for t in inputs]
    gg = {f"d{n}": g for n, g in _by_name(op, ctx.statics, [
        g if need and g is not None and g.numel() else None for g, need in per_entry]).items()}
    d_cotangents, d_arrays = rule(ops, ops.arrays, cotangents, gg)
    d_inputs = _entries_of(op, ctx.statics, d_arrays)
    d_inputs += [None] * (len(inputs) - len(d_inputs))
    # a zero the rule leaves out (None) is a zero tensor for an input that asks for a gradient: torch's
    # pooling backward is connected to its x with a zero derivative, and autograd.grad(..., x) then gives
    # zeros rather than refusing x as unused
    wanted = ctx.needs_input_grad[3 + ctx.count:]
    d_inputs = [None if t is None else torch.zeros_like(t) if d is None and want else d
                for d, t, want in zip(d_inputs, inputs, wanted)]
    return (None, None, None, *d_cotangents, *[None] * (ctx.count - len(d_cotangents)), *d_inputs)


def refuse_batched(op: str, cotangent: Tensor | None) -> None:
    """Refuse a cotangent batched by torch.autograd's own vmap (``is_grads_batched=True``, what
    ``torch.autograd.functional.jacobian(vectorize=True)`` uses), naming the op: the backends take plain
    arrays, and that vmap has no fallback for the backward ops' lists of results. (Not while a compiler
    traces, which cannot trace the check: torch.autograd's vmap does not run under one.)"""
    if cotangent is not None and not torch.compiler.is_compiling() and _legacy_batched(cotangent):
        raise RuntimeError(f"dnnbind.{op}: batched gradients (torch.autograd.grad(is_grads_batched=True), "
                           f"torch.autograd.functional.jacobian or hessian with vectorize=True) are not "
                           f"supported; use torch.func.jacrev, or torch.func.vmap over torch.func.vjp")


_legacy_batched = torch._C._functorch.is_legacy_batchedtensor


def refuse_jvp(op: str, *_: Any) -> None:
    """Forward-mode AD is refused, naming the op (what an autograd.Function's jvp does)."""
    raise RuntimeError(f"dnnbind.{op}: forward-mode AD (torch.func.jvp, jacfwd, linearize, "
                       f"torch.autograd.forward_ad) is not supported; use reverse mode (torch.func.vjp, grad, "
                       f"jacrev)")


def _forward_ad(tensors: Sequence[Tensor | None]) -> bool:
    """Whether a tensor carries a forward-mode tangent (torch.autograd.forward_ad's dual tensors, what
    torch.func.linearize traces with): the registered ops have no forward-mode formula, and the
    dispatcher would drop the tangents rather than refuse."""
    if torch.autograd.forward_ad._current_level < 0:       # (outside every dual_level)
        return False
    return any(t is not None and _unpack_dual(t).tangent is not None for t in tensors)


_unpack_dual = torch.autograd.forward_ad.unpack_dual


def _per_op(name: str, forward: Any, setup: Any, backward: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """op -> an autograd.Function named for it (so grad_fn names the op) with setup_context and a
    generated vmap rule (which vmaps the op itself, through its batching rule), as (eager, traced). Its
    methods are static, closed over the op: Dynamo binds an autograd.Function's ctx by position. The
    eager one refuses forward mode (torch.func.jvp, jacfwd) with an error naming the op; Dynamo cannot
    trace an autograd.Function that defines jvp, so the one it traces has none (torch's own error for a
    missing jvp stands there)."""
    def made(op: str, jvp: bool) -> type:
        def op_forward(*inputs: Any) -> Any:
            if inputs and isinstance(inputs[0], torch.autograd.function.FunctionCtx):
                inputs = inputs[1:]       # Dynamo passes a ctx to a forward of varying arity it traces alone
            return forward(op, *inputs)

        def op_setup(ctx: Any, inputs: tuple, output: Any) -> None:
            setup(op, ctx, inputs, output)

        def op_backward(ctx: Any, *grads: Any) -> tuple:
            return backward(op, ctx, *grads)

        def op_jvp(ctx: Any, *tangents: Any) -> Any:
            refuse_jvp(op)

        if jvp:        # the eager one: never a frame Dynamo compiles (tracers.untraced)
            op_forward, op_setup, op_backward = untraced(op_forward), untraced(op_setup), untraced(op_backward)
        body: dict[str, Any] = {"generate_vmap_rule": True, "op": op, "forward": staticmethod(op_forward),
                                "setup_context": staticmethod(op_setup), "backward": staticmethod(op_backward)}
        if jvp:
            body["jvp"] = staticmethod(op_jvp)
        return type(name.format(op), (torch.autograd.Function,), body)
    return {op: made(op, True) for op in SPECS}, {op: made(op, False) for op in SPECS}


@contextlib.contextmanager
def _no_saved_tensor_hooks() -> Iterator[None]:
    """The saved-tensor hooks in force (torch.autograd.graph.save_on_cpu around a create_graph backward) set
    aside: torch.func.vjp refuses to run under them, and what the second-order rules save inside it lives
    only as long as their results' graph."""
    popped = []
    while (top := _saved_tensor_hooks(False)) is not None:
        popped.append(top)
        torch._C._autograd._pop_saved_tensors_default_hooks()
    try:
        yield
    finally:
        for pack, unpack in reversed(popped):
            torch._C._autograd._push_saved_tensors_default_hooks(pack, unpack)


class _Final(torch.autograd.Function):
    """Second derivatives whose own derivative would miss a path (see :meth:`_Ops.vjp`): a third derivative
    through them is refused instead of coming out wrong."""

    @staticmethod
    def forward(ctx: Any, *tensors: Tensor | None) -> tuple:  # type: ignore[override]
        return tuple(None if t is None else t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        raise RuntimeError("dnnbind: a third derivative through a chained op's second derivative (an op that is "
                           "two ops in a row, its spec's chain) is not supported")


def from_result(op: str, gradients: Any, y: Tensor, cotangents: Sequence[Tensor | None],
                arguments: dict[str, Any]) -> Tensor:
    """dx of a call whose backward reads its result y alone (``gradients``: the spec's backward in
    differentiable operations, :func:`dnnbind.highlevel.specs.second_order.from_result`), in torch's
    operations on y, so that autograd differentiates it further through y's own history, as torch's
    sigmoid_backward; half precision computed in float32."""
    half = y.dtype in (torch.float16, torch.bfloat16)
    ops = _ResultOps(op, y.float() if half else y, arguments)
    dx = gradients(ops, {"x": None}, [c.float() if half and c is not None else c for c in cotangents])["x"]
    return dx.to(y.dtype) if half else dx


class _Ops:
    """What a second-order rule calls (see :mod:`dnnbind.highlevel.specs.second_order`): the op's typed
    forward and backward on other arrays, with the arguments of the call being differentiated."""

    def __init__(self, op: str, statics: Sequence[Any], tensors: Sequence[Tensor | None]) -> None:
        self.op = op
        x, arrays, self.kwargs = public_arguments(op, _with_tensors(op, statics, tensors))
        self.arrays = dict(zip(SPECS[op].array_names, [x, *arrays]))
        #: the call's public arguments, by name
        self.arguments = self.kwargs

    @property
    def transformed(self) -> bool:
        """Whether a torch.func transform is differentiating (a rule that nests other ops' backwards
        refuses there: torch.func cannot nest them)."""
        return _functorch()

    def part(self, op: str, arrays: dict[str, Any]) -> "_Ops":
        """The same calls for another op (a chain's parts) on ``arrays``, with the public arguments of this
        call that ``op``'s spec takes."""
        ops = object.__new__(_Ops)
        ops.op = op
        ops.arrays = {n: arrays.get(n) for n in SPECS[op].array_names}
        ops.kwargs = ops.arguments = {k: v for k, v in self.kwargs.items() if k in SPECS[op].arguments}
        return ops

    def _typed(self, arrays: dict[str, Any], arguments: dict[str, Any]) -> list[Any]:
        named = {**self.arrays, **arrays}
        values = [named[n] for n in SPECS[self.op].array_names]
        return typed_arguments(self.op, values[0], values[1:], {**self.kwargs, **arguments})

    def forward(self, arrays: dict[str, Any], **arguments: Any) -> list[Tensor]:
        named = {**self.arrays, **arrays}
        values = [named[n] for n in SPECS[self.op].array_names]
        return call(self.op, values[0], values[1:], {**self.kwargs, **arguments})

    def backward(self, cotangents: list[Any], arrays: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
        inputs = self._typed(arrays, {})
        tensors = _flat_tensors(self.op, inputs)
        given = [(n, t) for n, t in zip(SPECS[self.op].array_names, tensors) if t is not None]
        needs = [n in names for n, _ in given]
        found = backward_function(self.op).apply(_statics(inputs), needs, len(cotangents), *cotangents, *tensors)
        return {n: g for (n, _), g in zip(given, found) if n in names}

    @staticmethod
    def zeros_like(a: Tensor) -> Tensor:
        return torch.zeros_like(a)

    @staticmethod
    def sum(a: Tensor, axes: tuple[int, ...], keepdims: bool = True) -> Tensor:
        return a.sum(dim=axes, keepdim=keepdims) if a.dim() else a

    @staticmethod
    def mean(a: Tensor, axes: tuple[int, ...]) -> Tensor:
        return a.mean(dim=axes, keepdim=True)

    exp = staticmethod(torch.exp)
    sigmoid = staticmethod(torch.sigmoid)
    where = staticmethod(torch.where)
    tanh = staticmethod(torch.tanh)
    relu = staticmethod(torch.relu)

    @staticmethod
    def matmul(a: Tensor, b: Tensor) -> Tensor:
        return torch.matmul(a, b)

    @staticmethod
    def zeros(shape: Sequence[int], like: Tensor) -> Tensor:
        """Zeros of ``shape`` in like's dtype, on like's device."""
        return like.new_zeros(tuple(shape))

    @staticmethod
    def constant(values: Any, like: Tensor) -> Tensor:
        """``values`` (nested lists of numbers or bools) as a tensor on like's device (bools stay bools)."""
        return torch.tensor(values, device=like.device)

    @staticmethod
    def backend(a: Tensor) -> str:
        """The dnnbind backend that computes on a's device (cpu, cudnn, miopen)."""
        return calls.backend(a.device)

    @staticmethod
    def stack(arrays: Sequence[Tensor], axis: int = 0) -> Tensor:
        return torch.stack(list(arrays), axis)

    @staticmethod
    def concat(arrays: Sequence[Tensor], axis: int = 0) -> Tensor:
        return torch.cat(list(arrays), axis)

    @staticmethod
    def channels(a: Tensor, like: Tensor) -> Tensor:
        """A per-channel vector shaped to broadcast over like (N, C, *spatial), in like's dtype."""
        return a.to(like.dtype).reshape(1, -1, *[1] * (like.dim() - 2))

    @staticmethod
    def vjp(gradients: Any, arrays: dict[str, Any], cotangents: list[Any],
            gg: dict[str, Any], nests: bool = False) -> tuple[list[Any], dict[str, Any]]:
        """The gradients of ``gradients(arrays, cotangents)`` (by name) with respect to the arrays and the
        cotangents, for their cotangents ``gg`` (by gradient name), by torch.func.vjp: it differentiates
        with respect to the arrays and the cotangents as variables of its own, so a cotangent computed from
        the forward's inputs (the dy of y.pow(3).sum(), 3 y^2) is not counted again through its history,
        and the results stay differentiable (a third derivative); a nested array (rnn's weights, a list of
        groups) entry by entry, its gradients and ``gg``'s likewise (None: none). ``nests``: ``gradients``
        calls other ops' typed backwards, which torch.func.vjp cannot nest outside a transform: then
        torch.autograd.grad with the cotangents as leaves of their own, whose results refuse a further
        derivative."""
        if not nests or _functorch():
            return _Ops._func_vjp(gradients, arrays, cotangents, gg)
        cotangents = [t.detach().requires_grad_() if isinstance(t, Tensor) and t.requires_grad else t
                      for t in cotangents]
        with torch.enable_grad():
            found = gradients(arrays, cotangents)
        pairs = [(found[name[1:]], g) for name, g in gg.items() if g is not None and found.get(name[1:]) is not None]
        wrt: list[tuple[tuple[str, Any], Tensor]] = [
            (("array", n), t) for n, t in arrays.items() if isinstance(t, Tensor) and t.requires_grad]
        wrt += [(("cotangent", i), t) for i, t in enumerate(cotangents) if isinstance(t, Tensor) and t.requires_grad]
        pairs = [(o, g) for o, g in pairs if o.requires_grad]
        d_arrays: dict[str, Any] = {}
        d_cotangents: list[Any] = [None] * len(cotangents)
        if pairs and wrt:
            results = torch.autograd.grad([o for o, _ in pairs], [t for _, t in wrt], [g for _, g in pairs],
                                          create_graph=True, allow_unused=True)
            results = _Final.apply(*results)
            for ((kind, key), _), r in zip(wrt, results):
                if kind == "array":
                    d_arrays[key] = r
                else:
                    d_cotangents[key] = r
        return d_cotangents, d_arrays

    @staticmethod
    def _func_vjp(gradients: Any, arrays: dict[str, Any], cotangents: list[Any],
                  gg: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        keys = [k for k, t in _leaves(arrays) if isinstance(t, Tensor)]
        places = [i for i, t in enumerate(cotangents) if isinstance(t, Tensor)]
        wanted = {k: g for k, g in _leaves({name[1:]: g for name, g in gg.items()}) if g is not None}
        if not wanted:                  # no cotangent (an empty batch's are taken for none): no gradient
            return [None] * len(cotangents), _regrouped(arrays, {})
        used: list[tuple] = []          # the wanted gradients that ``gradients`` gives (rnn's absent biases: not)

        def f(*tensors: Tensor) -> tuple:
            a = _regrouped(arrays, {**dict(_leaves(arrays)), **dict(zip(keys, tensors[:len(keys)]))})
            c = list(cotangents)
            for i, t in zip(places, tensors[len(keys):]):
                c[i] = t
            found = dict(_leaves(gradients(a, c)))
            used[:] = [k for k in wanted if found.get(k) is not None]
            return tuple(found[k] for k in used)
        primals = [t for k, t in _leaves(arrays) if isinstance(t, Tensor)] + [cotangents[i] for i in places]
        with _no_saved_tensor_hooks():
            pullback = torch.func.vjp(f, *primals)[1]
            results = pullback(tuple(wanted[k] for k in used))
        d_cotangents: list[Any] = [None] * len(cotangents)
        for i, r in zip(places, results[len(keys):]):
            d_cotangents[i] = r
        return d_cotangents, _regrouped(arrays, dict(zip(keys, results[:len(keys)])))

    @staticmethod
    def gather(a: Tensor, indices: Tensor) -> Tensor:
        return a.flatten(2).gather(2, indices.flatten(2)).view(indices.shape)

class _ResultOps(_Ops):
    """What :func:`from_result`'s backward calls: :class:`_Ops` whose forward is the call's result (its x
    is not kept)."""

    def __init__(self, op: str, result: Tensor, arguments: dict[str, Any]) -> None:
        self.op, self.arrays, self.kwargs, self.arguments = op, {"x": None}, arguments, arguments
        self.result = result

    def forward(self, arrays: dict[str, Any], **arguments: Any) -> list[Tensor]:
        return [self.result]


#: op -> the autograd.Function of its backward op (eager; traced)
_BACKWARDS, _TRACED_BACKWARDS = _per_op("dnnbind_{}_backward_typed", _backward_forward, _backward_setup,
                                        _backward_backward)
#: op -> its autograd.Function (grad_fn ``dnnbind_conv_typedBackward`` ...) (eager; traced)
_FUNCTIONS, _TRACED_FUNCTIONS = _per_op("dnnbind_{}_typed", _call_forward, _call_setup, _call_backward)


def backward_function(op: str) -> type[torch.autograd.Function]:
    """The autograd.Function of ``op``'s backward op, for eager calls or for Dynamo's trace."""
    return (_TRACED_BACKWARDS if torch.compiler.is_compiling() else _BACKWARDS)[op]


def function(op: str) -> type[torch.autograd.Function]:
    """``op``'s autograd.Function for torch.func, for eager calls or for Dynamo's trace."""
    return (_TRACED_FUNCTIONS if torch.compiler.is_compiling() else _FUNCTIONS)[op]


def _needs(op: str, flags: Sequence[Any], statics: Sequence[Any]) -> list[bool]:
    """ctx.needs_input_grad as one flag per entry of :func:`_flat_tensors` (a nested array's: one for
    all its entries, or one per tensor given; its entries' flags are the third input from it)."""
    spec = SPECS[op]
    out: list[bool] = []
    i = 0
    for a in spec.arrays:
        flag = flags[i]
        if a.nested:                 # flags for the tensors given: False for the entries not given
            given = statics[i + 2]
            found = iter(flag if isinstance(flag, (list, tuple)) else [flag] * sum(given))
            out += [bool(next(found)) if g else False for g in given]
            i += 3
        else:
            out.append(bool(flag))
            i += 1
    out += [False for kind in spec.kinds.values() if kind.tensor]
    return out


def _per_input(op: str, inputs: Sequence[Any], gradients: Sequence[Tensor | None]) -> tuple:
    """The backward's gradients as autograd wants them: one per typed input (a list for a list)."""
    spec = SPECS[op]
    it = iter(gradients)
    out: list[Any] = []
    i = 0
    for a in spec.arrays:
        if a.nested:
            entries = [next(it) for _ in inputs[i + 2]]
            out += [[g for g, given in zip(entries, inputs[i + 2]) if given], None, None]
            i += 3
        else:
            out.append(next(it))
            i += 1
    for kind in spec.kinds.values():
        out.append(next(it) if kind.tensor else None)
    return tuple(out)


_functorch = torch._C._are_functorch_transforms_active


@torch.compiler.disable(recursive=True)
def _untraced_function(op: str, statics: list[Any], tensors: Sequence[Tensor | None]) -> Any:
    """The torch.func call run eagerly, outside Dynamo's graph: a graph break (fullgraph=True refuses)."""
    return _FUNCTIONS[op].apply(statics, *tensors)


def _traced_transform(tensors: Sequence[Tensor | None]) -> str:
    """How a call under torch.func goes into a graph Dynamo traces. Under one vmap: "op", the op itself,
    vmapped by its batching rule and differentiated by its registered formula (Dynamo turns an
    autograd.Function into a template that cannot be vmapped). Under one grad, vjp or jacrev with a
    tensor that requires a gradient in Dynamo's view: "function", the autograd.Function. Otherwise
    "eager", outside the graph: Dynamo would inline the Function's forward (the tensors of a
    torch.func.grad do not require a gradient in its view) and lose its backward, or vmap its template."""
    interpreter = torch._functorch.pyfunctorch.retrieve_current_functorch_interpreter()
    if interpreter.level() != 1:        # (a transform's level is its depth in the stack)
        return "eager"
    if interpreter.key() == torch._C._functorch.TransformType.Vmap:
        return "op"
    if interpreter.key() == torch._C._functorch.TransformType.Grad and any(
            t is not None and t.requires_grad for t in tensors):
        return "function"
    return "eager"


# -- registration ---------------------------------------------------------------------------------

#: the namespace's registrations (dnnbind.torch.typed_sequence adds its ops here too)
LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")


def define(name: str, schema: str, kernel: Any, fake: Any, differentiable: bool) -> None:
    """Register the op ``dnnbind::name`` with its kernel (every device: CompositeExplicitAutograd) and fake
    kernel, straight with the dispatcher rather than through ``torch.library.custom_op``, whose Python
    wrappers around each call cost more than a small op's kernel in a compiled graph (measured, same
    process: a do-nothing op 4 us this way, 14-24 us as a custom_op). An op that is not ``differentiable``
    (the backward ops: autograd differentiates them through :func:`backward_function`) falls through
    autograd, its results never requiring a gradient; a differentiable one gets its formula from the
    caller (``torch.library.register_autograd``)."""
    LIBRARY.define(f"{name}{schema}", tags=(torch.Tag.pt2_compliant_tag,))
    LIBRARY.impl(name, untraced(kernel), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=LIBRARY)
    if not differentiable:
        LIBRARY.impl(name, torch.library.fallthrough_kernel, "Autograd")


def _register(op: str) -> None:
    spec = SPECS[op]
    # the spec's derived facts the calls read, worked out now: a traced call (Dynamo) cannot take the
    # lock of a cached_property computed for the first time
    spec.kinds, spec.arguments_function, spec.array_names, spec.arguments, spec.updated  # noqa: B018
    spec.without_gradient  # noqa: B018
    forward_schema, backward_schema = schemas(spec)
    training_schema, pullback_schema = training_schemas(spec)
    for name, schema, kernel, fake, differentiable in (
            (op, forward_schema, _forward, _fake_forward, True),
            (f"{op}_backward", backward_schema, _backward, _fake_backward, False),
            (f"{op}_training", training_schema, _training, _fake_training, True),
            (f"{op}_pullback", pullback_schema, _pullback, _fake_pullback, False)):
        define(name, schema, functools.partial(kernel, op), functools.partial(fake, op), differentiable)
    qualified = f"{NAMESPACE}::{op}"
    torch.library.register_autograd(qualified, untraced(functools.partial(_autograd_backward, op)),
                                    setup_context=untraced(functools.partial(_setup_context, op)), lib=LIBRARY)
    torch.library.register_autograd(f"{qualified}_training", untraced(functools.partial(_training_backward, op)),
                                    setup_context=untraced(functools.partial(_training_setup, op)), lib=LIBRARY)
    torch.library.register_vmap(qualified, batching.forward_rule(op), lib=LIBRARY)
    torch.library.register_vmap(f"{qualified}_backward", batching.backward_rule(op), lib=LIBRARY)


for _op in SPECS:
    _register(_op)


def kept_copy(t: Tensor) -> Tensor:
    """A copy of ``t`` that torch.compile's passes neither fold back into ``t`` nor recompute from it (the
    opaque op ``dnnbind::copy``): what a compiled layer made with ``inplace=True`` gives an op that saves
    its input, since the layer's write into a graph input reaches that tensor itself."""
    copied: Tensor = torch.ops.dnnbind.copy(t)
    return copied


def _register_copy() -> None:
    define("copy", "(Tensor x) -> Tensor", lambda x: x.clone(), lambda x: torch.empty_like(x), True)
    torch.library.register_autograd(f"{NAMESPACE}::copy", lambda ctx, d: d, lib=LIBRARY)
    torch.library.register_vmap(f"{NAMESPACE}::copy", lambda info, in_dims, x: (kept_copy(x), in_dims[0]),
                                lib=LIBRARY)


_register_copy()


def call(op: str, x: Tensor, arrays: Sequence[Any], kwargs: dict[str, Any]) -> list[Tensor]:
    """The typed op's results (a list) for x, the spec's other arrays (then its tensor arguments) and the
    public op's arguments by name (defaults filled in)."""
    spec = SPECS[op]
    n = len(spec.arrays) - 1         # arrays past the spec's: its tensor arguments (dropout's seed), in order
    kwargs = spec.arguments_function(**{**kwargs, **dict(zip(spec.tensor_arguments, arrays[n:]))})
    if spec.without_gradient and (torch.is_grad_enabled() or _functorch()):
        refuse_gradients((op, name, t) for name, t in zip(spec.array_names[1:], arrays[:n])
                         if name in spec.without_gradient)
    inputs = typed_arguments(op, x, arrays[:n], kwargs)
    tensors = _flat_tensors(op, inputs)
    if not torch.compiler.is_compiling() and _forward_ad(tensors):
        refuse_jvp(op)
    jit_tracing = torch.jit.is_tracing()
    if jit_tracing and op in _NESTED:
        raise RuntimeError(f"dnnbind.{op}: torch.jit.trace cannot record this op (its typed op takes a bool "
                           f"list, which TorchScript's tracer does not support); use torch.export or "
                           f"torch.compile instead")
    route = _traced_transform(tensors) if _functorch() and torch.compiler.is_compiling() else ""
    if route == "eager":
        result = _untraced_function(op, _statics(inputs), tensors)
    elif _functorch() and route != "op":
        # torch.func transforms take an autograd.Function with setup_context
        result = function(op).apply(_statics(inputs), *tensors)
    elif (not _functorch() and torch.is_grad_enabled() and not torch.compiler.is_exporting() and not jit_tracing
          and any(t is not None and t.requires_grad for t in tensors)):
        # a gradient may be asked for: the training op, whose residuals the backward reads (an exported
        # program keeps the residual-free op: torch.export traces above autograd; so does a TorchScript
        # trace, which must not hold this install's residual tag and is replayed through autograd)
        result, _ = getattr(torch.ops.dnnbind, f"{op}_training")(*inputs, saves_tag(x.device.type))
        result = result[0] if single_result(spec) else result
    else:
        result = getattr(torch.ops.dnnbind, op)(*inputs)
    return [result] if isinstance(result, Tensor) else list(result)
