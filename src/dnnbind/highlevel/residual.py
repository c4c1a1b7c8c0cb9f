"""The residual form of every op: the one contract between the public ops, the backends and frameworks.

A closure cannot cross a framework's op boundary (a ``torch.library`` custom op, an exported graph), so
every backend implements op ``NAME`` as three functions whose saved state is arrays:

``NAME_forward(*arrays, *static, **options) -> (result, residuals)``
    Runs the op. ``residuals`` is a tuple of arrays on the result's device: everything the backward
    pass reads (saved statistics, pooling workspace, reserve space, dropout mask, private copies of the
    inputs). They are the forward's own: changing the inputs or the result later changes nothing.
``NAME_backward(residuals, cotangents, *static, **options) -> gradients``
    ``cotangents`` is a tuple, one per output (None: zeros where the spec says the output is
    optional). Never changes ``residuals``, so it may be called any number of times.
``NAME_residuals(*specs, *static, **options) -> tuple[ArraySpec, ...]``
    The shapes and dtypes ``NAME_forward`` would save for arrays described by ``specs`` (an
    :class:`ArraySpec`, or None, per array argument; nested like them for rnn's weights), computed
    without running anything: what a framework's fake/meta kernel reports.

``arrays`` and ``static`` are the parameters the op's spec lists (:mod:`dnnbind.highlevel.specs`), in that order; ``options`` are a
backend's own keywords (``layout=`` on cuDNN, ``threaded=`` on the reference) and may be ignored. The
gradients are the spec's ``gradients`` in order; conv's ``db`` is always computed (the pullback
form drops it when b is None). The backward of the ops whose spec is ``skippable`` also takes ``needs=``, one
bool per gradient in the spec's ``gradients`` order (default all True): a gradient marked False comes back as
None, and is not computed where the backend can skip it (a framework's first layer needs no dx, a frozen
layer no dw). The ``(result, pullback)`` form every backend also exports is built from the
pair by :func:`with_pullback`, so there is one implementation per op and backend.
"""
from __future__ import annotations

import functools
import itertools
from typing import Any, Callable, NamedTuple

from dnnbind.highlevel.grad_mode import saving
from dnnbind.highlevel.specs import SPECS


class ArraySpec(NamedTuple):
    """An array described by shape and dtype only (numpy dtype object).

    ``same_as``, which a backend's ``NAME_residuals`` may declare for a residual: the forward saves, in
    this shape and dtype, C-ordered, the value of one of the op's arrays or results, named as a key:
    ``(name,)`` (an array or a result of the spec) or ``(name, group, index)`` (an entry of a nested
    array, rnn's weights). A framework that keeps that array unchanged until the backward (torch's
    autograd) need not keep the residual too: it passes the array in its place (:func:`declared`).
    """
    shape: tuple[int, ...]
    dtype: Any
    same_as: tuple | None = None


def declared(specs: Any) -> tuple[tuple[int, tuple, ArraySpec], ...]:
    """(place, source key, spec) of each residual among ``specs`` that declares itself the value of an
    array or a result (:attr:`ArraySpec.same_as`)."""
    return tuple((i, s.same_as, s) for i, s in enumerate(specs) if getattr(s, "same_as", None) is not None)


def without(items: Any, places: Any) -> list:
    """``items`` (residuals, or their specs) without those at ``places`` (ints, or tuples whose first entry is
    the place, as :func:`declared` gives them): what a framework keeps of a forward's residuals where it
    passes the declared ones' sources instead."""
    left_out = {p if isinstance(p, int) else int(p[0]) for p in places}
    return [item for i, item in enumerate(items) if i not in left_out]


def undeclared(specs: Any) -> tuple:
    """``specs`` with no residual declaring a source (where what a backend declares no longer holds: a
    half-precision op computed in float32, a chain's intermediate)."""
    return tuple(s._replace(same_as=None) if getattr(s, "same_as", None) is not None else s for s in specs)


