"""What an op spec is: the one declaration of an op that everything else is derived from.

An :class:`OpSpec` says what the op takes (its public parameters, which of them are arrays, in which
order the residual form takes them), what it checks (:attr:`OpSpec.check`, built on the dims objects),
what it returns (:class:`Output`), which inputs get gradients and which may be skipped, and its 0-d,
zero-size and unbatched rules. :mod:`dnnbind.highlevel.ops` makes the public functions from it,
:mod:`~dnnbind.highlevel.residual` the residual form's parameters, :mod:`~dnnbind.highlevel.edges` the
edge policy, :mod:`~dnnbind.highlevel.plans` the plans, ``python -m dnnbind ops`` the support matrix and
:mod:`dnnbind.torch` its custom ops and its functions on tensors.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

#: a parameter without a default
REQUIRED = inspect.Parameter.empty


class Param(NamedTuple):
    """One parameter of the public function, in its order. ``kind``: its value's type for a framework's
    typed schema (a key of :data:`KINDS`); empty: read from ``annotation`` (:data:`ANNOTATION_KINDS`)."""
    name: str
    default: Any = REQUIRED
    keyword_only: bool = False
    annotation: str = "Any"
    kind: str = ""


class Kind(NamedTuple):
    """A static argument's type, as a typed op schema (torch.library's) writes it, and how a value is
    normalized to it: ``per_dim`` values are given once per spatial dimension (an int stands for all),
    ``pairs`` ones as (low, high) per spatial dimension (one list of 2 * dims ints when any pair is
    uneven, else one int per dimension)."""
    schema: str
    optional: bool = False
    per_dim: bool = False
    pairs: bool = False
    tensor: bool = False


#: every static argument type an op spec declares, once
KINDS = {
    "int": Kind("SymInt"), "int?": Kind("SymInt?", optional=True), "bool": Kind("bool"), "float": Kind("float"),
    "float?": Kind("float?", optional=True), "str": Kind("str"), "ints": Kind("SymInt[]"), "ints?": Kind("SymInt[]?", optional=True),
    "per_dim": Kind("SymInt[]", per_dim=True), "per_dim?": Kind("SymInt[]?", optional=True, per_dim=True),
    "padding": Kind("SymInt[]", per_dim=True, pairs=True), "tensor?": Kind("Tensor?", optional=True, tensor=True),
}
#: the kind of a parameter declared by its annotation only
ANNOTATION_KINDS = {"int": "int", "bool": "bool", "float": "float", "str": "str", "int | None": "int?",
                    "float | None": "float?"}


@dataclass(frozen=True)
class ArrayArg:
    """An array input of the op (the residual form takes them in the spec's order)."""
    name: str
    optional: bool = False          # may be None
    gradient: str | None = None     # the name of its gradient ("dx"); None: it gets none
    dropped_when_none: bool = False  # the pullback form leaves its gradient out when it is None (conv's db)
    nested: bool = False            # a list of tuples of arrays (rnn's weights), parsed by OpSpec.parse
    batched: bool = False           # carries the batch axis the unbatched rule adds and drops
    own_dtype: bool = False         # may have a floating dtype other than x's (batch norm's running statistics)


@dataclass(frozen=True)
class Output:
    """One output of the op: its name, the name of its cotangent (None: it takes none, as maxpool's
    indices), whether that cotangent may be None (zeros) and its dtype when it is not the input's."""
    name: str
    cotangent: str | None = None
    optional: bool = False
    dtype: str | None = None
    why_none: str = ""               # when the output may be None: why (formatted with the call's arguments)
    when: str | None = None          # the bool argument that asks for it (maxpool's indices: return_indices)


class EmptyCall(NamedTuple):
    """What an op's zero-size call returns, from the residual form's arguments (see :mod:`edges`)."""
    outputs: list[Any]                          # the results' shapes (None where an output is None)
    gradients: Callable[[Callable[..., Any]], Any]   # zeros -> the gradients, zeros(shape) called in order


@dataclass(frozen=True)
class Unbatching:
    """The op's unbatched rule: ``test(arrays, arguments)`` (by name) says whether a call is one sample;
    then the arrays marked ``batched`` get a batch axis of 1 at ``axis``."""
    test: Callable[[dict[str, Any], dict[str, Any]], bool]
    axis: int = 0


@dataclass(frozen=True)
class Autocast:
    """The op under a framework's automatic mixed precision (torch.autocast): its floating-point arrays
    in the lower-precision dtype, as torch casts them for its own convolutions and recurrent layers;
    where ``exempt(arguments, device_type)`` (the call's public arguments by name) says so, in x's dtype
    instead (torch's CPU GRU is no autocast op). With ``float32(arguments, x_shape, device_type)``
    instead, the op is one torch.autocast runs in float32 where that says so (torch's CPU policy for
    3-d pooling) and in x's dtype elsewhere."""
    exempt: Callable[[dict[str, Any], str], bool] | None = None
    float32: Callable[[dict[str, Any], tuple[int, ...], str], bool] | None = None


@dataclass(frozen=True)
class Chain:
    """An op that is one op's result fed to another's (a convolution, then an activation): its forms on a
    backend are composed from the two ops' forms there (:mod:`dnnbind.highlevel.chain`), unless the
    backend has a fused primitive for it (``NAME_fused``). ``split(static)`` gives each op's static
    arguments; ``between(static)`` the shape of the first op's result (what the second takes)."""
    first: str
    second: str
    split: Callable[[tuple], tuple[tuple, tuple]]
    between: Callable[[tuple], tuple[int, ...]]


@dataclass(frozen=True)
class Layout:
    """How an op lays out its results of x's rank. ``like_x``: as x is laid out (an elementwise op: x's
    own strides, whatever they are), its gradient as torch's elementwise backward kernel lays out its
    operands: ``gradient_from(arguments)`` names them in its order ("dy", "x"; default: the cotangent,
    then x), the first one's order deciding where they differ (torch's relu reads x first, its sigmoid
    the cotangent, its dropout with p = 1 the cotangent alone); else channels last (NHWC, NDHWC) where one
    of the arrays named in ``channels_last_from`` is, for x of the ranks in ``ranks`` (4: 2-d images, 5:
    volumes), volumes only of the dtypes in ``volume_dtypes`` where given (by name), their gradients
    likewise."""
    like_x: bool = False
    gradient_from: Callable[[dict[str, Any]], tuple[str, ...]] | None = None
    channels_last_from: tuple[str, ...] = ()
    ranks: tuple[int, ...] = (4, 5)
    volume_dtypes: tuple[str, ...] | None = None


@dataclass(frozen=True, eq=False)
class OpSpec:
    """One op, declared once."""
    name: str
    doc: str                                             # the public function's docstring
    params: tuple[Param, ...]                            # the public function's parameters, in order
    arrays: tuple[ArrayArg, ...]                         # its array inputs, in the residual form's order
    static: tuple[str, ...]                              # the residual form's other parameters
    outputs: tuple[Output, ...]
    check: Callable[..., tuple]                          # (*arrays, **arguments) -> static values
    empty: Callable[[tuple], EmptyCall]                  # the zero-size call's results and gradients
    #: an empty call's gradients from its zeros; None: one per array with a gradient, None for an optional
    #: array the call did not give (the edge policy records which in a zero-size residual's shape)
    regroup: Callable[[list[Any], tuple], Any] | None = None
    pointwise: bool = False                              # takes 0-d arrays (run as shape (1,))
    skippable: bool = False                              # its backward takes needs= (a flag per gradient)
    unbatched: Unbatching | None = None
    parse: Callable[[Any], Any] | None = None            # checks and normalizes a nested array argument
    every_call: Callable[..., None] | None = None        # a check the plan cannot fix (arrays, arguments)
    title: Callable[[dict[str, Any]], str] | None = None  # the pullback's name for a call (default: name)
    mask_residuals: bool = False                         # an empty call saves bool zeros (dropout's mask)
    #: the op's optional features (arguments beyond the plain call) a backend may or may not support:
    #: the rows of the support matrix (python -m dnnbind ops) beside the dtypes
    features: tuple[str, ...] = ()
    #: arguments a framework passes as runtime tensors rather than constants (dropout's seed)
    tensor_arguments: tuple[str, ...] = ()
    #: whether a call with these public arguments is random, drawing the tensor arguments the caller left
    #: None from the framework's generator (dropout: 0 < p < 1; p = 1 needs no mask, as in PyTorch, and
    #: runs where random numbers are refused, vmap's randomness="error"); None: always
    random: Callable[[dict[str, Any]], bool] | None = None
    #: arrays the forward updates in place (batch norm's running statistics), for calls whose public
    #: arguments ``updates(arguments)`` says so (batch norm: when training)
    updated_in_place: tuple[str, ...] = ()
    updates: Callable[[dict[str, Any]], bool] | None = None
    #: the other arrays the in-place update reads (batch norm: x, whose batch statistics it takes in); the
    #: update is the same for every call that shares them, and a call without the updated arrays (None)
    #: gives the same results without updating: a vmap that maps neither runs the update once
    update_reads: tuple[str, ...] = ()
    #: the arrays and outputs (by name) whose values the op's backward reads, as PyTorch's own op saves
    #: them; a function of the public arguments where they decide it (an activation's mode). A framework
    #: with version counters refuses a backward after an in-place change to one of them between the
    #: forward and the backward, as torch refuses it for its own layers. (The backends keep their own
    #: copies of what they read: the raw pullbacks need no such rule.)
    backward_reads: tuple[str, ...] | Callable[[dict[str, Any]], tuple[str, ...]] = ()
    #: whether the op's gradients, and their own (``second_order``), come out the same computed from its
    #: result in x's place, for these public arguments (relu's: the result's sign is x's): a framework's
    #: layer that overwrites x with the result (torch's inplace=True) then keeps no copy of x, as torch's
    #: ``relu_`` keeps none; None: never (a copy of x is kept where a gradient may be asked for)
    result_stands_for_x: Callable[[dict[str, Any]], bool] | None = None
    #: each sample along x's axis 0 is computed alone, with the same other arrays and arguments: a
    #: framework may fold a mapped axis of x (torch.func.vmap's) into it; False: it maps over that axis;
    #: or a function of the public arguments and x's rank saying which (:meth:`independent`)
    samples_independent: bool | Callable[[dict[str, Any], int], bool] = False
    #: how the op's backward is differentiated (double backward), from its own forward and backward
    #: (:mod:`.second_order`); None: it is not, and a framework refuses a gradient of its gradient
    second_order: Callable[..., tuple] | None = None
    #: the primitive family the op is composed from above the backends ("convolution":
    #: :mod:`dnnbind.highlevel.conv_composed`); None: each backend implements the op itself
    composed_from: str | None = None
    #: the residual form's gradients when not in the arrays' order (rnn: dx, dh0, dc0, dweights)
    gradient_order: tuple[str, ...] = ()
    #: the op is two ops in a row, composed on every backend that has both (:class:`Chain`)
    chain: Chain | None = None
    #: the docstring of the op's function on a framework's tensors (``dnnbind.torch.functional``'s), which
    #: returns the result without a pullback
    tensor_doc: str = ""
    #: how the op runs under a framework's automatic mixed precision; None: in its inputs' dtypes
    autocast: Autocast | None = None
    #: the memory layout of the results of x's rank, as PyTorch's CPU kernels lay them out (a framework
    #: with strided tensors follows it; the backends compute on C-ordered arrays), :class:`Layout`;
    #: None: C order (softmax, layer norm, rnn)
    results_layout: Layout | None = None

    # -- derived (computed once per spec) ------------------------------------------------------------
    @functools.cached_property
    def folds_leading_axis(self) -> bool:
        """Whether every array, output and residual has x's leading axis, each position computed apart
        (samples independent, x the only array): a vmap may fold all its mapped axes into that axis, one
        call for the whole batch (JAX's broadcast_all), where conv can fold only a mapped axis of x."""
        return self.samples_independent is True and len(self.arrays) == 1

    def independent(self, arguments: dict[str, Any], ndim: int) -> bool:
        """:attr:`samples_independent` for a call with these public arguments (by name) on an x of rank
        ``ndim``."""
        rule = self.samples_independent
        return bool(rule(arguments, ndim)) if callable(rule) else bool(rule)

    @functools.cached_property
    def array_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arrays)

    @property
    def planned(self) -> bool:
        """Whether a framework may keep a plan per call signature: not when a call passes a runtime
        tensor argument (dropout's seed) or nested arrays (rnn's weights)."""
        return not self.tensor_arguments and not any(a.nested for a in self.arrays)

    @functools.cached_property
    def updated(self) -> slice:
        """Where the arrays updated in place are among the arrays after x (an empty slice: none)."""
        places = [self.array_names.index(n) - 1 for n in self.updated_in_place]
        return slice(min(places), max(places) + 1) if places else slice(0, 0)

    def reads(self, arguments: dict[str, Any]) -> tuple[str, ...]:
        """:attr:`backward_reads` for a call with these public arguments (by name)."""
        reads = self.backward_reads
        return reads(arguments) if callable(reads) else reads

    def updates_in_place(self, arguments: dict[str, Any]) -> bool:
        """Whether a call with these public arguments (by name) updates arrays in place."""
        return bool(self.updated_in_place) and (self.updates is None or bool(self.updates(arguments)))

    @functools.cached_property
    def arguments(self) -> tuple[str, ...]:
        """The public parameters that are not arrays, in order: what a plan's key holds."""
        arrays = set(self.array_names)
        return tuple(p.name for p in self.params if p.name not in arrays)

    @functools.cached_property
    def without_gradient(self) -> tuple[str, ...]:
        """The arrays the op is not differentiable by (batch norm's running statistics): a framework refuses
        one that asks for a gradient, as torch's batch norm refuses them."""
        return tuple(a.name for a in self.arrays if a.gradient is None and not a.nested)

    def not_differentiable(self, name: str) -> str:
        """What a framework says refusing a gradient with respect to array ``name`` (one of
        :attr:`without_gradient`), its own advice after it."""
        return f"dnnbind.{self.name} is not differentiable with respect to argument '{name}'"

    @functools.cached_property
    def output_names(self) -> tuple[str, ...]:
        """The outputs' names, in order (maxpool: y, indices; rnn: y, hy, cy)."""
        return tuple(o.name for o in self.outputs)

    @functools.cached_property
    def gradients(self) -> tuple[str, ...]:
        """The residual form's gradients, in order."""
        return self.gradient_order or tuple(a.gradient for a in self.arrays if a.gradient is not None)

    def needs(self, wanted: Any) -> tuple[bool, ...]:
        """A skippable op's ``needs=`` (one flag per gradient, in :attr:`gradients` order) from whether each
        of its arrays' gradient is wanted (``wanted``: one flag per array, in the arrays' order)."""
        by_gradient = {a.gradient: bool(w) for a, w in zip(self.arrays, wanted, strict=True) if a.gradient}
        return tuple([by_gradient[g] for g in self.gradients])

    def pullback_gradients(self, arrays: tuple) -> tuple[str, ...]:
        """The gradients the pullback form returns for these arrays (conv without b: dx, dw)."""
        dropped = {a.gradient for a, value in zip(self.arrays, arrays) if a.dropped_when_none and value is None}
        return tuple(g for g in self.gradients if g not in dropped)

    def signature(self) -> inspect.Signature:
        """The public function's signature."""
        out = []
        for p in self.params:
            kind = inspect.Parameter.KEYWORD_ONLY if p.keyword_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
            out.append(inspect.Parameter(p.name, kind, default=p.default, annotation=p.annotation))
        return inspect.Signature(out)

    def residual_signature(self) -> inspect.Signature:
        """The residual form's and the backends' ``(result, pullback)`` form's parameters: the arrays, then
        the static arguments, all positional-or-keyword; from the last required one on, optional arrays default to
        None and static arguments named like a public parameter take its default."""
        defaults = {p.name: p.default for p in self.params}
        params = [inspect.Parameter(a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    default=None if a.optional else REQUIRED) for a in self.arrays]
        params += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults.get(n, REQUIRED))
                   for n in self.static]
        last_required = max((i for i, p in enumerate(params) if p.default is REQUIRED), default=-1)
        return inspect.Signature([p.replace(default=REQUIRED) if i < last_required else p
                                  for i, p in enumerate(params)])

    @functools.cached_property
    def arguments_function(self) -> Callable[..., dict[str, Any]]:
        """``f(*arguments, **arguments) -> {name: value}``: the public arguments that are not arrays, in
        order, with the spec's defaults, positional or by name (what a framework adapter keys and
        encodes). Generated once per spec: a plain function, as cheap as writing the dict by hand."""
        names = self.arguments
        defaults = {p.name: p.default for p in self.params}
        last_required = max((i for i, n in enumerate(names) if defaults[n] is REQUIRED), default=-1)
        params = [n if i <= last_required or defaults[n] is REQUIRED else f"{n}=_d[{n!r}]"
                  for i, n in enumerate(names)]
        namespace: dict[str, Any] = {"_d": defaults}
        body = ", ".join(f"{n!r}: {n}" for n in names)
        exec(f"def {self.name}_arguments({', '.join(params)}):\n    return {{{body}}}\n", namespace)
        return namespace[f"{self.name}_arguments"]

    @functools.cached_property
    def kinds(self) -> dict[str, Kind]:
        """The type (:class:`Kind`) of each of :attr:`arguments`, by name, from the params' declarations;
        a parameter without one is a spec error."""
        found = {}
        for p in self.params:
            if p.name in self.arguments:
                kind = p.kind or ANNOTATION_KINDS.get(p.annotation, "")
                if kind not in KINDS:
                    raise TypeError(f"op spec {self.name}: parameter {p.name} declares no kind (annotation "
                                    f"{p.annotation!r}); give Param(kind=...) one of {sorted(KINDS)}")
                found[p.name] = KINDS[kind]
        return found

    def __repr__(self) -> str:
        return f"<op spec {self.name}>"
