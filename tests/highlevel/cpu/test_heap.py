"""The cpu backend's glibc heap settings (_heap.py): an explicit opt-in (importing or using dnnbind never
makes them), left alone where the user tunes glibc, and what they are for: a loop of fresh megabyte arrays
stops costing new pages on every call."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = """
import json, resource, sys
import numpy as np
import dnnbind, dnnbind.highlevel.cpu
from dnnbind.highlevel.cpu import _heap
x = np.ones((32, 16, 32, 32), np.float32)
dnnbind.batchnorm(x, np.ones(16, np.float32), np.zeros(16, np.float32))[1](x)     # using the cpu backend
dnnbind.conv(x, np.ones((4, 16, 3, 3), np.float32))
untouched = _heap._applied is None
if sys.argv[1] == "opt-in":
    dnnbind.highlevel.cpu.keep_heap_padding()
for _ in range(5):
    y = x * 2.0; z = y + 1.0; del y, z
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    y = x * 2.0; z = y + 1.0; del y, z          # two fresh 2 MiB arrays per step, freed at once
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"untouched": untouched, "applied": _heap._applied, "faults": faults}))
"""


def _child(mode: str, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "DNNBIND_HEAP_PADDING"}
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True,
                         env={**base, **env}).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap")
def test_importing_and_running_ops_leaves_the_heap_alone_and_the_opt_in_keeps_freed_pages():
    default, opted = _child("default"), _child("opt-in")
    assert default["untouched"] and default["applied"] is None       # never called by import or by an op
    assert opted["untouched"] and opted["applied"] is True
    # glibc as it was: each step maps its arrays afresh (about 1,000 new pages); with the opt-in, almost none
    assert default["faults"] > 10_000, default
    assert opted["faults"] < default["faults"] / 10, (opted, default)


def test_the_opt_in_leaves_a_users_own_tuning_alone():
    assert _child("opt-in", MALLOC_TOP_PAD_="1048576")["applied"] is False
    assert _child("opt-in", DNNBIND_HEAP_PADDING="0")["applied"] is False
