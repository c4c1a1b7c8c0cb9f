"""The public ops, made from their specs (:mod:`dnnbind.highlevel.specs`), and the explicit plan object.

Every op returns ``(result, pullback)``. A pullback (a :class:`~dnnbind.highlevel.pullback.Pullback`,
whose repr and docstring name the op and the cotangents it takes) takes the gradient of the result and
returns the gradients of the array inputs; it may be called any number of times and never changes what the
forward pass saved. What the forward saves is its own: changing x, the parameters or the returned result
after the forward never changes what the pullback returns (every backend keeps a copy where it would
otherwise keep the caller's array). Semantics equal ``torch.nn.functional`` for the same arguments unless a
docstring says otherwise. Arrays are float16, bfloat16, float32 or float64 (float16 and bfloat16 are computed
in float32 on the CPU, bfloat16 through the ``ml_dtypes`` package).

Unbatched input, as torch.nn.functional takes it (see :mod:`dnnbind.highlevel.unbatched` for the
rules): conv and conv_transpose take x (C, *spatial) with one dimension fewer than w; maxpool and meanpool
take x (C, *spatial) when an argument given per spatial dimension (a sequence) says the spatial rank;
rnn takes x (seq, input) with h0, c0 (num_layers * num_directions, size). Results, cotangents and the
gradients of those inputs then have no batch axis either.

Edge cases follow one policy for every op and backend (see :mod:`dnnbind.highlevel.edges`): 0-d arrays
give 0-d results where PyTorch takes them; zero-size arrays give empty results and gradients without
running any backend where PyTorch does so, and a ValueError naming the argument elsewhere. ``None`` for
a required array is a TypeError naming it.

Each public function is generated from its spec (:func:`public_function`), with the spec's real
signature and docstring: it looks its plan up (:mod:`dnnbind.highlevel.plans`) by a key built inline,
and runs it; the first call of a call signature takes :func:`checked`, which adopts device arrays,
runs the spec's checks, picks the backend and builds the plan. Backends receive validated, normalized
arguments only (dims objects, resolved activation coefficients).
"""
from __future__ import annotations

from typing import Any, Callable

from dnnbind.highlevel.dispatch import adopted, backend_op
from dnnbind.highlevel.plans import CACHE, Plan, array_key, find_or_build, nested_key, tags
from dnnbind.highlevel.pullback import Pullback
from dnnbind.highlevel.residual import ArraySpec
from dnnbind.highlevel.specs import SPECS, OpSpec
from dnnbind.highlevel.specs.activation import ACTIVATION_DEFAULTS, activation_alpha
from dnnbind.highlevel.specs.base import REQUIRED
from dnnbind.highlevel.unbatched import Unbatched, problem, with_batch


def _flat(spec: OpSpec, arrays: tuple) -> dict[str, Any]:
    """The arrays by name, nested ones flattened (``weights[i][j]``), as dispatch takes them."""
    flat: dict[str, Any] = {}
    for arg, value in zip(spec.arrays, arrays):
        if arg.nested:
            flat.update({f"{arg.name}[{i}][{j}]": a for i, entry in enumerate(value) for j, a in enumerate(entry)})
        else:
            flat[arg.name] = value
    return flat


def make_plan(spec: OpSpec, arrays: tuple, arguments: tuple) -> Plan:
    """Check one call (arrays in the spec's order, the other arguments in the public order), pick its
    backend and build its plan; errors name the argument."""
    named = dict(zip(spec.array_names, arrays))
    kwargs = dict(zip(spec.arguments, arguments))
    for arg, value in zip(spec.arrays, arrays):
        if arg.nested:
            spec.parse(value)                                   # checked before the arrays in it
    run = backend_op(spec.name, tuple(a.name for a in spec.arrays if not a.optional and not a.nested),
                     **_flat(spec, arrays))
    if spec.unbatched is not None and spec.unbatched.test(named, kwargs):
        axis = spec.unbatched.axis
        batched = [i for i, a in enumerate(spec.arrays) if a.batched]
        # the checks see the batch of one it runs as; the run adds the batch axis and drops it again
        specs = tuple(ArraySpec(with_batch(a.shape, axis), a.dtype) if i in batched and a is not None else a
                      for i, a in enumerate(arrays))
        static = problem(lambda: spec.check(*specs, **kwargs), named[spec.arrays[0].name].shape)
        gradients = tuple(spec.gradients.index(spec.arrays[i].gradient) for i in batched)
        run = Unbatched(run, inputs=tuple(batched), gradients=gradients, axis=axis)
    else:
        static = spec.check(*arrays, **kwargs)
    title = spec.name if spec.title is None else spec.title(kwargs)
    return Plan.of(spec)(spec, run, tuple(static), title, spec.pullback_gradients(arrays), kwargs)


