"""dnnbind's ops as JAX functions: one FFI call for the forward, one for the backward, joined by a
``jax.custom_vjp``, generic over :mod:`dnnbind.jax.table`'s rows.

Shapes and arguments are checked in Python while JAX traces, with dnnbind's own errors (the public op's
checks, through :func:`dnnbind.highlevel.ops.residual_static`), so XLA never runs a call dnnbind would
refuse; the results' shapes come from the same definitions (the edge rules' output shapes and the
backend's ``NAME_residuals``).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import numpy as np

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from dnnbind.highlevel.cpu._memory import CHECK_FROM_BYTES, available_bytes, gib
from dnnbind.highlevel.dispatch import backend_function
from dnnbind.highlevel.edges import output_dtype
from dnnbind.highlevel.specs import SPECS
from dnnbind.highlevel.ops import residual_static
from dnnbind.highlevel.grad_mode import saving_residuals
from dnnbind.highlevel.residual import ArraySpec, declared, without
from dnnbind.highlevel.unbatched import batch_axis
from dnnbind.jax import attrs as A
from dnnbind.jax import targets as T
from dnnbind.jax.table import Row, row

_PLATFORMS = {"cpu": "cpu", "gpu": "CUDA", "cuda": "CUDA"}


def _platform() -> str:
    backend = jax.default_backend()
    if backend not in _PLATFORMS:
        raise NotImplementedError(f"dnnbind.jax runs on the CPU and on CUDA; JAX's default backend is {backend!r}")
    return _PLATFORMS[backend]


def _spec(a: Any) -> ArraySpec:
    """An array's shape and dtype as dnnbind's checks take them: its sizes known while JAX traces."""
    if not all(isinstance(n, (int, np.integer)) for n in a.shape):
        raise NotImplementedError(f"dnnbind.jax needs every array's sizes known while JAX traces; an array has "
                                  f"shape {tuple(a.shape)} with symbolic sizes (a shape-polymorphic jax.export): "
                                  f"export with concrete shapes")
    return ArraySpec(tuple(int(n) for n in a.shape), np.dtype(a.dtype))


def _map(fn: Callable[[Any], Any], tree: Any) -> Any:
    if A.is_node(tree):
        return type(tree)(_map(fn, t) for t in tree)
    return None if tree is None else fn(tree)


class Call:
    """One traced call of an op: everything static about it (hashable: custom_vjp's non-differentiable
    argument), and the two FFI calls."""

    def __init__(self, r: Row, arrays: list[Any], kwargs: dict[str, Any], platform: str) -> None:
        specs = _map(_spec, arrays)
        checked = {**kwargs, **{name: 0 for name in r.traced}}    # per-call values: checked when they run
        static = residual_static(r.op, *specs, **checked)
        backend = T.PLATFORMS[platform]
        leaves = A.leaves(specs)
        x_dtype = leaves[0].dtype
        shapes = SPECS[r.op].empty((*specs, *static)).outputs
        self.slots = tuple(s is not None for s in shapes)            # which outputs exist (rnn's cy may not)
        outputs = [jax.ShapeDtypeStruct(s, output_dtype(SPECS[r.op], i, x_dtype)) for i, s in enumerate(shapes)
                   if s is not None]
        self.float_outputs = tuple(np.dtype(o.dtype).kind == "f" or np.dtype(o.dtype).name == "bfloat16"
                                   for o in outputs)
        updated = [specs[r.arrays.index(n)] for n in r.updated if specs[r.arrays.index(n)] is not None]
        with saving_residuals(True, borrowed=True):       # (what the forward target's backend call saves)
            saved = backend_function(backend, f"{r.op}_residuals")(*specs, *static)
        self.lent = _lent(r, specs, self.slots, saved)
        kept = without(saved, self.lent)
        for spec in saved:
            if jax.dtypes.canonicalize_dtype(spec.dtype) != np.dtype(spec.dtype):
                raise TypeError(f"{r.op} saves a {np.dtype(spec.dtype).name} array for its backward, which JAX "
                                f"would narrow without jax_enable_x64: enable it (jax.config.update("
                                f"'jax_enable_x64', True)) to run this op")
        _check_sizes(r.op, [*outputs, *kept], platform)
        self.row, self.platform, self.tree, self.kwargs = r, platform, A.tree(specs), kwargs
        self.counts = (len(outputs), len(updated), len(kept))
        self.forward_types = tuple(outputs + [jax.ShapeDtypeStruct(s.shape, s.dtype) for s in updated]
                                   + [jax.ShapeDtypeStruct(tuple(s.shape), s.dtype) for s in kept])
        aliases = {}
        for k, name in enumerate(n for n in r.updated if specs[r.arrays.index(n)] is not None):
            aliases[_leaf_index(r, specs, name)] = len(outputs) + k
        self.aliases = aliases
        paths = T.gradient_paths(r, specs)
        # per leaf: its gradient's place among the backward's (None: none), its array's place among the spec's
        self.gradient_of = tuple(None if p is None else p[0] for p in paths)
        self.array_of = tuple(k for k, value in enumerate(specs) for _ in A.leaves([value]))
        self.leaf_types = tuple(jax.ShapeDtypeStruct(leaf.shape, leaf.dtype) for leaf in leaves)
        self.skippable = SPECS[r.op].skippable
        traced = [0] * len(r.traced)               # per-call values are 0-d
        self.attrs = {**A.encode(kwargs), A.TREE: self.tree,
                      T.RANKS: np.asarray([len(s.shape) for s in leaves] + traced, np.int64)}
        if self.lent:
            self.attrs[T.LENT] = np.asarray([place for place, *_ in self.lent], np.int64)
        cotangents = [len(o.shape) for o, f in zip(outputs, self.float_outputs) if f]
        self.backward_attrs = {**self.attrs, **T.encode_shapes(leaves), T.RESIDUALS: np.int64(len(saved)),
                               T.GIVEN: np.asarray(self.float_outputs, np.int64),
                               T.RANKS: np.asarray([len(s.shape) for s in saved] + cotangents + traced, np.int64)}
        self.key = (r.op, platform, self.tree, repr(sorted(kwargs.items())), repr(leaves))
        # where the samples are independent but the op has other arrays (conv's weights): which of the
        # forward call's results have x's leading axis, for a vmap of x alone to fold into it (None: no
        # fold here; x-only ops fold in their handlers, table.Row.folds)
        independent = SPECS[r.op].independent(SPECS[r.op].arguments_function(**kwargs), len(leaves[0].shape))
        self.x_axis = None if r.folds or not independent or r.traced else _x_axis(
            r, specs, kwargs, backend, self.lent, len(outputs) + len(updated), kept)
        n = len(outputs) + len(updated)
        if self.x_axis is None:
            self.forward = self._ffi_forward
            self.inference = self._ffi_inference
        else:
            # x is the forward's one input with x's leading axis; per residual whether it has it (those
            # put back from the inputs or outputs: x's and the outputs')
            axis_of_kept = iter(self.x_axis[len(outputs) + len(updated):])
            lent_axis = {place: (index == 0) if is_input else True for place, is_input, index, *_ in self.lent}
            self.residual_axis = tuple(lent_axis[i] if i in lent_axis else next(axis_of_kept)
                                       for i in range(len(saved)))
            forward_axis = (True,) + (False,) * (len(leaves) - 1)
            self.forward = _folding(self, lambda c, *inputs: _flat(c._ffi_forward(*inputs)), forward_axis,
                                    self.x_axis, False, self._regrouped)
            self.inference = _folding(self, lambda c, *inputs: c._ffi_inference(*inputs), forward_axis,
                                      self.x_axis[:n], False)
        T.ensure_registered(r.op, platform)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Call) and other.key == self.key

    def _ffi_forward(self, *inputs: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """(outputs and updated arrays, residuals) of the forward FFI call (:attr:`forward` runs it, folding
        a vmap of x alone into x's leading axis where it can)."""
        results = jax.ffi.ffi_call(T.target_name(self.row.op, "forward"), _varying_like(self.forward_types, inputs),
                                   vmap_method=self.row.vmap_method,
                                   input_output_aliases=self.aliases or None)(*inputs, **self.attrs)
        n = self.counts[0] + self.counts[1]
        return tuple(results[:n]), tuple(results[n:])

    def _ffi_inference(self, *inputs: Any) -> tuple[Any, ...]:
        """The outputs and updated arrays of the forward FFI call where no gradient is asked for (the
        custom_vjp's primal, :attr:`inference` runs it): the backend saves no residuals, none come back."""
        n = self.counts[0] + self.counts[1]
        return tuple(jax.ffi.ffi_call(T.target_name(self.row.op, "forward"),
                                      _varying_like(self.forward_types[:n], inputs),
                                      vmap_method=self.row.vmap_method,
                                      input_output_aliases=self.aliases or None)(
            *inputs, **{**self.attrs, T.INFERENCE: np.bool_(True)}))

    def restored(self, residuals: tuple, inputs: tuple, outputs: tuple) -> tuple:
        """All the backend's residuals: the forward target's, and in their places the inputs or outputs the
        backend declares them the values of (:attr:`lent`), in the residual's shape and dtype (no copy:
        JAX keeps those arrays for the backward)."""
        if not self.lent:
            return residuals
        full = list(residuals)
        for place, is_input, index, shape, dtype in self.lent:
            a = (inputs if is_input else outputs)[index].reshape(shape)
            full.insert(place, a if a.dtype == dtype else a.astype(dtype))
        return tuple(full)

    def refuse_gradients(self, perturbed: tuple[bool, ...]) -> None:
        """TypeError while JAX traces where it differentiates with respect to an array the op is not
        differentiable by (its spec's ``without_gradient``: batch norm's running statistics), as torch's
        batch norm refuses them, rather than give it a gradient of zeros."""
        refused = SPECS[self.row.op].without_gradient
        for k, p in zip(self.array_of, perturbed):
            if p and self.row.arrays[k] in refused:
                raise TypeError(f"{SPECS[self.row.op].not_differentiable(self.row.arrays[k])}: JAX differentiates "
                                f"with respect to it here (leave it out of what jax.grad or jax.vjp differentiates, "
                                f"or stop_gradient it)")

    def needs(self, perturbed: tuple[bool, ...]) -> tuple[bool, ...] | None:
        """A skippable op's ``needs=`` (one flag per gradient) from which array leaves JAX differentiates
        with respect to (``perturbed``, per leaf); None (every gradient) for the other ops."""
        if not self.skippable:
            return None
        wanted = [False] * len(self.row.arrays)
        for k, p in zip(self.array_of, perturbed):
            wanted[k] = wanted[k] or p
        return SPECS[self.row.op].needs(wanted)

    def backward(self, residuals: tuple, cotangents: tuple, traced: tuple, needs: tuple[bool, ...] | None) -> tuple:
        """One gradient per input (None where an input has none or none is needed) from the backward FFI
        call."""
        given = [c for c, f in zip(cotangents[:self.counts[0]], self.float_outputs) if f]
        computed = [g is not None and (needs is None or needs[g]) for g in self.gradient_of]
        inputs = [*residuals, *given, *traced]
        if not any(computed):
            grads: Any = iter(())
        elif self.x_axis is None:
            grads = iter(self._ffi_backward(needs, *inputs))
        else:      # (a per-sample gradient of a weight, one without x's axis, is each sample's: no fold)
            grads = iter(_folding(self, lambda c, *i: c._ffi_backward(needs, *i),
                                  (*self.residual_axis, *[True] * len(given)),
                                  tuple(k == 0 for k, c in enumerate(computed) if c), True)(*inputs))
        return tuple(next(grads) if c else None for c in computed) + (None,) * len(traced)

    def _ffi_backward(self, needs: tuple[bool, ...] | None, *inputs: Any) -> tuple:
        """The gradients the backward FFI call computes (those ``needs`` asks for), from the residuals, the
        float outputs' cotangents and the per-call values."""
        computed = [g is not None and (needs is None or needs[g]) for g in self.gradient_of]
        types = tuple(t for t, c in zip(self.leaf_types, computed) if c)
        attrs = self.backward_attrs if needs is None else {**self.backward_attrs, T.NEEDS: np.asarray(needs, np.int64)}
        given = inputs[:len(inputs) - len(self.row.traced)]
        return tuple(jax.ffi.ffi_call(T.target_name(self.row.op, "backward"), _varying_like(types, given),
                                      vmap_method=self.row.vmap_method)(*inputs, **attrs))

    def _regrouped(self, flat: tuple) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The forward call's results as (outputs and updated arrays, residuals)."""
        n = self.counts[0] + self.counts[1]
        return tuple(flat[:n]), tuple(flat[n:])


def _varying_like(types: tuple, inputs: Any) -> tuple:
    """``types`` as results of a call on ``inputs``: inside jax.shard_map varying over the mesh axes of the
    input that varies over the most (after :func:`_vary_alike`, all of them: an FFI call's results are
    typed as given, and without the axes JAX would take a per-device value for a replicated one),
    unchanged elsewhere."""
    found = None
    for a in inputs:
        aval = jax.typeof(a)
        kind = getattr(aval, "manual_axis_type", None)
        if kind is not None and kind.varying and (found is None or len(kind.varying) > len(found[1].varying)):
            found = (aval, kind)
    if found is None:
        return types
    sharding = jax.sharding.NamedSharding(found[0].sharding.mesh, jax.sharding.PartitionSpec())
    return tuple(jax.ShapeDtypeStruct(t.shape, t.dtype, sharding=sharding, manual_axis_type=found[1])
                 for t in types)


def _vary_alike(arrays: list[Any]) -> list[Any]:
    """Inside jax.shard_map, every array cast to vary over all the mesh axes any of them varies over (one
    FFI call computes all its results from all its inputs; the cast's transpose sums a replicated
    array's gradient over the devices); the arrays themselves elsewhere."""
    axes: set[Any] = set()
    for a in arrays:
        kind = getattr(jax.typeof(a), "manual_axis_type", None)
        axes |= set(kind.varying) if kind is not None else set()
    if not axes:
        return arrays
    cast = []
    for a in arrays:
        missing = axes - set(jax.typeof(a).manual_axis_type.varying)
        cast.append(jax.lax.pcast(a, tuple(sorted(missing, key=str)), to="varying") if missing else a)
    return cast


def _check_sizes(op: str, arrays: list[Any], platform: str) -> None:
    """MemoryError, while JAX traces, for results and residuals that no machine (or, on the CPU, not
    this one) could hold: XLA would abort the process on a size beyond 64 bits, and fail to allocate
    the others only when it runs."""
    need = sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in arrays)
    if need >= 2**62:
        raise MemoryError(f"{op}'s results and residuals would need {gib(need)} of memory ({need} bytes): more "
                          f"than any machine has")
    have = available_bytes() if platform == "cpu" and need >= CHECK_FROM_BYTES else need
    if need > have:
        raise MemoryError(f"{op}'s results and residuals would need {gib(need)} of memory ({need} bytes) but "
                          f"{gib(have)} is available")


