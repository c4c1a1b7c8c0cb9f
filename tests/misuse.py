"""Running misuse cases against a real library so that a crash is a failing case, not a lost run.

Each case is a Python expression evaluated after a shared setup. They run in one child interpreter, one
after another, each announcing itself before it runs; if the child dies (a segfault, an abort), the case
that was running is recorded as a crash and the cases after it run in a fresh child.
"""
from __future__ import annotations

import json
import re
import subprocess
from typing import Callable

CHILD = r'''
import json, sys
{setup}
for name, expression in json.loads({cases!r}):
    print(json.dumps({{"start": name}}), flush=True)
    try:
        eval(expression)
        outcome = ["no error", ""]
    except Exception as exc:
        outcome = [type(exc).__name__, str(exc), isinstance(exc, TypeError), isinstance(exc, OverflowError)]
    print(json.dumps({{"case": name, "outcome": outcome}}), flush=True)
'''


def run_cases(run: Callable[[str], subprocess.CompletedProcess], setup: str,
              cases: dict[str, str]) -> dict[str, list]:
    """name -> [exception class name, message, is TypeError, is OverflowError] (or ["no error", ""]), or
    ["crash", "exit status N: <stderr tail>"] for a case that killed its interpreter."""
    results: dict[str, list] = {}
    remaining = list(cases.items())
    while remaining:
        result = run(CHILD.format(setup=setup, cases=json.dumps(remaining)))
        running = None
        for line in result.stdout.splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "start" in record:
                running = record["start"]
            else:
                results[record["case"]] = record["outcome"]
                running = None
        if result.returncode == 0 and running is None:
            break
        if running is None:                           # the setup itself failed: nothing can run
            raise AssertionError(f"misuse child failed before any case: {result.stderr[-2000:]}")
        results[running] = ["crash", f"exit status {result.returncode}: {result.stderr[-500:]}"]
        done = {name for name, _ in remaining[:[n for n, _ in remaining].index(running) + 1]}
        remaining = [(n, e) for n, e in remaining if n not in done]
    return results


def assert_outcome(case: str, outcome: list, expected: tuple[str, str] | None) -> None:
    """The case did not crash; it succeeded when ``expected`` is None, else raised ``expected[0]`` (a class
    name) with ``expected[1]`` in its message. A DnnRangeError is an OverflowError, a DnnArgumentError a
    TypeError."""
    assert outcome[0] != "crash", f"{case} crashed the interpreter: {outcome[1]}"
    if expected is None:
        assert outcome == ["no error", ""], outcome
        return
    kind, text = expected
    assert outcome[0] == kind and text in outcome[1], outcome
    assert not re.match(r"^(\w+): \1: ", outcome[1]), f"the function is named twice: {outcome[1]}"
    if kind == "DnnRangeError":
        assert outcome[3] is True
    elif kind == "DnnArgumentError":
        assert outcome[2] is True
