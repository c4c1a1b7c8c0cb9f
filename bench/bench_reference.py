"""Benchmark the numpy reference backend against PyTorch on the CPU, side by side in one run.

    python bench/bench_reference.py [--repeats N]

Every figure is the median of several timed repeats, taken in alternating bursts (ours, torch's)
with a pause between bursts so that neither library's idle worker threads slow the other. torch
gets as many threads as numpy's BLAS has, so the two compete on equal terms. Rows without torch
installed are skipped with a message.

Then the convolution's thread pool is compared with a single thread, twice: with numpy's BLAS as it
is, and (in a child process) with BLAS limited to one thread, the case where conv.use_threads turns
the pool on.
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

try:
    import dnnbind  # noqa: F401
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import dnnbind
from dnnbind.highlevel.dims import ConvDims

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row  # noqa: E402  (bench/common.py: the row type bench/run.py summarises)

# the module, not the function of the same name that dnnbind.highlevel.reference exports
ref_conv = importlib.import_module("dnnbind.highlevel.reference.conv")

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None


def blas_name() -> str:
    """numpy's BLAS as np.show_config reports it (and its kernel when threadpoolctl is installed)."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        name = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy: no dict mode
        name = "unknown"
    try:
        from threadpoolctl import threadpool_info
        kernels = [i.get("architecture") for i in threadpool_info() if i.get("user_api") == "blas"]
        if kernels and kernels[0]:
            name += f" ({kernels[0]} kernels)"
    except ImportError:
        pass
    return name


def blas_threads() -> int:
    """Threads numpy's BLAS uses (threadpoolctl when available, else the usual variables)."""
    try:
        from threadpoolctl import threadpool_info
        for info in threadpool_info():
            if info.get("user_api") == "blas":
                return int(info["num_threads"])
    except ImportError:
        pass
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return len(os.sched_getaffinity(0))


