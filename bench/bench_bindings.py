"""Benchmarks of the generated bindings (issue: cuDNN bindings).

- regenerating the cuDNN module with headers installed: wall time of `python -m generator check cudnn`
  (parse + classify + render + compare; a fresh interpreter), goal <= 1 s;
- `import dnnbind.gen.cudnn` in a fresh interpreter with bytecode cached, goal < 50 ms;
- a checked generated call of cudnnSetTensor4dDescriptor against a bare hand-declared ctypes function
  with argtypes set, goal <= 1.25x; and the same after tracing was switched on and off (tracing is
  free when off).
"""
from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, median_seconds, print_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    return env


def _child_seconds(code: str, repeats: int) -> float:
    """Median of what a fresh interpreter reports for ``code`` (which prints elapsed seconds)."""
    run = lambda: float(subprocess.run([sys.executable, "-c", code], env=_env(), cwd=ROOT, check=True,
                                       capture_output=True, text=True).stdout.strip())
    run()                                   # writes the .pyc files
    return statistics.median(run() for _ in range(repeats))


def _wall_seconds(argv: list[str], repeats: int) -> float:
    def once() -> float:
        start = time.perf_counter()
        subprocess.run(argv, env=_env(), cwd=ROOT, check=True, capture_output=True)
        return time.perf_counter() - start
    once()
    return statistics.median(once() for _ in range(repeats))


def regeneration() -> Row:
    ours = _wall_seconds([sys.executable, "-m", "generator", "check", "cudnn"], repeats=3)
    return Row("regenerate cuDNN module (wall, fresh process)", ours, 1.0, "the 1 s budget", 1.0, "s")


def import_time() -> Row:
    timed = "import time; t = time.perf_counter(); import {}; print(time.perf_counter() - t)"
    ours = _child_seconds(timed.format("dnnbind.gen.cudnn"), repeats=9)
    return Row("import dnnbind.gen.cudnn (fresh process)", ours, 0.050, "the 50 ms budget", 1.0)


def call_overhead(after_trace: bool = False) -> Row:
    from dnnbind.gen import cudnn
    desc = cudnn.cudnnTensorDescriptor_t()
    cudnn.cudnnCreateTensorDescriptor(ctypes.byref(desc))
    bare = ctypes.CDLL(cudnn.library_path()).cudnnSetTensor4dDescriptor
    bare.argtypes = [cudnn.cudnnTensorDescriptor_t] + [ctypes.c_int] * 6
    bare.restype = ctypes.c_int
    checked = cudnn.cudnnSetTensor4dDescriptor
    args = (desc, 0, 0, 1, 2, 3, 4)
    if after_trace:                          # tracing on, then off again: must cost nothing now
        import dnnbind
        with dnnbind.trace(file=None):
            checked(*args)
    # interleave the two so that machine noise hits both alike
    ours, reference = [], []
    for _ in range(7):
        reference.append(median_seconds(lambda: bare(*args), repeats=1, number=50_000))
        ours.append(median_seconds(lambda: checked(*args), repeats=1, number=50_000))
    name = "same call after a trace() block (tracing off)" if after_trace else "checked cudnnSetTensor4dDescriptor call"
    return Row(name, statistics.median(ours), statistics.median(reference), "bare ctypes function, argtypes set",
               1.25, "us")


def main() -> list[Row]:
    rows = [regeneration(), import_time(), call_overhead(), call_overhead(after_trace=True)]
    print_table("Generated bindings", rows)
    return rows


if __name__ == "__main__":
    rows = main()
    sys.exit(0 if all(r.met for r in rows) else 1)
