"""Whether the MIOpen headers in the cache are still the pinned ones.

Debian's unstable suite moves on: when a pinned package has left it, `make headers` takes what the
suite has (and says so). The committed module then no longer matches the headers, and the tests that
compare the two skip with "header moved from X to Y: run make generate" until a maintainer
regenerates, while the host-side tests keep running against whatever library is present.
"""
from __future__ import annotations

import pytest

from generator.pipeline import header_move_note as header_moved


def skip_if_header_moved(library: str) -> None:
    note = header_moved(library)
    if note:
        pytest.skip(f"header moved ({note}): run make generate")
