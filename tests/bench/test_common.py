"""bench/common.py times functions in rounds: each round times every function in turn, so that a ratio
taken round by round sees the same background load on both of its sides."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import common  # noqa: E402


def test_rounds_time_every_function_in_turn(monkeypatch):
    monkeypatch.setattr(common, "PAUSE_S", 0.0)
    monkeypatch.setattr(common, "WARM_S", 0.0)
    monkeypatch.setattr(common, "WARM_CALLS", 0)
    calls: list[str] = []
    times = common.rounds([lambda: calls.append("a"), lambda: calls.append("b")], repeats=5, burst=2)
    assert [len(per_fn) for per_fn in times] == [3, 3]               # ceil(5 / 2) rounds of 2 samples
    assert all(len(samples) == 2 and all(t >= 0 for t in samples) for per_fn in times for samples in per_fn)
    assert calls == ["a", "a", "b", "b"] * 3


def test_a_ratio_per_round_takes_each_rounds_medians():
    times = [[[1.0, 3.0, 2.0], [10.0, 10.0, 10.0]], [[1.0, 1.0, 1.0], [5.0, 4.0, 6.0]]]
    assert common.ratio_per_round(times, lambda a, b: a / b) == [2.0, 2.0]
