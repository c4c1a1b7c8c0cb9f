"""The demo's picture: loss curves of both models and a few CNN inputs with their predicted classes.

matplotlib is optional (the dev extra installs it): without it :func:`save` says how to get it and the
demo ends with its numbers only.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Sequence

import numpy as np

INSTALL_HINT = "pip install matplotlib (or `make setup`, which installs dnnbind's dev extra)"


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def save(path: Path, curves: dict[str, Sequence[float]], images: np.ndarray, predicted: np.ndarray,
         labels: np.ndarray, classes: Sequence[str]) -> Path:
    """Write the figure to ``path`` (PNG): one loss curve per model (per step, and smoothed), then
    ``images`` (n, 1, h, w) titled with their predicted class, red where it is wrong."""
    import matplotlib
    matplotlib.use("Agg")                                   # files only: no display needed
    import matplotlib.pyplot as plt

    n = len(images)
    fig = plt.figure(figsize=(max(8.0, 1.6 * n), 6.4), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.5, 1])
    ax = top.subplots()
    for label, losses in curves.items():
        steps = np.arange(1, len(losses) + 1)
        line, = ax.plot(steps, losses, alpha=0.3, linewidth=0.8)
        window = max(1, len(losses) // 20)
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
        ax.plot(steps[window - 1:], smooth, color=line.get_color(), label=f"{label} (mean of {window} steps)")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_yscale("log")
    ax.set_title("dnnbind demo: training loss")
    ax.legend()
    bottom.suptitle("CNN on held-out images: predicted class (red: wrong; true class in brackets)")
    for ax, image, guess, truth in zip(np.atleast_1d(bottom.subplots(1, n)), images, predicted, labels):
        ax.imshow(image[0], cmap="gray")
        ax.set_xticks([])
        ax.set_yticks([])
        wrong = guess != truth
        ax.set_title(classes[guess] + (f"\n[{classes[truth]}]" if wrong else ""), fontsize=9,
                     color="red" if wrong else "black")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
