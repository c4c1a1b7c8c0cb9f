"""What a generated module offers its users, as plain comparable data: the input of ``generator.diff``.

An :class:`Api` can be read from two places, and both give the same answer for the same headers (a
test checks it on the committed modules):

* :func:`api_of_ir` from a parse (IR plus classification), for any header set, with the pointer
  classifier's problems against the current ``pointer_overrides.json``;
* :func:`api_of_text` from a generated module's text, such as the committed module: the text is run
  as a throw-away module (which loads no library), so struct layouts come from ctypes itself.

That is how ``make generate`` compares the previous generation with the new one without storing
anything besides the generated modules.
"""
from __future__ import annotations

import ast
import ctypes
import enum
import inspect
import itertools
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from generator import config as cfg
from generator import ir
from generator.classify import Classification
from generator.render import TypeNames, _fields, py_name


@dataclass(frozen=True)
class FunctionApi:
    prototype: str
    deprecated: bool = False
    beta: bool = False
    kinds: tuple[tuple[str, str], ...] = ()       # (parameter, kind) for pointer parameters; "" unclassified


@dataclass(frozen=True)
class FieldApi:
    name: str
    ctype: str              # the ctypes expression of the field, as the module writes it
    offset_bits: int
    bit_width: int = 0


@dataclass(frozen=True)
class StructApi:
    kind: str               # struct or union
    size: int               # bytes; 0 for an opaque (field-less) record
    align: int
    fields: tuple[FieldApi, ...] = ()


@dataclass
class Api:
    """One library's generated API: functions, enums, macros, records, handles, callbacks."""
    library: str
    title: str
    version: str
    functions: dict[str, FunctionApi] = field(default_factory=dict)
    enums: dict[str, dict[str, int]] = field(default_factory=dict)      # "" holds anonymous enumerators
    macros: dict[str, int | float] = field(default_factory=dict)
    structs: dict[str, StructApi] = field(default_factory=dict)
    handles: set[str] = field(default_factory=set)
    callbacks: dict[str, str] = field(default_factory=dict)             # name -> CFUNCTYPE(...) expression
    problems: tuple[str, ...] = ()          # classifier problems against the current overrides
    unused_rules: tuple[str, ...] = ()

    def same_surface(self, other: "Api") -> bool:
        """True when both describe the same API (problems and rule use aside)."""
        keys = ("functions", "enums", "macros", "structs", "handles", "callbacks")
        return all(getattr(self, k) == getattr(other, k) for k in keys)


def _expression(text: str) -> str:
    """A Python expression in one canonical spelling (so ``(c_int * 4)`` equals ``c_int * 4``)."""
    return ast.unparse(ast.parse(text.strip(), mode="eval").body)


def _field_tuple(text: str) -> tuple[str, str, int]:
    """``('name', ctype[, bits])`` as written in ``_fields_`` -> (name, canonical ctype, bit width)."""
    node = ast.parse(text.strip().rstrip(","), mode="eval").body
    assert isinstance(node, ast.Tuple) and isinstance(node.elts[0], ast.Constant)
    bits = node.elts[2].value if len(node.elts) > 2 else 0  # type: ignore[attr-defined]
    return node.elts[0].value, ast.unparse(node.elts[1]), int(bits)


# ---------------------------------------------------------------------------------------- from the IR

def api_of_ir(module: ir.Module, classification: Classification) -> Api:
    """The API a module rendered from this IR and classification would have."""
    names = TypeNames(module)
    api = Api(module.library, module.title, module.version, problems=tuple(classification.problems),
              unused_rules=tuple(classification.unused_rules))
    for fn in classification.functions:
        kinds = tuple((py_name(p.name), p.kind) for p in fn.params if p.type.kind == "pointer")
        api.functions[fn.name] = FunctionApi(fn.prototype, fn.deprecated, fn.beta, kinds)
    for e in module.enums:
        api.enums.setdefault(e.name, {}).update({m.name: m.value for m in e.members})
    api.macros = {m.name: m.value for m in module.macros}
    for s in module.structs:
        fields = []
        for f, text in zip(s.fields, _fields(s, names)):
            name, ctype, bits = _field_tuple(text)
            fields.append(FieldApi(name, ctype, f.offset_bits, bits))
        size, align = (s.size, s.align) if fields else (0, 0)
        api.structs[s.name] = StructApi(s.kind, size, align, tuple(fields))
    api.handles = {h.name for h in module.handles}
    for c in module.callbacks:
        api.callbacks[c.name] = _expression(names.callback_type(c))
    return api


# ------------------------------------------------------------------------------ from a generated text

