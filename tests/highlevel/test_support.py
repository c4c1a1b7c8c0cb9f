"""The support matrix (python -m dnnbind ops): rows from the specs, columns from dispatch.BACKENDS, cells
from each backend's own support data, which must agree with what the backend does."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dnnbind.highlevel import dispatch, support
from dnnbind.highlevel.dims.checks import SUPPORTED_DTYPES
from dnnbind.highlevel.specs import SPECS


def test_every_op_and_backend_has_a_cell():
    table = support.matrix()
    assert list(table) == list(SPECS)
    for op, row in table.items():
        assert list(row) == list(dispatch.BACKENDS)
        assert row["reference"][:2] == (SUPPORTED_DTYPES, {}), op


def test_the_matrix_reads_the_backends_list_not_names(monkeypatch):
    """A backend added to dispatch.BACKENDS gets a column; one without support data shows no op."""
    monkeypatch.setitem(dispatch.BACKENDS, "elsewhere", "dnnbind.highlevel.dims")    # a package without support
    table = support.matrix()
    assert all(row["elsewhere"] is None for row in table.values())
    assert "elsewhere" in support.render().splitlines()[0]


def test_miopen_declares_what_it_refuses():
    from dnnbind.highlevel import miopen
    table = support.matrix()
    assert {op for op, row in table.items() if "bfloat16" in row["miopen"].dtypes} == set(miopen.BFLOAT16_OPS)
    assert table["rnn"]["miopen"].dtypes == ("float16", "float32")
    assert "proj_size" in table["rnn"]["miopen"].lacks and "proj_size" in SPECS["rnn"].features


def test_miopen_refuses_bfloat16_where_the_matrix_says_so():
    """What the matrix says is what the backend does: a bfloat16 softmax is refused by name, before any
    library call (no device needed for the refusal)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from dnnbind.highlevel import miopen
    x = np.zeros((2, 3), ml_dtypes.bfloat16)
    with pytest.raises(TypeError, match="the MIOpen backend has no bfloat16 kernel for softmax"):
        miopen.softmax_forward(x, 1)


def test_a_feature_the_spec_does_not_have_is_an_error(monkeypatch):
    from dnnbind.highlevel.reference import support as reference_support
    monkeypatch.setitem(reference_support.SUPPORTS, "softmax", support.Support(lacks={"ceil_mode": "no"}))
    with pytest.raises(ValueError, match="features its op's spec does not have.*'softmax', 'ceil_mode'"):
        support.matrix()


def test_python_m_dnnbind_ops_prints_the_matrix():
    src = str(Path(__file__).resolve().parents[2] / "src")
    out = subprocess.run([sys.executable, "-m", "dnnbind", "ops"], capture_output=True, text=True, check=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": src}).stdout
    header = out.splitlines()[0].split()
    assert header == ["op", *dispatch.BACKENDS]
    rows = {line.split()[0]: line for line in out.splitlines()[2:2 + len(SPECS)]}
    assert list(rows) == list(SPECS)
    assert "f16/f32, lacks 1" in rows["rnn"] and "rnn on miopen: no proj_size" in out
    for op, spec in SPECS.items():
        assert f"  {op}: {', '.join(spec.features)[:40]}" in out.replace("\n      ", " ")
    assert max(map(len, out.splitlines())) <= 100
