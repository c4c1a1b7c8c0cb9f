"""Sphinx directive ``dnnbind-raw-functions``: the reference of every function of a generated module.

Everything comes from the generated module itself, read when the docs are built, so the reference cannot
drift from the code: each docstring's C prototype, its deprecation line, its checked-parameter facts (the
generator writes one per parameter: pointer kind, length source, whether None is accepted, the integer
range, the enum class, the handle type), its notes and its link to the vendor's reference. Whatever else
a docstring carries (the vendor's own text, where its license lets us ship it) is shown verbatim, never
parsed as markup. Importing a generated module loads no vendor library, so building the docs needs none.
"""
from __future__ import annotations

import importlib
import inspect
import os
import re
from enum import IntEnum
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

_CHECKED = "Checked parameters:"
_DEPRECATED = "Deprecated by the vendor."
_REFERENCE = "Reference: "


def function_names(module: Any) -> list[str]:
    """The C functions a generated module binds, in header order."""
    return list(module._lib.function_names)


def _split_parameters(prototype: str) -> list[str]:
    """The parameter declarations of a C prototype (commas inside parentheses do not split)."""
    inside = prototype[prototype.index("(") + 1:prototype.rindex(")")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inside):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(inside[start:i].strip())
            start = i + 1
    parts.append(inside[start:].strip())
    return [p for p in parts if p and p != "void"]


def _c_type(declaration: str, name: str) -> str:
    """``const int * dims`` -> ``const int *``; the declaration itself when the name is not its last word."""
    match = re.fullmatch(rf"(.*?)\s*\b{re.escape(name)}\s*(\[\d*\])?", declaration)
    return (match[1] + (match[2] or "")).strip() if match else declaration


class _Docstring:
    """A generated function's docstring, split into what the generator states and the rest."""

    def __init__(self, doc: str) -> None:
        lines = doc.splitlines()
        self.prototype = lines[0]
        self.deprecation: str | None = None        # the deprecation line, when the vendor deprecates it
        self.checked: dict[str, str] = {}          # parameter -> what the wrapper checks
        self.notes: list[str] = []                 # the generator's other one-line statements
        self.reference: str | None = None          # the vendor's online reference of this function
        self.other: list[str] = []                 # anything else (the vendor's text), verbatim
        rest, i = lines[1:], 0
        while i < len(rest):
            line = rest[i]
            if line.startswith(_DEPRECATED):
                self.deprecation = line
            elif line.strip() == _CHECKED:
                i += 1
                while i < len(rest) and rest[i].startswith((" ", "\t")) and ":" in rest[i]:
                    name, fact = rest[i].strip().split(":", 1)
                    self.checked[name.strip()] = fact.strip()
                    i += 1
                continue
            elif line.startswith(_REFERENCE):
                self.reference = line[len(_REFERENCE):].strip()
            elif (line.startswith("Raises ") and "status" in line) or line.startswith("Handles that may be None"):
                self.notes.append(line.strip())
            else:
                self.other.append(line)
            i += 1
        while self.other and not self.other[0].strip():
            self.other.pop(0)
        while self.other and not self.other[-1].strip():
            self.other.pop()


def _fact(text: str, module: Any) -> str:
    """One checked-parameter fact as table text: literal, with the enum class linked."""
    if not text:
        return "—"
    enum = re.match(r"enum (\w+)(.*)", text)
    if enum and isinstance(getattr(module, enum[1], None), type):
        return f"enum :class:`{enum[1]}`{_escape(enum[2])}"
    return _escape(text)


def _escape(text: str) -> str:
    """Plain text in reStructuredText: no character of it starts markup."""
    return re.sub(r"([\\`*_|\[\]<>])", r"\\\1", text)


