"""Reading the generator's JSON inputs (headers.json, pointer_overrides.json), validated before any use.

Each file names its JSON Schema with ``"$schema"`` (files under generator/schemas/), so editors check it
while typing; :func:`load` checks it again with ``jsonschema`` before the generator reads a key. The
schema refuses unknown keys, wrong types, invalid regular expressions and unknown kinds; this module adds
what a schema cannot say: a key given twice in one object, and a rule id used twice in one list of rules.
Every problem is one line, ``FILE: ENTRY: PROBLEM``, the entry being the path to it (library, section,
rule id, or function and parameter); a JSON syntax error is ``FILE:LINE:COLUMN: PROBLEM``.
"""
from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import jsonschema

from generator.problems import InputProblem

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


class InputError(InputProblem):
    """One of the generator's JSON files is malformed or breaks its schema; one line per problem."""


class _Object(dict):
    """A JSON object that remembers the keys given more than once (json keeps only the last)."""
    duplicates: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    counts = Counter(key for key, _ in pairs)
    obj.duplicates = tuple(key for key, n in counts.items() if n > 1)
    return obj


def schema_reference(schema_name: str) -> str:
    """What a file under generator/ writes as its ``"$schema"``: its schema's path relative to it."""
    return f"schemas/{schema_name}"


_validators: dict[str, jsonschema.protocols.Validator] = {}
_loaded: dict[tuple[str, str, str], dict[str, Any]] = {}


def _validator(schema_name: str) -> jsonschema.protocols.Validator:
    if schema_name not in _validators:
        schema = json.loads((SCHEMA_DIR / schema_name).read_text())
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        _validators[schema_name] = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return _validators[schema_name]


def load(path: Path, schema_name: str, shown: str) -> dict[str, Any]:
    """The file's data once it passes its schema (``"$schema"`` removed); InputError listing every problem.

    ``shown`` is how messages name the file (``generator/pointer_overrides.json``)."""
    text = path.read_text()
    key = (str(path), schema_name, text)
    if key not in _loaded:
        _loaded[key] = parse(text, schema_name, shown)
    return copy.deepcopy(_loaded[key])          # callers may change what they get


