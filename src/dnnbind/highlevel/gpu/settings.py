"""Backend options that the public ops do not take as arguments: algorithm choice, determinism,
workspace limit, TF32.

The public ops keep PyTorch's signatures, so these options live with each GPU backend as a
:class:`SettingsControl`: ``backend.settings.configure(...)`` changes the process-wide defaults and
``with backend.settings(...):`` overrides them for the current thread (or asyncio task) only.
"""
from __future__ import annotations

import contextlib
import dataclasses
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator

ALGOS = ("heuristic", "benchmark")


@dataclass(frozen=True)
class Settings:
    """How a GPU backend chooses and runs its algorithms.

    ``algo``: "heuristic" (the library's ranking, first algorithm whose workspace fits) or "benchmark"
    (time every algorithm once per problem, keep the fastest). ``deterministic``: only algorithms that
    give bitwise identical results run to run. ``workspace_limit``: most bytes of scratch memory one call
    may take from the memory pool. ``allow_tf32``: float32 convolutions may use TF32 tensor cores
    (about 1e-3 relative error instead of 1e-6).
    """

    algo: str = "heuristic"
    deterministic: bool = False
    workspace_limit: int = 1 << 30
    allow_tf32: bool = False

    def __post_init__(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f"algo={self.algo!r} must be one of {', '.join(map(repr, ALGOS))}")
        for name in ("deterministic", "allow_tf32"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}={getattr(self, name)!r} must be a bool")
        limit = self.workspace_limit
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"workspace_limit={limit!r} must be a non-negative int (bytes)")

    def replace(self, **changes: Any) -> "Settings":
        """A copy with ``changes``; TypeError naming an unknown option."""
        known = {f.name for f in dataclasses.fields(self)}
        for name in changes:
            if name not in known:
                raise TypeError(f"unknown setting {name!r}; the settings are {', '.join(sorted(known))}")
        return dataclasses.replace(self, **changes)


class SettingsControl:
    """One backend's settings: process-wide defaults plus per-context overrides."""

    def __init__(self, name: str, defaults: Settings | None = None) -> None:
        self._defaults = defaults or Settings()
        self._override: ContextVar[Settings | None] = ContextVar(f"{name}.settings", default=None)

    def current(self) -> Settings:
        """The settings in force here (the override of this context, else the defaults)."""
        override = self._override.get()
        return self._defaults if override is None else override

    def configure(self, **changes: Any) -> Settings:
        """Change the process-wide defaults; returns the new defaults."""
        self._defaults = self._defaults.replace(**changes)
        return self._defaults

    @contextlib.contextmanager
    def __call__(self, **changes: Any) -> Iterator[Settings]:
        """``with settings(algo="benchmark"):`` overrides the settings for this thread/task only."""
        token = self._override.set(self.current().replace(**changes))
        try:
            yield self.current()
        finally:
            self._override.reset(token)

    def __repr__(self) -> str:
        return f"<settings {self.current()}>"
