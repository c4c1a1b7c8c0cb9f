"""The functions of :mod:`dnnbind.torch.functional`, made from the op specs (as
:mod:`dnnbind.highlevel.ops` makes the public numpy-level ones): one per spec, with the spec's parameters
(its arrays as tensors), its ``tensor_doc`` and one body for every op, specialised per spec when the
function is made, so that a repeated call does only what its op needs.

A call takes the arguments that are not arrays as the eager plans key them (ints given as a torch.Size
as a tuple, as a tensor as a list); under torch.autocast, for an op whose spec says so
(:attr:`~dnnbind.highlevel.specs.base.OpSpec.autocast`), its floating-point tensors in autocast's dtype;
then the plan an earlier call left (:func:`~dnnbind.torch.eager.planned`), else the checked path
(:func:`checked_call`): the tensors' device and dtype checks, a seed tensor for each tensor argument, the
unbatched rule (the batch axis added with ``unsqueeze`` and removed from the results, so autograd and the
compilers see plain views), the call (:func:`~dnnbind.torch.eager.call`) and the statistics an op updates
in place copied back (which torch.compile and torch.export trace as buffer updates).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import torch

from dnnbind.highlevel.specs import SPECS
from dnnbind.highlevel.specs.base import REQUIRED, OpSpec, Param
from dnnbind.highlevel.unbatched import batch_axis
from dnnbind.torch.convert import check_same_dtype, common_device
from dnnbind.torch.errors import as_torchs
from dnnbind.torch.eager import call, planned

Tensor = torch.Tensor


def _check(**tensors: Any) -> None:
    """TypeError in torch's terms for a non-tensor, an unsupported dtype or device, or a mix of them."""
    flat: dict[str, Any] = {}
    for name, value in tensors.items():
        if isinstance(value, (list, tuple)):
            for i, entry in enumerate(value):
                for j, a in enumerate(entry if isinstance(entry, (list, tuple)) else (entry,)):
                    flat[f"{name}[{i}][{j}]"] = a
        else:
            flat[name] = value
    if flat.get("x") is None:
        raise TypeError("x must be a torch.Tensor, not None")
    common_device(flat)
    check_same_dtype(flat)


def autocast_dtype(x: Tensor) -> torch.dtype | None:
    """The dtype torch.autocast runs its lower-precision ops in on x's device (None: autocast is off there).
    torch's own conv, conv_transpose and recurrent layers are such ops, so dnnbind's are too."""
    if not torch._C._is_any_autocast_enabled():
        return None
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None


def _autocast(spec: OpSpec, arguments: dict[str, Any], *arrays: Any) -> tuple[Any, ...]:
    """The op's arrays (x first) as torch.autocast's lower-precision ops take them: the floating-point
    tensors in the autocast dtype of x's device, or x's where the spec's autocast exempts the call (as
    they are when autocast is off there); a nested array is a list of lists of tensors."""
    x = arrays[0]
    dtype = autocast_dtype(x)
    if dtype is None:
        return arrays
    widen = spec.autocast.float32 if spec.autocast is not None else None
    if widen is not None:
        dtype = torch.float32 if widen(arguments, tuple(x.shape), x.device.type) else x.dtype
    exempt = spec.autocast.exempt if spec.autocast is not None else None
    if exempt is not None and exempt(arguments, x.device.type):
        dtype = x.dtype

    def lower(t: Any) -> Any:
        if isinstance(t, (list, tuple)):
            return [lower(u) for u in t]
        return t.to(dtype) if t is not None and t.is_floating_point() and t.dtype != dtype else t
    return tuple(lower(t) for t in arrays)


def _takes_ints(spec: OpSpec, name: str) -> bool:
    """Whether the argument ``name`` takes an int or ints (its typed schema's SymInt or SymInt[]): a torch.Size
    or an integer tensor is taken for them, as torch's own functions take them."""
    kind = spec.kinds.get(name)
    return kind is not None and kind.schema.startswith("SymInt")


def _ints(value: Any) -> Any:
    """Ints given as a torch.Size or a tensor as a tuple (a 0-d tensor: an int), as the plans key the same
    ints given as a tuple."""
    if isinstance(value, Tensor):
        value = value.tolist()
        if not isinstance(value, list):
            return value
    return tuple(value)


def _seed(name: str, value: Any, random: bool) -> Tensor:
    """The tensor a tensor argument (a seed: dropout's) passes: drawn from torch's default generator when
    None and the call is ``random`` (``torch.manual_seed`` makes it reproducible), else the non-negative
    int given (0 for None where nothing is random)."""
    if value is None:
        return torch.randint(0, 2**62, (), dtype=torch.int64) if random else torch.zeros((), dtype=torch.int64)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"{name}={value!r} must be None or a non-negative int")
    return torch.tensor(value, dtype=torch.int64)


