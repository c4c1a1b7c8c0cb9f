"""Whether forwards save what their backward needs, and whether they may save the caller's own arrays.

``dnnbind.no_grad()`` turns saving off for inference: inside the block every op still returns
``(result, pullback)``, but the pullback refuses to run (nothing was saved to pull back through), and a
backend may skip work only a backward needs: the reference convolution's private copy of x, a third of
the memory traffic of a memory-bound forward (a depthwise or strided layer).

By default what a pullback reads is the forward's own: changing x, the parameters or the result after
the forward never changes the gradient. An adapter whose framework guarantees that those arrays stay
unchanged until the backward (torch's autograd refuses a backward after an in-place change of a tensor it
saved; JAX's arrays never change) lets the forwards *borrow* them instead: a residual that would be a
copy of an input or of the result is that array itself, as torch's own layers save their tensors, so a
training step holds each activation once. Per thread and per asyncio task (a context variable), like
``torch.no_grad``.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any

#: what a forward saves: nothing (inside no_grad), its own copies, or the caller's arrays themselves
NOTHING, OWN, BORROWED = 0, 1, 2

_SAVING = contextvars.ContextVar("dnnbind_saving_residuals", default=OWN)


def saving() -> bool:
    """Whether a forward called now saves its residuals (False inside :func:`no_grad`)."""
    return _SAVING.get() != NOTHING


def borrowing() -> bool:
    """Whether a forward called now may save its inputs and its result themselves (see the module doc)."""
    return _SAVING.get() == BORROWED


def residual_mode() -> int:
    """:data:`NOTHING`, :data:`OWN` or :data:`BORROWED`: what a forward called now saves."""
    return _SAVING.get()


def own(array: Any) -> Any:
    """``array`` as a residual, C-contiguous: a copy of it, or the array itself where the caller lends it
    (:func:`borrowing`) and it is C-contiguous already."""
    return array if _SAVING.get() == BORROWED and array.flags.c_contiguous else array.copy()


class saving_residuals:
    """Forwards inside the block save their residuals (``enabled``) or not, borrowing the caller's arrays
    where ``borrowed`` (see the module doc); the setting before comes back after. (A class, not a
    generator: the torch adapter enters one on every call.)"""

    __slots__ = ("mode", "token")

    def __init__(self, enabled: bool, borrowed: bool = False) -> None:
        self.mode = (BORROWED if borrowed else OWN) if enabled else NOTHING
        self.token: contextvars.Token[int] | None = None

    def __enter__(self) -> None:
        self.token = _SAVING.set(self.mode)

    def __exit__(self, *exc: object) -> None:
        assert self.token is not None
        _SAVING.reset(self.token)
        self.token = None


def no_grad() -> contextlib.AbstractContextManager[None]:
    """Inference: forwards inside the block save nothing for a backward, and their pullbacks raise."""
    return saving_residuals(False)
