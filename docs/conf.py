"""Sphinx configuration of dnnbind's documentation (``make docs``: HTML under build/docs/)."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(Path(__file__).parent / "_ext")]

import dnnbind  # noqa: E402  (after the path change: the worktree's own package)

project = "dnnbind"
author = "the dnnbind developers"
copyright = "the dnnbind developers"
release = version = dnnbind.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "dnnbind_rawref", "dnnbind_autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]      # pages start at their own level (ARCHITECTURE.md is also read on GitHub)

html_theme = "furo"
html_title = f"dnnbind {release}"

nitpicky = True
# names outside dnnbind that its signatures and docstrings mention: no intersphinx (the build is offline)
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|torch|ctypes|enum|typing|types|collections|contextlib|threading|cupy|pathlib|os)\..*"),
    (r"py:.*", r"(Any|Callable|Iterator|Iterable|Sequence|Mapping|TextIO|IO|Self|ArrayLike|NDArray)"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {}
autodoc_inherit_docstrings = False      # dnnbind.torch's layers subclass torch's: their docstrings are torch's
