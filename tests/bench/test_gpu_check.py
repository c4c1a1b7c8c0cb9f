"""bench/gpu_check.py on a machine without a GPU: it exits 0 with its table, orders tests breadth first,
and a stage stopped at its share of the budget keeps every result that finished."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu_check
from bench.gpu_check_plugin import breadth_first

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_gpu_it_says_so_prints_its_table_and_exits_0(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "bench/gpu_check.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    if "no GPU found" not in done.stdout:
        pytest.skip("this machine has a GPU: gpu-check runs for real here")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu-check summary (no GPU found" in done.stdout and "tests skipped: no GPU found" in done.stdout
    assert "benchmarks skipped: no GPU" in done.stdout
    assert {p.name for p in tmp_path.iterdir()} >= {"gpu-probe.log", "gpu-smoke.log", "gpu-tests.log", "gpu-bench.log"}


class _Item:
    def __init__(self, nodeid):
        self.nodeid = nodeid


def test_breadth_first_runs_the_first_case_of_every_test_before_any_second():
    ids = ["a.py::f[1]", "a.py::f[2]", "a.py::f[3]", "a.py::g", "b.py::h[x]", "b.py::h[y]"]
    order = [i.nodeid for i in breadth_first([_Item(n) for n in ids])]
    assert order == ["a.py::f[1]", "a.py::g", "b.py::h[x]", "a.py::f[2]", "b.py::h[y]", "a.py::f[3]"]


def test_a_stage_stopped_at_its_budget_keeps_what_finished(tmp_path):
    tests = tmp_path / "test_slow.py"
    tests.write_text("import time, pytest\n"
                     "@pytest.mark.gpu\n"
                     "@pytest.mark.parametrize('i', range(20))\n"
                     "def test_sleep(i):\n"
                     "    time.sleep(0.3)\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a GPU test\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT / "src")])}
    problems: list[str] = []
    counts = gpu_check.pytest_stage("tests", [str(tests), "--rootdir", str(tmp_path)], [], out, env, 4.0, problems)
    passed = sum(c["passed"] for c in counts.values())
    assert 2 <= passed < 20, counts
    lines = (out / "gpu-tests-results.jsonl").read_text().splitlines()
    assert len(lines) == passed and all(json.loads(line)["outcome"] == "passed" for line in lines)
    assert problems and "stopped after" in problems[0]
    assert "stopped after 4 s" in (out / "gpu-tests.log").read_text()


def test_smoke_matrix_reads_op_by_dtype(tmp_path):
    results = tmp_path / "r.jsonl"
    results.write_text("\n".join(json.dumps({"test": f"t.py::test_op_on_every_dtype[{op}-{dt}]", "outcome": o})
                                 for op, dt, o in [("conv", "float32", "passed"), ("conv", "bfloat16", "failed"),
                                                   ("rnn", "float32", "skipped")])
                       + "\n" + json.dumps({"test": "t.py::test_dropout_on_every_dtype[float32]", "outcome": "passed"}))
    table = gpu_check.smoke_matrix(results)
    assert table[0].split() == ["op", "float32", "bfloat16"]
    assert table[1].split() == ["conv", "passed", "failed"] and table[2].split() == ["rnn", "skipped", "-"]
    assert table[3].split() == ["dropout", "passed", "-"]
