"""One call of a dnnbind op on tensors: the backend's functions, static arguments and residuals.

A call is ``(op, x, arrays, kwargs)``: x, the op's spec's other arrays in its order (None where not
given, rnn's weights nested), and the public op's keyword arguments (its tensor arguments, dropout's
seed tensor, among them). What every call of one signature repeats (the spec's checks, the backend's
functions, where each gradient comes from) is a :class:`Call`, kept in the one plan cache
(:func:`dnnbind.highlevel.plans.remember`, reported by ``dnnbind.plan_cache_info()``). The typed custom
ops (:mod:`dnnbind.torch.typed`) and the eager path (:mod:`dnnbind.torch.eager`) run the backends
through here; fake kernels take their shapes from :func:`fake` (the specs' checks on the dims objects,
symbolic sizes kept symbolic).
"""
from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np
import torch

from dnnbind.highlevel.cpu.conv_paths import macs
from dnnbind.highlevel.dims.checks import numpy_dtype
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dispatch import backend_function
from dnnbind.highlevel.edges import output_dtype
from dnnbind.highlevel.grad_mode import saving_residuals
from dnnbind.highlevel.ops import residual_static
from dnnbind.highlevel.plans import kept
from dnnbind.highlevel.residual import ArraySpec, declared, innermost, without
from dnnbind.highlevel.specs import SPECS
from dnnbind.highlevel.support import backend_support
from dnnbind.torch import layout, symbolic
from dnnbind.torch.convert import device_scope, to_array, to_tensor

Tensor = torch.Tensor
NOTHING = contextlib.nullcontext()


# -- trees of arrays ------------------------------------------------------------------------------

def tree_map(fn: Any, tree: Any) -> Any:
    """``fn`` on every array of a list of arrays (None kept, lists nested: rnn's weights)."""
    if isinstance(tree, (list, tuple)) and not isinstance(tree, ArraySpec):
        return [tree_map(fn, t) for t in tree]
    return None if tree is None else fn(tree)


def leaves(tree: Any) -> list[Any]:
    """The arrays of a tree, in order (None left out)."""
    if isinstance(tree, (list, tuple)) and not isinstance(tree, ArraySpec):
        return [leaf for t in tree for leaf in leaves(t)]
    return [] if tree is None else [tree]


def pick(grads: tuple, path: tuple[int, ...]) -> Any:
    """The gradient at ``path`` among a backend's backward results (None where a step is None)."""
    value: Any = grads
    for i in path:
        value = value[i] if value is not None else None
    return value


# -- dtypes, devices, scopes ----------------------------------------------------------------------

_TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                 "float64": torch.float64, "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8,
                 "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint16": torch.uint16,
                 "uint32": torch.uint32}


def torch_dtype(dtype: Any) -> torch.dtype:
    return _TORCH_DTYPES[np.dtype(dtype).name]


def array_dtype(dtype: torch.dtype) -> Any:
    """The numpy dtype of a float tensor dtype (bfloat16 through ml_dtypes)."""
    return numpy_dtype(str(dtype).removeprefix("torch."))


def backend(device: torch.device) -> str:
    """The backend of a tensor's device; meta tensors (shapes only) take the cpu backend's residual
    specs, which need no device library."""
    if device.type in ("cpu", "meta"):
        return "cpu"
    return "miopen" if torch.version.hip else "cudnn"


def _spec(t: Any) -> ArraySpec:
    return ArraySpec(tuple(int(s) for s in t.shape), array_dtype(t.dtype))


