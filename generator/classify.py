"""Pointer kinds: give every pointer parameter of every function a kind (device, host, either).

The rules and per-function exceptions come from pointer_overrides.json. Classification FAILS, listing
each case, when a pointer parameter matches nothing, when an exception names a function or parameter
the headers no longer declare, or when a parameter marked as a byte size is not 64-bit (size_t).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from generator import ir, lengths
from generator.problems import InputProblem

KINDS = ("device", "host", "either")


class ClassificationError(InputProblem):
    """The override file and the headers disagree; the message lists every problem."""

    def __init__(self, message: str, library: str = "", problems: tuple[str, ...] = (), others: tuple[str, ...] = ()):
        super().__init__(message)
        self.library, self.problems, self.others = library, problems, others

    def lines(self) -> list[str]:
        """The summary, then one self-contained line per problem (file, library, entry, what is wrong); ``others``
        are problems of other input files (headers.json), each line naming its file already."""
        if not self.problems and not self.others:
            return super().lines()
        return ([str(self).splitlines()[0]] + list(self.others)
                + [f"pointer_overrides.json: {self.library}: {p}" for p in self.problems])


@dataclass
class Classification:
    functions: list[ir.Function]
    per_kind: Counter = field(default_factory=Counter)
    per_rule: Counter = field(default_factory=Counter)
    unused_rules: list[str] = field(default_factory=list)
    byte_sizes: int = 0
    optional_handles: int = 0     # handle parameters listed as nullable_handles (may be NULL)
    unset_types: frozenset[str] = frozenset()   # handle types unusable between create and their first set
    unset_setters: str = ""       # the functions (a regex) that set the handle they take first
    unset_partial: str = ""       # setters (a regex) of one field, which leave the handle as unset as it was
    problems: list[str] = field(default_factory=list)   # filled instead of raising when not strict


def _pointee_kind(t: ir.CType) -> str:
    assert t.pointee is not None
    return t.pointee.kind


def _rule_matches(rule: dict[str, Any], fn: ir.Function, param: ir.Param) -> bool:
    if _pointee_kind(param.type) not in rule["pointee"]:
        return False
    if "name" in rule and not re.fullmatch(rule["name"], param.name):
        return False
    if "name_not" in rule and re.fullmatch(rule["name_not"], param.name):
        return False
    if "function" in rule and not re.fullmatch(rule["function"], fn.name):
        return False
    return True


def _is_size_t(t: ir.CType) -> bool:
    if t.kind == "pointer":
        return t.pointee is not None and t.pointee.kind == "int" and t.pointee.name == "c_size_t"
    return t.kind == "int" and t.name == "c_size_t"


def destroyed_handle(fn: ir.Function) -> str:
    """The handle parameter a ``*Destroy*`` function frees ("" when it is not one): the generated wrapper
    refuses a NULL one and clears the handle object after success, so it cannot be freed twice."""
    if "Destroy" in fn.name and len(fn.params) == 1 and fn.params[0].type.kind == "handle" \
            and fn.result.kind == "enum":
        return fn.params[0].name
    return ""


def created_handle(fn: ir.Function) -> str:
    """The output parameter through which a ``*Create*`` function returns a new handle ("" when it is not
    one): the generated wrapper tells the runtime that this address is live again (see runtime/handles.py)."""
    if "Create" not in fn.name:
        return ""
    for p in fn.params:
        pointee = p.type.pointee
        if p.type.kind == "pointer" and pointee is not None and pointee.kind == "handle" and not pointee.const:
            return p.name
    return ""


def unset_roles(fn: ir.Function, types: frozenset[str], setters: str,
                partial: str = "") -> tuple[bool, str, list[str]]:
    """For handle types a library leaves unusable between create and the first set (``unset_handles``): whether
    ``fn`` creates one, which parameter it sets ("" if none), and which handles it needs set already."""
    if not types:
        return False, "", []
    out = created_handle(fn)
    creates = bool(out) and any(p.name == out and p.type.pointee is not None and p.type.pointee.name in types
                                for p in fn.params)
    first = fn.params[0] if fn.params else None
    sets = first.name if (first is not None and first.type.kind == "handle" and first.type.name in types
                          and re.fullmatch(setters, fn.name)) else ""
    needs = [p.name for p in fn.params if p.type.kind == "handle" and p.type.name in types and p.name != sets
             and not destroyed_handle(fn)]
    if sets and partial and re.fullmatch(partial, fn.name):
        sets = ""                         # sets one field: neither needs the handle set nor makes it usable
    return creates, sets, needs


def _handle_is_owned(t: ir.CType, foreign: set[str]) -> bool:
    return t.kind == "handle" and t.name not in foreign


def classify_handles(functions: list[ir.Function], module: ir.Module, overrides: dict[str, Any],
                     problems: list[str]) -> list[ir.Function]:
    """Mark which handles passed by value may be NULL (``nullable``): only those the vendor documents as
    optional, listed in the ``nullable_handles`` section. Every other one is refused as None in Python,
    since several library functions dereference a NULL (or destroyed, hence cleared) descriptor without
    checking it. Handles of other libraries stay nullable (``cudaStream_t``: NULL is the default stream), and so
    do the section's ``types``: the library context, which every function checks itself (returning a bad-parameter
    status), so that argument checks stay testable on a machine that cannot create one."""
    section = overrides.get("nullable_handles", {})
    listed: dict[str, list[str]] = section.get("exceptions", {})
    checked_by_library = set(section.get("types", []))
    foreign = {h.name for h in module.handles if h.foreign} | checked_by_library
    problems += [f"stale nullable_handles type: {name} is not a handle the headers declare"
                 for name in sorted(checked_by_library - {h.name for h in module.handles})]
    by_name = {fn.name: fn for fn in functions}
    for fn_name, names in sorted(listed.items()):
        fn = by_name.get(fn_name)
        if fn is None:
            problems.append(f"stale nullable_handles exception: function {fn_name} is not declared by the headers")
            continue
        owned = {p.name for p in fn.params if _handle_is_owned(p.type, foreign)}
        problems += [f"stale nullable_handles exception: {fn_name} has no handle parameter {n!r}"
                     for n in names if n not in owned]

    def decided(fn: ir.Function, p: ir.Param) -> ir.Param:
        if p.name in listed.get(fn.name, ()):
            return replace(p, nullable=True, rule=OPTIONAL_HANDLE)
        return replace(p, nullable=not _handle_is_owned(p.type, foreign))

    return [replace(fn, params=tuple(decided(fn, p) if p.type.kind == "handle" else p for p in fn.params))
            for fn in functions]


#: ``Param.rule`` of a handle parameter listed in ``nullable_handles.exceptions``
OPTIONAL_HANDLE = "nullable_handles"


def required_handles(fn: ir.Function) -> list[str]:
    """The handle parameters the generated wrapper refuses as None (NULL), in order."""
    return [p.name for p in fn.params if p.type.kind == "handle" and not p.nullable
            and p.name != destroyed_handle(fn)]


def classify(module: ir.Module, overrides: dict[str, Any], strict: bool = True) -> Classification:
    """Return the module's functions with each pointer parameter's kind and deciding rule filled in.

    ``strict=False`` (for diffs against other header versions) never raises for a header/overrides
    disagreement: the problems go to ``Classification.problems`` and unclassified parameters keep kind "".
    """
    rules = overrides.get("rules", [])
    for rule in rules:
        if rule.get("kind") not in KINDS:
            raise ClassificationError(f"rule {rule.get('id')!r}: kind must be one of {KINDS}")
    exceptions: dict[str, dict[str, str]] = overrides.get("exceptions", {})
    size_pattern = re.compile(overrides["byte_sizes"]) if overrides.get("byte_sizes") else None
    by_name = {fn.name: fn for fn in module.functions}
    problems: list[str] = []

    for fn_name, entries in sorted(exceptions.items()):
        fn = by_name.get(fn_name)
        if fn is None:
            problems.append(f"stale exception: function {fn_name} is not declared by the headers")
            continue
        params = {p.name: p for p in fn.params}
        for pname, kind in entries.items():
            if pname not in params:
                problems.append(f"stale exception: {fn_name} has no parameter {pname!r}")
            elif params[pname].type.kind != "pointer":
                problems.append(f"stale exception: {fn_name}.{pname} is no longer a pointer")
            if kind not in KINDS:
                problems.append(f"exception {fn_name}.{pname}: kind {kind!r} is not one of {KINDS}")

    result = Classification(functions=[])
    used = Counter()
    for fn in module.functions:
        params = []
        for p in fn.params:
            byte_size = bool(size_pattern and size_pattern.fullmatch(p.name))
            if byte_size:
                result.byte_sizes += 1
                if not _is_size_t(p.type):
                    problems.append(f"byte size not 64-bit: {fn.name}.{p.name} is {p.type.spelling!r}, "
                                    "expected size_t or size_t*")
            if p.type.kind != "pointer":
                params.append(replace(p, byte_size=byte_size))
                continue
            kind, rule_id = "", ""
            if p.name in exceptions.get(fn.name, {}):
                kind, rule_id = exceptions[fn.name][p.name], f"exception:{fn.name}"
            else:
                for rule in rules:
                    if _rule_matches(rule, fn, p):
                        kind, rule_id = rule["kind"], rule["id"]
                        break
            if not kind:
                problems.append(f"unclassified pointer: {fn.name}.{p.name} ({p.type.spelling})")
            else:
                used[rule_id] += 1
                result.per_kind[kind] += 1
            params.append(replace(p, kind=kind, rule=rule_id, byte_size=byte_size))
        result.functions.append(replace(fn, params=tuple(params)))
    result.functions = lengths.classify_lengths(result.functions, module, overrides, problems, used)
    result.functions = classify_handles(result.functions, module, overrides, problems)
    result.optional_handles = sum(map(len, overrides.get("nullable_handles", {}).get("exceptions", {}).values()))
    unset = overrides.get("unset_handles", {})
    result.unset_types = frozenset(unset.get("types", []))
    result.unset_setters = unset.get("setters", "")
    result.unset_partial = unset.get("partial_setters", "")
    declared = {h.name for h in module.handles}
    problems += [f"stale unset_handles type: {name} is not a handle the headers declare"
                 for name in sorted(result.unset_types - declared)]
    if problems and strict:
        raise ClassificationError(f"{len(problems)} problem(s) in pointer_overrides.json for "
                                  f"{module.library}:\n" + "\n".join(f"  {p}" for p in problems),
                                  module.library, tuple(problems))
    result.per_rule = used
    result.problems = problems
    result.unused_rules = [r for r in [r["id"] for r in rules] + lengths.rule_ids(overrides) if used[r] == 0]
    return result