def _lent(r: Row, specs: list[Any], slots: tuple[bool, ...], saved: Any) -> tuple[tuple[Any, ...], ...]:
    """(place, whether an input, its index among the inputs (array leaves, depth first) or the outputs,
    shape, dtype) of each residual the backend declares the value of an array or a result (ArraySpec.same_as)."""
    places: dict[tuple, tuple[bool, int]] = {}
    for name, value in zip(r.arrays, specs):
        if A.is_node(value):
            for g, group in enumerate(value):
                for j, leaf in enumerate(group):
                    if leaf is not None:
                        places[(name, g, j)] = (True, len(places))
        elif value is not None:
            places[(name,)] = (True, len(places))
    returned = [name for name, slot in zip(SPECS[r.op].output_names, slots) if slot]
    places.update(((name,), (False, i)) for i, name in enumerate(returned))
    return tuple((place, *places[key], tuple(s.shape), np.dtype(s.dtype)) for place, key, s in declared(saved))


def _x_axis(r: Row, specs: list[Any], kwargs: dict[str, Any], backend: str, lent: tuple, returned: int,
            kept: list[ArraySpec]) -> tuple[bool, ...] | None:
    """Per result of the forward FFI call (outputs, then the residuals it returns): whether it has x's
    leading axis, found as the results whose leading size follows x's (the results of a call on one more
    sample); None where some other size changes too, or for an empty batch (whose call saves what the edge
    policy saves: not what a call of samples saves)."""
    if specs[0].shape[0] == 0:
        return None
    one_more = [ArraySpec((specs[0].shape[0] + 1, *specs[0].shape[1:]), specs[0].dtype), *specs[1:]]
    static = residual_static(r.op, *one_more, **kwargs)
    with saving_residuals(True, borrowed=True):
        saved = backend_function(backend, f"{r.op}_residuals")(*one_more, *static)
    grown = without(saved, lent)
    if len(grown) != len(kept):
        return None
    axis = [True] * returned         # (the outputs: every one has x's leading axis)
    for before, after in zip(kept, grown):
        if tuple(after.shape) == tuple(before.shape):
            axis.append(False)
        elif tuple(after.shape) == (before.shape[0] + 1, *before.shape[1:]):
            axis.append(True)
        else:
            return None
    return tuple(axis)