def function_rst(module: Any, name: str) -> list[str]:
    """The reStructuredText of one function's entry."""
    function = getattr(module, name)
    doc = _Docstring(inspect.getdoc(function) or name)
    params = list(inspect.signature(function).parameters)
    declarations = _split_parameters(doc.prototype)
    if len(declarations) != len(params):
        declarations = ["" for _ in params]
    out = [f".. py:function:: {name}({', '.join(params)})", "", "   .. code-block:: c", "",
           f"      {doc.prototype}", ""]
    if doc.deprecation:
        reason = doc.deprecation[len(_DEPRECATED):].strip()
        out += [f"   **Deprecated** by the vendor. {_escape(reason)} The first call warns "
                f"(``DeprecationWarning``).", ""]
    if params:
        out += ["   .. list-table::", "      :header-rows: 1", "      :widths: 20 30 50", "",
                "      * - parameter", "        - C type", "        - what the wrapper checks before the call"]
        for param, declaration in zip(params, declarations):
            c_type = _c_type(declaration, param) if declaration else ""
            out += [f"      * - ``{param}``", f"        - {('``' + c_type + '``') if c_type else '—'}",
                    f"        - {_fact(doc.checked.get(param, ''), module)}"]
        out.append("")
    for line in doc.notes:
        out += [f"   {_escape(line)}", ""]
    if doc.reference:
        out += [f"   The vendor's reference: `{name} <{doc.reference}>`__", ""]
    if any(line.strip() for line in doc.other):
        out += ["   ::", ""] + [f"      {line}" if line.strip() else "" for line in doc.other] + [""]
    return out


def enum_names(module: Any) -> list[str]:
    """The enum classes a generated module defines, in header order."""
    return [name for name, value in vars(module).items() if isinstance(value, type) and issubclass(value, IntEnum)
            and value.__module__ == module.__name__]


def enum_rst(module: Any, name: str) -> list[str]:
    """One enum class: its members and values (also module-level constants of the same names)."""
    members = ", ".join(f"``{member}`` = {int(value)}" for member, value in getattr(module, name).__members__.items())
    return [f".. py:class:: {name}", "", f"   :class:`enum.IntEnum`: {members}", ""]


class RawFunctions(SphinxDirective):
    """``.. dnnbind-raw-functions:: dnnbind.gen.cudnn``: one entry per bound C function, in header order
    (with ``:enums:``, one per enum class instead)."""
    required_arguments = 1
    option_spec = {"enums": directives.flag}

    def run(self) -> list:
        module = importlib.import_module(self.arguments[0])
        self.env.note_dependency(module.__file__)
        lines = [f".. py:currentmodule:: {module.__name__}", ""]
        entries = enum_rst if "enums" in self.options else function_rst
        for name in (enum_names if "enums" in self.options else function_names)(module):
            lines += entries(module, name)
        content = StringList(lines, source=f"<generated reference of {module.__name__}>")
        container = nodes.container()
        nested_parse_with_titles(self.state, content, container)
        return container.children


#: the generated modules whose every function the built reference must have, and the page that has them
REFERENCE_PAGES = {"dnnbind.gen.cudnn": "reference/cudnn", "dnnbind.gen.miopen": "reference/miopen"}


def missing_anchors(html_dir: str) -> list[str]:
    """The functions of the generated modules without an anchor on their reference page in ``html_dir``."""
    missing = []
    for module_name, page in REFERENCE_PAGES.items():
        path = os.path.join(html_dir, page + ".html")
        html = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        module = importlib.import_module(module_name)
        missing += [f"{module_name}.{name}" for name in function_names(module)
                    if f'id="{module_name}.{name}"' not in html]
    return missing


def _check_built_reference(app: Sphinx, exception: Exception | None) -> None:
    """`make docs` fails when the HTML it wrote lacks an anchor for a function of a generated module."""
    if exception is None and app.builder.format == "html":
        missing = missing_anchors(app.outdir)
        if missing:
            raise ExtensionError(f"{len(missing)} generated functions have no anchor in the reference: "
                                 f"{', '.join(missing[:10])}")


def setup(app: Sphinx) -> dict:
    app.add_directive("dnnbind-raw-functions", RawFunctions)
    app.connect("build-finished", _check_built_reference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
