"""dnnbind demo: train a small CNN and a small LSTM on synthetic data with dnnbind's high-level ops.

Each model runs on a CUDA GPU when CuPy, a device and a dnnbind GPU backend with its ops are there, else
on the CPU (numpy cpu backend). At the end it writes a PNG of the loss curves and a few CNN inputs with
their predicted classes (matplotlib needed; without it, it says how to get it).
Usage: python demo/train.py [--steps N] [--cpu] [--seed S] [--plot PATH | --no-plot]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data                                                          # noqa: E402
import plot                                                          # noqa: E402
from layers import (Adam, BatchNorm, Conv, Dense, Flatten, LSTMLast, Sequential, Stateless,  # noqa: E402
                    cross_entropy)
from progress import Progress                                        # noqa: E402

import dnnbind                                                       # noqa: E402
from dnnbind.highlevel.dispatch import load_backend                  # noqa: E402

DEFAULT_PLOT = Path(__file__).resolve().parents[1] / "build" / "demo.png"
SHOWN_IMAGES = 8
CNN_OPS = ("conv", "batchnorm", "activation", "maxpool", "dropout", "logsoftmax")
LSTM_OPS = ("rnn", "conv", "logsoftmax")


def choose_backend(force_cpu: bool, ops: tuple[str, ...]) -> tuple[ModuleType, str]:
    """(numpy or cupy, where ``ops`` will run): the GPU when it can run them all, else the CPU and why."""
    cpu = "CPU, numpy cpu backend"
    if force_cpu:
        return np, f"{cpu} (--cpu)"
    try:
        import cupy  # type: ignore[import-not-found]
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no CuPy, no driver, no device: all mean "CPU"
        return np, f"{cpu} ({'CuPy not installed' if isinstance(exc, ImportError) else f'no usable GPU: {exc}'})"
    if count == 0:
        return np, f"{cpu} (no GPU visible)"
    name = "miopen" if cupy.cuda.runtime.is_hip else "cudnn"
    try:
        backend = load_backend(name)
    except (NotImplementedError, ImportError) as exc:
        return np, f"{cpu} ({exc})"
    missing = [op for op in ops if not hasattr(backend, op)]
    if missing:
        return np, f"{cpu} (the {name} backend has no {', '.join(missing)} yet)"
    try:
        dnnbind.conv(cupy.ones((1, 1, 3, 3), np.float32), cupy.ones((1, 1, 2, 2), np.float32))
    except Exception as exc:  # for example no cuDNN library: say so and train on the CPU
        return np, f"{cpu} (a test convolution on the GPU failed: {exc})"
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return cupy, f"GPU {device.decode() if isinstance(device, bytes) else device}, {name} backend"


def cnn(xp: Any, rng: np.random.Generator) -> Sequential:
    """12x12 images -> conv/bn/relu/pool twice -> dropout -> dense -> 4 classes."""
    relu = Stateless(lambda x: dnnbind.activation(x, "relu"))
    pool = Stateless(lambda x: dnnbind.maxpool(x, 2))
    dropout = Stateless(lambda x: dnnbind.dropout(x, 0.2, seed=int(rng.integers(2**31))), train_only=True)
    return Sequential(Conv(xp, rng, 1, 8, (3, 3), padding=1), BatchNorm(xp, 8), relu, pool,
                      Conv(xp, rng, 8, 16, (3, 3), padding=1), BatchNorm(xp, 16), relu, pool,
                      dropout, Flatten(), Dense(xp, rng, 16 * 3 * 3, len(data.BAR_CLASSES)))


def lstm(xp: Any, rng: np.random.Generator) -> Sequential:
    """Sequences of 16 values -> LSTM (last hidden state) -> dense -> 3 classes."""
    return Sequential(LSTMLast(xp, rng, 1, 24), Dense(xp, rng, 24, len(data.WAVE_FREQUENCIES)))


def train(label: str, xp: Any, model: Sequential, make_batch: Callable[[int], tuple[np.ndarray, np.ndarray]],
          steps: int, lr: float) -> dict[str, Any]:
    """Adam on fresh batches; returns first/last losses, held-out accuracy, seconds per step, every
    step's loss and the held-out inputs with their labels and predictions."""
    opt = Adam(xp, model, lr=lr)
    progress = Progress(label, steps)
    losses = []
    start = time.perf_counter()
    for step in range(1, steps + 1):
        x, labels = (xp.asarray(a) for a in make_batch(32))
        logits, tape = model.forward(x, train=True)
        loss, dlogits = cross_entropy(xp, logits, labels)
        tape.backward(dlogits)
        opt.step()
        losses.append(loss)
        progress.update(step, loss)
    seconds = (time.perf_counter() - start) / steps
    x, labels = (xp.asarray(a) for a in make_batch(512))
    logits, _ = model.forward(x, train=False)
    predicted = logits.argmax(axis=1)
    accuracy = float((predicted == labels).mean())
    k = max(1, steps // 10)
    host = np.asarray if xp is np else xp.asnumpy
    return {"first": float(np.mean(losses[:k])), "last": float(np.mean(losses[-k:])), "accuracy": accuracy,
            "seconds": seconds, "losses": [float(v) for v in losses],
            "held_out": (host(x[:SHOWN_IMAGES]), host(predicted[:SHOWN_IMAGES]), host(labels[:SHOWN_IMAGES]))}


def picture(path: Path, results: dict[str, Any]) -> str:
    """Write the loss curves and some CNN predictions to ``path``; the line that says where, or why not."""
    if not plot.available():
        return f"no picture: matplotlib is not installed; to get one: {plot.INSTALL_HINT}"
    images, predicted, labels = results["cnn"]["held_out"]
    plot.save(path, {label: r["losses"] for label, r in results.items()}, images, predicted, labels,
              data.BAR_CLASSES)
    return f"picture: {path} (loss curves, and {len(images)} held-out CNN inputs with their predicted classes)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps per model (default 300)")
    parser.add_argument("--cpu", action="store_true", help="use the CPU backend even with a GPU")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT, help=f"the PNG to write (default {DEFAULT_PLOT})")
    parser.add_argument("--no-plot", action="store_true", help="write no picture")
    args = parser.parse_args(argv)
    print(f"dnnbind {dnnbind.__version__} demo: {args.steps} steps per model")
    rng = np.random.default_rng(args.seed)
    models = {"cnn": (cnn, CNN_OPS, lambda n: data.bars(rng, n), 0.01),
              "lstm": (lstm, LSTM_OPS, lambda n: data.waves(rng, n), 0.02)}
    results = {}
    for label, (build, ops, make_batch, lr) in models.items():
        xp, where = choose_backend(args.cpu, ops)
        print(f"{label:<5} on {where}")
        results[label] = train(label, xp, build(xp, rng), make_batch, args.steps, lr), where
    print()
    for label, (r, where) in results.items():
        print(f"{label:<5} loss {r['first']:.3f} -> {r['last']:.3f} (first and last tenth of the steps), "
              f"held-out accuracy {r['accuracy']:.0%}, {r['seconds'] * 1e3:.1f} ms per step\n"
              f"      backend: {where}")
    if not args.no_plot:
        print(picture(args.plot, {label: r for label, (r, _) in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
