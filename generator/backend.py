"""Typed backend descriptors: the ``backend_attributes`` section of pointer_overrides.json -> a model to render.

cuDNN's graph API sets and gets every attribute through one untyped pair of calls
(``cudnnBackendSetAttribute``/``GetAttribute``: a name, an element type, a count, a void*). The section
says, for every member of the attribute-name enum, which descriptor type it belongs to, its element type
and its count, so that the generated module can offer one class per descriptor type with its attributes
by name. Like pointer kinds, generation FAILS (listing them) on an attribute nobody classified, on an
entry the headers no longer declare, and on an entry that names a type, a descriptor or a count that
does not exist. Handle-valued element types come from the ``handle_values`` section (its ``inputs``).
"""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from typing import Any

from generator import ir

COUNTS = ("scalar", "array")
#: ctypes names an element type may map to (besides the headers' enums and structs)
PRIMITIVES = {"c_int64": 8, "c_int32": 4, "c_float": 4, "c_double": 8, "c_bool": 1, "c_char": 1, "c_void_p": 8}


@dataclass(frozen=True)
class Attribute:
    name: str              # CUDNN_ATTR_TENSOR_DIMENSIONS
    py_name: str           # dimensions
    type: str              # CUDNN_TYPE_INT64
    ctype: str             # c_int64, an enum class, a struct, or a handle type
    kind: str              # int, float, bool, char, pointer, enum, struct, handle, descriptor
    count: str | int       # "scalar", "array" or a fixed number of elements
    elements: tuple[str, ...] = ()   # descriptor-valued: the classes it takes
    settable: bool = True
    library_checks_type: bool = True
    also: tuple[str, ...] = ()       # other element types the library accepts too


@dataclass(frozen=True)
class Descriptor:
    name: str              # CUDNN_BACKEND_TENSOR_DESCRIPTOR
    cls: str               # TensorDescriptor
    prefix: str            # CUDNN_ATTR_TENSOR_
    attributes: tuple[Attribute, ...]
    needs: tuple[str, ...] = ()   # user-space libraries cuDNN loads for this type (checked on creation)


@dataclass(frozen=True)
class Model:
    type_enum: str
    name_enum: str
    descriptor_enum: str
    descriptors: tuple[Descriptor, ...]


def _kind(ctype: str, module: ir.Module, handles: set[str]) -> str:
    if ctype in handles:
        return "handle"
    if ctype in PRIMITIVES:
        return {"c_int64": "int", "c_int32": "int", "c_float": "float", "c_double": "float", "c_bool": "bool",
                "c_char": "char", "c_void_p": "pointer"}[ctype]
    if any(e.name == ctype for e in module.enums):
        return "enum"
    return "struct"


def _class_problems(desc_section: dict[str, dict[str, Any]]) -> list[str]:
    """Class names that cannot be classes of one module: a Python keyword, or one name for two descriptor types
    (the second would silently replace the first)."""
    problems = [f"backend_attributes.descriptors.{d}: class {e['class']!r} is a Python keyword"
                for d, e in desc_section.items() if keyword.iskeyword(e["class"])]
    owners: dict[str, list[str]] = {}
    for d, e in desc_section.items():
        owners.setdefault(e["class"], []).append(d)
    return problems + [f"backend_attributes.descriptors: class {cls!r} is given to {len(ds)} descriptor types "
                       f"({', '.join(ds)})" for cls, ds in owners.items() if len(ds) > 1]