#: The revision of what the forwards save (which arrays, their shapes): part of the ``saves`` argument of
#: dnnbind.torch's training ops (dnnbind.torch.typed.saves_tag), so that a compiled training graph cached on
#: disk by torch.compile is never reused by a dnnbind that saves something else. Bump it whenever a
#: backend's residuals change, or what dnnbind.torch's training ops have autograd save (torch.compile
#: caches the traced graphs, which hold it, by the graph's text alone).
RESIDUAL_REVISION = 10

#: every gradient of a three-gradient op
ALL_NEEDED = (True, True, True)


def only_needed(gradients: tuple, needs: Any) -> tuple:
    """``gradients`` with None for those ``needs`` marks False (None: all needed): the residual form's
    contract for a backend that computes a skippable op's gradients together."""
    if needs is None:
        return gradients
    return tuple([g if need else None for g, need in zip(gradients, needs, strict=True)])


class ResidualPullback:
    """``pullback(*cotangents)``: a backend's backward bound to one call's residuals and static arguments.

    ``names`` label residuals that callers may read as attributes (the reference dropout's ``mask``).
    """

    __slots__ = ("backward", "residuals", "static", "options", "names", "dtype", "shape", "keep")

    def __init__(self, backward: Callable[..., Any], residuals: tuple, static: tuple, options: dict,
                 names: tuple[str, ...] = (), dtype: Any = None, shape: Any = None,
                 keep: tuple[int, ...] | None = None) -> None:
        self.backward, self.residuals, self.static, self.options, self.names, self.dtype, self.shape = (
            backward, residuals, static, options, names, dtype, shape)
        self.keep = keep         # the gradients to return, by index (conv without b: dx, dw); None: all

    def __call__(self, *cotangents: Any) -> Any:
        if self.residuals is None:
            name = getattr(self.backward, "__name__", "the op").removesuffix("_backward")
            raise RuntimeError(f"{name}'s forward ran under dnnbind.no_grad(), which saves nothing for a "
                               f"backward: call it outside no_grad() to get a pullback that runs")
        dtype = self.dtype
        if dtype is not None:        # float cotangents in the result's dtype, as the forward computed it
            cotangents = tuple(c.astype(dtype) if _other_float(c, dtype) else c for c in cotangents)
        grads = self.backward(self.residuals, cotangents, *self.static, **self.options)
        return grads if self.keep is None else tuple(grads[i] for i in self.keep)

    def __getattr__(self, name: str) -> Any:
        names = object.__getattribute__(self, "names")
        if name in names and object.__getattribute__(self, "residuals") is None:
            raise AttributeError(f"{name}: the forward ran under dnnbind.no_grad() and saved nothing")
        if name in names:
            value = object.__getattribute__(self, "residuals")[names.index(name)]
            shape = object.__getattribute__(self, "shape")   # a 0-d call's mask saved as shape (1,) reads 0-d
            return value.reshape(shape) if shape == () and value.size == 1 else value
        raise AttributeError(name)


def _other_float(value: Any, dtype: Any) -> bool:
    """Whether ``value`` is an array of a float dtype other than ``dtype`` (others are the backend's to refuse)."""
    other = getattr(value, "dtype", dtype)
    return other != dtype and hasattr(value, "astype") and (getattr(other, "kind", "") == "f"
                                                            or getattr(other, "name", "") == "bfloat16")


