"""`make gpu-check`: the GPU tests and benchmarks, with logs under $OUT, and a short summary table last.

Runs on the machine's own python3 with PYTHONPATH=src (nothing installed): `pytest -m gpu` over
tests/highlevel/cudnn, tests/highlevel/gpu, tests/torch_adapter and tests/runtime, then bench/bench_gpu.py. Each part has its own timeout
(the whole stays under 6 minutes). Logs and JSON go to $OUT, or ./gpu-results when $OUT is unset.
Without a GPU it says so plainly: the tests report as skipped, the benchmarks as skipped.
Exit status: 1 when a test failed or errored or a part timed out, else 0.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = {"probe": 30, "tests": 170, "bench": 140}
TEST_DIRS = ["tests/highlevel/cudnn", "tests/highlevel/gpu", "tests/runtime"]
TORCH_TEST_DIR = "tests/torch_adapter"          # needs PyTorch; the GPU machine has it
PROBE = """
import cupy
n = cupy.cuda.runtime.getDeviceCount()
if n < 1 or cupy.cuda.runtime.is_hip:
    raise SystemExit("CuPy sees no NVIDIA GPU")
name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
print(f"{n} x {name.decode() if isinstance(name, bytes) else name}, CuPy {cupy.__version__}")
"""


def run(name: str, argv: list[str], log: Path, env: dict[str, str]) -> tuple[int | None, str, float]:
    """(exit status or None on timeout, combined output, seconds); the output also goes to ``log``."""
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT[name])
        status, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        status, text = None, out + err + f"\n[gpu-check: {name} timed out after {TIMEOUT[name]} s]\n"
    log.write_text(text)
    return status, text, time.perf_counter() - start


def main() -> int:
    out = Path(os.environ.get("OUT") or ROOT / "gpu-results")
    out.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT / "bench"),
                                                                     os.environ.get("PYTHONPATH")]))}
    problems: list[str] = []

    status, text, _ = run("probe", [python, "-c", PROBE], out / "gpu-probe.log", env)
    gpu = status == 0
    device = text.strip().splitlines()[-1] if gpu else "no GPU found: " + (
        text.strip().splitlines()[-1] if text.strip() else f"probe exit status {status}")
    print(f"gpu-check: {device}")

    test_dirs = list(TEST_DIRS)
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0:
        test_dirs.append(TORCH_TEST_DIR)
    else:
        print(f"gpu-check: PyTorch is not importable; {TORCH_TEST_DIR} not run")
    counts_file = out / "gpu-tests-counts.json"
    counts_file.unlink(missing_ok=True)
    status, text, seconds = run("tests", [python, "-m", "pytest", "-m", "gpu", "-p", "gpu_check_plugin",
                                          "-p", "no:cacheprovider", "--continue-on-collection-errors", "-q", "-rfEs",
                                          *test_dirs],
                                out / "gpu-tests.log", {**env, "DNNBIND_GPU_CHECK_COUNTS": str(counts_file)})
    counts = json.loads(counts_file.read_text()) if counts_file.exists() else {}
    if status is None:
        problems.append(f"tests timed out after {TIMEOUT['tests']} s")
    elif status not in (0, 5) and not any(c["failed"] or c["error"] for c in counts.values()):
        problems.append(f"pytest exited with status {status} (see gpu-tests.log)")
    test_seconds = seconds

    bench_rows, bench_note = [], ""
    if gpu:
        status, text, _ = run("bench", [python, "bench/bench_gpu.py", "--json", str(out / "gpu-bench.json")],
                              out / "gpu-bench.log", env)
        if status is None:
            problems.append(f"benchmarks timed out after {TIMEOUT['bench']} s")
        elif status != 0:
            problems.append(f"benchmarks failed with status {status} (see gpu-bench.log)")
        try:
            data = json.loads((out / "gpu-bench.json").read_text())
            bench_rows, bench_note = data.get("rows", []), data.get("skipped", "")
        except (OSError, ValueError):
            pass
    else:
        bench_note = "no GPU"
        (out / "gpu-bench.log").write_text("GPU benchmarks skipped: no GPU found\n")

    failed = sum(c["failed"] + c["error"] for c in counts.values())
    print(f"\ngpu-check summary ({device}; logs in {out})")
    print(f"{'test file':<52} {'passed':>6} {'failed':>6} {'errors':>6} {'skipped':>7}")
    for path, c in sorted(counts.items()):
        print(f"{path:<52} {c['passed']:>6} {c['failed']:>6} {c['error']:>6} {c['skipped']:>7}")
    total = {k: sum(c[k] for c in counts.values()) for k in ("passed", "failed", "error", "skipped")}
    print(f"{'all (' + format(test_seconds, '.0f') + ' s)':<52} {total['passed']:>6} {total['failed']:>6} "
          f"{total['error']:>6} {total['skipped']:>7}")
    if not gpu:
        print("tests skipped: no GPU found")
    if bench_rows:
        print(f"\n{'benchmark':<56} {'ratio':>6} {'goal':>6}  result")
        for r in bench_rows:
            print(f"{r['name']:<56} {r['ratio']:>6.2f} {'<=' + format(r['goal'], '.2f'):>6}  "
                  f"{'met' if r['met'] else 'MISSED'}")
    else:
        print(f"benchmarks skipped: {bench_note or 'no results'}")
    for p in problems:
        print(f"PROBLEM: {p}")
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
