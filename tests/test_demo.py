"""The demo (``make demo``) trains both models, the loss falls (here with fewer steps), and it draws them."""
from __future__ import annotations

import importlib.util
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _demo(*args: str, prelude: str = "pass") -> subprocess.CompletedProcess:
    code = (f"import runpy, sys; {prelude}; sys.argv = {['train.py', *args]!r}; "
            f"runpy.run_path({str(ROOT / 'demo' / 'train.py')!r}, run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR"
    return struct.unpack(">II", header[16:24])


def test_demo_loss_falls_and_draws_it(tmp_path):
    picture = tmp_path / "out" / "demo.png"
    result = _demo("--steps", "60", "--plot", str(picture))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for model in ("cnn", "lstm"):
        match = re.search(rf"^{model} +loss ([\d.]+) -> ([\d.]+) .* ([\d.]+) ms per step$", out, re.MULTILINE)
        assert match, out
        first, last = float(match[1]), float(match[2])
        assert last < 0.7 * first, out
        assert re.search(rf"^{model} +\[#{{24}}\] +60/60  loss [\d.]+$", out, re.MULTILINE), out  # the full bar
        assert re.search(rf"^{model} +loss .*\n +backend: (CPU|GPU)\b", out, re.MULTILINE), out
    if importlib.util.find_spec("matplotlib") is None:
        assert "no picture: matplotlib is not installed" in out
        return
    assert out.rstrip().endswith(f"picture: {picture} (loss curves, and 8 held-out CNN inputs with their "
                                 f"predicted classes)"), out
    width, height = _png_size(picture)
    assert width >= 800 and height >= 500 and picture.stat().st_size > 20_000


def test_without_matplotlib_the_demo_says_how_to_get_it(tmp_path):
    picture = tmp_path / "demo.png"
    result = _demo("--steps", "10", "--plot", str(picture), prelude="sys.modules['matplotlib'] = None")
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().splitlines()[-1] == (
        "no picture: matplotlib is not installed; to get one: pip install matplotlib (or `make setup`, which "
        "installs dnnbind's dev extra)")
    assert not picture.exists()


def test_no_plot_writes_nothing(tmp_path):
    result = _demo("--steps", "10", "--plot", str(tmp_path / "demo.png"), "--no-plot")
    assert result.returncode == 0, result.stderr
    assert "picture" not in result.stdout and not (tmp_path / "demo.png").exists()


def test_make_demo_target_runs_the_demo():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:.*\n\t\$\(PY\) demo/train\.py$", makefile, re.MULTILINE)
