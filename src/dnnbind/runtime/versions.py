"""Decoding each vendor's version report into a ``(major, minor, patch)`` tuple."""
from __future__ import annotations


def cudnn_version(encoded: int) -> tuple[int, int, int]:
    """cuDNN 9 encodes 9.28.1 as 92801; cuDNN 8 and older encoded 8.9.7 as 8907."""
    if encoded >= 90000:
        return encoded // 10000, encoded % 10000 // 100, encoded % 100
    return encoded // 1000, encoded % 1000 // 100, encoded % 100
