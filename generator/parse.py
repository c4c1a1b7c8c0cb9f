"""libclang -> IR: read the vendor's own headers and keep what the library declares.

Only declarations from the library's own files (``keep`` in headers.json) are kept; the CUDA or HIP
headers they include are parsed for types but not exported. Any error diagnostic stops generation.
"""
from __future__ import annotations

import fnmatch
import functools
import re
import subprocess
from pathlib import Path
from typing import Any, Iterable

from clang import cindex
from clang.cindex import AvailabilityKind, CursorKind, TypeKind

from generator import ir, macros
from generator.config import HeaderSet
from generator.problems import InputProblem

_BUILTIN = {
    TypeKind.INT: ("int", "c_int"), TypeKind.UINT: ("int", "c_uint"),
    TypeKind.LONG: ("int", "c_long"), TypeKind.ULONG: ("int", "c_ulong"),
    TypeKind.LONGLONG: ("int", "c_longlong"), TypeKind.ULONGLONG: ("int", "c_ulonglong"),
    TypeKind.SHORT: ("int", "c_short"), TypeKind.USHORT: ("int", "c_ushort"),
    TypeKind.SCHAR: ("int", "c_byte"), TypeKind.UCHAR: ("int", "c_ubyte"),
    TypeKind.CHAR_S: ("char", "c_char"), TypeKind.CHAR_U: ("char", "c_char"),
    TypeKind.FLOAT: ("float", "c_float"), TypeKind.DOUBLE: ("float", "c_double"),
    TypeKind.LONGDOUBLE: ("float", "c_longdouble"), TypeKind.BOOL: ("bool", "c_bool"),
    TypeKind.VOID: ("void", ""),
}
# Typedef names whose width matters more than their canonical spelling.
_FIXED = {"size_t": "c_size_t", "ssize_t": "c_ssize_t", "int8_t": "c_int8", "int16_t": "c_int16",
          "int32_t": "c_int32", "int64_t": "c_int64", "uint8_t": "c_uint8", "uint16_t": "c_uint16",
          "uint32_t": "c_uint32", "uint64_t": "c_uint64", "intptr_t": "c_ssize_t", "uintptr_t": "c_size_t",
          "ptrdiff_t": "c_ssize_t"}
_UNDERLYING = {TypeKind.INT: "c_int", TypeKind.UINT: "c_uint", TypeKind.LONG: "c_long",
               TypeKind.ULONG: "c_ulong", TypeKind.LONGLONG: "c_longlong", TypeKind.ULONGLONG: "c_ulonglong",
               TypeKind.SHORT: "c_short", TypeKind.USHORT: "c_ushort", TypeKind.SCHAR: "c_byte",
               TypeKind.UCHAR: "c_ubyte", TypeKind.CHAR_S: "c_char"}


class ParseError(InputProblem):
    """The headers did not parse cleanly; the message lists every error diagnostic."""


