"""What libclang itself says about a library's headers, read independently of the generator's parser.

Tests compare the generated modules against these facts: the function count, enum values and the
size and field offsets of every struct.
"""
from __future__ import annotations

import fnmatch
from functools import lru_cache
from pathlib import Path

from clang import cindex

from generator import config as cfg
from generator.parse import clang_args


def _cursors(library: str):
    config = cfg.load_all()[library]
    headers = cfg.header_set(library, config)
    tu = cindex.Index.create().parse(str(headers.entry), args=clang_args(headers, config, config.get("defines", [])))
    roots = [d.resolve() for d in headers.include_dirs]

    def kept(cursor: cindex.Cursor) -> bool:
        if cursor.location.file is None:
            return False
        path = Path(cursor.location.file.name).resolve()
        for root in roots:
            if path.is_relative_to(root):
                rel = path.relative_to(root).as_posix()
                return any(fnmatch.fnmatch(rel, p) for p in config["keep"])
        return False

    for cursor in tu.cursor.walk_preorder():
        if kept(cursor):
            yield cursor


@lru_cache(maxsize=None)
def function_names(library: str) -> frozenset[str]:
    return frozenset(c.spelling for c in _cursors(library) if c.kind == cindex.CursorKind.FUNCTION_DECL)


@lru_cache(maxsize=None)
def enum_values(library: str) -> dict[str, int]:
    return {c.spelling: c.enum_value for c in _cursors(library)
            if c.kind == cindex.CursorKind.ENUM_CONSTANT_DECL}


@lru_cache(maxsize=None)
def record_layouts(library: str) -> dict[str, tuple[int, dict[str, int]]]:
    """typedef name -> (size in bytes, {field: offset in bytes}) for every named, non-empty record."""
    layouts: dict[str, tuple[int, dict[str, int]]] = {}
    for c in _cursors(library):
        if c.kind != cindex.CursorKind.TYPEDEF_DECL:
            continue
        t = c.underlying_typedef_type.get_canonical()
        if t.kind != cindex.TypeKind.RECORD:
            continue
        names = list(_field_names(t))
        if names:
            layouts[c.spelling] = (t.get_size(), {n: t.get_offset(n) // 8 for n in names})
    return layouts


def _field_names(t: cindex.Type):
    """Field names as reachable from the record, members of anonymous structs/unions included
    (ctypes' ``_anonymous_`` exposes them on the outer class too)."""
    for f in t.get_fields():
        inner = f.type.get_canonical()
        if inner.kind == cindex.TypeKind.RECORD and inner.get_declaration().is_anonymous():
            yield from _field_names(inner)
        elif f.spelling:
            yield f.spelling


@lru_cache(maxsize=None)
def comment_lines(library: str) -> frozenset[str]:
    """Every line of every comment libclang attaches to a declaration of the library's headers (the text a
    generator could ship), markers and Doxygen commands kept as written, surrounding whitespace and comment
    punctuation stripped."""
    lines = set()
    for c in _cursors(library):
        for line in (c.raw_comment or "").splitlines():
            line = line.strip().lstrip("/*!<").rstrip("*/").strip()
            if line:
                lines.add(line)
    return frozenset(lines)