def build(module: ir.Module, overrides: dict[str, Any], problems: list[str],
          sonames: frozenset[str] | None = None) -> Model | None:
    """The model of the section, or None when the overrides have none; problems are appended. ``sonames``:
    the libraries headers.json knows (what a descriptor's ``needs`` may name); None checks nothing."""
    section = overrides.get("backend_attributes")
    if not section:
        return None
    enums = {e.name: [m.name for m in e.members] for e in module.enums}
    structs = {s.name for s in module.structs}
    declared_handles = {h.name for h in module.handles}
    type_enum, name_enum, desc_enum = section["type_enum"], section["name_enum"], section["descriptor_enum"]
    for enum in (type_enum, name_enum, desc_enum):
        if enum not in enums:
            problems.append(f"backend_attributes: {enum} is no enum of the headers")
            return None
    sizes = overrides.get("element_sizes", {}).get(type_enum, {})
    handle_types: dict[str, str] = overrides.get("handle_values", {}).get("inputs", {}).get(type_enum, {})
    element_types: dict[str, str] = dict(section.get("element_types", {}))

    # element types: every member of the type enum maps to a C type of the right size
    ctypes_of: dict[str, str] = {}
    for member in enums[type_enum]:
        ctype = handle_types.get(member) or element_types.get(member)
        if ctype is None:
            problems.append(f"backend_attributes.element_types: {type_enum} member {member} has no C type "
                            f"(nor a handle type in handle_values.inputs)")
            continue
        if member in handle_types and member in element_types:
            problems.append(f"backend_attributes.element_types: {member} is a handle (handle_values); drop it here")
        known = ctype in PRIMITIVES or ctype in enums or ctype in structs or ctype in declared_handles
        if not known:
            problems.append(f"backend_attributes.element_types: {member} -> {ctype} is no type of the headers")
        elif ctype in PRIMITIVES and sizes.get(member) not in (None, PRIMITIVES[ctype]):
            problems.append(f"backend_attributes.element_types: {member} -> {ctype} is {PRIMITIVES[ctype]} bytes, "
                            f"element_sizes says {sizes.get(member)}")
        ctypes_of[member] = ctype
    problems += [f"stale backend_attributes.element_types entry: {m} is no member of {type_enum}"
                 for m in sorted(set(element_types) - set(enums[type_enum]))]

    # descriptor classes
    desc_section: dict[str, dict[str, Any]] = section.get("descriptors", {})
    problems += [f"backend_attributes.descriptors: {d} (a {desc_enum} member) has no entry"
                 for d in enums[desc_enum] if d not in desc_section]
    problems += [f"stale backend_attributes.descriptors entry: {d} is no member of {desc_enum}"
                 for d in sorted(set(desc_section) - set(enums[desc_enum]))]
    problems += _class_problems(desc_section)
    if section.get("descriptor_handle", "") not in declared_handles:
        problems.append(f"backend_attributes.descriptor_handle: {section.get('descriptor_handle')!r} is not a "
                        f"handle the headers declare")
    problems += [f"backend_attributes.descriptors.{d}.needs: {lib!r} is no library headers.json names "
                 f"(sonames, deviceless)" for d, e in desc_section.items() for lib in e.get("needs", ())
                 if sonames is not None and lib not in sonames]
    groups: dict[str, str] = section.get("groups", {})
    classes = {d: e["class"] for d, e in desc_section.items()}

    def elements(value: Any, where: str) -> tuple[str, ...]:
        if value in groups:
            found = tuple(sorted(classes[d] for d in desc_section if re.fullmatch(groups[value], d)))
            if not found:
                problems.append(f"{where}: group {value!r} matches no descriptor")
            return found
        if value not in classes:
            problems.append(f"{where}: element {value!r} is neither a descriptor type nor a group")
            return ()
        return (classes[value],)

    # attributes
    attr_section: dict[str, dict[str, Any]] = section.get("attributes", {})
    problems += [f"unclassified backend attribute: {a} (no entry in backend_attributes.attributes)"
                 for a in enums[name_enum] if a not in attr_section]
    problems += [f"stale backend_attributes.attributes entry: {a} is no member of {name_enum}"
                 for a in sorted(set(attr_section) - set(enums[name_enum]))]
    per_desc: dict[str, list[Attribute]] = {d: [] for d in desc_section}
    for name in enums[name_enum]:
        entry = attr_section.get(name)
        if entry is None:
            continue
        where = f"backend_attributes.attributes.{name}"
        desc, typ, count = entry.get("descriptor"), entry.get("type"), entry.get("count")
        if desc not in desc_section:
            problems.append(f"{where}: descriptor {desc!r} has no entry in backend_attributes.descriptors")
            continue
        prefix = desc_section[desc]["prefix"]
        if not name.startswith(prefix):
            problems.append(f"{where}: does not start with its descriptor's prefix {prefix}")
            continue
        if typ not in ctypes_of:
            problems.append(f"{where}: type {typ!r} is no member of {type_enum}")
            continue
        if count not in COUNTS and not (isinstance(count, int) and count > 0):
            problems.append(f"{where}: count {count!r} is not one of {COUNTS} or a positive number")
            continue
        also = tuple(entry.get("also", ()))
        problems += [f"{where}: also {t!r} is no member of {type_enum}" for t in also if t not in ctypes_of]
        ctype = ctypes_of[typ]
        kind = _kind(ctype, module, declared_handles)
        elems: tuple[str, ...] = ()
        if ctype == handle_types.get(typ) and "element" in entry:
            kind = "descriptor"
            elems = elements(entry["element"], where)
        elif "element" in entry:
            problems.append(f"{where}: 'element' is only for handle-valued types")
        elif typ in handle_types and ctype == section.get("descriptor_handle"):
            problems.append(f"{where}: a descriptor-valued attribute needs 'element' (a descriptor type or group)")
        py = name[len(prefix):].lower()
        per_desc[desc].append(Attribute(name, py, typ, ctype, kind, count, elems,
                                        settable=entry.get("access", "set") == "set",
                                        library_checks_type=entry.get("library_checks_type", True), also=also))
        if entry.get("access", "set") not in ("set", "get"):
            problems.append(f"{where}: access {entry.get('access')!r} is not 'set' or 'get'")
    descriptors = tuple(Descriptor(d, e["class"], e["prefix"], tuple(per_desc[d]), tuple(e.get("needs", ())))
                        for d, e in desc_section.items() if d in enums[desc_enum])
    return Model(type_enum, name_enum, desc_enum, tuple(sorted(descriptors, key=lambda x: enums[desc_enum].index(x.name))))
