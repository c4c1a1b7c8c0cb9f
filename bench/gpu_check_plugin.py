"""pytest plugin for `make gpu-check`: per-file counts of passed/failed/error/skipped, written as JSON.

Loaded with ``-p gpu_check_plugin``; the file to write is named by $DNNBIND_GPU_CHECK_COUNTS.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict

_counts: dict[str, dict[str, int]] = defaultdict(lambda: {"passed": 0, "failed": 0, "error": 0, "skipped": 0})


def _path(report) -> str:
    return str(report.location[0] if getattr(report, "location", None) else report.fspath)


def pytest_runtest_logreport(report) -> None:
    counts = _counts[_path(report)]
    if report.when == "call":
        counts["skipped" if report.skipped else "passed" if report.passed else "failed"] += 1
    elif report.skipped:                       # skipped in setup (no GPU)
        counts["skipped"] += 1
    elif report.failed:                        # setup or teardown failed
        counts["error"] += 1


def pytest_collectreport(report) -> None:
    if report.failed:
        _counts[str(report.fspath)]["error"] += 1
    elif report.skipped:                       # a module skipped as a whole (importorskip)
        _counts[str(report.fspath)]["skipped"] += 1


def pytest_sessionfinish(session) -> None:
    target = os.environ.get("DNNBIND_GPU_CHECK_COUNTS")
    if target:
        root = str(session.config.rootpath)
        rel = {os.path.relpath(k, root) if os.path.isabs(k) else k: v for k, v in _counts.items()}
        with open(target, "w") as f:
            json.dump(rel, f, indent=1, sort_keys=True)
