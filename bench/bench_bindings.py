"""Benchmarks of the generated bindings (issue: cuDNN bindings).

- regenerating the cuDNN module with headers installed: wall time of `python -m generator check cudnn`
  (parse + classify + render + compare; a fresh interpreter), goal <= 1 s;
- `import dnnbind.gen.cudnn` in a fresh interpreter with bytecode cached, goal < 50 ms;
- a checked generated call of cudnnSetTensor4dDescriptor (every integer range-checked, enums checked
  for their class) against a bare hand-declared ctypes function with argtypes set, goal <= 1.35x; and
  the same after tracing was switched on and off (tracing is free when off);
- cudnnSetTensorNdDescriptor with its two int arrays (lengths checked against nbDims, elements
  range-checked) given Python lists (goal <= 2x) and numpy int32 arrays (goal <= 2.5x), against the bare
  function given ready ctypes arrays.
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
    ours, reference = _interleaved(lambda: checked(*args), lambda: bare(*args))
    name = "same call after a trace() block (tracing off)" if after_trace else "checked cudnnSetTensor4dDescriptor call"
    return Row(name, ours, reference, "bare ctypes function, argtypes set", 1.35, "us")


def _interleaved(ours: object, reference: object, number: int = 50_000) -> tuple[float, float]:
    """Medians of 7 alternating measurements, so that machine noise hits both alike."""
    mine, theirs = [], []
    for _ in range(7):
        theirs.append(median_seconds(reference, repeats=1, number=number))
        mine.append(median_seconds(ours, repeats=1, number=number))
    return statistics.median(mine), statistics.median(theirs)


def array_call_overhead(form: str) -> Row:
    """cudnnSetTensorNdDescriptor given lists or numpy arrays, against the bare function given ctypes arrays."""
    import numpy as np
    from dnnbind.gen import cudnn
    desc = cudnn.cudnnTensorDescriptor_t()
    cudnn.cudnnCreateTensorDescriptor(ctypes.byref(desc))
    bare = ctypes.CDLL(cudnn.library_path()).cudnnSetTensorNdDescriptor
    bare.argtypes = [cudnn.cudnnTensorDescriptor_t, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                     ctypes.POINTER(ctypes.c_int)]
    bare.restype = ctypes.c_int
    dims, strides = [8, 64, 56, 56], [200704, 3136, 56, 1]
    ready = ((ctypes.c_int * 4)(*dims), (ctypes.c_int * 4)(*strides))
    given = (dims, strides) if form == "lists" else (np.array(dims, np.int32), np.array(strides, np.int32))
    checked = cudnn.cudnnSetTensorNdDescriptor
    ours, reference = _interleaved(lambda: checked(desc, 0, 4, *given), lambda: bare(desc, 0, 4, *ready),
                                   number=20_000)
    goal = 2.0 if form == "lists" else 2.5
    return Row(f"checked cudnnSetTensorNdDescriptor, {form}", ours, reference,
               "bare ctypes function, ready ctypes arrays", goal, "us")


def main() -> list[Row]:
    rows = [regeneration(), import_time(), call_overhead(), call_overhead(after_trace=True),
            array_call_overhead("lists"), array_call_overhead("numpy int32 arrays")]
    print_table("Generated bindings", rows)
    return rows


if __name__ == "__main__":
    rows = main()
    sys.exit(0 if all(r.met for r in rows) else 1)
