"""dnnbind is one pure-Python wheel (py3-none-any): no compiled part inside, and with only numpy and
ml_dtypes beside it (no dnnbind-native) it imports and runs every op on numpy arrays."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: every op and its pullback on small numpy arrays, with dnnbind-native out of reach
_EVERY_OP = """
import sys
sys.modules["dnnbind_native"] = None                 # as if dnnbind-native were not installed
import numpy as np
import dnnbind
from dnnbind import compiled
from dnnbind.highlevel.cpu import native
from dnnbind.runtime import checks
assert dnnbind.__file__.startswith(sys.argv[1]), dnnbind.__file__
assert compiled.package_directory() is None and native.library() is None
assert not checks.VALUES_OK_COMPILED
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 6, 6))
runs = {
    "conv": lambda: dnnbind.conv(x, rng.standard_normal((4, 3, 3, 3)), np.ones(4), padding=1),
    "conv_transpose": lambda: dnnbind.conv_transpose(x, rng.standard_normal((3, 2, 3, 3)), stride=2),
    "conv_bias_activation": lambda: dnnbind.conv_bias_activation(x, rng.standard_normal((4, 3, 3, 3)), np.ones(4),
                                                                 padding=1, mode="swish"),
    "maxpool": lambda: dnnbind.maxpool(x, 2),
    "meanpool": lambda: dnnbind.meanpool(x, 3, padding=1, count_include_pad=False),
    "softmax": lambda: dnnbind.softmax(x),
    "logsoftmax": lambda: dnnbind.logsoftmax(x, axis=-1),
    "activation": lambda: dnnbind.activation(x.astype(np.float32), "swish"),
    "batchnorm": lambda: dnnbind.batchnorm(x, np.ones(3), np.zeros(3)),
    "dropout": lambda: dnnbind.dropout(x, 0.5, seed=1),
    "layer_norm": lambda: dnnbind.layer_norm(x, (6, 6), np.ones((6, 6)), np.zeros((6, 6))),
    "rnn": lambda: dnnbind.rnn(rng.standard_normal((4, 2, 3)), [(rng.standard_normal((8, 3)),
                               rng.standard_normal((8, 2)), np.zeros(8), np.zeros(8))], hidden_size=2),
}
from dnnbind.highlevel.specs import OP_NAMES
assert sorted(runs) == sorted(OP_NAMES), OP_NAMES
for name, run in runs.items():
    result, pullback = run()
    y = result[0] if isinstance(result, tuple) else result
    grads = pullback(np.ones_like(y))
    assert np.isfinite(y).all(), name
print("every op ran")
"""


def test_the_wheel_is_pure_python_and_runs_every_op_without_the_compiled_parts(tmp_path):
    source = tmp_path / "source"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name if source.exists() else _mkdir(source) / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "-w", str(tmp_path / "dist"), str(source)], check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path / "unpacked")
    assert "dnnbind/compiled.py" in names and "dnnbind/highlevel/reference/conv.py" in names
    assert not [n for n in names if n.endswith((".so", ".pyd", ".c", ".h"))]
    unpacked = str(tmp_path / "unpacked")
    done = subprocess.run([sys.executable, "-c", _EVERY_OP, unpacked], env={"PYTHONPATH": unpacked, "PATH": "/usr/bin"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "every op ran" in done.stdout


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path