def timeit(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn`` in milliseconds, after one warm-up call."""
    return compare(fn, None, repeats)[0]


#: Idle time between bursts: OpenBLAS worker threads spin up to ~2^28 cycles after a call, and
#: OpenMP workers spin too; without a pause one library's spinning threads steal the other's cores.
PAUSE_S = 0.25


def compare(ours: Callable[[], object], theirs: Callable[[], object] | None, repeats: int,
            burst: int = 4) -> tuple[float, float | None]:
    """Median times (ms) of two functions, timed in alternating bursts with a pause in between.

    Alternating spreads the machine's background load over both. Each burst starts with an untimed
    call after the pause (to wake the library's threads), then times ``burst`` calls.
    """
    fns = [ours] if theirs is None else [ours, theirs]
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(-(-repeats // burst)):
        for fn, bucket in zip(fns, times):
            time.sleep(PAUSE_S)
            fn()
            for _ in range(burst):
                start = time.perf_counter()
                fn()
                bucket.append(time.perf_counter() - start)
    medians = [statistics.median(bucket) * 1e3 for bucket in times]
    return medians[0], (medians[1] if theirs is not None else None)


# ---------------------------------------------------------------------------------------------- cases


def conv_case(x_shape, w_shape, groups, padding, backward, repeats, threaded=None):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    dims = ConvDims(x.shape, w.shape, padding=padding, groups=groups, dtype=x.dtype)
    dy = rng.standard_normal(dims.y_shape, dtype=np.float32)

    def ours():
        y, pullback = ref_conv.conv(x, w, None, dims, threaded=threaded)
        if backward:
            pullback(dy)

    if torch is None:
        return timeit(ours, repeats), None
    xt, wt, dyt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(dy)
    if backward:
        xt.requires_grad_(True)
        wt.requires_grad_(True)

    def theirs():
        y = F.conv2d(xt, wt, padding=padding, groups=groups)
        if backward:
            torch.autograd.grad(y, (xt, wt), dyt)

    with torch.set_grad_enabled(backward):
        return compare(ours, theirs, repeats)


def thread_case(x_shape, w_shape, groups, padding, repeats):
    """conv forward+backward with the thread pool forced on, and off; timed alternately."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    dims = ConvDims(x.shape, w.shape, padding=padding, groups=groups, dtype=x.dtype)
    dy = rng.standard_normal(dims.y_shape, dtype=np.float32)

    def run(threaded):
        return lambda: ref_conv.conv(x, w, None, dims, threaded=threaded)[1](dy)

    return compare(run(True), run(False), repeats)


def lstm_case(seq, batch, inp, hidden, repeats, backward=True):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((seq, batch, inp), dtype=np.float32)
    scale = 1 / np.sqrt(hidden)
    weights = [tuple(rng.uniform(-scale, scale, shape).astype(np.float32)
                     for shape in ((4 * hidden, inp), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)))]
    dy = rng.standard_normal((seq, batch, hidden), dtype=np.float32)

    def ours():
        _, pullback = dnnbind.rnn(x, weights, mode="lstm", hidden_size=hidden)
        if backward:
            pullback(dy)

    if torch is None:
        return timeit(ours, repeats), None
    lstm = torch.nn.LSTM(inp, hidden)
    with torch.no_grad():
        for name, value in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"), weights[0]):
            getattr(lstm, name).copy_(torch.from_numpy(value))
    xt, dyt = torch.from_numpy(x).requires_grad_(backward), torch.from_numpy(dy)
    params = list(lstm.parameters())

    def theirs():
        y, _ = lstm(xt)
        if backward:
            torch.autograd.grad(y, [xt] + params, dyt)

    with torch.set_grad_enabled(backward):
        return compare(ours, theirs, repeats)


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> list[Row]:
    """Print both tables; return the rows that have goals (for bench/run.py's summary)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads-only", action="store_true", help="only the thread-pool table")
    args = parser.parse_args([] if argv is None and __name__ != "__main__" else argv)
    results: list[Row] = []
    r = args.repeats
    threads = blas_threads()
    print(f"numpy {np.__version__}, BLAS {blas_name()}, BLAS threads {threads}, "
          f"CPUs {len(os.sched_getaffinity(0))}, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    grouped = ((2, 100, 28, 28), (15, 20, 3, 3), 5, 0)
    dense = ((8, 64, 56, 56), (64, 64, 3, 3), 1, 1)
    if not args.threads_only:
        if torch is None:
            print("torch is not installed: torch columns skipped (pip install torch==2.13.0 to compare)")
        else:
            torch.set_num_threads(threads)
            print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
        rows = [
            ("conv grouped g=5 fwd", lambda: conv_case(*grouped, False, r), 1.0),
            ("conv grouped g=5 fwd+bwd", lambda: conv_case(*grouped, True, r), 1.0),
            ("conv dense 3x3 fwd", lambda: conv_case(*dense, False, r), 1.5),
            ("conv dense 3x3 fwd+bwd", lambda: conv_case(*dense, True, r), None),
            ("lstm fwd", lambda: lstm_case(50, 32, 128, 256, r, backward=False), None),
            ("lstm fwd+bwd", lambda: lstm_case(50, 32, 128, 256, r), 2.0),
        ]
        print()
        print(f"{'case':<28}{'dnnbind ms':>12}{'torch ms':>10}{'ratio':>8}{'goal':>8}  result")
        for name, case, goal in rows:
            ours, theirs = case()
            if theirs is None:
                print(f"{name:<28}{ours:>12.2f}{'-':>10}{'-':>8}{'-':>8}  torch missing")
                continue
            ratio = ours / theirs
            verdict = "-" if goal is None else ("met" if ratio <= goal else "missed")
            if goal is not None:
                results.append(Row(f"reference {name}", ours / 1e3, theirs / 1e3, "torch CPU", goal))
            goal_text = "-" if goal is None else f"<={goal:g}x"
            print(f"{name:<28}{ours:>12.2f}{theirs:>10.2f}{ratio:>7.2f}x{goal_text:>8}  {verdict}")

    print()
    print(f"thread pool over (groups x batch) chunks vs one thread, conv forward+backward, "
          f"BLAS threads {threads}:")
    print(f"{'case':<34}{'threaded ms':>12}{'serial ms':>10}{'ratio':>8}  rule picks")
    thread_cases = [
        ("g=1 x(8,64,56,56) w(64,64,3,3)", dense),
        ("g=1 x(16,32,32,32) w(32,32,3,3)", ((16, 32, 32, 32), (32, 32, 3, 3), 1, 1)),
        ("g=1 x(2,20,28,28) w(15,20,3,3)", ((2, 20, 28, 28), (15, 20, 3, 3), 1, 0)),
        ("g=5 x(2,100,28,28) w(15,20,3,3)", grouped),
        ("g=5 x(8,100,56,56) w(100,20,3,3)", ((8, 100, 56, 56), (100, 20, 3, 3), 5, 1)),
    ]
    for name, (xs, ws, g, p) in thread_cases:
        on, off = thread_case(xs, ws, g, p, r)
        rule = ref_conv.use_threads(ConvDims(xs, ws, padding=p, groups=g))
        print(f"{name:<34}{on:>12.2f}{off:>10.2f}{on / off:>7.2f}x  {'threaded' if rule else 'serial'}")
    sys.stdout.flush()
    if not args.threads_only and threads > 1:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        subprocess.run([sys.executable, __file__, "--threads-only", "--repeats", str(r)], env=env, check=True)
    return results


if __name__ == "__main__":
    main()
