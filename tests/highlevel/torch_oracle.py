"""Small translations from dnnbind's arguments to torch.nn.functional's, for the oracle tests."""
from __future__ import annotations

from typing import Sequence


def torch_pad(pads: Sequence[tuple[int, int]]) -> list[int]:
    """((low, high) per spatial dim, first dim first) -> F.pad's flat list, last dim first."""
    flat: list[int] = []
    for lo, hi in reversed(pads):
        flat += [lo, hi]
    return flat