def result(spec: OpSpec, outputs: Sequence[Any], arguments: dict[str, Any]) -> Any:
    """What the function returns from the op's outputs: the one output the call asks for, else a tuple of
    them (None for an output the op did not return, as rnn's cy without an LSTM)."""
    shown = [o for o in spec.outputs if o.when is None or arguments[o.when]]
    if len(shown) == 1:
        return outputs[0]
    return tuple(outputs[i] if i < len(outputs) else None for i in range(len(shown)))


def checked_call(spec: OpSpec, arrays: list[Any], arguments: dict[str, Any]) -> Any:
    """A call without a plan (the first of its kind, traced, or of an op that is not planned): checked,
    run on the batched problem (:attr:`OpSpec.unbatched`) and returned as :func:`result` says. A
    ValueError or TypeError of its checks is also a RuntimeError, as torch's are (errors.as_torchs)."""
    try:
        return _checked_call(spec, arrays, arguments)
    except (ValueError, TypeError) as error:
        raise as_torchs(error)


def _numbers(spec: OpSpec, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments with a 0-d tensor given for an int or a float (alone or in a list or tuple: torch's
    ConvTranspose computes its output_padding as tensors from tensors in output_size) as that number, as
    torch's own functions take them. (Only here, on the checked path: a plan's key holds no tensor.)"""
    def number(value: Any) -> Any:
        if isinstance(value, Tensor) and value.dim() == 0 and not value.is_complex():
            return value.item()
        if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
            return type(value)(number(v) for v in value)
        return value
    kinds = spec.kinds
    return {name: number(value) if name in kinds and kinds[name].schema.startswith(("SymInt", "float")) else value
            for name, value in arguments.items()}


def _checked_call(spec: OpSpec, arrays: list[Any], arguments: dict[str, Any]) -> Any:
    arguments = _numbers(spec, arguments)
    flat = [(a, v) for a, v in zip(spec.arrays, arrays) if not a.nested]
    nested = [(a, v) for a, v in zip(spec.arrays, arrays) if a.nested]
    _check(**{a.name: v for a, v in flat + nested if not a.own_dtype})    # the states before the weights
    own = {a.name: v for a, v in flat if a.own_dtype}
    if own:
        common_device({"x": arrays[0], **own})
    random = spec.random is None or spec.random(arguments)
    seeds = [_seed(name, arguments[name], random) for name in spec.tensor_arguments]
    keywords = {n: v for n, v in arguments.items() if n not in spec.tensor_arguments} if seeds else arguments
    arrays = [[list(entry) for entry in v] if a.nested and v is not None else v for a, v in zip(spec.arrays, arrays)]
    axis = batch_axis(spec, arrays, arguments)   # one sample: added to the batched arrays, dropped from the outputs
    if axis is not None:
        arrays = [v.unsqueeze(axis) if a.batched and v is not None else v for a, v in zip(spec.arrays, arrays)]
    outputs = call(spec.name, *arrays, *seeds, **keywords)
    if axis is not None:
        outputs = [o.squeeze(axis) if i < len(spec.outputs) else o for i, o in enumerate(outputs)]
    if spec.updates_in_place(arguments):
        copy_back(spec, arrays, outputs[len(spec.outputs):])
    return result(spec, outputs, arguments)


def copy_back(spec: OpSpec, arrays: Sequence[Any], new: Sequence[Tensor]) -> None:
    """The arrays the op updates in place (batch norm's running statistics) set to the values it returned
    for them, where those are new tensors (a traced call's; an eager call updated them in place and
    returns them as they are)."""
    updated = [arrays[spec.array_names.index(n)] for n in spec.updated_in_place]
    for old, value in zip([u for u in updated if u is not None], new):
        set_in_place(old, value)


def set_in_place(old: Tensor, value: Tensor) -> None:
    """``old`` (a running statistic) given ``value``'s values, unless it is ``value`` itself. Detached
    rather than under no_grad: torch.export then records a plain buffer mutation (a no_grad block
    becomes a higher-order op whose missing result torch.export.save refuses). Under a torch.func
    transform that ``old`` comes from outside of (captured), ``value`` is unwrapped to old's level
    first, as torch's own batch norm updates captured statistics inside its kernel (the transform
    refuses an in-place copy from its own level into a captured tensor)."""
    if value is old:
        return
    value = value.detach()
    # (Dynamo cannot trace the levels: a plain copy while a compiler traces)
    if not torch.compiler.is_compiling() and _level(value) > _level(old):
        while _level(value) > _level(old):
            value = _unwrapped(value)
        with torch._C._DisableFuncTorch():
            old.copy_(value)
        return
    old.copy_(value)


_level = torch._C._functorch.maybe_get_level
_unwrapped = torch._C._functorch.get_unwrapped


def _annotation(spec: OpSpec, name: str, annotation: str) -> str:
    """A parameter's annotation on tensors: an array's is Tensor (or a nest of them), a seed's an int."""
    array = next((a for a in spec.arrays if a.name == name), None)
    params = {p.name: p for p in spec.params}
    if array is not None:
        if array.nested:
            return "Sequence[Sequence[Tensor | None]]"
        return "Tensor | None" if array.optional or params[name].default is None else "Tensor"
    return "int | None" if name in spec.tensor_arguments else annotation


