"""Host arrays and buffers: where each one's length comes from, and whether None (NULL) may be passed.

Like pointer kinds (classify.py), both come from rules plus per-function exceptions in
pointer_overrides.json (sections ``lengths`` and ``nullable``), and a header update that adds a host
array with no known length source, or an output pointer that nothing classifies, FAILS generation with
a list, as does an exception that names a function or parameter the headers no longer declare.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import Any

from generator import ir

SOURCES = ("fixed", "count", "sized", "query", "unchecked")


def needs_length(p: ir.Param) -> bool:
    """Host pointers the wrapper converts: typed arrays and void* buffers (not const char* strings)."""
    t = p.type
    if t.kind != "pointer" or p.kind != "host" or t.pointee is None:
        return False
    if t.pointee.kind == "function" and not t.pointee.name:     # int (*fn)(int): the callback itself
        return False
    return not (t.pointee.kind == "char" and t.pointee.const)


def _eligible(p: ir.Param, strings_too: bool) -> bool:
    """``needs_length``, or (named by a length exception) a const char* that is binary data, not a string."""
    return needs_length(p) or (strings_too and p.type.kind == "pointer" and p.kind == "host")


def _matches(rule: dict[str, Any], fn: ir.Function, p: ir.Param) -> bool:
    pointee = p.type.pointee
    assert pointee is not None
    if "pointee" in rule and pointee.kind not in rule["pointee"]:
        return False
    if "const" in rule and bool(pointee.const) != rule["const"]:
        return False
    if "declared" in rule and ("array" if "[" in p.type.spelling else "pointer") != rule["declared"]:
        return False
    for key, negate, value in (("name", False, p.name), ("name_not", True, p.name), ("function", False, fn.name)):
        if key in rule and bool(re.fullmatch(rule[key], value)) == negate:
            return False
    return True


def _count_param(fn: ir.Function, pattern: str, skip: str) -> ir.Param | None:
    """The first by-value integer parameter of ``fn`` whose name matches ``pattern``."""
    for q in fn.params:
        if q.name != skip and q.type.kind == "int" and re.fullmatch(pattern, q.name):
            return q
    return None


def _query(entry: dict[str, Any], fn: ir.Function, path: str, functions: dict[str, ir.Function],
           problems: list[str]) -> ir.Length | None:
    """A ``query`` source, checked against the headers: the wrapper calls that function with ``args`` (parameters
    of ``fn``, one per query parameter before its last) and reads the count from its last, an integer output."""
    query, args = functions.get(entry["query"]), tuple(entry.get("args", ()))
    if query is None:
        problems.append(f"{path}: query {entry['query']!r} is not a function of the headers")
        return None
    out = query.params[-1].type if query.params else None
    if out is None or out.kind != "pointer" or out.pointee is None or out.pointee.kind != "int" or out.pointee.const:
        problems.append(f"{path}: query {query.name!r} is no count query (its last parameter must be an integer "
                        f"output: {query.prototype})")
        return None
    found = len(problems)
    problems += [f"{path}: args names {a!r}, no parameter of {fn.name}" for a in args
                 if a not in {q.name for q in fn.params}]
    if len(args) != len(query.params) - 1:
        problems.append(f"{path}: args gives {len(args)} argument(s) ({', '.join(args) or 'none'}); query "
                        f"{query.name} takes {len(query.params) - 1} before its count output")
    return ir.Length("query", query.name, args=args) if len(problems) == found else None


def _source(entry: dict[str, Any], fn: ir.Function, p: ir.Param, size_tables: dict[str, dict[str, int]],
            enum_members: dict[str, list[str]], problems: list[str],
            limits: dict[str, int | float] | None = None,
            handle_tables: dict[tuple[str, str], dict[str, str]] | None = None,
            functions: dict[str, ir.Function] | None = None, path: str = "",
            number_tables: dict[str, dict[str, tuple[str, int, str]]] | None = None) -> ir.Length | None:
    limits = limits or {}
    handle_tables = handle_tables or {}
    where = f"{fn.name}.{p.name}"
    if "fixed" in entry:
        return ir.Length("fixed", str(int(entry["fixed"])))
    if "unchecked" in entry:
        if not str(entry["unchecked"]).strip():
            problems.append(f"length of {where}: 'unchecked' needs a reason")
        return ir.Length("unchecked", reason=str(entry["unchecked"]))
    if "query" in entry:
        return _query(entry, fn, path or where, functions or {}, problems)
    if "count" in entry:
        count = _count_param(fn, entry["count"], p.name)
        if count is None:
            return None
        if "size_by" not in entry:
            most, most_name = 0, ""
            if "most" in entry and re.fullmatch(entry.get("most_for", ".*"), count.name):
                most_name = entry["most"] if isinstance(entry["most"], str) else ""
                most = int(limits.get(entry["most"], 0)) if most_name else int(entry["most"])
                if not most:
                    problems.append(f"length of {where}: 'most' {entry['most']!r} is no integer macro of the headers")
            return ir.Length("count", count.name, minus=int(entry.get("minus", 0)), most=most, most_name=most_name,
                             least=int(entry.get("least", 0)))
        selector = next((q for q in fn.params if q.name == entry["size_by"]), None)
        table = size_tables.get(entry.get("sizes", ""))
        if selector is None or selector.type.kind != "enum" or table is None:
            problems.append(f"length of {where}: size_by {entry['size_by']!r} must name an enum parameter and "
                            f"sizes {entry.get('sizes')!r} a table in element_sizes")
            return None
        missing = [m for m in enum_members.get(selector.type.name, []) if m not in table]
        if missing:
            problems.append(f"element size unknown for {selector.type.name} member(s) {', '.join(missing)} "
                            f"(element_sizes.{entry['sizes']}): {where} cannot be checked")
        direction = "inputs" if p.type.pointee is not None and p.type.pointee.const else "outputs"
        handles = tuple(sorted(handle_tables.get((direction, entry.get("sizes", "")), {}).items()))
        return ir.Length("sized", count.name, selector.name, tuple(sorted(table.items())), handles=handles,
                         numbers=tuple(sorted((number_tables or {}).get(entry.get("sizes", ""), {}).items())))
    problems.append(f"length of {where}: entry {entry} names no source (one of {SOURCES})")
    return None


def classify_lengths(functions: list[ir.Function], module: ir.Module, overrides: dict[str, Any],
                     problems: list[str], used: Counter) -> list[ir.Function]:
    """Fill ``length``, ``nullable`` and ``length_rule`` of every host array parameter."""
    section = overrides.get("lengths", {})
    rules: list[dict[str, Any]] = section.get("rules", [])
    exceptions: dict[str, dict[str, dict[str, Any]]] = section.get("exceptions", {})
    null_section = overrides.get("nullable", {})
    null_rules: list[dict[str, Any]] = null_section.get("rules", [])
    nullable_exceptions: dict[str, list[str]] = null_section.get("exceptions", {})
    size_tables = {k: v for k, v in overrides.get("element_sizes", {}).items() if isinstance(v, dict)}
    enum_members = {e.name: [m.name for m in e.members] for e in module.enums}
    limits = {m.name: m.value for m in module.macros}
    handle_section = overrides.get("handle_values", {})
    handle_tables = {(direction, enum): members for direction in ("inputs", "outputs")
                     for enum, members in handle_section.get(direction, {}).items()}
    declared_handles = {h.name for h in module.handles}
    for (_, enum), members in handle_tables.items():
        problems += [f"handle_values.{enum}: {member} is no member of the headers' {enum}"
                     for member in members if member not in enum_members.get(enum, [])]
        problems += [f"handle_values.{enum}: {handle} is not a handle the headers declare"
                     for handle in members.values() if handle not in declared_handles]
    problems += _stale_element_sizes(size_tables, enum_members)
    number_tables = _number_tables(overrides, enum_members)
    by_name = {fn.name: fn for fn in functions}

    for table_name, entries in (("lengths", exceptions), ("nullable", nullable_exceptions)):
        for fn_name, params in sorted(entries.items()):
            fn = by_name.get(fn_name)
            if fn is None:
                problems.append(f"stale {table_name} exception: function {fn_name} is not declared by the headers")
                continue
            declared = {q.name: q for q in fn.params}
            for pname in params:
                if pname not in declared or not _eligible(declared[pname], table_name == "lengths"):
                    problems.append(f"stale {table_name} exception: {fn_name} has no host pointer parameter {pname!r}")

    out = []
    for fn in functions:
        params = []
        for p in fn.params:
            if not (needs_length(p) or (p.name in exceptions.get(fn.name, {}) and _eligible(p, True))):
                params.append(p)
                continue
            length, rule_id = None, ""
            if p.type.length and p.name not in exceptions.get(fn.name, {}):     # const int dims[4]
                length, rule_id = ir.Length("fixed", str(p.type.length)), "declared-size"
            elif p.name in exceptions.get(fn.name, {}):
                entry, path = exceptions[fn.name][p.name], f"lengths.exceptions.{fn.name}.{p.name}"
                length = _source(entry, fn, p, size_tables, enum_members, problems, limits, handle_tables, by_name,
                                 path, number_tables)
                if "count" in entry and _count_param(fn, entry["count"], p.name) is None:
                    problems.append(f"{path}: count {entry['count']!r} names no integer parameter of {fn.name}")
                rule_id = f"exception:{fn.name}"
            else:
                for rule in rules:
                    if _matches(rule, fn, p):
                        length = _source(rule, fn, p, size_tables, enum_members, problems, limits, handle_tables,
                                         by_name, f"lengths.rules[{rule['id']}] ({fn.name}.{p.name})",
                                         number_tables)
                        if length is not None:
                            rule_id = rule["id"]
                            break
            if length is None:
                problems.append(f"no length source: {fn.name}.{p.name} ({p.type.spelling})")
            else:
                used[f"length:{rule_id}"] += 1
            nullable = p.name in nullable_exceptions.get(fn.name, [])
            assert p.type.pointee is not None
            if not nullable and not p.type.pointee.const:
                rule = next((r for r in null_rules if _matches(r, fn, p)), None)
                if rule is None:
                    problems.append(f"output pointer not classified nullable or not: {fn.name}.{p.name} "
                                    f"({p.type.spelling})")
                else:
                    used[f"nullable:{rule['id']}"] += 1
                    nullable = bool(rule["nullable"])
            params.append(replace(p, length=length, nullable=nullable, length_rule=rule_id))
        out.append(replace(fn, params=tuple(params)))
    return out


#: the ctypes number types an element type may name (backend_attributes.element_types) -> (numpy's kind, bytes)
_NUMBERS = {"c_int64": ("i", 8), "c_int32": ("i", 4), "c_double": ("f", 8), "c_float": ("f", 4), "c_bool": ("b", 1),
            "c_char": ("S", 1)}


def _number_tables(overrides: dict[str, Any], enum_members: dict[str, list[str]]) -> dict[str, dict[str, tuple]]:
    """Per selector enum (backend_attributes.type_enum), its members whose elements are numbers of one C
    type (an enum's are int32): a sized array's wrapper refuses an array of another element type."""
    section = overrides.get("backend_attributes") or {}
    types: dict[str, str] = section.get("element_types", {})
    numbers = {member: (*_NUMBERS[ctype], ctype[2:]) if ctype in _NUMBERS else ("i", 4, ctype)
               for member, ctype in types.items() if ctype in _NUMBERS or ctype in enum_members}
    return {section["type_enum"]: numbers} if numbers and "type_enum" in section else {}


def _stale_element_sizes(tables: dict[str, dict[str, int]], enum_members: dict[str, list[str]]) -> list[str]:
    """element_sizes tables for enums the headers lack, and members their enums lack (a typo never checks
    anything; a member the header dropped is stale)."""
    problems = [f"element_sizes.{enum}: {enum} is no enum of the headers"
                for enum in tables if enum not in enum_members]
    return problems + [f"element_sizes.{enum}: {member} is no member of the headers' {enum}"
                       for enum, table in tables.items() if enum in enum_members
                       for member in table if member not in enum_members[enum]]


def rule_ids(overrides: dict[str, Any]) -> list[str]:
    """Every length and nullable rule id, as counted in ``used``."""
    return ([f"length:{r['id']}" for r in overrides.get("lengths", {}).get("rules", [])]
            + [f"nullable:{r['id']}" for r in overrides.get("nullable", {}).get("rules", [])])
