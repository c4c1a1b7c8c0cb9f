"""pytest plugin for `make gpu-check`: results written as they come, and the most informative tests first.

Loaded with ``-p gpu_check_plugin``. Environment:

* ``DNNBIND_GPU_CHECK_COUNTS``: a JSON file of per-file counts (passed/failed/error/skipped), rewritten
  (atomically) after every test, so a run killed half-way still leaves what finished;
* ``DNNBIND_GPU_CHECK_RESULTS``: a JSON-lines file, one line per test as it finishes (node id, outcome,
  seconds);
* ``DNNBIND_GPU_CHECK_ORDER=breadth``: run the first case of every test function before the second
  case of any, and so on (round-robin over the parametrized cases), so that a short run covers every
  test function once before it spends time on long sweeps.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict

_counts: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "error": 0, "skipped": 0})
_root = ""


def breadth_first(items: list) -> list:
    """``items`` reordered round-robin over their test functions (first cases first), stable otherwise."""
    groups: dict[str, list] = {}
    for item in items:
        key = item.nodeid.split("[", 1)[0]
        groups.setdefault(key, []).append(item)
    ordered = []
    depth = max((len(g) for g in groups.values()), default=0)
    for i in range(depth):
        ordered.extend(g[i] for g in groups.values() if i < len(g))
    return ordered


def pytest_configure(config) -> None:
    global _root
    _root = str(config.rootpath)


def pytest_collection_modifyitems(session, config, items) -> None:
    if os.environ.get("DNNBIND_GPU_CHECK_ORDER") == "breadth":
        items[:] = breadth_first(items)


def _path(report) -> str:
    path = str(report.location[0] if getattr(report, "location", None) else report.fspath)
    return os.path.relpath(path, _root) if os.path.isabs(path) else path


def _write_counts() -> None:
    target = os.environ.get("DNNBIND_GPU_CHECK_COUNTS")
    if not target:
        return
    partial = target + ".partial"
    with open(partial, "w") as f:
        json.dump(_counts, f, indent=1, sort_keys=True)
    os.replace(partial, target)


def _record(report, outcome: str) -> None:
    target = os.environ.get("DNNBIND_GPU_CHECK_RESULTS")
    if target:
        with open(target, "a") as f:
            f.write(json.dumps({"test": report.nodeid, "outcome": outcome,
                                "seconds": round(getattr(report, "duration", 0.0), 3)}) + "\n")


def pytest_runtest_logreport(report) -> None:
    counts = _counts[_path(report)]
    outcome = None
    if report.when == "call":
        outcome = "skipped" if report.skipped else "passed" if report.passed else "failed"
    elif report.skipped:                       # skipped in setup (no GPU)
        outcome = "skipped"
    elif report.failed:                        # setup or teardown failed
        outcome = "error"
    if outcome is None:
        return
    counts[outcome] += 1
    _record(report, outcome)
    _write_counts()


def pytest_collectreport(report) -> None:
    if report.failed:
        _counts[_path(report)]["error"] += 1
    elif report.skipped:                       # a module skipped as a whole (importorskip)
        _counts[_path(report)]["skipped"] += 1
    else:
        return
    _write_counts()


def pytest_sessionfinish(session) -> None:
    _write_counts()
