"""`make gpu-check` (or, without make: `PYTHONPATH=src python3 bench/gpu_check.py`): the GPU tests and
benchmarks in one call that fits a 600 s limit on a cold machine, with a summary table last.

Runs on the machine's own python3 with PYTHONPATH=src (nothing installed), in stages against one overall
budget (:data:`BUDGET` seconds, ``$DNNBIND_GPU_CHECK_BUDGET`` to change it), each stage getting what is
left of it:

1. probe: is there an NVIDIA GPU CuPy can use (without one, the rest is skipped and the table says so);
1b. deviceprop: the device's cuDNN device-properties JSON (read back from a CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR
   finalized on a handle; from CuPy's CUDA device attributes if that fails) written to
   $OUT/deviceprop-smNN-NAME.json, to replace the hand-built file in tests/data/deviceprop/;
2. smoke: tests/highlevel/cudnn/test_gpu_smoke.py, one case of every op on every dtype, first, so that
   even a short run says which op works in which dtype;
3. tests: ``pytest -m gpu`` over tests/highlevel/cudnn, tests/highlevel/gpu, tests/runtime and
   tests/torch_adapter (when PyTorch imports), breadth first: the first case of every test function
   before the second of any (see gpu_check_plugin.py); they leave :data:`BENCH_RESERVE` seconds;
4. bench: bench/bench_gpu.py, with what is left.

Everything is written as it happens, under $OUT (./gpu-results when $OUT is unset): each stage's log,
per-file counts (rewritten after every test) and one JSON line per finished test, so a stage stopped at
the budget keeps everything that finished. Exit status: 1 when a test failed or errored, a stage ran out
of time or crashed; else 0 (also without a GPU).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: seconds for the whole check: a 600 s call, less a margin for the interpreter, the copy back and a rerun
BUDGET = 450.0
#: most seconds each stage may take (the overall budget caps them further)
STAGE_CAP = {"probe": 60.0, "deviceprop": 60.0, "smoke": 180.0, "tests": 330.0, "bench": 150.0}
#: a stage is not started with less than this left (the benchmarks need their warm-up)
STAGE_MIN = {"smoke": 20.0, "tests": 20.0, "bench": 60.0}
#: seconds the tests leave for the benchmarks (the speed goals are worth more than the sweeps' last cases)
BENCH_RESERVE = 120.0
SMOKE_FILE = "tests/highlevel/cudnn/test_gpu_smoke.py"
DTYPE_NAMES = ("float64", "float32", "float16", "bfloat16")
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

#: argv[1]: the output folder. cuDNN's own JSON when it gives one, else CUDA's device attributes under cuDNN's keys
DEVICEPROP = """
import json, os, sys
try:
    from dnnbind.gen import cudnn as c, cudnn_backend as b
    handle = c.cudnnHandle_t()
    c.cudnnCreate(handle)
    props, source = json.loads(b.DevicePropDescriptor(handle=handle).finalize().get("json_representation")), "cuDNN"
except Exception as exc:
    print(f"cuDNN's JSON representation failed ({type(exc).__name__}: {exc}); using CUDA's device attributes")
    import cupy
    rt = cupy.cuda.runtime
    p = rt.getDeviceProperties(0)
    keys = dict(maxGridSize="maxGridSize", maxBlockSize="maxThreadsDim", regsPerBlock="regsPerBlock",
                multiProcessorCount="multiProcessorCount", warpSize="warpSize",
                maxSharedMemoryPerBlock="sharedMemPerBlock", maxSharedMemoryPerBlockOptin="sharedMemPerBlockOptin",
                reservedSharedMemoryPerBlock="reservedSharedMemPerBlock", maxRegistersPerSM="regsPerMultiprocessor",
                maxCtasPerSM="maxBlocksPerMultiProcessor", maxThreadsPerBlock="maxThreadsPerBlock",
                maxThreadsPerSM="maxThreadsPerMultiProcessor", pciDeviceId="pciDeviceID", isTccDriver="tccDriver",
                supportCoopLaunch="cooperativeLaunch", totalGlobalMem="totalGlobalMem", smClockRateKHz="clockRate",
                memClockRateKHz="memoryClockRate", memoryBusWidth="memoryBusWidth", l2CacheSize="l2CacheSize")
    props = {k: (list(p[v]) if isinstance(p.get(v), (list, tuple)) else p.get(v, 0)) for k, v in keys.items()}
    name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
    props.update(cudaDeviceId=0, deviceVer=p["major"] * 100 + p["minor"] * 10, driverVer=rt.driverGetVersion(),
                 deviceName=name)
    source = "CUDA"
