"""Synthetic data sets, generated on the fly with numpy (moved to the device by the caller)."""
from __future__ import annotations

import numpy as np

BAR_CLASSES = ("horizontal", "vertical", "diagonal", "anti-diagonal")
WAVE_FREQUENCIES = (0.5, 1.0, 1.5)          # cycles per sequence, one class each


def bars(rng: np.random.Generator, n: int, size: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """(n, 1, size, size) noisy images, each with one bar of a random position; label = its orientation."""
    labels = rng.integers(0, len(BAR_CLASSES), n)
    images = 0.4 * rng.standard_normal((n, 1, size, size)).astype(np.float32)
    offsets = rng.integers(-size // 3, size // 3 + 1, n)
    grid = np.arange(size)
    for i, (label, k) in enumerate(zip(labels, offsets)):
        if label == 0:
            images[i, 0, size // 2 + k, :] += 1.0
        elif label == 1:
            images[i, 0, :, size // 2 + k] += 1.0
        else:
            rows = grid if label == 2 else grid[::-1]
            cols = np.clip(grid + k, 0, size - 1)
            images[i, 0, rows, cols] += 1.0
    return images, labels


def waves(rng: np.random.Generator, n: int, length: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(n, length, 1) noisy sine waves with a random phase; label = which frequency."""
    labels = rng.integers(0, len(WAVE_FREQUENCIES), n)
    t = np.arange(length) / length
    phase = rng.uniform(0, 2 * np.pi, (n, 1))
    freq = np.asarray(WAVE_FREQUENCIES)[labels][:, None]
    x = np.sin(2 * np.pi * freq * t + phase) + 0.3 * rng.standard_normal((n, length))
    return x[:, :, None].astype(np.float32), labels