def passes_when(predicate: Callable[..., bool]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a wrapper of a residual-form forward (made with functools.wraps) as one that only calls the
    function it wraps, with the same arguments, for a call where ``predicate(*args, **options)`` holds.
    The predicate may look only at what a plan fixes (the arrays' shapes and dtypes, the static
    arguments): a plan then calls the wrapped function directly (:func:`innermost`)."""
    def mark(wrapper: Callable[..., Any]) -> Callable[..., Any]:
        # the mark names its wrapper: functools.wraps copies a function's attributes onto the wrappers
        # around it, which must not pass for marked themselves
        wrapper.__dnnbind_passes__ = (wrapper, predicate)      # type: ignore[attr-defined]
        return wrapper
    return mark


def kept_around(around: Callable[[Callable[..., Any]], Callable[..., Any]],
                function: Callable[..., Any]) -> Callable[..., Any]:
    """``around(function)`` (a wrapper made with functools.wraps), marked as one that every call runs in:
    :func:`innermost` strips what it wraps and wraps the rest again."""
    wrapper = around(function)
    wrapper.__dnnbind_around__ = (wrapper, around)            # type: ignore[attr-defined]
    return wrapper


def innermost(forward: Callable[..., Any], args: tuple, options: dict[str, Any]) -> Callable[..., Any]:
    """``forward`` without the wrappers that only call through for calls like this one (see
    :func:`passes_when`): what a plan's later calls run, a Python frame and its checks fewer per wrapper.
    A wrapper that every call runs in (:func:`kept_around`) stays, around what is left of the rest."""
    while True:
        around = getattr(forward, "__dnnbind_around__", None)
        if around is not None and around[0] is forward:
            return around[1](innermost(forward.__wrapped__, args, options))   # type: ignore[attr-defined]
        mark = getattr(forward, "__dnnbind_passes__", None)
        if mark is None or mark[0] is not forward or not mark[1](*args, **options):
            return forward
        forward = forward.__wrapped__               # type: ignore[attr-defined]


def with_pullback(op: str, forward: Callable[..., Any], backward: Callable[..., Any],
                  labels: tuple[str, ...] = ()) -> Callable[..., Any]:
    """The ``(result, pullback)`` form of a backend's op, built on its forward/backward pair.

    It takes the forward's parameters positionally or by name (plus the backend's options as keywords)
    and binds the pullback to the residuals and the static arguments.
    """
    spec = SPECS[op]
    names = spec.array_names + spec.static
    arity, known, n_arrays = len(names), set(names), len(spec.arrays)
    signature = spec.residual_signature()
    # arrays whose gradient the pullback form leaves out when they are None (conv's b: its db), with the
    # index of that gradient
    droppable = [(i, spec.gradients.index(a.gradient)) for i, a in enumerate(spec.arrays) if a.dropped_when_none]
    every = range(len(spec.gradients))
    drop_at = tuple(i for i, _ in droppable)
    # the gradients kept, per pattern of which droppable arrays are None (worked out once, not per call)
    keeps = {pattern: tuple(g for g in every if g not in {g for (_, g), none in zip(droppable, pattern) if none})
             if any(pattern) else None for pattern in itertools.product((False, True), repeat=len(droppable))}

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> tuple[Any, ResidualPullback]:
        options = {k: kwargs.pop(k) for k in list(kwargs) if k not in known} if kwargs else kwargs
        if kwargs or len(args) != arity:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            args = tuple(bound.arguments[n] for n in names)
        result, residuals = forward(*args, **options)
        main = result[0] if isinstance(result, tuple) else result
        # conv without b: no db
        if not drop_at:
            keep = None
        elif len(drop_at) == 1:                                     # (conv's b: no comprehension's frame)
            keep = keeps[(args[drop_at[0]] is None,)]
        else:
            keep = keeps[tuple([args[i] is None for i in drop_at])]
        if not saving():                                            # dnnbind.no_grad(): nothing to pull back
            residuals = None
        return result, ResidualPullback(backward, residuals, args[n_arrays:], options, labels,
                                        getattr(main, "dtype", None), getattr(main, "shape", None), keep)

    def for_call(*args: Any, **kwargs: Any) -> Callable[..., Any]:
        """This run for calls like this one (a plan's): its forward without the wrappers that only call
        through for them."""
        if len(args) != arity or kwargs.keys() & known:
            return run
        direct = innermost(forward, args, kwargs)
        return run if direct is forward else with_pullback(op, direct, backward, labels)

    run.__name__ = op
    run.__qualname__ = op
    run.for_call = for_call                             # type: ignore[attr-defined]
    return run


def forms(op: str, forward: Callable[..., Any], backward: Callable[..., Any], residuals: Callable[..., Any],
          names: tuple[str, ...] = ()) -> tuple[Callable[..., Any], ...]:
    """A backend's ``(NAME_forward, NAME_backward, NAME_residuals, NAME)`` for op ``NAME``: the residual
    form with the edge policy (:func:`dnnbind.highlevel.edges.guard`) and the ``(result, pullback)``
    form built on it."""
    from dnnbind.highlevel.edges import guard
    forward, backward, residuals = guard(op, forward, backward, residuals)
    return forward, backward, residuals, with_pullback(op, forward, backward, names)


#: the parts of an op a backend's ``adapt`` hook sees (:func:`install_forms`)
PARTS = ("forward", "backward", "residuals", "pair")


def install_forms(namespace: dict[str, Any], modules: tuple[Any, ...], *, saves_masks: bool = True,
                  adapt: Callable[[str, str, Callable[..., Any]], Callable[..., Any]] | None = None,
                  around: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None) -> list[str]:
    """Install into a backend's ``namespace`` the four names of :func:`forms` for every op of the specs that
    one of ``modules`` implements (its ``NAME_forward``, ``NAME_backward`` and ``NAME_residuals``), the
    first module that has them winning. Returns the ops installed, in the specs' order: a backend lists no
    op by hand.

    ``saves_masks``: an op whose spec says its residual is a mask (dropout's, ``mask_residuals``) saves
    the mask itself, which its pullback exposes as ``pullback.mask``; False where the backend saves
    something else (cuDNN's reserve spaces), whose ``adapt`` then provides the attribute.
    ``adapt(op, part, function)``, when given, is the backend's own adaptation of every op: it sees the
    residual form's ``"forward"``, ``"backward"`` and ``"residuals"`` before the edge policy, and the
    ``(result, pullback)`` form as ``"pair"``, and returns the function to install (the same one where
    it has nothing to add). ``around``, when given, wraps every op's forward and backward inside the edge
    policy (the numpy backends': :func:`dnnbind.highlevel.reference._arrays.quiet`); plans keep it.
    """
    from dnnbind.highlevel.specs import OP_NAMES
    installed = []
    for op in OP_NAMES:
        module = next((m for m in modules if hasattr(m, f"{op}_forward")), None)
        if module is None:
            continue
        forward, backward, residuals = (getattr(module, f"{op}_{part}") for part in PARTS[:3])
        if adapt is not None:
            forward, backward, residuals = (adapt(op, part, fn) for part, fn in zip(PARTS, (forward, backward,
                                                                                           residuals)))
        if around is not None:
            forward, backward = kept_around(around, forward), around(backward)
        names = ("mask",) if saves_masks and SPECS[op].mask_residuals else ()
        built = list(forms(op, forward, backward, residuals, names))
        if adapt is not None:
            built[3] = adapt(op, PARTS[3], built[3])
        namespace.update(zip((f"{op}_forward", f"{op}_backward", f"{op}_residuals", op), built))
        installed.append(op)
    return install_chains(namespace, modules, installed, around)


def install_chains(namespace: dict[str, Any], modules: tuple[Any, ...], installed: list[str],
                   around: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None) -> list[str]:
    """Install the ops that are two installed ops in a row (a spec's ``chain``), composed by
    :mod:`dnnbind.highlevel.chain` with a module's fused primitive ``NAME_fused`` where one has it (run
    inside ``around`` where given, as the installed ops run); returns ``installed`` with them, in the
    specs' order."""
    from dnnbind.highlevel.chain import chained, chained_ops
    from dnnbind.highlevel.specs import OP_NAMES
    for op in chained_ops(namespace):
        fused = next((getattr(m, f"{op}_fused") for m in modules if hasattr(m, f"{op}_fused")), None)
        if fused is not None and around is not None:
            fused = around(fused)
        forward, backward, residuals = chained(SPECS[op], namespace, fused)
        built = forms(op, forward, backward, residuals)
        namespace.update(zip((f"{op}_forward", f"{op}_backward", f"{op}_residuals", op), built))
        installed.append(op)
    return [op for op in OP_NAMES if op in installed]