def off_cpu_scope(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """The device scope (convert.device_scope) around a whole call off the CPU, conversions included: CuPy
    then converts on torch's current stream, without a synchronisation per array. On the CPU nothing:
    only the backend's BLAS calls need a scope there (:data:`BLAS_OPS`)."""
    return NOTHING if device.type == "cpu" else device_scope(device)


#: ops whose cpu backend calls numpy's BLAS (its support data says so), which dnnbind.torch holds to
#: one thread around them (see convert.device_scope); the others need no scope on the CPU
BLAS_OPS = frozenset(op for op, s in (backend_support("cpu") or {}).items() if s.blas)

#: OpenBLAS runs a product of fewer multiply-adds than this on one thread (its GEMM threading threshold,
#: 65536 times GEMM_MULTITHREAD_THRESHOLD's default 4); dnnbind's own splits start far above it
BLAS_ONE_THREAD_MACS = 65536 * 4


def _blas_scope(op: str, device: torch.device, static: tuple) -> torch.device | None:
    """The device whose scope the backend call itself needs: the CPU for the BLAS ops, else None (off
    the CPU, :func:`off_cpu_scope` covers the whole call). A convolution too small for OpenBLAS to
    thread any of its products needs none: setting OpenBLAS's threads and back costs more than it."""
    if device.type != "cpu" or op not in BLAS_OPS:
        return None
    if isinstance(static[0], ConvDims) and macs(static[0]) < BLAS_ONE_THREAD_MACS:
        return None
    return device


# -- calls ----------------------------------------------------------------------------------------

def _static_arguments(op: str, x: Any, arrays: Sequence[Any], kwargs: dict[str, Any],
                      seeded: bool) -> tuple[dict[str, Any], bool]:
    """(the public op's keyword arguments with a tensor argument's value read where ``seeded``, else None;
    whether a tensor argument was given: such a call is not remembered)."""
    tensors = SPECS[op].tensor_arguments
    if not tensors:
        return kwargs, False
    given = any(isinstance(kwargs.get(name), Tensor) for name in tensors)
    values = {name: int(kwargs[name].item()) if seeded and isinstance(kwargs.get(name), Tensor) else None
              for name in tensors}
    return {**kwargs, **values}, given


def _gradient_paths(op: str, arrays: Sequence[Any]) -> tuple[tuple[int, ...] | None, ...]:
    """Per tensor of the call (x and the spec's arrays, nested ones flattened, None left out): where its
    gradient is among the backend's backward results (an index, then indices into a nested one: rnn's
    dweights), or None for one without."""
    spec = SPECS[op]
    paths: list[tuple[int, ...] | None] = []

    def walk(value: Any, path: tuple[int, ...] | None) -> None:
        if isinstance(value, (list, tuple)) and not isinstance(value, ArraySpec):
            for i, v in enumerate(value):
                walk(v, None if path is None else (*path, i))
        elif value is not None:
            paths.append(path)

    for a, value in zip(spec.arrays, arrays):
        walk(value, (spec.gradients.index(a.gradient),) if a.gradient in spec.gradients else None)
    return tuple(paths)


class Call:
    """What every call of one op with the same tensors' shapes, dtypes and device and the same arguments
    has in common: the backend's functions and static arguments (checked once, as the public ops'
    plans are), the results' shapes, and where each tensor's gradient comes from among the backward's
    results. Built by the first such call (:func:`call_of`)."""

    __slots__ = ("op", "device", "dtype", "static", "forward", "backward", "blas_scope", "scoped", "paths",
                 "counts", "shapes", "kwargs", "plan", "reads", "specs", "_lent")

    def __init__(self, op: str, device: torch.device, specs: list[Any], kwargs: dict[str, Any]) -> None:
        self.op, self.device, self.kwargs = op, device, kwargs
        self.dtype = specs[0].dtype
        name = backend(device)
        self.static = residual_static(op, *specs, **_listed(kwargs))
        # every call of this signature has these shapes and dtypes: it skips the backend's wrappers
        # that only call through for them (residual.passes_when), as the public ops' plans do
        self.forward = innermost(backend_function(name, f"{op}_forward"), (*specs, *self.static), {})
        self.backward = backend_function(name, f"{op}_backward")
        self.blas_scope = _blas_scope(op, device, self.static)
        # whether a call needs a device scope at all: off the CPU always, on it the BLAS ops
        self.scoped = device.type != "cpu" or self.blas_scope is not None
        self.paths = _gradient_paths(op, specs)
        self.counts = tuple(_leaves(a) for a in specs)     # per spec array: its tensors (0: not given)
        #: the results' shapes (None where the op returns none: maxpool's indices unless asked for)
        self.shapes = list(SPECS[op].empty((*specs, *self.static)).outputs)
        self.reads = _reads(op, self.counts, self.shapes, kwargs)
        self.plan: Any = None          # the eager path's plan on it (dnnbind.torch.eager)
        self.specs = specs
        self._lent: Any = None

    def lent(self) -> tuple[tuple[int, tuple, ArraySpec], ...]:
        """The residuals a forward that borrows (:func:`forward` with ``borrowed``) declares the values of
        the call's arrays or results (:func:`dnnbind.highlevel.residual.declared`): worked out once."""
        if self._lent is None:
            with saving_residuals(True, True):
                specs = backend_function(backend(self.device), f"{self.op}_residuals")(*self.specs, *self.static)
            self._lent = declared(specs)
        return self._lent

    @property
    def results(self) -> int:
        """How many results the op returns (batch norm's updated running statistics follow them)."""
        return sum(s is not None for s in self.shapes)


def _reads(op: str, counts: Sequence[int], shapes: Sequence[Any],
           kwargs: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the places among a call's tensors (x and the spec's arrays, nested ones flattened, None left out),
    the places among its results (those it returns)) of what the op's backward reads
    (:meth:`~dnnbind.highlevel.specs.base.OpSpec.reads`): what autograd saves, so that an in-place change
    to one of them before the backward is refused, as for torch's own layers."""
    spec = SPECS[op]
    names = spec.reads(kwargs)
    inputs: list[int] = []
    at = 0
    for name, count in zip(spec.array_names, counts):
        if name in names:
            inputs += range(at, at + count)
        at += count
    returned = [name for name, shape in zip(spec.output_names, shapes) if shape is not None]
    return tuple(inputs), tuple(i for i, name in enumerate(returned) if name in names)


