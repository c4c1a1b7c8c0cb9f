"""The residual machinery behind dnnbind.torch's ops: a call's backend functions, static arguments and residuals.

The typed custom ops (:mod:`dnnbind.torch.typed`, what ``torch.compile``, ``torch.export`` and
``torch.func`` see) and the eager path (:mod:`dnnbind.torch.eager`) run the backends through here. A
call is described internally as (x, others, params, reals): ``others`` the op's other array arguments
that are not None, in the spec's order (rnn's weights flattened), ``params`` a JSON text (:func:`encode`)
of the public op's keyword arguments and which array slots are filled, ``reals`` its float arguments.
That text never reaches a graph: the typed ops take typed arguments and build it in their kernels.
:func:`_forward` gives the op's outputs and residuals, :func:`gradients` / :func:`_backward` the
gradients from them, :func:`_fake_forward` the shapes (computed from ConvDims/PoolDims/RNNDims through the
public ops' checks, symbolic sizes kept symbolic).

One op is registered here: ``dnnbind::NAME_eager_backward(Tensor[] residuals, Tensor[] cotangents, str
params, float[] reals) -> Tensor[]``, what an eager call of an op without a second-order rule records
when autograd builds a graph of its backward (create_graph), so that a second derivative through it is
refused instead of coming out wrong. :mod:`dnnbind.torch.sequence_op` (a run of layers as one op under
torch.compile) keeps this generic form.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import json
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np
import torch

from dnnbind.highlevel.dispatch import backend_function
from dnnbind.highlevel.dims.checks import numpy_dtype
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.edges import output_dtype
from dnnbind.highlevel.grad_mode import saving_residuals
from dnnbind.highlevel.ops import residual_static
from dnnbind.highlevel.plans import remember
from dnnbind.highlevel.reference.conv_paths import macs
from dnnbind.highlevel.residual import RESIDUAL_REVISION, ArraySpec, innermost
from dnnbind.highlevel.specs import SPECS
from dnnbind.highlevel.support import backend_support
from dnnbind.torch import symbolic
from dnnbind.torch.convert import device_scope, to_array, to_tensor

NAMESPACE = "dnnbind"
Tensor = torch.Tensor

_FORWARD_SCHEMA = "(Tensor x, Tensor[] others, str params, float[] reals) -> (Tensor[], Tensor[])"
_BACKWARD_SCHEMA = "(Tensor[] residuals, Tensor[] cotangents, str params, float[] reals) -> Tensor[]"


# -- params ---------------------------------------------------------------------------------------

def _jsonable(name: str, value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (tuple, list, torch.Size)):
        return [_jsonable(name, v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(k, v) for k, v in value.items()}
    if isinstance(value, (np.integer, np.bool_, np.floating)):
        return value.item()
    raise TypeError(f"{name}={value!r} must be an int, float, bool, str, None or a tuple of those")


def encode(**params: Any) -> str:
    """The ``params`` text of a custom op call: its keyword arguments as compact, sorted JSON (a constant
    for ``torch.compile``: its arguments are the layers' own settings). Remembered per distinct value
    (its repr: True, 1 and 1.0 are three), as a repeated call (a training loop) asks for the same text
    every time."""
    items = tuple(params.items())
    if torch.compiler.is_compiling():       # traced once: the text is a constant of the graph
        return _encode(items)
    try:
        key = repr(items)
    except Exception:                       # something without a repr: encoded (or refused) uncached
        return _encode(items)
    text = _ENCODED.get(key)
    if text is None:
        if len(_ENCODED) >= _ENCODED_MAX:
            _ENCODED.clear()
        text = _ENCODED[key] = _encode(items)
    return text


#: encode's texts by the repr of their items (bounded: cleared when full)
_ENCODED: dict[str, str] = {}
_ENCODED_MAX = 4096


@torch.compiler.assume_constant_result
def _encode(items: tuple) -> str:
    return json.dumps({k: _jsonable(k, v) for k, v in items}, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def decode(params: str) -> dict[str, Any]:
    return json.loads(params)


# -- array slots ----------------------------------------------------------------------------------

def flatten(arrays: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(the non-None leaves of ``arrays``, their slots: 0 for None, 1 for an array, a list for a nest)."""
    leaves: list[Any] = []

    def slot(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [slot(v) for v in value]
        if value is None:
            return 0
        leaves.append(value)
        return 1

    return leaves, [slot(a) for a in arrays]


def unflatten(leaves: Sequence[Any], slots: Sequence[Any]) -> list[Any]:
    """The arrays :func:`flatten` took apart, from its leaves (or values standing for them)."""
    it = iter(leaves)

    def take(slot: Any) -> Any:
        if isinstance(slot, list):
            return [take(s) for s in slot]
        return next(it) if slot else None

    return [take(s) for s in slots]


def _map(fn: Any, tree: Any) -> Any:
    if isinstance(tree, list):
        return [_map(fn, t) for t in tree]
    return None if tree is None else fn(tree)


def _differentiable(op: str) -> list[bool]:
    """Per spec array: whether it has a gradient (batch norm's running statistics have none)."""
    return [a.gradient is not None for a in SPECS[op].arrays]


def _gradient_paths(op: str, slots: Sequence[Any]) -> tuple[tuple[int, ...] | None, ...]:
    """Per input (x, then others in flatten order): where its gradient is among the backward's results (an
    index, then indices into a nested one: rnn's dweights), or None for an input without one."""
    form = SPECS[op]
    paths: list[tuple[int, ...] | None] = []

    def walk(slot: Any, path: tuple[int, ...] | None) -> None:
        if isinstance(slot, list):
            for i, s in enumerate(slot):
                walk(s, None if path is None else (*path, i))
        elif slot:
            paths.append(path)

    for name, slot in zip(form.array_names, (1, *slots)):
        gradient = f"d{name}"
        walk(slot, (form.gradients.index(gradient),) if gradient in form.gradients else None)
    paths += [None] * len(form.tensor_arguments)      # dropout's seed tensor, the last of others: no gradient
    return tuple(paths)


def _pick(grads: tuple, path: tuple[int, ...]) -> Any:
    value: Any = grads
    for i in path:
        value = value[i] if value is not None else None
    return value


# -- dtypes and devices ---------------------------------------------------------------------------

_TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                 "float64": torch.float64, "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8,
                 "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint16": torch.uint16,
                 "uint32": torch.uint32}


def torch_dtype(dtype: Any) -> torch.dtype:
    return _TORCH_DTYPES[np.dtype(dtype).name]


def array_dtype(dtype: torch.dtype) -> Any:
    """The numpy dtype of a float tensor dtype (bfloat16 through ml_dtypes)."""
    return numpy_dtype(str(dtype).removeprefix("torch."))


def _backend(device: torch.device) -> str:
    """The backend of a tensor's device; meta tensors (shapes only) take the reference backend's residual
    specs, which need no device library."""
    if device.type in ("cpu", "meta"):
        return "reference"
    return "miopen" if torch.version.hip else "cudnn"


def _spec(t: Tensor) -> ArraySpec:
    return ArraySpec(tuple(int(s) for s in t.shape), array_dtype(t.dtype))


def _static(op: str, arrays: list[Any], kwargs: dict[str, Any], params: str, reals: Sequence[float]) -> tuple:
    """``ops.residual_static`` for this call, remembered per (op, arrays' types, shapes and dtypes, params,
    reals) like the public ops' checks; a call-varying dropout seed is never remembered."""
    if kwargs.get("seed") is not None:
        return residual_static(op, *arrays, **kwargs)
    metas = tuple(None if a is None else (type(a), tuple(a.shape), a.dtype) for a in _leaves(arrays))
    return remember(("residual_static", op, metas), (params, repr(tuple(float(r) for r in reals))),
                    lambda: residual_static(op, *arrays, **kwargs))


# -- the forward op -------------------------------------------------------------------------------

def _arguments(op: str, x: Any, others: Sequence[Any], p: dict[str, Any], reals: Sequence[float],
               read_seed: bool = False) -> tuple[list[Any], dict[str, Any]]:
    """The spec's arrays (x first) and the public op's keyword arguments of one call. Dropout's seed
    tensor is no array of the op's: its value becomes the ``seed`` keyword when ``read_seed`` (the real
    kernel), else None (shapes do not depend on it)."""
    arrays, seed = _forms_arrays(op, x, others, p["slots"])
    kwargs = {**p["args"], **dict(zip(p["reals"], reals))}
    for name in SPECS[op].tensor_arguments:   # (dropout's seed: one at most)
        kwargs[name] = int(seed.item()) if read_seed and seed is not None else None
    return arrays, kwargs


def _forms_arrays(op: str, x: Any, others: Sequence[Any], slots: Sequence[Any]) -> tuple[list[Any], Any]:
    """(x and others in the spec's order, None where not given; dropout's seed tensor, which is none of the
    op's arrays, or None)."""
    arrays = [x, *unflatten(others, slots)]
    seed = arrays.pop() if SPECS[op].tensor_arguments and len(arrays) > 1 else None
    return arrays, seed


def _forward(op: str, x: Tensor, others: Sequence[Tensor], params: str,
             reals: Sequence[float]) -> tuple[list[Tensor], list[Tensor]]:
    """The custom op's forward: outputs and residuals as tensors. Residuals are always saved (also inside
    dnnbind.no_grad()): the op's outputs must have the shapes its fake kernel reports. Batch norm's running
    statistics are updated in copies that come back as outputs (the op mutates none of its inputs)."""
    sig = _signature(op, x, others, params, reals)
    with off_cpu_scope(x.device), saving_residuals(True):
        result, statistics, residuals = forward_arrays(sig, to_array(x), others)
        outputs = [to_tensor(r) for r in (result if type(result) is tuple else (result,)) if r is not None]
        return outputs + statistics, [to_tensor(r) for r in residuals]


def off_cpu_scope(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """The device scope (convert.device_scope) around a whole call off the CPU, conversions included: CuPy
    then converts on torch's current stream, without a synchronisation per array. On the CPU nothing:
    only the backend's BLAS calls need a scope there (:data:`BLAS_OPS`)."""
    return _NOTHING if device.type == "cpu" else device_scope(device)


def forward_arrays(sig: _Signature, x: Any, others: Sequence[Tensor]) -> tuple[Any, list[Tensor], tuple]:
    """(the backend's results, batch norm's updated running statistics as new tensors, its residuals) of
    the op of ``sig`` on the array ``x`` and the tensors ``others``. Batch norm updates copies of the
    running statistics: the op mutates none of its inputs."""
    arrays = _map(to_array, sig.tensors(None, others)[1:])
    statistics: list[Any] = []
    updated = SPECS[sig.op].updated
    if SPECS[sig.op].updated_in_place:
        arrays[updated] = [None if a is None else a.copy() for a in arrays[updated]]
        statistics = [a for a in arrays[updated] if a is not None]
    with device_scope(sig.blas_scope) if sig.blas_scope is not None else _NOTHING:
        result, residuals = sig.forward(x, *arrays, *sig.static)
    return result, [to_tensor(a) for a in statistics], residuals


_NOTHING = contextlib.nullcontext()

#: ops whose reference backend calls numpy's BLAS (its support data says so), which dnnbind.torch holds to
#: one thread around them (see convert.device_scope); the others need no scope on the CPU
BLAS_OPS = frozenset(op for op, s in (backend_support("reference") or {}).items() if s.blas)


def once_scope(scopes: Sequence[torch.device | None]) -> contextlib.AbstractContextManager[None]:
    """The scope a run of backend calls needs (``scopes``: each call's, None where it needs none),
    entered once for the whole run: the first one given."""
    scope = next((s for s in scopes if s is not None), None)
    return _NOTHING if scope is None else device_scope(scope)


def _blas_scope(op: str, device: torch.device, static: tuple) -> torch.device | None:
    """The device whose scope the backend call itself needs: the CPU for the BLAS ops, else None (off
    the CPU, :func:`off_cpu_scope` covers the whole call). A convolution too small for OpenBLAS to
    thread any of its products needs none: setting OpenBLAS's threads and back costs more than it."""
    if device.type != "cpu" or op not in BLAS_OPS:
        return None
    if isinstance(static[0], ConvDims) and macs(static[0]) < BLAS_ONE_THREAD_MACS:
        return None
    return device


#: OpenBLAS runs a product of fewer multiply-adds than this on one thread (its GEMM threading threshold,
#: 65536 times GEMM_MULTITHREAD_THRESHOLD's default 4); dnnbind's own splits start far above it
BLAS_ONE_THREAD_MACS = 65536 * 4


class _Signature:
    """What every call of one op with the same params, reals, and tensor shapes, dtypes and device has in
    common: the tensors' places among the op's spec's arrays, the backend's functions and static arguments
    (checked once, as the public ops' plans are), and what the autograd setup records. Built by the first
    such call; a repeated call (a training loop's) finds it by one dictionary lookup."""

    __slots__ = ("op", "p", "device", "static", "forward", "backward", "record", "cached", "plan", "blas_scope",
                 "scoped", "positions", "gradients")

    def __init__(self, op: str, x: Tensor, others: Sequence[Tensor], params: str, reals: Sequence[float],
                 tensors: list[Any], kwargs: dict[str, Any]) -> None:
        self.op, self.p, self.device = op, decode(params), x.device
        backend = _backend(x.device)
        specs = _map(_spec, tensors)
        self.static = _static(op, specs, kwargs, params, reals)
        # every call of this signature has these shapes and dtypes: it skips the backend's wrappers
        # that only call through for them (residual.passes_when), as the public ops' plans do
        self.forward = innermost(backend_function(backend, f"{op}_forward"), (*specs, *self.static), {})
        self.backward = backend_function(backend, f"{op}_backward")
        self.record = _call_record(op, x, others, self.p, reals)
        self.cached = False        # whether _signature remembers it (a dropout call with a seed: no)
        self.plan: Any = None      # the eager path's Plan on it (dnnbind.torch.eager)
        self.blas_scope = _blas_scope(op, x.device, self.static)
        # whether a call needs a device scope at all: off the CPU always, on it the BLAS ops
        self.scoped = x.device.type != "cpu" or self.blas_scope is not None
        slots = self.p["slots"]
        # spec array -> its index in (x, *others), None where not given; None for rnn's nested weights
        # and dropout's seed tensor (no array of the op's), which take the general mapping
        self.positions: tuple[int | None, ...] | None = None
        if not SPECS[op].tensor_arguments and not any(isinstance(s, list) for s in slots):
            counter = iter(range(1, 1 + len(others)))
            self.positions = (0, *[next(counter) if s else None for s in slots])
        self.gradients = _gradient_paths(op, slots)

    def tensors(self, x: Any, others: Sequence[Any]) -> list[Any]:
        """x and others in the spec's order (None where not given; dropout's seed tensor left out): the
        tensors, or whatever stands for them (their indices)."""
        if self.positions is None:
            return _forms_arrays(self.op, x, others, self.p["slots"])[0]
        inputs = (x, *others)
        return [None if i is None else inputs[i] for i in self.positions]


def _signature(op: str, x: Tensor, others: Sequence[Tensor], params: str, reals: Sequence[float]) -> _Signature:
    """The :class:`_Signature` of this call: remembered, except for a dropout call with a seed tensor (whose
    value is one of the static arguments)."""
    seeded = bool(SPECS[op].tensor_arguments) and len(others) > 0
    key = None
    if not seeded:
        key = call_key(op, x, others, params, reals)
        found = _SIGNATURES.get(key)
        if found is not None:
            return found
    tensors, kwargs = _arguments(op, x, list(others), decode(params), reals, read_seed=True)
    sig = _Signature(op, x, others, params, reals, tensors, kwargs)
    if key is not None:
        if len(_SIGNATURES) >= _SIGNATURES_MAX:
            _SIGNATURES.clear()
        _SIGNATURES[key] = sig
        sig.cached = True
    return sig


def call_key(op: str, x: Tensor, others: Sequence[Tensor], params: str, reals: Sequence[float]) -> tuple:
    """What calls sharing a signature share: the op, its params and reals (exact), and the tensors'
    shapes, dtypes and x's device."""
    return (op, params, tuple([float(r).hex() for r in reals]), x.shape, x.dtype, x.device,
            *[(t.shape, t.dtype) for t in others])


#: eager calls' signatures (bounded: cleared when full; a training loop has a few)
_SIGNATURES: dict[tuple, _Signature] = {}
_SIGNATURES_MAX = 1024


def _fake_forward(op: str, x: Tensor, others: Sequence[Tensor], params: str,
                  reals: Sequence[float]) -> tuple[list[Tensor], list[Tensor]]:
    """The fake kernel: results and residuals of the shapes the real kernel gives, symbolic sizes kept
    symbolic (:mod:`dnnbind.torch.symbolic`)."""
    found: list[Any] = []

    def evaluate(size_of: Any) -> list[Any]:
        def like(t: Any) -> Any:
            return None if t is None else SimpleNamespace(shape=size_of(t), dtype=t.dtype, device=t.device)
        found[:] = result_specs(op, like(x), [like(t) for t in others], params, reals)
        return [*found[0], *[s.shape for s in found[1]]]

    every = symbolic.shapes(evaluate, [x, *others])
    shapes, saved = every[:len(found[0])], [(s, spec.dtype) for s, spec in zip(every[len(found[0]):], found[1])]
    outputs = [x.new_empty(shape, dtype=torch.int64 if output_dtype(SPECS[op], i, None) is not None else x.dtype)
               for i, shape in enumerate(shapes) if shape is not None]
    if SPECS[op].updated_in_place:            # the updated copies (batch norm's running statistics)
        outputs += [x.new_empty(t.shape, dtype=t.dtype) for t in found[2][1:][SPECS[op].updated] if t is not None]
    return outputs, [x.new_empty(shape, dtype=torch_dtype(dtype)) for shape, dtype in saved]


def result_specs(op: str, x: Any, others: Sequence[Any], params: str,
                 reals: Sequence[float]) -> tuple[list[Any], tuple[ArraySpec, ...], list[Any]]:
    """(the op's result shapes, None where a result is not returned; its residuals as ArraySpecs; x and
    others in the spec's order) for tensors or anything with their shape, dtype and device: computed, not run."""
    p = decode(params)
    tensors, kwargs = _arguments(op, x, list(others), p, [float(r) for r in reals])
    specs = _map(_spec, tensors)
    static = _static(op, specs, kwargs, params, reals)
    shapes = SPECS[op].empty((*specs, *static)).outputs
    saved = backend_function(_backend(x.device), f"{op}_residuals")(*specs, *static)
    return list(shapes), tuple(saved), tensors


def op_params(op: str, device_type: str, arrays: Sequence[Any],
              kwargs: dict[str, Any]) -> tuple[list[Any], str, dict[str, Any]]:
    """(others, params, reals) of a custom op call: the arrays after x flattened (None left out), the
    params text and the float settings by name. Float settings (p, eps, momentum, alpha) travel as the
    op's float arguments: torch.compile may trace a layer's float attribute as a symbolic value, which
    cannot be part of the params text."""
    others, slots = flatten(arrays)
    reals = {k: v for k, v in kwargs.items() if isinstance(v, (float, torch.SymFloat))}
    compiling = torch.compiler.is_compiling()
    args = {k: _constant(v) if compiling else v for k, v in kwargs.items() if k not in reals}
    return others, encode(args=args, reals=list(reals), slots=slots, saves=_saves(device_type)), reals


# -- the backward op ------------------------------------------------------------------------------

def _backward_arguments(op: str, p: dict[str, Any], reals: Sequence[float]) -> tuple[list[Any], dict[str, Any]]:
    """The forward's spec's arrays as ArraySpecs (from the shapes the autograd setup recorded)."""
    dtype = numpy_dtype(p["dtype"])
    specs = [ArraySpec(tuple(s), dtype) for s in p["shapes"]]
    return _arguments(op, specs[0], specs[1:], p, [float(r) for r in reals])


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, (list, tuple)) and not isinstance(tree, ArraySpec):
        return [leaf for t in tree for leaf in _leaves(t)]
    return [tree]


def _backward(op: str, residuals: Sequence[Tensor], cotangents: Sequence[Tensor], params: str,
              reals: Sequence[float]) -> list[Tensor]:
    given, needs, static, paths, scope, backward = _backward_call(op, params, reals)
    return _run_backward(op, residuals, cotangents, given, needs, static, paths, scope, backward)


def _backward_call(op: str, params: str, reals: Sequence[float]) -> tuple:
    """What every backward op call with these params and reals repeats (a compiled graph's, each step):
    the cotangents given and gradients needed, the static arguments, the forward's arrays as ArraySpecs,
    the device and the backend's function; remembered (bounded, like the eager signatures)."""
    key = (op, params, *[float(r).hex() for r in reals])
    found = _BACKWARD_CALLS.get(key)
    if found is not None:
        return found
    p = decode(params)
    arrays, kwargs = _backward_arguments(op, p, reals)
    device = torch.device(p["device"])
    with device_scope(device):
        static = _static(op, arrays, kwargs, params, reals)
    # where each gradient the op returns (one per given differentiable array) is among the backend's
    paths = tuple(path for path in _gradient_paths(op, p["slots"]) if path is not None)
    call = (p["given"], p.get("needs"), static, paths, _blas_scope(op, device, static),
            backend_function(_backend(device), f"{op}_backward"))
    if len(_BACKWARD_CALLS) >= _SIGNATURES_MAX:
        _BACKWARD_CALLS.clear()
    _BACKWARD_CALLS[key] = call
    return call


#: backward op calls' shared parts, by op, params and reals (see _backward_call)
_BACKWARD_CALLS: dict[tuple, tuple] = {}


def _run_backward(op: str, residuals: Sequence[Tensor], cotangents: Sequence[Tensor], given: Sequence[bool],
                  needs: Sequence[bool] | None, static: tuple, paths: tuple[tuple[int, ...], ...],
                  scope: torch.device | None, backward: Any) -> list[Tensor]:
    """The backend's ``backward`` on the given cotangents; one gradient per given differentiable array
    (``paths``: where each is among the backend's results); where ``needs`` skipped one, an empty tensor
    (the custom op returns tensors only). ``scope``: the device whose scope the backend call needs (the
    CPU for the BLAS ops), or None."""
    like = cotangents[0]
    with off_cpu_scope(like.device):
        it = iter([to_array(c) for c in cotangents])
        cts = tuple([next(it) if flag else None for flag in given])
        picked = backward_arrays(tuple([to_array(r) for r in residuals]), cts, needs, static, paths, scope, backward)
        return [like.new_empty((0,)) if g is None else to_tensor(g) for g in picked]


def backward_arrays(saved: tuple, cotangents: tuple, needs: Sequence[bool] | None, static: tuple,
                    paths: tuple[tuple[int, ...], ...], scope: torch.device | None, backward: Any) -> list[Any]:
    """The backend's ``backward`` on arrays: one gradient array per path (None where ``needs`` skipped
    it), in the device scope ``scope`` (None: none)."""
    with device_scope(scope) if scope is not None else _NOTHING:
        grads = (backward(saved, cotangents, *static) if needs is None
                 else backward(saved, cotangents, *static, needs=tuple(needs)))
    if type(grads) is not tuple:
        grads = (grads,)
    return [_pick(grads, path) for path in paths]


def _fake_backward(op: str, residuals: Sequence[Tensor], cotangents: Sequence[Tensor], params: str,
                   reals: Sequence[float]) -> list[Tensor]:
    p = decode(params)
    arrays, _ = _backward_arguments(op, p, reals)
    like = cotangents[0]
    needs = p.get("needs")
    if needs is not None:          # conv and conv_transpose: one flag per array (x, w, b)
        return [like.new_empty(a.shape if need else (0,)) for a, need in zip(arrays, needs) if a is not None]
    flat = [a for a, diff in zip(arrays, _differentiable(op)) if diff]
    return [like.new_empty(a.shape) for a in _leaves(flat) if a is not None]


# -- autograd -------------------------------------------------------------------------------------

def _remember_call(op: str, ctx: Any, x: Tensor, others: Sequence[Tensor], params: str, reals: Sequence[float],
                   outputs: Sequence[Tensor]) -> list[Tensor]:
    """Keep on ``ctx`` what the backward needs besides the residuals; returns the outputs that get no
    gradient (batch norm's running statistics, maxpool's integer indices). The tensors' sizes become
    the backward's params only when a backward runs (:func:`_record_of`): a symbolic size stays
    symbolic while a forward is traced alone (torch.export with a dynamic batch)."""
    p = decode(params)
    ctx.op, ctx.call, ctx.record = op, (metadata(x), [metadata(t) for t in others], p, list(reals)), None
    ctx.results = len(outputs) - _running_statistics(op, p)
    ctx.reals = list(reals)
    ctx.first = (outputs[0].shape, outputs[0].dtype, outputs[0].device)
    return list(outputs[ctx.results:]) + [o for o in outputs[:ctx.results] if not o.is_floating_point()]


def metadata(t: Tensor) -> SimpleNamespace:
    """What the shape logic reads of a tensor (its sizes, dtype and device), kept without the tensor."""
    return SimpleNamespace(shape=tuple(t.shape), dtype=t.dtype, device=t.device)


def _record_of(ctx: Any) -> tuple[str, dict[str, Any], list[bool], int]:
    """:func:`_call_record` of the call ``ctx`` remembered, worked out once."""
    if ctx.record is None:
        ctx.record = _call_record(ctx.op, *ctx.call)
    return ctx.record


def _call_record(op: str, x: Tensor, others: Sequence[Tensor], p: dict[str, Any],
                 reals: Sequence[float]) -> tuple[str, dict[str, Any], list[bool], int]:
    """(op, the backward's params: the call's with the tensors' shapes, dtype and device, whether each tensor
    in others gets a gradient, how many running statistics follow the results)."""
    stats = _running_statistics(op, p)
    # per tensor in others: whether it gets a gradient (slots past the spec's arrays, dropout's seed, get none)
    diff = [d for d, slot in itertools.zip_longest(_differentiable(op)[1:], _flat_slots(p["slots"]),
                                                   fillvalue=False) for _ in range(slot)]
    shapes = [[int(s) for s in t.shape] for t in (x, *others)]
    if SPECS[op].tensor_arguments:            # the seed tensor is no array of the op's
        shapes = shapes[:1]
        p = {**p, "slots": []}
    params = {**p, "shapes": shapes, "dtype": array_dtype(x.dtype).name, "device": str(x.device)}
    return op, params, diff, stats


def _flat_slots(slots: Sequence[Any]) -> list[int]:
    """Per spec array after x: how many tensors it put into ``others``."""
    return [sum(_leaves(s)) if isinstance(s, list) else s for s in slots]


def _running_statistics(op: str, p: dict[str, Any]) -> int:
    """How many running statistics batch norm returns after y (those given); 0 for other ops."""
    return sum(_flat_slots(p["slots"])[SPECS[op].updated])


def gradients(op: str, x: Tensor, others: Sequence[Tensor], params: str, reals: Sequence[float],
              outputs: Sequence[Tensor], residuals: Sequence[Tensor], d_outputs: Sequence[Tensor | None],
              need_x: bool, need_others: Sequence[bool]) -> tuple[Tensor | None, list[Tensor | None]]:
    """(dx, one gradient per tensor in others, None where it has none or is not needed) of the forward
    call (x, others, params, reals) that gave ``outputs`` (its results, then batch norm's running
    statistics) and ``residuals``, for the results' cotangents ``d_outputs`` (None: not given)."""
    ctx = SimpleNamespace()
    _remember_call(op, ctx, x, others, params, reals, outputs)
    _, call_params, diff, _ = _record_of(ctx)
    # integer results (maxpool's indices) take no cotangent
    d_results = [d if d is None or d.is_floating_point() else None for d in list(d_outputs)[:ctx.results]]
    d_results += [None] * (ctx.results - len(d_results))
    if not any(d is not None for d in d_results):
        return None, [None] * len(diff)
    if d_results[0] is None:                  # the first cotangent is required: zeros stand for "unused"
        shape, dtype, device = ctx.first
        d_results[0] = torch.zeros(shape, dtype=dtype, device=device)
    given = [d is not None for d in d_results]
    need_others = [bool(f) for f in need_others]
    needs = None
    if SPECS[op].skippable:      # x, w, b: whether autograd wants each (b's slot False when b was None)
        slots = iter(need_others)
        needs = [bool(need_x)] + [bool(next(slots)) if slot else False for slot in call_params["slots"]]
    cotangents = [d for d in d_results if d is not None]
    extra: dict[str, Any] = {"given": given} if needs is None else {"given": given, "needs": needs}
    grads = _backward(op, list(residuals), cotangents, _encode(tuple({**call_params, **extra}.items())), reals)
    it = iter(grads)
    dx: Tensor | None = next(it)
    d_others = [next(it) if has else None for has in diff]
    dx = dx if need_x else None
    d_others = [d if need else None for d, need in zip(d_others, need_others)]
    return dx, d_others


def _no_gradient(reals: list[float]) -> Any:
    """The (absent) gradient of the ``reals`` argument, in the structure torch's check expects: an empty
    list for an empty one, None for a filled one (a float list is one input to autograd)."""
    return [] if not reals else None


# -- registration ---------------------------------------------------------------------------------

def _register(op: str) -> None:
    """The residual form's backward as an op of its own, ``dnnbind::NAME_eager_backward``: what an eager
    call's backward records when autograd builds a graph of it (create_graph), so that a second derivative
    through it is refused by its missing formula instead of coming out wrong."""
    backward = torch.library.custom_op(f"{NAMESPACE}::{op}_eager_backward", functools.partial(_backward, op),
                                       mutates_args=(), schema=_BACKWARD_SCHEMA)
    backward.register_fake(functools.partial(_fake_backward, op))


for _op in SPECS:
    _register(_op)


def _saves_tag(device_type: str) -> str:
    """What decides the residuals' shapes besides the call's own arguments: dnnbind's version and residual
    revision, and on the CPU whether the reference backend's C kernels run (they take other paths, which
    save other arrays). In the params text, so a graph torch.compile cached under other conditions is
    not reused. Computed when this module is imported (a compiled graph must not trace it)."""
    from dnnbind import __version__
    from dnnbind.highlevel.reference import native
    kernels = "" if device_type != "cpu" else "/native" if native.library() is not None else "/numpy"
    return f"{__version__}/r{RESIDUAL_REVISION}{kernels}"


_SAVES = {"cpu": _saves_tag("cpu")}
_SAVES["meta"] = _SAVES["cpu"]          # meta tensors' residuals are the reference backend's (see _backend)
_SAVES_ELSEWHERE = _saves_tag("cuda")


def _saves(device_type: str) -> str:
    return _SAVES.get(device_type, _SAVES_ELSEWHERE)


def _constant(value: Any) -> Any:
    """``value`` with plain Python ints (torch.compile may trace an int setting as a symbolic one)."""
    if isinstance(value, (list, tuple)):
        return type(value)(_constant(v) for v in value)
    if isinstance(value, torch.SymInt):
        return int(value)
    return value