def checked(spec: OpSpec, arrays: tuple, arguments: tuple) -> tuple[Any, Pullback]:
    """A call that found no plan: device arrays adopted, the plan found or built (checks), then run."""
    arrays = adopted(spec, arrays)
    plan = find_or_build(spec, arrays, arguments, lambda: make_plan(spec, arrays, arguments))
    return plan(*arrays)


def _key_source(spec: OpSpec) -> str:
    """The key :func:`plans.call_key` builds, as Python source over the public function's parameters."""
    arguments = spec.arguments
    parts = ["_spec", f"({', '.join(arguments)},)", f"({', '.join(f'type({a})' for a in arguments)},)"]
    for arg in spec.arrays:
        n = arg.name
        if arg.nested:
            parts.append(f"_nested_key({n})")
        elif arg.optional:
            parts.append(f"None if {n} is None else (type({n}), {n}.shape, {n}.dtype)")
        else:
            parts += [f"type({n})", f"{n}.shape", f"{n}.dtype"]
    return "(" + ", ".join(parts) + ")"


def public_function(spec: OpSpec) -> Callable[..., tuple[Any, Pullback]]:
    """The public function of ``spec``: its real signature and docstring; a repeated call builds its key
    inline, finds its plan and runs it (see the module doc)."""
    params, keyword = [], False
    namespace: dict[str, Any] = {"_spec": spec, "_entries": CACHE.entries, "_tags": tags, "_checked": checked,
                                 "_nested_key": nested_key}
    for p in spec.params:
        if p.keyword_only and not keyword:
            params.append("*")
            keyword = True
        if p.default is REQUIRED:
            params.append(p.name)
        else:
            namespace[f"_default_{p.name}"] = p.default
            params.append(f"{p.name}=_default_{p.name}")
    arrays, arguments = ", ".join(spec.array_names), ", ".join(spec.arguments)
    source = f"""def {spec.name}({', '.join(params)}):
    arguments = ({arguments},)
    try:
        plan = _entries.get({_key_source(spec)})
    except (AttributeError, TypeError):
        plan = None
    if plan is None or (plan.tags is not None and plan.tags != _tags(arguments)):
        return _checked(_spec, ({arrays},), arguments)
    plan.hits += 1
    return plan({arrays})
"""
    exec(compile(source, f"<dnnbind op {spec.name}>", "exec"), namespace)
    function = namespace[spec.name]
    function.__doc__ = spec.doc
    function.__module__ = __name__
    function.__signature__ = spec.signature()
    function.__annotations__ = {p.name: p.annotation for p in spec.params} | {"return": "tuple[Any, Pullback]"}
    function.__dnnbind_spec__ = spec
    return function


# -- the explicit plan ---------------------------------------------------------------------------

class BoundPlan:
    """``p = dnnbind.plan(dnnbind.conv, x, w, b, stride=2)``; ``p(x, w, b) -> (y, pullback)``.

    The checks and the choice of backend ran once, when the plan was made; a call checks only that its
    arrays have the types, shapes and dtypes the plan was made for (ValueError naming the first that
    differs) and runs it. For the hottest loops: no key, no lookup, no argument parsing."""

    __slots__ = ("spec", "plan", "expected", "arguments")

    def __init__(self, spec: OpSpec, plan: Plan, arrays: tuple, arguments: dict[str, Any]) -> None:
        self.spec, self.plan, self.arguments = spec, plan, arguments
        self.expected = _arrays_key(spec, arrays)

    def __call__(self, *arrays: Any, **named: Any) -> tuple[Any, Pullback]:
        if named:                           # (by name, as dnnbind.plan and the op take them)
            arrays = self._by_name(arrays, named)
        if len(arrays) != len(self.expected):
            arrays = self._complete(arrays)
        try:
            same = _arrays_key(self.spec, arrays) == self.expected
        except (AttributeError, TypeError):
            same = False
        if not same:
            self._mismatch(arrays)
        return self.plan(*arrays)

    def _by_name(self, arrays: tuple, named: dict[str, Any]) -> tuple:
        """The arrays in the spec's order, those given by name placed (None where left out); TypeError for
        a name the op has no array of, or one given twice."""
        names = self.spec.array_names
        placed = list(arrays) + [None] * (len(names) - len(arrays))
        for name, value in named.items():
            if name not in names:
                raise TypeError(f"this {self.spec.name} plan takes the arrays {', '.join(names)}, not {name!r}")
            if names.index(name) < len(arrays):
                raise TypeError(f"this {self.spec.name} plan got {name} twice, by position and by name")
            placed[names.index(name)] = value
        return tuple(placed)

    def _complete(self, arrays: tuple) -> tuple:
        """The arrays with the optional ones left out at the end as None; TypeError for too many or too few."""
        spec, n = self.spec, len(self.expected)
        required = sum(1 for a in spec.arrays if not a.optional)
        if not required <= len(arrays) <= n or any(not a.optional for a in spec.arrays[len(arrays):]):
            counted = f"{n} array{'s' if n != 1 else ''}" if required == n else f"{required} to {n} arrays"
            raise TypeError(f"this {spec.name} plan takes {counted} ({', '.join(spec.array_names)}), got "
                            f"{len(arrays)}")
        return arrays + (None,) * (n - len(arrays))

    def _mismatch(self, arrays: tuple) -> None:
        for name, value, want in zip(self.spec.array_names, arrays, self.expected):
            try:
                got = _arrays_key(self.spec, (value,), name)[0]
            except (AttributeError, TypeError):
                got = f"a {type(value).__name__}"
            if got != want:
                raise ValueError(f"{name} is {_describe(got)} but this {self.spec.name} plan was made for "
                                 f"{_describe(want)}: make another plan with dnnbind.plan for other arrays")

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"<dnnbind plan of {self.spec.name}({', '.join(self.spec.array_names)}{', ' if settings else ''}" \
               f"{settings}) on {', '.join(_describe(e) for e in self.expected)}>"


