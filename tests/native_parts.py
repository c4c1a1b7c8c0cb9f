"""The tests' view of dnnbind's optional compiled parts (dnnbind.compiled): a test of a compiled part skips,
saying why, when DNNBIND_NATIVE=0 turns them off (the Makefile's second pass), and fails when they are
simply missing (the development install, make setup, builds them)."""
from __future__ import annotations

import pytest

from dnnbind import compiled

REASON = "DNNBIND_NATIVE=0: the compiled parts (dnnbind-native) are turned off; this pass tests the Python paths"

#: mark a test (or a module, as ``pytestmark``) that needs the compiled parts
needs_native = pytest.mark.skipif(compiled.disabled(), reason=REASON)


def require(present: bool, what: str) -> None:
    """Skip when DNNBIND_NATIVE=0; else fail unless ``present`` (``what`` names the missing part)."""
    if compiled.disabled():
        pytest.skip(REASON)
    assert present, f"{what} is not built: run make setup (it installs dnnbind-native from native/)"