def call_of(op: str, x: Any, arrays: Sequence[Any], kwargs: dict[str, Any]) -> Call:
    """The :class:`Call` of this call (tensors, or anything with their shape, dtype and device): kept in
    the one plan cache, except a call given a tensor argument (dropout's seed tensor: its value is one of
    the static arguments). The key holds each tensor's shape and dtype and the arguments' exact values
    with their types (``padding=1.0`` is checked, and refused, apart from ``padding=1``)."""
    kwargs, seeded = _static_arguments(op, x, arrays, kwargs, True)
    if seeded:
        return Call(op, x.device, tree_map(_spec, [x, *arrays]), kwargs)
    key = ("torch", op, x.device, tuple([_meta(a) for a in arrays]), tuple(x.shape), x.dtype,
           tuple([exact(v) for v in kwargs.values()]))
    return kept(key, lambda: Call(op, x.device, tree_map(_spec, [x, *arrays]), kwargs))


def _listed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments with their sequences as lists, as the checks name them in a message (``stride=[0]``,
    torch's way)."""
    return {k: _as_list(v) for k, v in kwargs.items()}


def _as_list(value: Any) -> Any:
    return [_as_list(v) for v in value] if type(value) in (tuple, list) else value


def _meta(a: Any) -> Any:
    """An array's part of a call's key: None, (shape, dtype), or a nest of those (rnn's weights)."""
    if a is None:
        return None
    if isinstance(a, (list, tuple)):
        return tuple([_meta(v) for v in a])
    return (tuple(a.shape), a.dtype)


def exact(value: Any) -> Any:
    """An argument's part of a call's key: bools and floats with their type (True is not 1, 1.0 is not
    1), a float by its exact text (0.0 is not -0.0), sequences as tuples of those."""
    kind = type(value)
    if kind is int or kind is str or value is None:
        return value
    if kind is float:
        return (float, value.hex())
    if kind is bool:
        return (bool, value)
    if kind is tuple or kind is list:
        return tuple([exact(v) for v in value])
    return (kind, value)


def forward(call: Call, x: Tensor, arrays: Sequence[Any], borrowed: bool = False) -> tuple[list[Tensor], tuple]:
    """(the results, then batch norm's updated running statistics as new tensors; the backend's residuals
    as arrays) of ``call`` on x and the spec's other arrays. Residuals are always saved (also inside
    dnnbind.no_grad()), borrowing the call's arrays where ``borrowed`` (grad_mode.borrowing). Batch norm
    updates copies of the running statistics: the op mutates none of its inputs."""
    with off_cpu_scope(x.device), saving_residuals(True, borrowed):
        inputs = tree_map(to_array, list(arrays))
        statistics: list[Any] = []
        if SPECS[call.op].updated_in_place:
            updated = SPECS[call.op].updated
            inputs[updated] = [None if a is None else a.copy() for a in inputs[updated]]
            statistics = [a for a in inputs[updated] if a is not None]
        with device_scope(call.blas_scope) if call.blas_scope is not None else NOTHING:
            result, residuals = call.forward(to_array(x), *inputs, *call.static)
        outputs = [to_tensor(r) for r in (result if type(result) is tuple else (result,)) if r is not None]
        outputs = layout.lay_out(outputs, layout.of(call.op, x, named_array(call.op, arrays)))
        return outputs + [to_tensor(a) for a in statistics], residuals


def named_array(op: str, arrays: Sequence[Any]) -> Any:
    """named(name) for :func:`layout.of`: the op's array of that name among the spec's arrays after x
    (``arrays``)."""
    order = SPECS[op].array_names
    return lambda name: arrays[order.index(name) - 1]


def run_call(call: Call, x: Tensor, arrays: Sequence[Any], borrowed: bool = False) -> tuple[list[Tensor], list[Tensor]]:
    """(the call's results and updated running statistics, its residuals) as tensors (``borrowed``: see
    :func:`forward`)."""
    outputs, residuals = forward(call, x, arrays, borrowed)
    with off_cpu_scope(x.device):
        return outputs, [to_tensor(r) for r in residuals]


def gradients(call: Call, residuals: Sequence[Any], cotangents: Sequence[Tensor | None],
              wanted: Sequence[bool]) -> list[Tensor | None]:
    """One gradient per tensor of the call (x and the spec's arrays, nested ones flattened, None left out),
    None where it has none or is not ``wanted``, from the forward's residuals (tensors or arrays) and the
    results' cotangents (None: not given; integer results take none)."""
    op = call.op
    d_results = [d if d is None or d.is_floating_point() else None for d in list(cotangents)[:call.results]]
    d_results += [None] * (call.results - len(d_results))
    if not any(d is not None for d in d_results) or not any(wanted):
        return [None] * len(call.paths)
    with off_cpu_scope(call.device):
        if d_results[0] is None:              # the first cotangent is required: zeros stand for "unused"
            like = next(d for d in d_results if d is not None)
            d_results[0] = torch.zeros(call.shapes[0], dtype=like.dtype, device=like.device)
        cts = tuple([None if d is None else to_array(d) for d in d_results])
        saved = tuple([to_array(r) if isinstance(r, Tensor) else r for r in residuals])
        scope = device_scope(call.blas_scope) if call.blas_scope is not None else NOTHING
        with scope:
            if SPECS[op].skippable:           # one flag per gradient: whether any of its tensors wants it
                grads = call.backward(saved, cts, *call.static, needs=needs_of(op, call.counts, wanted))
            else:
                grads = call.backward(saved, cts, *call.static)
        if type(grads) is not tuple:
            grads = (grads,)
        out = [None if path is None or not want else pick(grads, path) for path, want in zip(call.paths, wanted)]
        return [None if g is None else to_tensor(g) for g in out]


def needs_of(op: str, counts: Sequence[int], wanted: Sequence[bool]) -> tuple[bool, ...]:
    """A skippable op's ``needs`` from ``wanted``, one flag per tensor of the call (x and the spec's other
    arrays in order, nested ones flattened, those not given left out), ``counts`` the tensors of each
    spec array (0: not given): a gradient is needed when any of its array's tensors wants it (rnn's
    weights: any of them)."""
    per_array, at = [], 0
    for count in counts:
        per_array.append(any(wanted[at:at + count]))
        at += count
    return SPECS[op].needs(per_array)


def _leaves(a: Any) -> int:
    """The tensors in a spec array's value: 0 for None, 1, or those of a nest (rnn's weights)."""
    if a is None:
        return 0
    return sum(_leaves(v) for v in a) if type(a) is list or type(a) is tuple else 1     # (an ArraySpec: one)


# -- shapes without running -----------------------------------------------------------------------

def result_specs(op: str, x: Any, arrays: Sequence[Any], kwargs: dict[str, Any],
                 borrowed: bool = False) -> tuple[list[Any], tuple[ArraySpec, ...], list[Any]]:
    """(the op's result shapes, None where a result is not returned; its residuals as ArraySpecs, of a
    forward that borrows where ``borrowed``; x and the spec's arrays as ArraySpecs) for tensors or anything
    with their shape, dtype and device: computed, not run."""
    kwargs, _ = _static_arguments(op, x, arrays, kwargs, False)
    kwargs = {k: _concrete(v) for k, v in kwargs.items()}
    specs = tree_map(_spec, [x, *arrays])
    metas = (tuple(specs[0].shape), specs[0].dtype, tuple([_meta(a) for a in arrays]))
    static = kept(("torch static", op, metas, tuple([exact(v) for v in kwargs.values()])),
                   lambda: residual_static(op, *specs, **_listed(kwargs)))
    shapes = SPECS[op].empty((*specs, *static)).outputs
    with saving_residuals(True, borrowed):
        saved = backend_function(backend(x.device), f"{op}_residuals")(*specs, *static)
    return list(shapes), tuple(saved), specs


def _concrete(value: Any) -> Any:
    """``value`` with plain ints and floats (torch.compile may trace a layer's setting as a symbolic one)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_concrete(v) for v in value)
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    return value


def fake(op: str, x: Tensor, arrays: Sequence[Any], kwargs: dict[str, Any],
         borrowed: bool = False) -> tuple[list[Tensor], list[Tensor], tuple[tuple, ...]]:
    """The fake kernels' results: the results (then batch norm's updated running statistics) and the
    residuals, empty tensors of the shapes the real kernel gives, symbolic sizes kept symbolic
    (:mod:`dnnbind.torch.symbolic`); where ``borrowed``, those of a forward that borrows, without the
    residuals it declares the values of arrays or results (what a typed training op returns), whose
    (place, source key) come third (``Call.lent``'s)."""
    found: list[Any] = []
    tensors = leaves(list(arrays))

    def evaluate(size_of: Any) -> list[Any]:
        def like(t: Any) -> Any:
            return SimpleNamespace(shape=size_of(t), dtype=t.dtype, device=t.device)
        found[:] = result_specs(op, like(x), tree_map(like, list(arrays)), kwargs, borrowed)
        return [*found[0], *[s.shape for s in found[1]]]

    every = symbolic.shapes(evaluate, [x, *tensors])
    shapes, saved = every[:len(found[0])], [(s, spec.dtype) for s, spec in zip(every[len(found[0]):], found[1])]
    outputs = [x.new_empty(shape, dtype=torch.int64 if output_dtype(SPECS[op], i, None) is not None else x.dtype)
               for i, shape in enumerate(shapes) if shape is not None]
    outputs = layout.lay_out(outputs, layout.of(op, x, named_array(op, list(arrays))))
    if SPECS[op].updated_in_place:            # the updated copies (batch norm's running statistics)
        outputs += [x.new_empty(t.shape, dtype=t.dtype) for t in list(arrays)[SPECS[op].updated] if t is not None]
    lent = tuple((place, key) for place, key, _ in declared(found[1])) if borrowed else ()
    return outputs, [x.new_empty(shape, dtype=torch_dtype(dtype)) for shape, dtype in without(saved, lent)], lent