@functools.lru_cache(maxsize=1)
def builtin_include_dir() -> str:
    """The C compiler's builtin headers (stddef.h, limits.h ...), which the libclang wheel lacks."""
    for compiler in ("cc", "gcc", "clang"):
        try:
            out = subprocess.run([compiler, "-print-file-name=include"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            continue
        if out and Path(out, "stddef.h").exists():
            return out
    raise ParseError("no C compiler found to locate builtin headers (stddef.h); install gcc or clang")


def clang_args(headers: HeaderSet, config: dict[str, Any], defines: Iterable[str]) -> list[str]:
    language = config.get("language", "c")
    args = ["-x", "c++" if language == "c++" else "c", "-std=c++17" if language == "c++" else "-std=c11"]
    args += [f"-D{d}" for d in defines]
    args += [f"-I{d}" for d in headers.include_dirs]
    args += ["-isystem", builtin_include_dir()]
    return args


def translation_unit(headers: HeaderSet, config: dict[str, Any], defines: Iterable[str]) -> cindex.TranslationUnit:
    index = cindex.Index.create()
    options = (cindex.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD
               | cindex.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES)
    tu = index.parse(str(headers.entry), args=clang_args(headers, config, defines), options=options)
    errors = [d for d in tu.diagnostics if d.severity >= cindex.Diagnostic.Error]
    if errors:
        lines = "\n".join(f"  {d.location.file}:{d.location.line}: {d.spelling}" for d in errors[:50])
        raise ParseError(f"{len(errors)} error diagnostic(s) parsing {headers.entry.name}:\n{lines}")
    return tu


def clean_comment(raw: str | None) -> str:
    """A doxygen or C comment without its markers and leading asterisks."""
    if not raw:
        return ""
    text = raw.strip()
    lines = []
    for line in text.splitlines():
        line = line.strip()
        line = re.sub(r"^(/\*\*<?|/\*!<?|/\*|///<?|//!<?|//)\s?", "", line)
        line = re.sub(r"\*/$", "", line)
        line = re.sub(r"^\*+ ?", "", line)
        lines.append(line.rstrip())
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


class Parser:
    """One parse of one library's headers into an :class:`ir.Module`."""

    def __init__(self, headers: HeaderSet, config: dict[str, Any], defines: Iterable[str] | None = None):
        self.headers = headers
        self.config = config
        self.defines = list(config.get("defines", []) if defines is None else defines)
        self.tu = translation_unit(headers, config, self.defines)
        self.kept_files: dict[str, str] = {}
        self.typedef_of: dict[str, str] = {}     # record/enum USR -> typedef name
        self.anon_counter = 0
        self.module = ir.Module(library=headers.library, title=config["title"], version="",
                                entry=config["entry"].split("/")[-1])
        self._struct_names: set[str] = set()
        self._referenced: dict[str, cindex.Cursor] = {}   # names used by kept declarations

    # -- which files count -------------------------------------------------------------------
    def header_of(self, cursor: cindex.Cursor) -> str | None:
        """The kept header's name relative to its include dir, or None for foreign declarations."""
        f = cursor.location.file
        if f is None:
            return None
        name = f.name
        if name not in self.kept_files:
            self.kept_files[name] = self._relative_kept(Path(name))
        return self.kept_files[name] or None

    def _relative_kept(self, path: Path) -> str:
        resolved = path.resolve()
        for d in self.headers.include_dirs:
            try:
                rel = resolved.relative_to(d.resolve()).as_posix()
            except ValueError:
                continue
            if any(fnmatch.fnmatch(rel, pattern) for pattern in self.config["keep"]):
                return rel
        return ""

    # -- types ----------------------------------------------------------------------------------
    def ctype(self, t: cindex.Type) -> ir.CType:
        const = t.is_const_qualified()
        spelling = t.spelling
        if t.kind == TypeKind.ELABORATED:
            inner = self.ctype(t.get_named_type())
            return ir.CType(inner.kind, inner.name, spelling, inner.pointee, const or inner.const, inner.length)
        if t.kind == TypeKind.TYPEDEF:
            name = t.get_declaration().spelling
            if name in _FIXED:
                return ir.CType("int", _FIXED[name], spelling, const=const)
            canonical = t.get_canonical()
            if canonical.kind == TypeKind.POINTER:
                pointee = canonical.get_pointee()
                if name in self._handle_names:
                    self._referenced[name] = t.get_declaration()
                    return ir.CType("handle", name, spelling, const=const)
                if pointee.kind == TypeKind.FUNCTIONPROTO:
                    return ir.CType("function", name, spelling, const=const)
            if canonical.kind == TypeKind.FUNCTIONPROTO:     # typedef R name(args): a function type
                return ir.CType("function", name, spelling, const=const)
            if canonical.kind == TypeKind.ENUM:
                decl = canonical.get_declaration()
                self._referenced[self._enum_name(decl)] = decl
                return ir.CType("enum", self._enum_name(decl), spelling, const=const)
            if canonical.kind == TypeKind.RECORD:
                decl = canonical.get_declaration()
                return ir.CType(self._record_kind(decl), self._record_name(decl), spelling, const=const)
            inner = self.ctype(t.get_declaration().underlying_typedef_type)
            return ir.CType(inner.kind, inner.name, spelling, inner.pointee, const or inner.const, inner.length)
        if t.kind == TypeKind.POINTER:
            pointee = self.ctype(t.get_pointee())
            return ir.CType("pointer", "", spelling, pointee, const)
        if t.kind in (TypeKind.INCOMPLETEARRAY, TypeKind.VARIABLEARRAY, TypeKind.DEPENDENTSIZEDARRAY):
            element = self.ctype(t.element_type)
            return ir.CType("pointer", "", spelling, element, const)
        if t.kind == TypeKind.CONSTANTARRAY:
            return ir.CType("array", "", spelling, self.ctype(t.element_type), const, t.element_count)
        if t.kind == TypeKind.ENUM:
            self._referenced[self._enum_name(t.get_declaration())] = t.get_declaration()
            return ir.CType("enum", self._enum_name(t.get_declaration()), spelling, const=const)
        if t.kind == TypeKind.RECORD:
            decl = t.get_declaration()
            return ir.CType(self._record_kind(decl), self._record_name(decl), spelling, const=const)
        if t.kind == TypeKind.FUNCTIONPROTO:
            signature = (self.ctype(t.get_result()), *(self.ctype(a) for a in t.argument_types()))
            return ir.CType("function", "", spelling, const=const, signature=signature)
        if t.kind == TypeKind.FUNCTIONNOPROTO:
            return ir.CType("function", "", spelling, const=const, signature=(self.ctype(t.get_result()),))
        if t.kind in _BUILTIN:
            kind, name = _BUILTIN[t.kind]
            return ir.CType(kind, name, spelling, const=const)
        raise ParseError(f"unsupported C type {spelling!r} (kind {t.kind})")

    def _record_kind(self, decl: cindex.Cursor) -> str:
        return "union" if decl.kind == CursorKind.UNION_DECL else "struct"

    def _record_name(self, decl: cindex.Cursor) -> str:
        return self.typedef_of.get(decl.get_usr()) or decl.spelling

    def _enum_name(self, decl: cindex.Cursor) -> str:
        name = self.typedef_of.get(decl.get_usr())
        if name:
            return name
        spelling = decl.spelling
        return "" if (not spelling or "unnamed" in spelling or "anonymous" in spelling) else spelling

    # -- the walk ---------------------------------------------------------------------------
    def run(self) -> ir.Module:
        top = list(self.tu.cursor.get_children())
        cursors = []
        for c in top:                       # C++ headers wrap their API in extern "C" { ... }
            if c.kind == CursorKind.LINKAGE_SPEC or c.kind == CursorKind.UNEXPOSED_DECL:
                cursors.extend(c.get_children())
            else:
                cursors.append(c)
        self._collect_typedef_names(cursors)
        for c in cursors:
            header = self.header_of(c)
            if c.kind == CursorKind.MACRO_DEFINITION:
                continue
            if header is None:
                continue
            if c.kind == CursorKind.ENUM_DECL and c.is_definition():
                self._enum(c)
            elif c.kind in (CursorKind.STRUCT_DECL, CursorKind.UNION_DECL) and c.is_definition():
                self._struct(c)
            elif c.kind == CursorKind.TYPEDEF_DECL:
                self._typedef(c)
            elif c.kind == CursorKind.FUNCTION_DECL:
                self._function(c, header)
        self._foreign_references()
        self._macros(cursors)
        return self.module

    def _foreign_references(self) -> None:
        """Enums and handles declared by included headers (CUDA, HIP) but used by kept functions."""
        emitted = {e.name for e in self.module.enums} | {h.name for h in self.module.handles}
        foreign_enums, foreign_handles = [], []
        for name, decl in sorted(self._referenced.items()):
            if name in emitted or not name:
                continue
            if decl.kind == CursorKind.ENUM_DECL:
                before = len(self.module.enums)
                self._enum(decl)
                foreign_enums.extend(self.module.enums[before:])
                del self.module.enums[before:]
            elif decl.kind == CursorKind.TYPEDEF_DECL:
                canonical = decl.underlying_typedef_type.get_canonical()
                pointee = canonical.get_pointee()
                tag = pointee.get_declaration().spelling if pointee.kind == TypeKind.RECORD else ""
                foreign_handles.append(ir.Handle(name, tag, False, "Declared by an included header.", True))
        self.module.enums[:0] = foreign_enums
        self.module.handles[:0] = foreign_handles

    def _collect_typedef_names(self, cursors: list[cindex.Cursor]) -> None:
        self._handle_names: set[str] = set()
        for c in cursors:
            if c.kind != CursorKind.TYPEDEF_DECL:
                continue
            underlying = c.underlying_typedef_type
            target = underlying.get_named_type() if underlying.kind == TypeKind.ELABORATED else underlying
            if target.kind in (TypeKind.RECORD, TypeKind.ENUM):
                decl = target.get_declaration()
                self.typedef_of.setdefault(decl.get_usr(), c.spelling)
            canonical = underlying.get_canonical()
            if canonical.kind == TypeKind.POINTER and (
                    canonical.get_pointee().kind == TypeKind.RECORD
                    or (canonical.get_pointee().kind == TypeKind.VOID and self.header_of(c))):
                self._handle_names.add(c.spelling)

    def _enum(self, c: cindex.Cursor) -> None:
        members = []
        for e in c.get_children():
            if e.kind != CursorKind.ENUM_CONSTANT_DECL:
                continue
            members.append(ir.Enumerator(e.spelling, e.enum_value,
                                         e.availability == AvailabilityKind.DEPRECATED,
                                         clean_comment(e.raw_comment)))
        underlying = _UNDERLYING.get(c.enum_type.get_canonical().kind, "c_int")
        name = self._enum_name(c)
        self.module.enums.append(ir.Enum(name, underlying, tuple(members), clean_comment(c.raw_comment),
                                         c.availability == AvailabilityKind.DEPRECATED, self.header_of(c) or ""))

    def _struct(self, c: cindex.Cursor, name: str | None = None) -> str:
        name = name or self._record_name(c)
        if not name or "unnamed" in name or "anonymous" in name:
            self.anon_counter += 1
            name = f"_anon_{self.anon_counter}"
        if name in self._struct_names:
            return name
        if not any(f.kind == CursorKind.FIELD_DECL for f in c.get_children()):
            return name         # an empty C++ tag (MIOPEN_DECLARE_OBJECT): only used through its handle
        fields: list[ir.Field] = []
        children = list(c.get_children())
        for i, f in enumerate(children):
            if f.kind in (CursorKind.STRUCT_DECL, CursorKind.UNION_DECL) and f.is_anonymous():
                following = children[i + 1] if i + 1 < len(children) else None
                if following is not None and following.kind == CursorKind.FIELD_DECL and \
                        _named_type(following.type).get_declaration() == f:
                    continue            # C: the unnamed FIELD_DECL that follows carries it
                fields.append(self._anonymous_member(c, f, name, len(fields)))
                continue
            if f.kind in (CursorKind.STRUCT_DECL, CursorKind.UNION_DECL) and f.is_definition():
                self._struct(f)         # a named record defined inside this one: its fields refer to it
                continue
            if f.kind != CursorKind.FIELD_DECL:
                continue
            target = _named_type(f.type)
            if target.kind == TypeKind.RECORD and target.get_declaration().is_anonymous():
                if not f.spelling or "anonymous" in f.spelling or f.spelling.startswith("("):
                    fields.append(self._anonymous_member(c, target.get_declaration(), name, len(fields)))
                    continue
                inner = self._struct(target.get_declaration(), f"{name}_{f.spelling}")
                ftype = ir.CType(self._record_kind(target.get_declaration()), inner, f.type.spelling)
            else:
                ftype = self.ctype(f.type)
            fields.append(ir.Field(f.spelling, ftype, c.type.get_offset(f.spelling),
                                   f.get_bitfield_width() if f.is_bitfield() else 0))
        self._struct_names.add(name)
        tag = c.spelling if c.spelling != name and not c.is_anonymous() else ""
        self.module.structs.append(ir.Struct(name, self._record_kind(c), tuple(fields), c.type.get_size(),
                                             c.type.get_align(), clean_comment(c.raw_comment), tag,
                                             self.header_of(c) or ""))
        return name

    def _anonymous_member(self, parent: cindex.Cursor, record: cindex.Cursor, parent_name: str,
                          index: int) -> ir.Field:
        """An anonymous struct/union member: its own ctypes class, listed in ``_anonymous_``."""
        inner = self._struct(record, f"{parent_name}_anon{index}")
        first = next(x.spelling for x in record.get_children() if x.kind == CursorKind.FIELD_DECL)
        return ir.Field(f"_anon{index}", ir.CType(self._record_kind(record), inner, ""),
                        parent.type.get_offset(first), 0, True)

    def _typedef(self, c: cindex.Cursor) -> None:
        underlying = c.underlying_typedef_type
        canonical = underlying.get_canonical()
        deprecated = c.availability == AvailabilityKind.DEPRECATED
        if c.spelling in self._handle_names:
            pointee = canonical.get_pointee()
            tag, foreign = "", False
            if pointee.kind == TypeKind.RECORD:
                tag = pointee.get_declaration().spelling
                foreign = self.header_of(pointee.get_declaration()) is None
            self.module.handles.append(ir.Handle(c.spelling, tag, deprecated, clean_comment(c.raw_comment),
                                                 foreign))
        elif canonical.kind == TypeKind.FUNCTIONPROTO or (
                canonical.kind == TypeKind.POINTER and canonical.get_pointee().kind == TypeKind.FUNCTIONPROTO):
            pointer = canonical.kind == TypeKind.POINTER    # typedef R (*name)(...) or typedef R name(...)
            proto = canonical.get_pointee() if pointer else canonical
            names = [p.spelling for p in c.get_children() if p.kind == CursorKind.PARM_DECL]
            params = tuple(ir.Param(names[i] if i < len(names) and names[i] else f"arg{i}", self.ctype(a))
                           for i, a in enumerate(proto.argument_types()))
            prototype = (f"typedef {underlying.spelling} {c.spelling}" if pointer else
                         f"typedef {proto.get_result().spelling} {c.spelling}"
                         f"({', '.join(a.spelling for a in proto.argument_types()) or 'void'})")
            self.module.callbacks.append(ir.Callback(c.spelling, self.ctype(proto.get_result()), params,
                                                     prototype, clean_comment(c.raw_comment), pointer))
        elif canonical.kind == TypeKind.RECORD and not canonical.get_declaration().is_definition():
            # typedef struct X X; without a body: an opaque type used only through pointers
            self.module.structs.append(ir.Struct(c.spelling, "struct", (), 0, 0, clean_comment(c.raw_comment)))
            self._struct_names.add(c.spelling)

    def _function(self, c: cindex.Cursor, header: str) -> None:
        if self.config.get("types_only"):
            return                  # no library to call: the API arrives at run time as function pointers
        if any(f.name == c.spelling for f in self.module.functions):
            return
        params = []
        for i, a in enumerate(c.get_arguments()):
            ptype = self.ctype(a.type)
            if ptype.kind == "array":          # int dims[4] as a parameter is an int* (C's decay), of 4 elements
                ptype = ir.CType("pointer", "", ptype.spelling, ptype.pointee, ptype.const, ptype.length)
            params.append(ir.Param(a.spelling or f"arg{i}", ptype))
        result = self.ctype(c.result_type)
        args = ", ".join(f"{a.type.spelling} {a.spelling}".strip() for a in c.get_arguments()) or "void"
        prototype = f"{c.result_type.spelling} {c.spelling}({args})"
        self.module.functions.append(ir.Function(
            c.spelling, result, tuple(params), prototype, clean_comment(c.raw_comment),
            c.availability == AvailabilityKind.DEPRECATED, False, header))

    def _macros(self, cursors: list[cindex.Cursor]) -> None:
        """Evaluate every object-like macro whose body is a constant expression.

        Bodies are expanded as tokens first (the preprocessor's rule), so a macro may use one
        defined later in the file, and an unparenthesised body keeps C's operator precedence.
        """
        enum_values: dict[str, int | float] = {m.name: m.value for e in self.module.enums for m in e.members}
        bodies: dict[str, list[str]] = {}
        kept: dict[str, bool] = {}
        for c in cursors:
            if c.kind != CursorKind.MACRO_DEFINITION:
                continue
            raw = list(c.get_tokens())
            if len(raw) >= 2 and _function_like(raw) and self.header_of(c) and not c.spelling.startswith("_"):
                self.module.skipped_macros.append(c.spelling)       # reported: a maintainer sees what is left out
            if len(raw) < 2 or _function_like(raw):
                continue
            bodies[c.spelling] = [t.spelling for t in raw[1:]]
            kept[c.spelling] = bool(self.header_of(c))
        values: dict[str, int | float] = dict(enum_values)
        for name, tokens in bodies.items():
            try:
                value = macros.value_of(macros.expand(name, bodies), enum_values)
            except (macros.NotConstant, RecursionError, ZeroDivisionError):
                if kept[name]:
                    self.module.skipped_macros.append(name)
                continue
            values[name] = value
            if kept[name] and not name.startswith("_"):
                self.module.macros.append(ir.Macro(name, value, " ".join(tokens)))
        self.all_macros = values


def _named_type(t: cindex.Type) -> cindex.Type:
    return t.get_named_type() if t.kind == TypeKind.ELABORATED else t


def _function_like(tokens: list[cindex.Token]) -> bool:
    """``#define F(x)``: the parenthesis touches the name (``#define F (x)`` is object-like)."""
    name, nxt = tokens[0], tokens[1]
    return nxt.spelling == "(" and nxt.extent.start.offset == name.extent.end.offset


def _header_macros(headers: HeaderSet, config: dict[str, Any], name: str) -> dict[str, int | float]:
    """Macros of a header the entry header does not include (MIOpen's miopen/version.h)."""
    for d in headers.include_dirs:
        if (d / name).exists():
            other = HeaderSet(headers.library, headers.include_dirs, d / name, headers.origin)
            parser = Parser(other, {**config, "keep": [name]})
            parser.run()
            return parser.all_macros
    raise ParseError(f"version header {name} not found in {[str(d) for d in headers.include_dirs]}")


def parse(headers: HeaderSet, config: dict[str, Any]) -> ir.Module:
    """Parse the headers; mark beta functions when the config names a beta-API macro."""
    parser = Parser(headers, config)
    module = parser.run()
    version_macros = config.get("version_macros", [])
    if version_macros:
        known = dict(parser.all_macros)
        if any(m not in known for m in version_macros) and config.get("version_header"):
            known.update(_header_macros(headers, config, config["version_header"]))
        missing = [m for m in version_macros if m not in known]
        if missing:
            raise ParseError(f"version macros {missing} not defined by the headers")
        module.version = ".".join(str(int(known[m])) for m in version_macros)
    beta = config.get("beta_macro")
    if beta:
        plain = Parser(headers, config, [d for d in parser.defines if not d.startswith(beta)]).run()
        stable = {f.name for f in plain.functions}
        module.functions = [f if f.name in stable else ir.Function(**{**f.__dict__, "beta": True})
                            for f in module.functions]
    return module