def _returns(spec: OpSpec) -> str:
    """The function's return annotation (Any where an argument decides how many results it has)."""
    if any(o.when for o in spec.outputs):
        return "Any"
    if len(spec.outputs) == 1:
        return "Tensor"
    return f"tuple[{', '.join('Tensor | None' if o.why_none else 'Tensor' for o in spec.outputs)}]"


def _parameters(spec: OpSpec, entry: Callable[[Param], str]) -> str:
    """The parameter list, each parameter as ``entry(param)`` writes it, ``*`` before the keyword-only ones."""
    params, keyword = [], False
    for p in spec.params:
        if p.keyword_only and not keyword:
            params.append("*")
            keyword = True
        params.append(entry(p))
    return ", ".join(params)


def torch_function(spec: OpSpec) -> Callable[..., Any]:
    """The function of ``spec`` on tensors, with its signature and docstring (see the module doc)."""
    namespace: dict[str, Any] = {"_spec": spec, "_op": spec.name, "_planned": planned, "_checked": checked_call,
                                 "_result": result, "_autocast": _autocast, "_ints": _ints,
                                 "_autocast_on": torch._C._is_any_autocast_enabled,
                                 # the annotations' names, for typing.get_type_hints (sphinx's autodoc)
                                 "Tensor": Tensor, "Any": Any, "Sequence": Sequence,
                                 "_Size": torch.Size}
    namespace.update({f"_default_{p.name}": p.default for p in spec.params if p.default is not REQUIRED})
    arrays = ", ".join(spec.array_names) + ("," if len(spec.arrays) == 1 else "")
    lines = [f"def {spec.name}({_parameters(spec, _with_default)}):"]
    for p in spec.params:
        if _takes_ints(spec, p.name):
            lines.append(f"    if isinstance({p.name}, (_Size, Tensor)):")
            lines.append(f"        {p.name} = _ints({p.name})")
    lines.append(f"    arguments = {{{', '.join(f'{n!r}: {n}' for n in spec.arguments)}}}")
    if spec.autocast is not None:
        lines.append("    if _autocast_on():")
        lines.append(f"        {arrays} = _autocast(_spec, arguments, {arrays})")
    if spec.planned:
        first = "done[0]" if len(spec.outputs) == 1 else "_result(_spec, done, arguments)"
        lines += [f"    done = _planned(_op, ({arrays}), arguments)",
                  "    if done is not None:",
                  f"        return {first}"]
    lines.append(f"    return _checked(_spec, [{arrays}], arguments)")
    exec(compile("\n".join(lines) + "\n", f"<dnnbind.torch {spec.name}>", "exec"), namespace)
    function = namespace[spec.name]
    function.__doc__ = spec.tensor_doc
    function.__module__ = "dnnbind.torch.functional"
    function.__annotations__ = {p.name: _annotation(spec, p.name, p.annotation) for p in spec.params}
    function.__annotations__["return"] = _returns(spec)
    function.__dnnbind_spec__ = spec
    return function


def stub_source() -> str:
    """The text of ``functional.pyi``: the functions' signatures for type checkers, from the specs
    (tests/torch_adapter/test_torch_functional.py checks that the committed file equals it)."""
    lines = ['"""GENERATED from the op specs by dnnbind.torch.spec_functions.stub_source(); do not edit."""',
             "from typing import Any, Sequence", "", "from torch import Tensor", "",
             "from dnnbind.torch.spec_functions import autocast_dtype as autocast_dtype", ""]
    for spec in SPECS.values():
        lines.append(f"def {spec.name}({_parameters(spec, functools.partial(_typed, spec))}) -> {_returns(spec)}: ...")
    return "\n".join(lines) + "\n"


def _with_default(p: Param) -> str:
    """A parameter of the made function, its default (if any) read from the function's namespace."""
    return p.name if p.default is REQUIRED else f"{p.name}=_default_{p.name}"


def _typed(spec: OpSpec, p: Param) -> str:
    """A parameter of the stub: ``name: annotation`` (``= ...`` when it has a default)."""
    return f"{p.name}: {_annotation(spec, p.name, p.annotation)}" + ("" if p.default is REQUIRED else " = ...")
