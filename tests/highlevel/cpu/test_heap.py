"""The cpu backend's glibc heap settings (_heap.py): in force after import unless turned off,
and what they are for: a loop of fresh megabyte arrays stops costing new pages on every call."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = """
import json, resource, sys
import numpy as np
import dnnbind.highlevel.cpu
from dnnbind.highlevel.cpu import _heap
x = np.ones((32, 16, 32, 32), np.float32)
for _ in range(5):
    y = x * 2.0; z = y + 1.0; del y, z
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    y = x * 2.0; z = y + 1.0; del y, z          # two fresh 2 MiB arrays per step, freed at once
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"applied": _heap.keep_heap_padding(), "faults": faults}))
"""


def _child(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "DNNBIND_HEAP_PADDING"}
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True,
                         env={**base, **env}).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap")
def test_heap_padding_keeps_freed_pages_for_the_next_call():
    on, off = _child(), _child(DNNBIND_HEAP_PADDING="0")
    assert on["applied"] and not off["applied"]
    # without the settings each step maps its arrays afresh (about 1,000 new pages); with them, almost none
    assert off["faults"] > 10_000, off
    assert on["faults"] < off["faults"] / 10, (on, off)


def test_a_users_own_tuning_is_left_alone():
    assert not _child(MALLOC_TOP_PAD_="1048576")["applied"]
