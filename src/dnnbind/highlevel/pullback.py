"""Named pullbacks: every public op's pullback says which op it belongs to and what it takes.

The backends return plain callables; the public ops wrap one (whatever the backend) in a
:class:`Pullback` (through their :class:`~dnnbind.highlevel.plans.Plan`, or :func:`named_rnn`)
that knows the op, the cotangents it expects (name, the result they belong to, shape, dtype) and the
gradients it returns. It checks the cotangents' kinds and shapes before the
backend sees them, so a scalar, a tuple or a wrong-shaped array gets an error that names the op and
says what is expected, and it has a repr and a docstring that say the same. Attributes of the backend's
pullback (``mask`` for dropout) stay reachable through it.
"""
from __future__ import annotations

import numbers
from typing import Any, Callable, NamedTuple


class Cotangent(NamedTuple):
    """One argument of a pullback: the gradient of one forward output."""
    name: str                          # "dy", "dhy", ...
    output: str                        # the forward output it is the gradient of: "y", "hy", ...
    shape: tuple[int, ...] | None      # None: that output is None and so must its cotangent be
    dtype: Any = None                  # the output's dtype (numpy's dtype object)
    optional: bool = False             # None stands for zeros
    why_none: str = ""                 # when shape is None: why that output is None

    def describe(self) -> str:
        if self.shape is None:
            return f"{self.name}=None ({self.output} is None)"
        what = f"{self.name} {self.shape}" + (f" {self.dtype}" if self.dtype is not None else "")
        return what + (" or None" if self.optional else "")


def _shape(value: Any) -> tuple[int, ...] | None:
    """The shape of an array of any kind (numpy, CuPy, torch, a __cuda_array_interface__ object);
    None when it cannot be told without importing anything (DLPack-only objects)."""
    shape = getattr(value, "shape", None)
    if shape is None and hasattr(value, "__cuda_array_interface__"):
        shape = value.__cuda_array_interface__.get("shape")
    return None if shape is None else tuple(shape)


def _is_array(value: Any) -> bool:
    return _shape(value) is not None or hasattr(value, "__dlpack__")