path = os.path.join(sys.argv[1], f"deviceprop-sm{props['deviceVer'] // 10}-"
                                 f"{props['deviceName'].replace(' ', '_').replace('/', '_')}.json")
with open(path, "w") as f:
    f.write(json.dumps(dict(sorted(props.items())), indent=2) + "\\n")
print(f"wrote {path} from {source}")
"""


class Clock:
    """The overall budget and what each stage may still take."""

    def __init__(self, budget: float) -> None:
        self.start, self.budget = time.monotonic(), budget

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def allow(self, stage: str, reserve: float = 0.0) -> float:
        """Seconds ``stage`` may run now: its cap, within what is left of the budget less ``reserve``."""
        return max(0.0, min(STAGE_CAP[stage], self.left() - reserve))


def run(argv: list[str], log: Path, env: dict[str, str], timeout: float) -> tuple[int | None, float]:
    """(exit status, or None when stopped at ``timeout``; seconds). Output goes to ``log`` as it comes."""
    start = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            status: int | None = process.wait(timeout=max(timeout, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            status = None
            out.write(f"\n[gpu-check: stopped after {timeout:.0f} s, the stage's share of the budget]\n")
    return status, time.monotonic() - start


def last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return lines[-1] if lines else ""


def pytest_stage(name: str, targets: list[str], extra: list[str], out: Path, env: dict[str, str],
                 timeout: float, problems: list[str]) -> dict[str, dict[str, int]]:
    """Run one pytest stage; returns its per-file counts (whatever finished, even when stopped)."""
    counts_file, results_file = out / f"gpu-{name}-counts.json", out / f"gpu-{name}-results.jsonl"
    counts_file.unlink(missing_ok=True)
    results_file.unlink(missing_ok=True)
    stage_env = {**env, "DNNBIND_GPU_CHECK_COUNTS": str(counts_file), "DNNBIND_GPU_CHECK_RESULTS": str(results_file)}
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "gpu_check_plugin", "-p", "no:cacheprovider",
            "--continue-on-collection-errors", "-q", "-rfE", *extra, *targets]
    status, seconds = run(argv, out / f"gpu-{name}.log", stage_env, timeout)
    try:
        counts = json.loads(counts_file.read_text())
    except (OSError, ValueError):
        counts = {}
    if status is None:
        problems.append(f"{name}: stopped after {seconds:.0f} s (budget); what finished is counted")
    elif status not in (0, 1, 5) or (status == 1 and not any(c["failed"] or c["error"] for c in counts.values())):
        problems.append(f"{name}: pytest exited with status {status}: {last_line(out / f'gpu-{name}.log')}")
    print(f"gpu-check: {name} took {seconds:.0f} s", flush=True)
    return counts


def smoke_matrix(results_file: Path) -> list[str]:
    """The smoke stage as a table: one row per op, one column per dtype, each cell its outcome."""
    cells: dict[str, dict[str, str]] = {}
    dtypes: list[str] = []
    if not results_file.exists():
        return []
    for line in results_file.read_text().splitlines():
        entry = json.loads(line)
        test = entry["test"].split("::")[-1]
        if "[" not in test:
            continue
        name, params = test[:-1].split("[", 1)
        parts = params.split("-")
        dtype = next((p for p in parts if p in DTYPE_NAMES), "?")
        op = "-".join(p for p in parts if p != dtype) or name.replace("test_", "").replace("_on_every_dtype", "")
        cells.setdefault(op, {})[dtype] = entry["outcome"]
        if dtype not in dtypes:
            dtypes.append(dtype)
    lines = [f"{'op':<16}" + "".join(f"{d:>10}" for d in dtypes)]
    for op, row in cells.items():
        lines.append(f"{op:<16}" + "".join(f"{row.get(d, '-'):>10}" for d in dtypes))
    return lines


def main() -> int:
    clock = Clock(float(os.environ.get("DNNBIND_GPU_CHECK_BUDGET") or BUDGET))
    out = Path(os.environ.get("OUT") or ROOT / "gpu-results")
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT / "bench"),
                                                                     os.environ.get("PYTHONPATH")]))}
    problems: list[str] = []
    counts: dict[str, dict[str, int]] = {}

    probe_log = out / "gpu-probe.log"
    status, _ = run([sys.executable, "-c", PROBE], probe_log, env, clock.allow("probe"))
    gpu = status == 0
    device = last_line(probe_log) if gpu else "no GPU found: " + (last_line(probe_log) or f"probe status {status}")
    print(f"gpu-check: {device}", flush=True)

    bench_rows, bench_note = [], "no GPU"
    if gpu:
        status, _ = run([sys.executable, "-c", DEVICEPROP, str(out)], out / "gpu-deviceprop.log", env,
                        clock.allow("deviceprop"))
        print(f"gpu-check: deviceprop: {last_line(out / 'gpu-deviceprop.log')}", flush=True)
        if status != 0:
            problems.append(f"deviceprop: failed with status {status} (see gpu-deviceprop.log)")
        counts.update(pytest_stage("smoke", [SMOKE_FILE], [], out, env, clock.allow("smoke"), problems))
        test_dirs = list(TEST_DIRS)
        if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, timeout=60).returncode == 0:
            test_dirs.append(TORCH_TEST_DIR)
        else:
            print(f"gpu-check: PyTorch is not importable; {TORCH_TEST_DIR} not run")
        if clock.allow("tests", BENCH_RESERVE) >= STAGE_MIN["tests"]:
            counts.update(pytest_stage("tests", test_dirs, ["--ignore", SMOKE_FILE], out,
                                       {**env, "DNNBIND_GPU_CHECK_ORDER": "breadth"},
                                       clock.allow("tests", BENCH_RESERVE), problems))
        else:
            problems.append("tests: not started, the budget is spent")
        if clock.allow("bench") >= STAGE_MIN["bench"]:
            status, seconds = run([sys.executable, "bench/bench_gpu.py", "--json", str(out / "gpu-bench.json")],
                                  out / "gpu-bench.log", env, clock.allow("bench"))
            if status is None:
                problems.append(f"bench: stopped after {seconds:.0f} s (budget)")
            elif status != 0:
                problems.append(f"bench: failed with status {status} (see gpu-bench.log)")
            try:
                data = json.loads((out / "gpu-bench.json").read_text())
                bench_rows, bench_note = data.get("rows", []), data.get("skipped", "")
            except (OSError, ValueError):
                bench_note = "no results"
        else:
            bench_note = f"not started: {clock.left():.0f} s of the budget left"
    else:
        for stage in ("smoke", "tests", "bench"):
            (out / f"gpu-{stage}.log").write_text("skipped: no GPU found\n")

    print(f"\ngpu-check summary ({device}; {clock.budget - clock.left():.0f} s; logs in {out})")
    matrix = smoke_matrix(out / "gpu-smoke-results.jsonl") if gpu else []
    if matrix:
        print("\none case of every op on every dtype:")
        print("\n".join(matrix))
        print()
    print(f"{'test file':<52} {'passed':>6} {'failed':>6} {'errors':>6} {'skipped':>7}")
    for path, c in sorted(counts.items()):
        print(f"{path:<52} {c['passed']:>6} {c['failed']:>6} {c['error']:>6} {c['skipped']:>7}")
    total = {k: sum(c[k] for c in counts.values()) for k in ("passed", "failed", "error", "skipped")}
    print(f"{'all':<52} {total['passed']:>6} {total['failed']:>6} {total['error']:>6} {total['skipped']:>7}")
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
    return 1 if total["failed"] or total["error"] or problems else 0


if __name__ == "__main__":
    sys.exit(main())