_SECTION = re.compile(r"^# -{10,} (.+?)\s*$", re.M)
_KIND_NOTES = {"device memory": "device", "host or device memory": "either"}
_counter = itertools.count()


def sections(text: str) -> dict[str, str]:
    """The generated module's sections by their marker (``# ---- enums``, ``macros``, ``functions`` ...)."""
    marks = list(_SECTION.finditer(text))
    return {m.group(1): text[m.end():(marks[i + 1].start() if i + 1 < len(marks) else len(text))]
            for i, m in enumerate(marks)}


def load_text(text: str) -> types.ModuleType:
    """Run a generated module's text as a fresh module (nothing is loaded until a function is called)."""
    src = str(cfg.REPO_ROOT / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    module = types.ModuleType(f"_dnnbind_generated_{next(_counter)}")
    exec(compile(text, f"<generated {module.__name__}>", "exec"), module.__dict__)
    return module


def _kinds_from_doc(doc: str) -> tuple[tuple[str, str], ...]:
    lines = doc.splitlines()
    if "Checked parameters:" not in lines:
        return ()
    kinds = []
    for line in lines[lines.index("Checked parameters:") + 1:]:
        if not line.startswith("    ") or ": " not in line:
            break
        name, note = line.strip().split(": ", 1)
        if note.startswith(("byte count", "integer (", "enum ", "handle ")):
            continue                                    # a value (range-checked), not a pointer
        kinds.append((name, _KIND_NOTES.get(note, "host")))
    return tuple(kinds)


def _field_offset(cls: type, name: str, bits: int) -> int:
    descriptor = getattr(cls, name)
    if not bits:
        return descriptor.offset * 8
    bit_offset = getattr(descriptor, "bit_offset", None)
    if bit_offset is None:                              # before Python 3.14: size = bits << 16 | offset
        bit_offset = descriptor.size & 0xFFFF
    return descriptor.offset * 8 + bit_offset


def api_of_text(text: str, library: str = "") -> Api:
    """The API of a generated module's text (for example the committed ``src/dnnbind/gen/cudnn.py``)."""
    module = load_text(text)
    ns: dict[str, Any] = module.__dict__
    parts = sections(text)
    if "_lib" in ns:
        title = ns["_lib"].title
    else:                   # a types-only module loads no library: its title is in the DO-NOT-EDIT line
        title = re.match(r"# DO NOT EDIT\. Generated by dnnbind's generator from the (.+) \S+ headers", text).group(1)
    api = Api(library, title, ns["HEADER_VERSION"])
    for value in ns.values():
        if isinstance(value, type) and issubclass(value, enum.IntEnum) and value.__module__ == module.__name__:
            api.enums[value.__name__] = {k: int(v) for k, v in value.__members__.items()}
    for m in re.finditer(r"^(\w+) = (-?\d+)$", parts.get("enums", ""), re.M):
        api.enums.setdefault("", {})[m.group(1)] = int(m.group(2))
    for m in re.finditer(r"^(\w+) = .*?  # ", parts.get("macros", ""), re.M):
        api.macros[m.group(1)] = ns[m.group(1)]
    api.handles = set(re.findall(r"^(\w+) = (?:POINTER|_address_handle)\(", parts.get("opaque handles", ""), re.M))
    records = parts.get("structs and unions", "")
    bodies = {m.group(1): m.group(2) for m in re.finditer(r"^(\w+)\._fields_ = \[\n(.*?)^\]", text, re.M | re.S)}
    for m in re.finditer(r"^class (\w+)\((Structure|Union)\):", records, re.M):
        name, cls = m.group(1), ns[m.group(1)]
        fields = []
        for line in bodies.get(name, "").splitlines():
            fname, ctype, bits = _field_tuple(line)
            fields.append(FieldApi(fname, ctype, _field_offset(cls, fname, bits), bits))
        size, align = (ctypes.sizeof(cls), ctypes.alignment(cls)) if fields else (0, 0)
        api.structs[name] = StructApi("union" if m.group(2) == "Union" else "struct", size, align, tuple(fields))
    for m in re.finditer(r"^(\w+) = (CFUNCTYPE\(.*\))$", text, re.M):
        api.callbacks[m.group(1)] = _expression(m.group(2))
    for m in re.finditer(r"^_(\w+) = _lazy\(", parts.get("functions", ""), re.M):
        name = m.group(1)
        doc = inspect.cleandoc(ns[name].__doc__ or "").splitlines() + ["", ""]
        flags = doc[2] if doc[1] == "" else ""          # the line render writes after the prototype
        api.functions[name] = FunctionApi(doc[0], ns["_" + name].deprecated is not None,
                                          "Beta API (" in flags, _kinds_from_doc("\n".join(doc)))
    return api
