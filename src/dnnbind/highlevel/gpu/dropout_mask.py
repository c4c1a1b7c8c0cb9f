"""``pullback.mask`` for a GPU backend's dropout in the ``(result, pullback)`` form.

The reference backend saves its boolean mask as the residual and names it (see
:class:`dnnbind.highlevel.residual.ResidualPullback`). A GPU library keeps the mask in an opaque reserve
space instead, so the residuals cannot be read as a mask; :func:`with_mask` gives the pullback a ``mask``
property computed the way the earlier GPU pullbacks did: where the pullback of ones is non-zero.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from dnnbind.highlevel.gpu.arrays import cupy


class MaskedPullback:
    """A ``(result, pullback)`` form's pullback with a ``mask`` property; everything else is the pullback's."""

    __slots__ = ("_pullback",)

    def __init__(self, pullback: Any) -> None:
        self._pullback = pullback

    def __call__(self, *cotangents: Any) -> Any:
        return self._pullback(*cotangents)

    @property
    def mask(self) -> Any:
        """The kept elements (a new boolean CuPy array of the result's shape)."""
        pullback = self._pullback
        return pullback(cupy().ones(pullback.shape, pullback.dtype)) != 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_pullback":
            raise AttributeError(name)
        return getattr(self._pullback, name)


def with_mask(run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` (dropout's ``(result, pullback)`` form) with pullbacks that have a ``mask``."""
    @functools.wraps(run)
    def dropout(*args: Any, **kwargs: Any) -> tuple[Any, MaskedPullback]:
        result, pullback = run(*args, **kwargs)
        return result, MaskedPullback(pullback)
    return dropout
