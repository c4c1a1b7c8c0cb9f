"""The optional compiled parts of dnnbind: which are there and in use.

dnnbind is pure Python. The separately built distribution dnnbind-native (``native/`` in the source tree,
``pip install ./native``) adds two compiled parts, each used where it is importable, each with a
pure-Python path that gives the same results otherwise:

* ``_kernels``: the cpu backend's C kernels (a library loaded with ctypes by
  :mod:`dnnbind.highlevel.cpu.native`);
* ``_values``: the generated wrappers' check of their integer and enum arguments (:mod:`dnnbind.runtime.checks`).

``DNNBIND_NATIVE=0`` turns both off, as if the package were absent (to compare, and to test the
pure-Python paths). Importing this module imports nothing but the standard library.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
from types import ModuleType

PACKAGE = "dnnbind_native"
#: each compiled part and what it does
PARTS = {"_kernels": "the cpu backend's C kernels", "_values": "the wrappers' integer and enum check"}


def disabled() -> bool:
    """Whether ``DNNBIND_NATIVE=0`` turns the compiled parts off."""
    return os.environ.get("DNNBIND_NATIVE", "").strip() == "0"


def package_directory() -> str | None:
    """Where the installed dnnbind_native package lies, found without importing it; None when absent."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):       # sys.modules holds None for it: blocked, as if absent
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def location(part: str) -> str | None:
    """The file of compiled part ``part`` (a key of :data:`PARTS`), found without loading it; None when the
    package or the part is absent (whether or not DNNBIND_NATIVE=0)."""
    directory = package_directory()
    if directory is None:
        return None
    spec = importlib.machinery.PathFinder.find_spec(part, [directory])
    return spec.origin if spec is not None else None


def module(part: str) -> ModuleType | None:
    """The compiled extension module ``part`` (``_values``), or None: absent, not importable
    here, or turned off by DNNBIND_NATIVE=0."""
    if disabled():
        return None
    try:
        return importlib.import_module(f"{PACKAGE}.{part}")
    except ImportError:
        return None


def library_path(part: str = "_kernels") -> str | None:
    """The path of a compiled library loaded with ctypes (``_kernels``), or None: absent or turned off."""
    return None if disabled() else location(part)
