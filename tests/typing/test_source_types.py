"""dnnbind's own source type-checks with mypy, seen from the source tree (not through an installed copy,
which would hide errors in it)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_source_type_checks():
    pytest.importorskip("mypy", reason="mypy comes with the dev extra (make setup)")
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", "/dev/null", "src/"],
                            capture_output=True, text=True, env={"MYPYPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
                            cwd=ROOT)
    errors = [line for line in result.stdout.splitlines() if re.match(r"\S+:\d+: error:", line)]
    assert result.returncode in (0, 1) and (errors or result.returncode == 0), result.stdout + result.stderr
    assert not errors, "\n".join(errors)
