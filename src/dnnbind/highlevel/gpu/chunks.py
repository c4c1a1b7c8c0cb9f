"""Elementwise library calls on arrays of 2**31 elements or more, cut into chunks the libraries accept.

cuDNN and MIOpen take a tensor's dims and strides as C ints, and cuDNN limits one tensor to 2**31
elements: the flat (1, 1, 1, n) descriptor of the activation and dropout calls cannot describe a larger
array (n would wrap, and the library would leave the rest of y unwritten). Both GPU backends therefore
run those calls over :func:`chunk_plan`'s pieces of the flat block: consecutive element ranges of at
most :data:`CHUNK_ELEMENTS`, each starting at a byte offset aligned for any dtype and vector load.
"""
from __future__ import annotations

from dataclasses import dataclass

#: the most elements one flat library call gets: 2**30, well inside cuDNN's 2**31 limit per tensor
CHUNK_ELEMENTS = 1 << 30


@dataclass(frozen=True)
class Chunk:
    """Elements [start, stop) of a flat block, at byte offset ``start * itemsize``."""

    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    def offset(self, itemsize: int) -> int:
        """Byte offset of the chunk's first element."""
        return self.start * itemsize


def chunk_plan(size: int, limit: int = CHUNK_ELEMENTS) -> list[Chunk]:
    """Consecutive chunks covering ``size`` elements, each at most ``limit`` (a multiple of 256, so every
    chunk but the last starts 256-element aligned); one chunk when the array fits in one call."""
    if size < 0:
        raise ValueError(f"size={size} must be non-negative")
    if limit < 256 or limit % 256:
        raise ValueError(f"limit={limit} must be a positive multiple of 256")
    if size <= limit:
        return [Chunk(0, size)]
    return [Chunk(start, min(start + limit, size)) for start in range(0, size, limit)]
