"""`import dnnbind`: cheap, yet `dir()` lists the ops and type checkers see their real types."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dnnbind
import dnnbind.highlevel

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _fresh(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(SRC)})
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_dir_lists_the_ops_without_importing_them():
    out = _fresh("import sys, dnnbind; print(' '.join(dir(dnnbind))); print('numpy' in sys.modules)")
    names, numpy_imported = out.splitlines()
    assert set(dnnbind.highlevel.__all__) | {"trace", "CudnnError", "DnnError", "__version__"} <= set(names.split())
    assert "TYPE_CHECKING" not in names.split()
    assert numpy_imported == "False"


def test_every_lazy_name_is_declared_for_type_checkers():
    tree = ast.parse((SRC / "dnnbind" / "__init__.py").read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING")
    declared = {alias.asname or alias.name for node in block.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert set(dnnbind.__all__) - {"CudnnError", "DnnError", "LibraryNotFoundError", "MiopenError",
                                   "__version__"} <= declared


@pytest.mark.slow
def test_mypy_sees_the_ops_real_signatures(tmp_path):
    pytest.importorskip("mypy")
    use = tmp_path / "use.py"
    use.write_text(textwrap.dedent("""\
        import dnnbind
        reveal_type(dnnbind.conv)
        reveal_type(dnnbind.rnn)
        y, back = dnnbind.maxpool(1, 2)
        reveal_type(back)
        """))
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                             "--follow-imports=silent", "--no-error-summary", str(use)], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "MYPYPATH": str(SRC)})
    notes = result.stdout
    assert 'Revealed type is "def (x: Any, w: Any, b: Any =, *, stride: Any =' in notes, notes
    assert "hidden_size: int," in notes, notes
    assert 'Revealed type is "dnnbind.highlevel.pullback.Pullback"' in notes, notes
    assert "def (*Any, **Any) -> Any" not in notes
