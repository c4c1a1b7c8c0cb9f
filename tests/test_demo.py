"""The demo (``make demo``) trains both models and the loss falls, here with fewer steps."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_loss_falls():
    result = subprocess.run([sys.executable, str(ROOT / "demo" / "train.py"), "--steps", "60"], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for model in ("cnn", "lstm"):
        match = re.search(rf"^{model} +loss ([\d.]+) -> ([\d.]+) .* ([\d.]+) ms per step$", out, re.MULTILINE)
        assert match, out
        first, last = float(match[1]), float(match[2])
        assert last < 0.7 * first, out
        assert re.search(rf"^{model} +\[#{{24}}\] +60/60  loss [\d.]+$", out, re.MULTILINE), out  # the full bar
        assert re.search(rf"^{model} +loss .*\n +backend: (CPU|GPU)\b", out, re.MULTILINE), out


def test_make_demo_target_runs_the_demo():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:.*\n\t\$\(PY\) demo/train\.py$", makefile, re.MULTILINE)
