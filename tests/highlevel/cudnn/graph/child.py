"""Running graph_child.py in a child process with the deviceless libraries, and reading its JSON lines."""
from __future__ import annotations

import json
from pathlib import Path

import deviceless_libs
from childproc import run_python

HERE = Path(__file__).resolve().parent
DEVICEPROPS = sorted((HERE.parents[2] / "data" / "deviceprop").glob("*.json"))


def run_child(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> list[dict]:
    """graph_child.py's rows for ``args``; fails the test, with the child's stderr, when the child fails."""
    script = str(HERE / "graph_child.py")
    code = f"import runpy, sys; sys.argv = [{script!r}, *{list(args)!r}]; runpy.run_path({script!r}, run_name='__main__')"
    result = run_python(code, env={**deviceless_libs.child_env(), **(env or {})}, timeout=timeout)
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stderr[-3000:]}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
