"""Errors in a torch user's words: the high-level ops name their arrays (x, w, gamma, weights[0][1]);
the layers rename them to the tensors and arguments of the torch.nn module that was called."""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping, Union

from dnnbind.highlevel.dims.checks import AxisError
from dnnbind.highlevel.specs import SPECS

Names = Union[Mapping[str, str], Callable[[], Mapping[str, str]]]

#: the errors renamed (re-raised as the same class with the renamed message)
_RENAMED = (ValueError, TypeError, AxisError)


class TorchValueError(ValueError, RuntimeError):
    """A dnnbind op's ValueError on tensors (a shape its checks refuse): also a RuntimeError, which torch
    raises for the same mistakes, so that code written for torch's layers catches it too."""


class TorchTypeError(TypeError, RuntimeError):
    """A dnnbind op's TypeError on tensors (a dtype or device its checks refuse): also a RuntimeError, as
    :class:`TorchValueError`."""


_AS_TORCHS: dict[type[BaseException], type[BaseException]] = {ValueError: TorchValueError, TypeError: TorchTypeError}


def as_torchs(error: BaseException) -> BaseException:
    """A plain ValueError or TypeError as one of the classes above (its message, traceback and cause
    kept); any other error as it is (numpy's AxisError is an IndexError, as torch's is)."""
    kind = _AS_TORCHS.get(type(error))
    if kind is None:
        return error
    found = kind(*error.args).with_traceback(error.__traceback__)
    found.__cause__, found.__suppress_context__ = error.__cause__, True
    return found


def rename(message: str, names: Mapping[str, str]) -> str:
    """``message`` with each whole-word occurrence of a key of ``names`` replaced by its value, except
    inside a quoted value (``dim='x'`` is what the user passed)."""
    if not names:
        return message
    keys = sorted(names, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w.\['])(" + "|".join(re.escape(k) for k in keys) + r")(?![\w\['])")
    return pattern.sub(lambda m: names[m.group(1)], message)


class torch_argument_names:
    """Re-raise a ValueError or TypeError (or one of their subclasses taking a message alone: an axis out
    of range, numpy's AxisError) from an op with its array names replaced by ``names`` (a mapping, or a
    function returning one, called only when there is an error to rename). A class: every layer call
    enters one, and a generator-based context manager costs several times as much."""

    __slots__ = ("names",)

    def __init__(self, names: Names) -> None:
        self.names = names

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, traceback: object) -> None:
        if kind is None or not issubclass(kind, _RENAMED) or exc is None:
            return
        names = self.names
        message = rename(str(exc), names() if callable(names) else names)
        if message == str(exc):
            return
        raise kind(message) from exc


def refuse_gradient(op: str, name: str) -> None:
    """RuntimeError: a tensor the op is not differentiable by (its spec's ``without_gradient``) asks for a
    gradient; torch's own batch norm refuses its running statistics so, rather than leave them none."""
    raise RuntimeError(f"{SPECS[op].not_differentiable(name)}. This input cannot have requires_grad True.")


def refuse_gradients(asked: Iterable[tuple[str, str, Any]]) -> None:
    """:func:`refuse_gradient` for the first (op, argument name, value) whose value asks for a gradient
    (anything with ``requires_grad`` True); the callers check that gradients are being recorded."""
    for op, name, value in asked:
        if getattr(value, "requires_grad", False):
            refuse_gradient(op, name)
