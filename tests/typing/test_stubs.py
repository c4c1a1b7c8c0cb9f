"""The generated .pyi stubs type-check real raw-API use with mypy and catch misuse."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def mypy(path: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy", reason="mypy comes with the dev extra (make setup)")
    src = str(HERE.parents[1] / "src")
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports",
                           "--cache-dir", "/dev/null", str(path)], capture_output=True, text=True,
                          env={"MYPYPATH": src, "PATH": "/usr/bin:/bin"}, cwd=HERE.parents[1])


def test_correct_use_type_checks():
    result = mypy(HERE / "raw_api_ok.py")
    assert result.returncode == 0, result.stdout


def test_every_marked_misuse_is_a_type_error():
    source = (HERE / "raw_api_bad.py").read_text().splitlines()
    expected = {i + 1 for i, line in enumerate(source) if "# error:" in line}
    result = mypy(HERE / "raw_api_bad.py")
    reported = {int(m.group(1)) for m in re.finditer(r"raw_api_bad\.py:(\d+): error", result.stdout)}
    assert reported == expected, result.stdout
