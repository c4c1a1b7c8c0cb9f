"""`make` alone lists the targets and starts nothing; the README's two commands keep working."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args, f"PYTHON={sys.executable}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def _targets() -> list[str]:
    phony = re.search(r"^\.PHONY: (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert phony
    return phony[1].split()


def test_bare_make_prints_every_target_one_line_each():
    result = _make()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    listed = [line.split()[0] for line in lines[1:]]
    assert sorted(listed) == sorted(_targets())                      # each once, none missing
    for line in lines[1:]:
        assert re.fullmatch(r"  [a-z-]+ +\S.*", line), line              # name, then what it does


def test_bare_make_runs_nothing_but_the_listing():
    dry = _make("-n").stdout
    assert "pip" not in dry and "generator" not in dry and "pytest" not in dry
    assert "awk" in dry


def test_the_two_commands_and_ci_still_run_setup_and_test():
    setup = _make("-n", "setup").stdout
    assert "-m venv .venv" in setup and "-m generator headers cudnn miopen xla_ffi" in setup and "--require-hashes" in setup
    assert "-m generator deviceless cudnn" in setup          # libcuda and cuBLASLt for the deviceless plan tests
    test = _make("-n", "test").stdout
    assert "-m generator check cudnn miopen xla_ffi" in test and "-m pytest" in test
    assert "-m generator generate cudnn miopen xla_ffi" in _make("-n", "generate").stdout
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make setup" in ci and "make test" in ci


def test_docs_builds_strictly_into_build_docs_and_ci_runs_it():
    """`make docs`: HTML under build/docs/, warnings as errors, nitpicky, a fresh environment (so an
    unchanged page that names something the code no longer has fails too); CI runs it after the tests."""
    docs = _make("-n", "docs").stdout
    sphinx = next(line for line in docs.splitlines() if "-m sphinx" in line)
    assert sphinx.split()[-2:] == ["docs", "build/docs"]
    assert {"-b", "html", "-W", "-n", "-E"} <= set(sphinx.split())
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make test") < ci.index("make docs")


def test_setup_shows_progress_for_each_long_step():
    setup = _make("-n", "setup").stdout
    steps = re.findall(r"==> setup (\d)/4", setup)
    assert steps == ["1", "2", "3", "4"]
    install = next(line for line in setup.splitlines() if '-e ".[dev,docs,torch,jax]"' in line)
    assert "--progress-bar on" in install and '"torch==2.13.0"' in install and '"jax[cpu]==0.10.2"' in install
    assert "--quiet" not in install


def test_setup_installs_the_compiled_parts_and_test_runs_without_them_too():
    """make setup installs dnnbind-native beside dnnbind; make test runs the tests of the code with a compiled
    and a pure-Python path a second time with DNNBIND_NATIVE=0 (the cpu backend's among them)."""
    assert "-m pip install --progress-bar on ./native" in _make("-n", "setup").stdout
    runs = [line for line in _make("-n", "test").stdout.splitlines() if "-m pytest" in line]
    assert len(runs) == 2 and "DNNBIND_NATIVE" not in runs[0]
    assert runs[1].startswith("DNNBIND_NATIVE=0 ") and "tests/highlevel/cpu" in runs[1]
