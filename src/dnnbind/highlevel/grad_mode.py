"""Whether forwards save what their backward needs: ``dnnbind.no_grad()`` turns saving off for inference.

Inside the block every op still returns ``(result, pullback)``, but the pullback refuses to run (nothing
was saved to pull back through), and a backend may skip work only a backward needs: the reference
convolution's private copy of x, a third of the memory traffic of a memory-bound forward (a depthwise or
strided layer). Per thread and per asyncio task (a context variable), like ``torch.no_grad``.
"""
from __future__ import annotations

import contextlib
import contextvars

_SAVING = contextvars.ContextVar("dnnbind_saving_residuals", default=True)


def saving() -> bool:
    """Whether a forward called now saves its residuals (False inside :func:`no_grad`)."""
    return _SAVING.get()


class saving_residuals:
    """Forwards inside the block save their residuals (``enabled``) or not; the setting before comes back
    after. (A class, not a generator: the torch adapter enters one on every call.)"""

    __slots__ = ("enabled", "token")

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.token: contextvars.Token[bool] | None = None

    def __enter__(self) -> None:
        self.token = _SAVING.set(self.enabled)

    def __exit__(self, *exc: object) -> None:
        assert self.token is not None
        _SAVING.reset(self.token)
        self.token = None


def no_grad() -> contextlib.AbstractContextManager[None]:
    """Inference: forwards inside the block save nothing for a backward, and their pullbacks raise."""
    return saving_residuals(False)
