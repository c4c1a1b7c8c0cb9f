"""docs/jax.md's example runs as a user runs it and trains both models to the same parameters."""
from __future__ import annotations

import re
from pathlib import Path

from childproc import run_python

DOC = Path(__file__).resolve().parents[2] / "docs" / "jax.md"


def test_the_example_trains_both_models_alike():
    blocks = re.findall(r"^```python\n(.*?)^```\n", DOC.read_text(), re.M | re.S)
    assert len(blocks) == 1
    result = run_python(blocks[0])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["cnn", "lstm"]
    assert all(line.endswith("the same as with jax.lax / jax.nn") for line in lines)