def _arrays_key(spec: OpSpec, arrays: tuple, name: str | None = None) -> tuple:
    """Per array (all of them, or the one called ``name``): its key part, as :func:`call_key` has it."""
    args = spec.arrays if name is None else [a for a in spec.arrays if a.name == name]
    return tuple(nested_key(a) if arg.nested else array_key(a) for arg, a in zip(args, arrays))


def _describe(part: Any) -> str:
    if part is None:
        return "None"
    if isinstance(part, str):
        return part
    if isinstance(part, tuple) and len(part) == 3 and isinstance(part[0], type):
        return f"a {part[0].__name__} of shape {tuple(part[1])} and dtype {part[2]}"
    return "nested arrays " + repr(part)


def plan(op: Callable[..., Any], *args: Any, **kwargs: Any) -> BoundPlan:
    """The plan of ``op(*args, **kwargs)`` (a public op, called as it would be), checked once: calling it
    with arrays of the same types, shapes and dtypes runs the op without checks (see :class:`BoundPlan`)."""
    spec = getattr(op, "__dnnbind_spec__", None)
    if spec is None:
        raise TypeError(f"op={op!r} must be one of dnnbind's ops ({', '.join(SPECS)})")
    bound = spec.signature().bind(*args, **kwargs)
    bound.apply_defaults()
    arrays = adopted(spec, tuple(bound.arguments[n] for n in spec.array_names))
    arguments = tuple(bound.arguments[n] for n in spec.arguments)
    made = find_or_build(spec, arrays, arguments, lambda: make_plan(spec, arrays, arguments))
    return BoundPlan(spec, made, arrays, dict(zip(spec.arguments, arguments)))


def residual_static(op: str, *arrays: Any, **kwargs: Any) -> tuple:
    """The static arguments of ``op``'s residual form (see :mod:`dnnbind.highlevel.residual`) for arrays
    (or ArraySpecs) in the spec's order and the public op's keyword arguments; errors as the public op gives."""
    return tuple(SPECS[op].check(*arrays, **kwargs))


def stub_source() -> str:
    """The text of ``public.pyi``: the public functions' signatures for type checkers, from the specs
    (tests/highlevel/test_specs.py checks that the committed file equals it)."""
    lines = ['"""GENERATED from the op specs by dnnbind.highlevel.ops.stub_source(); do not edit."""',
             "from typing import Any, Sequence", "", "from dnnbind.highlevel.pullback import Pullback", ""]
    for spec in SPECS.values():
        params, keyword = [], False
        for p in spec.params:
            if p.keyword_only and not keyword:
                params.append("*")
                keyword = True
            params.append(f"{p.name}: {p.annotation}" + ("" if p.default is REQUIRED else " = ..."))
        result = "tuple[Any, Any, Any]" if len(spec.outputs) > 2 else "Any"
        lines.append(f"def {spec.name}({', '.join(params)}) -> tuple[{result}, Pullback]: ...")
    return "\n".join(lines) + "\n"


__all__ = ["plan", "BoundPlan", "residual_static", "public_function", "make_plan", "checked",
           "ACTIVATION_DEFAULTS", "activation_alpha"]