def parse(text: str, schema_name: str, shown: str) -> dict[str, Any]:
    """:func:`load` on a file's text."""
    try:
        data = json.loads(text, object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        raise InputError(f"{shown}:{exc.lineno}:{exc.colno}: JSON syntax error: {exc.msg}") from None
    problems = list(problems_of(data, schema_name))
    if problems:
        raise InputError("\n".join(f"{shown}: {line}" for line in problems))
    return {k: v for k, v in data.items() if k != "$schema"}


def problems_of(data: Any, schema_name: str) -> Iterator[str]:
    """Each problem of a parsed file as ``ENTRY: PROBLEM``, ordered by entry, none twice."""
    seen: set[str] = set()
    found = []
    if not isinstance(data, dict):
        yield f"(top level): must be a JSON object, not {_json_type(data)}"
        return
    if data.get("$schema") != schema_reference(schema_name):
        found.append(f'(top level): "$schema" must name the file\'s schema: "{schema_reference(schema_name)}"')
    validator = _validator(schema_name)
    for error in sorted(validator.iter_errors(data), key=lambda e: [f"{p:09d}" if isinstance(p, int) else p
                                                                    for p in e.absolute_path]):
        problem = _problem(error, validator.schema)
        if problem:
            found.append(f"{where(data, list(error.absolute_path))}: {problem}")
    found += _duplicate_keys(data, [])
    found += _duplicate_ids(data, [])
    for line in found:
        if line not in seen:
            seen.add(line)
            yield line


# ------------------------------------------------------------------------------------------- entries

def where(data: Any, path: list[Any]) -> str:
    """A path in the file as a maintainer names it: ``cudnn.lengths.rules[dimension-arrays].count``
    (list items by their ``id``, packages by their ``name``, anything else by position)."""
    out, node = "", data
    for key in path:
        child = None
        if isinstance(key, int):
            if isinstance(node, list) and 0 <= key < len(node):
                child = node[key]
            out += f"[{_label(child, key)}]"
        else:
            if isinstance(node, dict):
                child = node.get(key)
            out += f".{key}" if out else str(key)
        node = child
    return out or "(top level)"


def _label(item: Any, index: int) -> str | int:
    """A list item as a path names it: a rule by its id, a package by its name (a rule's "name" is a
    pattern, not what the rule is called), anything else by its position."""
    if isinstance(item, dict):
        if isinstance(item.get("id"), str):
            return item["id"]
        if isinstance(item.get("name"), str) and "version" in item:
            return item["name"]
    return index


def _duplicate_keys(node: Any, path: list[Any]) -> Iterator[str]:
    if isinstance(node, dict):
        for key in getattr(node, "duplicates", ()):
            yield f"{where_path(path)}: key {key!r} is given more than once (JSON keeps only the last)"
        for key, value in node.items():
            yield from _duplicate_keys(value, path + [key])
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _duplicate_keys(value, path + [i])


def where_path(path: list[Any]) -> str:
    """:func:`where` without the data: positions stay positions."""
    return where(None, path)


def _duplicate_ids(node: Any, path: list[Any], root: Any = None) -> Iterator[str]:
    """Rule ids are unique within each list of rules (``rules``, ``lengths.rules``, ``nullable.rules``)."""
    root = node if root is None else root
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _duplicate_ids(value, path + [key], root)
    elif isinstance(node, list):
        ids = [item.get("id") for item in node if isinstance(item, dict) and isinstance(item.get("id"), str)]
        for rule_id, n in Counter(ids).items():
            if n > 1:
                positions = [i for i, item in enumerate(node) if isinstance(item, dict) and item.get("id") == rule_id]
                yield (f"{where(root, path)}[{rule_id}]: rule id {rule_id!r} is used {n} times in this list "
                       f"(positions {', '.join(map(str, positions))}); each rule needs its own")
        for i, value in enumerate(node):
            yield from _duplicate_ids(value, path + [i], root)


# ------------------------------------------------------------------------------------------ problems

def _json_type(value: Any) -> str:
    return {dict: "an object", _Object: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while isinstance(schema, dict) and "$ref" in schema and schema["$ref"].startswith("#/"):
        target: Any = root
        for part in schema["$ref"][2:].split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def known_keys(schema: dict[str, Any], root: dict[str, Any]) -> list[str]:
    """The keys an object schema names (through allOf and local $refs), in the schema's order."""
    schema = _resolve(schema, root)
    keys = list(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        keys += [k for k in known_keys(part, root) if k not in keys]
    return keys


_UNEXPECTED = re.compile(r"\((.*) (?:was|were) unexpected\)")


def _problem(error: jsonschema.ValidationError, root: dict[str, Any]) -> str | None:
    """One line saying what is wrong with the entry, in the file's terms; None for an error that only
    follows from another one (keys left unevaluated because the part of the schema naming them failed)."""
    kind, value, instance = error.validator, error.validator_value, error.instance
    in_key_names = "propertyNames" in error.relative_schema_path
    if kind in ("additionalProperties", "unevaluatedProperties"):
        m = _UNEXPECTED.search(error.message)
        extra = m.group(1) if m else ", ".join(map(repr, instance))
        valid = known_keys(error.schema, root)
        unknown = [k for k in instance if k not in valid] if isinstance(instance, dict) else []
        if kind == "unevaluatedProperties" and not unknown:
            return None
        extra = ", ".join(map(repr, unknown)) or extra
        return f"unknown key {extra} (valid keys here: {', '.join(valid) or 'none'})"
    if kind == "required":
        missing = [k for k in value if k not in instance]
        return "missing required key " + ", ".join(map(repr, missing))
    if kind == "dependentRequired":
        needs = [f"{k!r} needs {', '.join(repr(d) for d in deps if d not in instance)}"
                 for k, deps in value.items() if k in instance and any(d not in instance for d in deps)]
        return "; ".join(needs)
    if kind == "format" and value == "regex":
        try:
            re.compile(instance)
        except re.error as exc:
            return f"invalid regular expression {instance!r}: {exc}"
    if kind == "type":
        return f"must be {_article(value)}, not {_json_type(instance)} ({_short(instance)})"
    if kind == "enum":
        return f"{_short(instance)} is not one of: {', '.join(map(str, value))}"
    if kind == "const":
        return f"{_short(instance)} must be {_short(value)}"
    if kind == "pattern":
        what = {r"^[A-Za-z_][A-Za-z0-9_]*$": "a C identifier",
                r"^[a-z0-9][a-z0-9-]*$": "a rule id (lower-case letters, digits and hyphens)"}.get(value)
        subject = f"key {instance!r}" if in_key_names else repr(instance)
        return f"{subject} is not {what}" if what else f"{subject} does not match {value!r}"
    if kind in ("minItems", "minProperties") and value == 1:
        return "must not be empty"
    if kind == "uniqueItems":
        return f"lists an item twice: {_short(instance)}"
    if kind == "oneOf":
        options = [_resolve(s, root) for s in value]
        if all(set(s) == {"required"} for s in options):
            names = [k for s in options for k in s["required"]]
            given = [k for k in names if k in instance]
            return (f"needs exactly one of {', '.join(names)}"
                    + (f" (has {', '.join(given)})" if given else " (has none)"))
        return f"{_short(instance)} is none of the forms allowed here"
    return error.message


def _article(type_name: Any) -> str:
    if isinstance(type_name, list):
        return " or ".join(_article(t) for t in type_name)
    return {"object": "an object", "array": "a list", "string": "a string", "integer": "an integer",
            "boolean": "true or false", "number": "a number", "null": "null"}.get(type_name, str(type_name))
