"""dnnbind.compiled: the optional compiled parts are found where dnnbind-native is installed, each one's
pure-Python stand-in runs without them, and DNNBIND_NATIVE=0 turns them all off."""
from __future__ import annotations

import sys

import pytest

from dnnbind import compiled
from native_parts import require


def test_each_part_is_found_and_imports_where_the_package_is_installed():
    require(compiled.package_directory() is not None, "dnnbind-native")
    for part in compiled.PARTS:
        path = compiled.location(part)
        assert path is not None and part in path, part
    assert compiled.library_path("_kernels") == compiled.location("_kernels")
    for part in ("_values",):
        assert compiled.module(part) is not None and compiled.module(part).__name__ == f"dnnbind_native.{part}"


@pytest.mark.parametrize("value, off", [("0", True), (" 0 ", True), ("1", False), ("", False)])
def test_dnnbind_native_0_turns_every_part_off(monkeypatch, value, off):
    monkeypatch.setenv("DNNBIND_NATIVE", value)
    assert compiled.disabled() is off
    if off:
        assert compiled.module("_values") is None and compiled.library_path("_kernels") is None


def test_an_absent_package_is_none_everywhere(monkeypatch):
    for name in ("dnnbind_native", *(f"dnnbind_native.{part}" for part in compiled.PARTS)):
        monkeypatch.setitem(sys.modules, name, None)             # as if dnnbind-native were not installed
    assert compiled.package_directory() is None
    assert all(compiled.location(part) is None for part in compiled.PARTS)
    assert compiled.module("_values") is None and compiled.library_path() is None
