"""GPU benchmarks of the cuDNN backend, as ratios against PyTorch measured in the same run.

- convolution forward + backward (the op and its pullback: dx and dw) on ResNet-50's layer shapes at
  batch 32, float16 and float32, with ``settings(algo="benchmark")`` against PyTorch with
  ``torch.backends.cudnn.benchmark = True`` (TF32 off on both sides for float32); goal <= 1.05x per
  shape and for the geometric mean;
- host overhead of a repeated small convolution (x 1x16x8x8, w 16x16x3x3, padding 1, float32): wall
  time per call over 1000 back-to-back calls (then one synchronisation), through the public op and
  through the backend with a prebuilt ConvDims, against F.conv2d without autograd; goal <= 1.0x;
- host time of a cached small cuDNN convolution (x 1x1x4x4, w 1x1x3x3, padding 1, float32): wall time
  per call of ``dnnbind.conv`` over 2000 back-to-back calls and one synchronisation, where the GPU's
  work per call (one tiny kernel) is far shorter than the host's and runs behind it; goal <= 10 us;
- LSTM forward + backward (seq 50, batch 64, 512 -> 1024, 2 layers, float16 and float32) against
  torch.nn.LSTM; goal <= 1.05x (bench/bench_gpu_rnn.py).

Without CuPy, a GPU or PyTorch with CUDA it prints why and skips. ``--json PATH`` writes the rows.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, median_seconds, print_table  # noqa: E402
from bench_gpu_rnn import rnn_rows  # noqa: E402

#: ResNet-50 convolutions: name, in channels, spatial size, out channels, kernel, stride, padding
RESNET50 = [
    ("conv1 7x7/2 3->64 @224", 3, 224, 64, 7, 2, 3),
    ("layer1 1x1 64->64 @56", 64, 56, 64, 1, 1, 0),
    ("layer1 3x3 64->64 @56", 64, 56, 64, 3, 1, 1),
    ("layer1 1x1 64->256 @56", 64, 56, 256, 1, 1, 0),
    ("layer2 3x3/2 128->128 @56", 128, 56, 128, 3, 2, 1),
    ("layer2 3x3 128->128 @28", 128, 28, 128, 3, 1, 1),
    ("layer2 down 1x1/2 256->512 @56", 256, 56, 512, 1, 2, 0),
    ("layer3 3x3 256->256 @14", 256, 14, 256, 3, 1, 1),
    ("layer3 1x1 1024->256 @14", 1024, 14, 256, 1, 1, 0),
    ("layer4 3x3 512->512 @7", 512, 7, 512, 3, 1, 1),
]
BATCH = 32
GOAL_CONV = 1.05
GOAL_OVERHEAD = 1.0
GOAL_HOST_US = 10.0


def environment() -> tuple[Any, Any] | str:
    """(cupy, torch) when both see a CUDA device, else the reason to skip."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1 or cupy.cuda.runtime.is_hip:
            return "no NVIDIA GPU visible to CuPy"
    except Exception as exc:
        return f"no GPU: CuPy unavailable ({type(exc).__name__}: {exc})"
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch is not installed ({exc}); the ratios need it"
    if not hasattr(torch, "cuda") or not torch.cuda.is_available():
        return "PyTorch with CUDA is not available here"
    return cupy, torch


def seconds_per_iteration(run: Callable[[], object], sync: Callable[[], None], iterations: int,
                          repeats: int = 5, warmup: int = 3) -> float:
    """Median over ``repeats`` of (wall time of ``iterations`` calls + one device sync) / iterations."""
    return median_seconds(run, repeats=repeats, number=iterations, warmup=warmup, sync=sync)


