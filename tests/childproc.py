"""Running code in a fresh interpreter of this venv, for cases that could crash the process."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def run_python(code: str) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter of this venv (for cases that could crash the process)."""
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=env)
