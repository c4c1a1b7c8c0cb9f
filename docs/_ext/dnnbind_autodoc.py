"""Autodoc over dnnbind's own docstrings, under ``-n -W``.

Two adjustments, both narrow:

- A reference to a name the reference pages do not document (an internal module, a module constant) is
  rendered as plain code when that name exists in the code, and still fails the build when it does not:
  a stale name is an error, an undocumented internal is not.
- The docstrings write shapes as ``(N, C, *spatial)``: a ``*`` that opens no emphasis is taken literally
  instead of failing as an unterminated one.
"""
from __future__ import annotations

import importlib
import re
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx

# a '*' before a word, when nothing after it on the line could close an emphasis (a '*' after a non-space)
_LONE_STAR = re.compile(r"(?<![\\*\w`])\*(?=\w)(?![^\n]*\S\*)")
_PY_ROLES = {"mod", "func", "data", "class", "attr", "meth", "obj", "exc"}


def _exists(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute reachable from one, inside dnnbind."""
    if not dotted.startswith("dnnbind"):
        return False
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def _resolve_existing(app: Sphinx, env: Any, node: Any, contnode: nodes.Node) -> nodes.Node | None:
    if node.get("refdomain") != "py" or node.get("reftype") not in _PY_ROLES:
        return None
    target = node["reftarget"].lstrip("~.")
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if module:
        candidates += [f"{module}.{target}"] + ([f"{module}.{cls}.{target}"] if cls else [])
    documented = re.search(r"docstring of (\S+)", node.source or "")     # where the docstring was written
    if documented:
        parts = documented[1].split(".")
        candidates += [".".join(parts[:cut] + [target]) for cut in range(len(parts) - 1, 0, -1)]
    return contnode if any(_exists(name) for name in candidates) else None


def _literal_stars(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if name.startswith("dnnbind"):
        lines[:] = [_LONE_STAR.sub(r"\\*", line) for line in lines]


def setup(app: Sphinx) -> dict:
    app.connect("missing-reference", _resolve_existing)
    app.connect("autodoc-process-docstring", _literal_stars)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
