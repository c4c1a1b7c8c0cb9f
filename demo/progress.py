"""A plain-text progress bar: redrawn in place on a terminal, one line per tenth of the run otherwise."""
from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    """``update(step, loss)`` after each step; the loss shown is the mean since the last printed line."""

    def __init__(self, label: str, total: int, *, width: int = 24, stream: TextIO | None = None) -> None:
        self.label, self.total, self.width = label, total, width
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.home = "\r" if self.tty else ""           # back to the line's start, to redraw it
        self.every = max(1, total // 10)
        self.losses: list[float] = []

    def bar(self, step: int) -> str:
        filled = self.width * step // self.total
        return f"{self.label:<5} [{'#' * filled}{'.' * (self.width - filled)}] {step:>4}/{self.total}"

    def update(self, step: int, loss: float) -> None:
        self.losses.append(loss)
        if step % self.every == 0 or step == self.total:
            mean = sum(self.losses) / len(self.losses)
            self.losses.clear()
            print(f"{self.home}{self.bar(step)}  loss {mean:.3f}", file=self.stream, flush=True)
        elif self.tty:
            print(f"\r{self.bar(step)}  loss {loss:.3f}", end="", file=self.stream, flush=True)
