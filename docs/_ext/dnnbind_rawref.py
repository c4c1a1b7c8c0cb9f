"""Sphinx directive ``dnnbind-raw-functions``: the reference of every function of a generated module.

The facts come from the generated module itself, read when the docs are built, so the reference cannot
drift from the code: the C prototype and the checked-parameter facts of each docstring (pointer kind,
length source, whether None is accepted), the integer type and enum class the wrapper range-checks each
value parameter against, and the deprecation the wrapper warns with. Whatever else a docstring carries
(the vendor's own text, where its license lets us ship it) is shown verbatim, never parsed as markup.
Importing a generated module loads no vendor library, so building the docs needs none.
"""
from __future__ import annotations

import ctypes
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

from dnnbind.runtime.checks import RANGES, struct_code

_CHECKED = "Checked parameters:"
_DEPRECATED = "Deprecated by the vendor."


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


def _sections(doc: str) -> tuple[str, bool, dict[str, str], list[str], list[str]]:
    """(prototype, deprecated, checked facts by parameter, the 'Raises ...' lines, the rest verbatim)."""
    lines = doc.splitlines()
    prototype, rest = lines[0], lines[1:]
    deprecated, checked, raises, other = False, {}, [], []
    i = 0
    while i < len(rest):
        line = rest[i]
        if line.strip() == _DEPRECATED:
            deprecated = True
        elif line.strip() == _CHECKED:
            i += 1
            while i < len(rest) and rest[i].startswith((" ", "\t")) and ":" in rest[i]:
                name, fact = rest[i].strip().split(":", 1)
                checked[name.strip()] = fact.strip()
                i += 1
            continue
        elif line.startswith("Raises ") and "status" in line:
            raises.append(line.strip())
        else:
            other.append(line)
        i += 1
    while other and not other[0].strip():
        other.pop(0)
    while other and not other[-1].strip():
        other.pop()
    return prototype, deprecated, checked, raises, other


def _value_facts(module: Any, name: str) -> dict[int, str]:
    """Per argument index: the range check the wrapper runs on an integer or enum argument."""
    argtypes = getattr(getattr(module, "_" + name), "argtypes", None) or ()    # a traced symbol has none
    spec = getattr(module, "_values_" + name, None)
    enums = list(spec[1]) if spec is not None else []
    facts, k = {}, 0
    for index, argtype in enumerate(argtypes):
        code = struct_code(argtype)
        if code is None:
            continue
        enum = enums[k] if k < len(enums) else None
        k += 1
        c_name, low, high = RANGES[code]
        if enum is not None:
            facts[index] = f"a :class:`{enum.__name__}` member or an int in its range ({c_name})"
        else:
            facts[index] = f"int, {low} to {high} ({c_name})"
    return facts


def _handle_fact(module: Any, c_type: str) -> str:
    """For a handle passed by value: its type (the generated pointer type refuses every other handle type)."""
    name = c_type.replace("const ", "").strip()
    typedef = getattr(module, name, None)
    if isinstance(typedef, type) and issubclass(typedef, ctypes._Pointer):
        return f"a ``{name}`` object; a handle of another type is refused"
    return ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else "—"


def function_rst(module: Any, name: str) -> list[str]:
    """The reStructuredText of one function's entry."""
    function = getattr(module, name)
    # the reason, while the symbol is unbound (as it is when the docs build: nothing loads the library)
    reason = getattr(getattr(module, "_" + name), "deprecated", None)
    prototype, deprecated, checked, raises, other = _sections(inspect.getdoc(function) or name)
    params = list(inspect.signature(function).parameters)
    declarations = _split_parameters(prototype)
    if len(declarations) != len(params):
        declarations = ["" for _ in params]
    values = _value_facts(module, name)
    out = [f".. py:function:: {name}({', '.join(params)})", "", "   .. code-block:: c", "",
           f"      {prototype}", ""]
    if deprecated or reason:
        because = f": {reason.rstrip('.')}" if reason else ""
        out += [f"   **Deprecated** by the vendor{because}. The first call warns (``DeprecationWarning``).", ""]
    if params:
        out += ["   .. list-table::", "      :header-rows: 1", "      :widths: 20 30 50", "",
                "      * - parameter", "        - C type", "        - what the wrapper checks before the call"]
        for index, (param, declaration) in enumerate(zip(params, declarations)):
            c_type = _c_type(declaration, param) if declaration else ""
            fact = checked.get(param) or values.get(index, "") or _handle_fact(module, c_type)
            out += [f"      * - ``{param}``", f"        - {('``' + c_type + '``') if c_type else '—'}",
                    f"        - {_cell(fact)}"]
        out.append("")
    for line in raises:
        out += [f"   {line}", ""]
    if any(line.strip() for line in other):
        out += ["   ::", ""] + [f"      {line}" if line.strip() else "" for line in other] + [""]
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
