"""Backend settings: validation, process-wide defaults, per-thread overrides."""
from __future__ import annotations

import threading

import pytest

from dnnbind.highlevel.gpu.settings import Settings, SettingsControl


def test_defaults_are_safe():
    s = Settings()
    assert (s.algo, s.deterministic, s.allow_tf32) == ("heuristic", False, False)
    assert s.workspace_limit == 1 << 30


@pytest.mark.parametrize("changes, error, match", [
    (dict(algo="fastest"), ValueError, r"algo='fastest' must be one of 'heuristic', 'benchmark'"),
    (dict(deterministic=1), TypeError, r"deterministic=1 must be a bool"),
    (dict(allow_tf32="yes"), TypeError, r"allow_tf32='yes' must be a bool"),
    (dict(workspace_limit=-1), ValueError, r"workspace_limit=-1 must be a non-negative int"),
    (dict(workspace_limit=1.5), ValueError, r"workspace_limit=1.5"),
    (dict(benchmark=True), TypeError, r"unknown setting 'benchmark'; the settings are algo, allow_tf32, "
                                      r"deterministic, workspace_limit"),
])
def test_bad_values_are_refused_by_name(changes, error, match):
    control = SettingsControl("test")
    with pytest.raises(error, match=match):
        with control(**changes):
            pass
    assert control.current() == Settings()


def test_context_override_is_scoped_and_per_thread():
    control = SettingsControl("test")
    seen = {}

    def other_thread():
        seen["other"] = control.current()

    with control(algo="benchmark", deterministic=True) as inside:
        assert inside == control.current() == Settings(algo="benchmark", deterministic=True)
        with control(workspace_limit=0):
            assert control.current() == Settings(algo="benchmark", deterministic=True, workspace_limit=0)
        assert control.current().workspace_limit == 1 << 30
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert seen["other"] == Settings()
    assert control.current() == Settings()


def test_configure_changes_the_defaults_everywhere():
    control = SettingsControl("test")
    assert control.configure(allow_tf32=True) == Settings(allow_tf32=True)
    seen = []
    t = threading.Thread(target=lambda: seen.append(control.current()))
    t.start()
    t.join()
    assert seen == [Settings(allow_tf32=True)]
    with control(allow_tf32=False):
        assert not control.current().allow_tf32
    assert control.current().allow_tf32
