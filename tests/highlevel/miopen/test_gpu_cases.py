"""The shared GPU cases are valid calls: run on the CPU with numpy standing in for the device arrays,
every case runs, its pullback works twice, and the comparison machinery accepts equal results and
rejects different ones."""
from __future__ import annotations

import numpy as np
import pytest

from .gpu_cases import CASES, Case, arrays, assert_close, run_case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_runs_on_the_reference_backend(case):
    for dtype in case.dtypes:
        run_case(case, dtype, to_device=np.array, to_host=np.asarray)


def test_case_names_are_unique_and_every_op_is_covered():
    import dnnbind.highlevel as hl
    assert len({c.name for c in CASES}) == len(CASES)
    covered = {c.op for c in CASES}
    assert covered == set(hl.OP_NAMES) - {"dropout"}     # dropout: random, tested apart


def test_a_wrong_device_result_is_caught(monkeypatch):
    case = Case("relu", "activation", arrays((3, 4), mode="relu"))
    with pytest.raises(AssertionError):
        run_case(case, "float32", to_device=lambda a: np.asarray(a) + 1e-2, to_host=np.asarray)
    with pytest.raises(AssertionError):
        assert_close([np.zeros(2), None], [np.zeros(2), np.zeros(1)], 0.0, "x")