def conv_rows(cupy: Any, torch: Any, dtype: str) -> list[Row]:
    import dnnbind
    from dnnbind.highlevel import cudnn as backend

    F = torch.nn.functional
    sync = torch.cuda.synchronize
    rows = []
    for name, cin, size, cout, k, stride, pad in RESNET50:
        x = cupy.random.standard_normal((BATCH, cin, size, size), dtype=cupy.float32).astype(dtype)
        w = (cupy.random.standard_normal((cout, cin, k, k), dtype=cupy.float32) / math.sqrt(cin * k * k)).astype(dtype)
        y0, _ = dnnbind.conv(x, w, stride=stride, padding=pad)
        dy = cupy.random.standard_normal(y0.shape, dtype=cupy.float32).astype(dtype)

        def ours() -> None:
            y, pullback = dnnbind.conv(x, w, stride=stride, padding=pad)
            pullback(dy)

        xt = torch.as_tensor(x, device="cuda").requires_grad_()
        wt = torch.as_tensor(w, device="cuda").requires_grad_()
        dyt = torch.as_tensor(dy, device="cuda")

        def theirs() -> None:
            y = F.conv2d(xt, wt, stride=stride, padding=pad)
            torch.autograd.grad(y, (xt, wt), dyt)

        with backend.settings(algo="benchmark"):
            t_ours = seconds_per_iteration(ours, sync, iterations=10)
        t_theirs = seconds_per_iteration(theirs, sync, iterations=10)
        rows.append(Row(f"conv fwd+bwd {dtype} {name}", t_ours, t_theirs, "torch, cudnn.benchmark", GOAL_CONV))
    geomean = lambda values: math.exp(sum(map(math.log, values)) / len(values))  # noqa: E731
    rows.append(Row(f"conv fwd+bwd {dtype} ResNet-50 (geometric mean)", geomean([r.ours for r in rows]),
                    geomean([r.reference for r in rows]), "torch, cudnn.benchmark", GOAL_CONV))
    return rows


def overhead_rows(cupy: Any, torch: Any) -> list[Row]:
    import dnnbind
    from dnnbind.highlevel import cudnn as backend
    from dnnbind.highlevel.dims import ConvDims

    x = cupy.random.standard_normal((1, 16, 8, 8), dtype=cupy.float32)
    w = cupy.random.standard_normal((16, 16, 3, 3), dtype=cupy.float32)
    dims = ConvDims(x.shape, w.shape, padding=1, dtype="float32")
    xt, wt = torch.as_tensor(x, device="cuda"), torch.as_tensor(w, device="cuda")
    sync = torch.cuda.synchronize

    def theirs() -> None:
        with torch.no_grad():
            torch.nn.functional.conv2d(xt, wt, padding=1)

    t_theirs = seconds_per_iteration(theirs, sync, iterations=1000, warmup=50)
    t_public = seconds_per_iteration(lambda: dnnbind.conv(x, w, padding=1), sync, iterations=1000, warmup=50)
    t_backend = seconds_per_iteration(lambda: backend.conv(x, w, None, dims), sync, iterations=1000, warmup=50)
    return [Row("small conv 1x16x8x8 3x3, per call: dnnbind.conv", t_public, t_theirs, "torch F.conv2d, no_grad",
                GOAL_OVERHEAD, "us"),
            Row("small conv, per call: backend, ConvDims prebuilt", t_backend, t_theirs, "torch F.conv2d, no_grad",
                GOAL_OVERHEAD, "us")]


def host_time_rows(cupy: Any, torch: Any) -> list[Row]:
    """Host time of a repeated tiny convolution whose plan is cached: the Python path, dispatch, the
    cached checks, the plan lookup and the library call, with negligible GPU work. The figure is absolute
    (microseconds), so the row's reference is 1 us and its goal GOAL_HOST_US."""
    import dnnbind

    x = cupy.random.standard_normal((1, 1, 4, 4), dtype=cupy.float32)
    w = cupy.random.standard_normal((1, 1, 3, 3), dtype=cupy.float32)
    dnnbind.conv(x, w, padding=1)                      # builds and caches the plan
    per_call = seconds_per_iteration(lambda: dnnbind.conv(x, w, padding=1), torch.cuda.synchronize,
                                     iterations=2000, warmup=100)
    return [Row("cached tiny conv 1x1x4x4 3x3: host time/call", per_call, 1e-6, "1 us: the goal is in us",
                GOAL_HOST_US, "us")]


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the rows (or the reason for skipping) here")
    args = parser.parse_args(argv)
    env = environment()
    if isinstance(env, str):
        print(f"GPU benchmarks skipped: {env}")
        if args.json:
            args.json.write_text(json.dumps({"skipped": env}))
        return []
    cupy, torch = env
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CuPy {cupy.__version__}")
    rows: list[Row] = []
    try:
        rows += overhead_rows(cupy, torch)
        rows += host_time_rows(cupy, torch)
        for dtype in ("float16", "float32"):
            rows += conv_rows(cupy, torch, dtype)
        for dtype in ("float16", "float32"):
            rows += rnn_rows(cupy, torch, dtype, seconds_per_iteration)
    finally:
        if rows:
            print_table("GPU: dnnbind's cuDNN backend vs PyTorch (same device, same run)", rows)
        if args.json:
            args.json.write_text(json.dumps({"rows": [
                {"name": r.name, "ours_s": r.ours, "reference_s": r.reference, "reference": r.reference_name,
                 "ratio": r.ratio, "goal": r.goal, "met": r.met} for r in rows]}, indent=1))
    return rows


if __name__ == "__main__":
    main()
