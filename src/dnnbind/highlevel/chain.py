"""The residual form of an op that is two ops in a row (its spec's :class:`~dnnbind.highlevel.specs.base.Chain`).

Composed once, from the two ops' residual forms on the same backend: the forward runs the first op and
feeds its result to the second, saving both ops' residuals one after the other; the backward runs the
second op's backward, then the first's on what came out. A backend with a fused primitive for the op
(``NAME_fused(*arrays, *static, **options) -> result``, or None when it cannot run this call) runs it
instead when nothing is saved for a backward (``dnnbind.no_grad()``, a framework's inference): a fused
kernel produces no intermediate result, which the second op's backward would need.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from dnnbind.highlevel.grad_mode import saving
from dnnbind.highlevel.residual import ArraySpec
from dnnbind.highlevel.specs import SPECS, OpSpec


def _only(result: Any) -> Any:
    """A one-output op's result (a backend's forward may return it alone or in a one-element tuple)."""
    return result[0] if isinstance(result, tuple) else result


def chained(spec: OpSpec, parts: dict[str, Callable[..., Any]], fused: Callable[..., Any] | None = None
            ) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """(forward, backward, residuals) of ``spec``'s chain, from ``parts``: the backend's ``NAME_forward``,
    ``NAME_backward`` and ``NAME_residuals`` of both ops, by those names."""
    chain = spec.chain
    assert chain is not None
    first, second = chain.first, chain.second
    forward1, backward1, residuals1 = (parts[f"{first}_{p}"] for p in ("forward", "backward", "residuals"))
    forward2, backward2, residuals2 = (parts[f"{second}_{p}"] for p in ("forward", "backward", "residuals"))
    n_arrays = len(spec.arrays)

    def second_count(static: tuple, dtype: Any) -> int:
        """How many of the residuals are the second op's."""
        return len(residuals2(ArraySpec(chain.between(static), dtype), *chain.split(static)[1]))

    def forward(*args: Any, **options: Any) -> tuple[Any, tuple]:
        arrays, static = args[:n_arrays], args[n_arrays:]
        static1, static2 = chain.split(static)
        if fused is not None and not saving():
            y = fused(*arrays, *static, **options)
            if y is not None:
                return y, ()
        between, saved1 = forward1(*arrays, *static1, **options)
        y, saved2 = forward2(_only(between), *static2)
        return y, (*saved1, *saved2)

    def backward(residuals: tuple, cotangents: tuple, *static: Any, **options: Any) -> Any:
        static1, static2 = chain.split(static)
        n = second_count(static, residuals[-1].dtype) if residuals else 0
        saved1, saved2 = residuals[:len(residuals) - n], residuals[len(residuals) - n:]
        d_between = _only(backward2(saved2, cotangents, *static2))
        return backward1(saved1, (d_between,), *static1, **options)

    def residuals(*args: Any, **options: Any) -> tuple:
        """The two ops' residuals; what they declare the value of (ArraySpec.same_as) where it is the
        chain's own: the first op's arrays, the second op's results, not the result between them."""
        arrays, static = args[:n_arrays], args[n_arrays:]
        static1, static2 = chain.split(static)
        x = arrays[0]
        return (*_declaring(residuals1(*arrays, *static1, **options), SPECS[first].array_names),
                *_declaring(residuals2(ArraySpec(chain.between(static), x.dtype), *static2),
                            SPECS[second].output_names))

    # the residual form's parameters (what frameworks and the tests read), then the backend's options
    taking = spec.residual_signature()
    taking = taking.replace(parameters=[*taking.parameters.values(),
                                        inspect.Parameter("options", inspect.Parameter.VAR_KEYWORD)])
    positional, var = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_KEYWORD
    # the backward's: the residual form's names for the saved state and the cotangents, the static arguments
    pulling = inspect.Signature([inspect.Parameter(n, positional) for n in ("residuals", "cotangents", *spec.static)]
                                + [inspect.Parameter("options", var)])
    functions: tuple[tuple[Callable[..., Any], str], ...] = (
        (forward, "forward"), (backward, "backward"), (residuals, "residuals"))
    for fn, part in functions:
        fn.__name__ = fn.__qualname__ = f"{spec.name}_{part}"
        setattr(fn, "__signature__", pulling if part == "backward" else taking)
    return forward, backward, residuals


def _declaring(specs: tuple, names: tuple[str, ...]) -> tuple:
    """``specs`` declaring a source (ArraySpec.same_as) only where it is one of ``names``."""
    return tuple(s if s.same_as is None or s.same_as[0] in names else s._replace(same_as=None) for s in specs)


def chained_ops(namespace: dict[str, Any]) -> list[str]:
    """The ops of the specs that are chains of two ops ``namespace`` has (installed by
    :func:`dnnbind.highlevel.residual.install_forms`), in the specs' order."""
    return [name for name, spec in SPECS.items() if spec.chain is not None and name not in namespace
            and f"{spec.chain.first}_forward" in namespace and f"{spec.chain.second}_forward" in namespace]