def _flat(results: tuple[tuple[Any, ...], tuple[Any, ...]]) -> tuple:
    return (*results[0], *results[1])


def _folding(call: Call, run: Callable[..., tuple], in_axis: tuple[bool, ...], out_axis: tuple[bool, ...],
             reduces: bool, regroup: Callable[[tuple], Any] = tuple) -> Callable[..., Any]:
    """``run(call, *inputs)`` (a flat tuple of arrays), a jax.vmap folded into x's leading axis, one call on
    (B * N, ...) for the whole batch, where every mapped input has that axis (``in_axis``: per input;
    an unmapped one that has it is broadcast) and, where the results without it would be sums over the
    samples (``reduces``: a weight's gradient), every result has it (``out_axis``); the others come back
    unmapped. A vmap of anything else runs ``run`` once per batch element. ``regroup`` shapes the flat
    results as the caller takes them."""
    @jax.custom_batching.custom_vmap
    def folding(*inputs: Any) -> Any:
        return regroup(run(call, *inputs))

    @folding.def_vmap
    def rule(axis_size: int, in_batched: list[bool], *inputs: Any) -> tuple[Any, Any]:
        if (any(b and not axis for b, axis in zip(in_batched, in_axis)) or (reduces and not all(out_axis))
                or axis_size == 0):
            mapped = jax.vmap(lambda *i: run(call, *i), in_axes=[0 if b else None for b in in_batched])(*inputs)
            return regroup(mapped), regroup((True,) * len(mapped))
        folded = [(a if b else jnp.broadcast_to(a, (axis_size, *a.shape))).reshape((-1, *a.shape[1 + b:]))
                  if axis else a for a, b, axis in zip(inputs, in_batched, in_axis)]
        leaf = call.leaf_types[0]
        leaves = [jax.ShapeDtypeStruct((axis_size * leaf.shape[0], *leaf.shape[1:]), leaf.dtype), *call.leaf_types[1:]]
        results = _folding(Call(call.row, A.fill(call.tree, leaves), call.kwargs, call.platform), run, in_axis,
                           out_axis, reduces)(*folded)
        results = tuple(r.reshape((axis_size, r.shape[0] // axis_size, *r.shape[1:])) if axis else r
                        for r, axis in zip(results, out_axis))
        return regroup(results), regroup(out_axis)
    return folding


def _leaf_index(r: Row, specs: list[Any], name: str) -> int:
    index = r.arrays.index(name)
    return len(A.leaves(specs[:index]))


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class _Needs:
    """A skippable op's needs= among the residuals, as static data (not an array)."""
    flags: tuple[bool, ...] | None


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _apply(call: Call, *inputs: Any) -> tuple:
    return call.inference(*inputs)          # (JAX runs _apply_forward instead where it differentiates)


def _apply_forward(call: Call, *primals: Any) -> tuple:
    """The forward, and which gradients the backward computes: those of the arrays JAX differentiates
    with respect to (symbolic zeros: a convolution of data needs no dx, a frozen filter no dw)."""
    inputs = [p.value for p in primals]
    perturbed = tuple(bool(p.perturbed) for p in primals[:len(call.gradient_of)])
    call.refuse_gradients(perturbed)
    needs = call.needs(perturbed)
    outputs, residuals = call.forward(*inputs)
    return outputs, (call.restored(residuals, tuple(inputs), outputs), tuple(inputs[len(call.gradient_of):]),
                     _Needs(needs))


def _apply_backward(call: Call, saved: tuple, cotangents: tuple) -> tuple:
    residuals, traced, needs = saved
    present = [c for c in cotangents if not isinstance(c, SymbolicZero)]
    if not present:                         # nothing flows back: no gradient to compute
        return (None,) * (len(call.gradient_of) + len(traced))
    cotangents = tuple(jnp.zeros(c.shape, c.dtype) if isinstance(c, SymbolicZero) else c for c in cotangents)
    return call.backward(residuals, cotangents, traced, needs.flags)


_apply.defvjp(_apply_forward, _apply_backward, symbolic_zeros=True)


def _traced_value(name: str, value: Any) -> Any:
    """A per-call static value (dropout's seed) as a 0-d uint32 array: an int in [0, 2**32) (numpy's
    too), a 0-d integer array (taken modulo 2**32) or a jax.random key (a typed key, or
    jax.random.PRNGKey's raw uint32 pair)."""
    if value is None:
        raise ValueError(f"{name}=None: dnnbind.jax needs an explicit {name} (an int, a 0-d integer array or "
                         f"a jax.random key): a JAX function has no hidden random state")
    dtype = getattr(value, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return jax.random.bits(value, (), jnp.uint32)
    if dtype == np.uint32 and getattr(value, "shape", ()) == (2,):        # a raw key (jax.random.PRNGKey's)
        return jax.random.bits(jax.random.wrap_key_data(value), (), jnp.uint32)
    if isinstance(value, (bool, np.bool_)) or (dtype is not None and not jnp.issubdtype(dtype, jnp.integer)):
        raise TypeError(f"{name}={value!r} must be an int, a 0-d integer array or a jax.random key")
    if dtype is None and not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}={value!r} must be an int, a 0-d integer array or a jax.random key")
    if (dtype is None or isinstance(value, np.integer)) and not 0 <= int(value) < 2**32:
        raise ValueError(f"{name}={value!r} must be in [0, 2**32)")     # (a numpy int as a Python int)
    if getattr(value, "shape", ()) != ():
        raise ValueError(f"{name} must be 0-d (got shape {value.shape})")
    return jnp.asarray(value).astype(jnp.uint32)


def _arrays(name: str, value: Any, optional: bool, levels: int) -> Any:
    """An array argument as a JAX array: a JAX or numpy array or a Python number (as jax.numpy takes
    them), ``levels`` of lists or tuples of them for a nested argument (rnn's weights: groups of arrays,
    None among them where its spec allows; a named tuple as a tuple); anything else refused naming the
    argument (a list is no array here, as in jax.numpy)."""
    if levels and isinstance(value, (list, tuple)):
        nest = list if isinstance(value, list) else tuple
        return nest(_arrays(f"{name}[{i}]", v, True, levels - 1) for i, v in enumerate(value))
    if value is None:
        if optional:
            return None
        raise TypeError(f"{name} must be a JAX or numpy array, not None")
    if not isinstance(value, (jax.Array, np.ndarray, np.generic, int, float)):
        raise TypeError(f"{name} must be a JAX or numpy array, not {type(value).__name__}")
    return jnp.asarray(value)


def _static(name: str, value: Any) -> Any:
    """A keyword argument as the op's checks and the FFI attributes take it: an array of values known
    while JAX traces (numpy's, or a concrete JAX array: rnn's lengths) as a (nested) list; a traced one
    refused, as every keyword argument decides the call's shapes or its attributes."""
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"{name} must be known while JAX traces (a Python or numpy value), not a traced "
                        f"array: pass it as a static argument")
    if isinstance(value, (np.ndarray, jax.Array)):
        return np.asarray(value).tolist()
    return value


def apply(op: str, *args: Any, **kwargs: Any) -> Any:
    """Run dnnbind's ``op`` on JAX arrays: the public op's arguments; returns its result (without the
    pullback: JAX differentiates through the custom_vjp), then the updated copies of the arrays the op
    updates in place, when given."""
    r, spec = row(op), SPECS[op]
    bound = r.signature.bind(*args, **kwargs)
    bound.apply_defaults()          # (rnn's mode comes before its required hidden_size: its spec requires it)
    arrays = [bound.arguments.get(name) for name in r.arrays]
    rest = {k: _static(k, v) for k, v in bound.arguments.items() if k not in r.arrays and k not in r.traced}
    traced = tuple(_traced_value(name, bound.arguments.get(name)) for name in r.traced)
    arrays = [_arrays(arg.name, a, arg.optional, 2 if arg.nested else 0) for arg, a in zip(spec.arrays, arrays)]
    # one sample (the spec's unbatched rule): run as a batch of one, the batch axis dropped from the results
    axis = batch_axis(spec, arrays, spec.arguments_function(**rest))      # (the defaults filled in)
    if axis is not None:
        arrays = [jnp.expand_dims(a, axis) if arg.batched and a is not None else a
                  for arg, a in zip(spec.arrays, arrays)]
    call = Call(r, arrays, rest, _platform())
    results = _apply(call, *_vary_alike([*A.leaves(arrays), *traced]))
    it = iter(results[:call.counts[0]])
    outputs = [next(it) if slot else None for slot in call.slots]
    if axis is not None:
        outputs = [None if o is None else jnp.squeeze(o, axis) for o in outputs]
    # integer results (maxpool's indices) in JAX's integer dtype: int32 without jax_enable_x64
    outputs = [o if o is None or jax.dtypes.canonicalize_dtype(o.dtype) == o.dtype
               else o.astype(jax.dtypes.canonicalize_dtype(o.dtype)) for o in outputs]
    main = outputs[0] if len(outputs) == 1 else tuple(outputs)
    updated = tuple(results[call.counts[0]:])
    return (main, *updated) if updated else main