class Pullback:
    # The pullback of one call of a dnnbind op: ``pullback(cotangents...) -> gradients``. Calling it
    # checks the cotangents and runs the backend's backward pass. Its docstring (``help(pullback)``)
    # is written for the call it belongs to, when asked for: building one costs every forward pass.

    __slots__ = ("op", "cotangents", "gradients", "_run")

    def __init__(self, op: str, run: Callable[..., Any], cotangents: tuple[Cotangent, ...],
                 gradients: tuple[str, ...]) -> None:
        self.op = op
        self.cotangents = cotangents
        self.gradients = gradients
        self._run = run

    @property                                           # type: ignore[misc]
    def __doc__(self) -> str:                           # type: ignore[override]
        return self._docstring()

    # -- what it is ---------------------------------------------------------------------------
    def signature(self) -> str:
        """``pullback(dy) -> (dx, dw)``, as the op's docstring writes it."""
        params = ", ".join(c.name + ("=None" if c.optional or c.shape is None else "") for c in self.cotangents)
        grads = self.gradients[0] if len(self.gradients) == 1 else f"({', '.join(self.gradients)})"
        return f"pullback({params}) -> {grads}"

    def __repr__(self) -> str:
        takes = ", ".join(c.describe() for c in self.cotangents)
        return f"<{self.op} pullback: {self.signature()}; takes {takes}>"

    def _docstring(self) -> str:
        lines = [f"Pullback of {self.op}: {self.signature()}.", ""]
        for c in self.cotangents:
            if c.shape is None:
                lines.append(f"{c.name}: None ({c.output} is None for this call)")
            else:
                none = "; None means zeros" if c.optional else ""
                lines.append(f"{c.name}: the gradient of {c.output}, an array of shape {c.shape}"
                             f"{f' and dtype {c.dtype}' if c.dtype is not None else ''}{none}")
        lines += ["", f"Returns the gradients {', '.join(self.gradients)} of {self.op}'s inputs. May be called "
                  "any number of times; never changes what the forward pass saved."]
        return "\n".join(lines)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_run":        # no delegation of protocols, nor during copying
            raise AttributeError(name)
        return getattr(self._run, name)

    # -- calling ------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or not self._plainly_right(args):
            self._check(args, kwargs)                  # explains what is wrong, or lets it through
            if kwargs:                                 # the backends take the cotangents positionally
                args = self._positional(args, kwargs)
        try:
            return self._run(*args)
        except (TypeError, ValueError) as exc:         # a backend's check of one cotangent: name the op
            named = str(exc).startswith(tuple(f"{c.name} " for c in self.cotangents))
            if type(exc) in (TypeError, ValueError) and named:
                raise type(exc)(f"{self.op} pullback: {exc}") from None
            raise

    def _positional(self, args: tuple, kwargs: dict) -> tuple:
        """Checked cotangents given by name as positional ones (None for those left out in between)."""
        given = dict(zip((c.name for c in self.cotangents), args), **kwargs)
        names = [c.name for c in self.cotangents]
        last = max(names.index(name) for name in given)
        return tuple(given.get(name) for name in names[:last + 1])

    def _plainly_right(self, args: tuple) -> bool:
        """The fast path: every cotangent given positionally with its output's shape."""
        if not args or len(args) > len(self.cotangents):
            return False
        for c, value in zip(self.cotangents, args):
            if getattr(value, "shape", None) != c.shape or c.shape is None:
                return False
        return True

    def _check(self, args: tuple, kwargs: dict) -> None:
        names = [c.name for c in self.cotangents]
        if len(args) > len(names):
            raise TypeError(f"{self.op} pullback takes {len(names)} cotangent{'s' if len(names) > 1 else ''} "
                            f"({', '.join(names)}), got {len(args)} arguments; {self._expected()}")
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise TypeError(f"{self.op} pullback got an unexpected argument {unknown[0]!r}; {self._expected()}")
        given = dict(zip(names, args))
        for name, value in kwargs.items():
            if name in given:
                raise TypeError(f"{self.op} pullback got {name} twice; {self._expected()}")
            given[name] = value
        for c in self.cotangents:
            self._check_one(c, given.get(c.name), c.name in given)

    def _check_one(self, c: Cotangent, value: Any, passed: bool) -> None:
        if c.shape is None:
            if value is not None:
                why = c.why_none or f"{c.output} is None for this call"
                raise ValueError(f"{self.op} pullback: {c.name} must be None: {why}; {self._expected()}")
            return
        if value is None:
            if c.optional:
                return
            raise TypeError(f"{self.op} pullback: {c.name} is required: {self._wanted(c)}" if not passed else
                            f"{self.op} pullback: {c.name} is None but must be {self._wanted(c)}")
        if isinstance(value, (tuple, list)):
            hint = (f"pass the cotangents as separate arguments, {self.signature().split(' -> ')[0]}"
                    if len(self.cotangents) > 1 else f"it takes one cotangent, {c.name}")
            raise TypeError(f"{self.op} pullback: {c.name} is a {type(value).__name__}, not an array; {hint}; "
                            f"{self._expected()}")
        if isinstance(value, numbers.Number) or not _is_array(value):
            raise TypeError(f"{self.op} pullback: {c.name} must be {self._wanted(c)}, got "
                            f"{type(value).__name__} {value!r}" + (
                                f"; for the gradient of {c.output}.sum() pass ones_like({c.output})"
                                if isinstance(value, numbers.Number) else ""))
        shape = _shape(value)
        if shape is not None and shape != c.shape:
            raise ValueError(f"{self.op} pullback: {c.name} has shape {shape} but must have shape {c.shape} "
                             f"(the shape of {c.output}, {self.op}'s result)")

    def _wanted(self, c: Cotangent) -> str:
        return f"an array shaped like {c.output}, {c.shape}" + (f" ({c.dtype})" if c.dtype is not None else "")

    def _expected(self) -> str:
        return f"expected {self.signature()} with " + ", ".join(c.describe() for c in self.cotangents)


def _dtype(value: Any) -> Any:
    return getattr(value, "dtype", None)          # formatted only when a message needs it (str() is slow)


def named_rnn(forward: tuple[tuple[Any, Any, Any], Callable[..., Any]],
              mode: str) -> tuple[tuple[Any, Any, Any], Pullback]:
    """The rnn backend's ``((y, hy, cy), pullback)`` with a Pullback: dy required, dhy and dcy optional
    (dcy None unless LSTM)."""
    outputs, run = forward
    y, hy, cy = outputs
    cotangents = (Cotangent("dy", "y", _shape(y), _dtype(y)),
                  Cotangent("dhy", "hy", _shape(hy), _dtype(hy), optional=True),
                  Cotangent("dcy", "cy", None if cy is None else _shape(cy), _dtype(cy), optional=True,
                            why_none=f"dcy is only used by mode='lstm', not mode={mode!r}"))
    return outputs, Pullback("rnn", run, cotangents, ("dx", "dh0", "dc0", "dweights"))
