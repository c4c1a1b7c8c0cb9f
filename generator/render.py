"""IR -> Python source for the generated module, through the jinja2 templates in templates/.

This module decides how each C type becomes a ctypes expression; the templates decide the layout.
Output is deterministic: header order, no paths, no timestamps.
"""
from __future__ import annotations

import ctypes
import keyword
import re
import struct
from dataclasses import dataclass, replace
from typing import Any

import jinja2

from generator import config as cfg
from generator import ir, lengths
from generator.classify import (OPTIONAL_HANDLE, Classification, created_handle, destroyed_handle,
                                 required_handles, unset_roles)


def py_name(name: str) -> str:
    """A C identifier that is a Python keyword gets a trailing underscore."""
    return name + "_" if keyword.iskeyword(name) or name in {"None", "True", "False"} else name


def docstring(text: str) -> str:
    text = text.replace("\\", "\\\\")
    body = text.rstrip('"')             # trailing quotes would merge with the closing triple quote
    return body.replace('"""', '\\"\\"\\"') + '\\"' * (len(text) - len(body))


@dataclass(frozen=True)
class Prose:
    """What docstrings take from the headers, as headers.json decides per library (``ship_comments``): the
    header's comments where the vendor's license lets us ship them; otherwise facts only (the prototype and
    what the generator derives) and a link into the vendor's online API reference (``api_reference``)."""
    ship: bool
    title: str = ""
    reference: dict[str, Any] | None = None

    @classmethod
    def of(cls, config: dict[str, Any]) -> "Prose":
        return cls(bool(config.get("ship_comments", False)), config.get("title", ""), config.get("api_reference"))

    def link(self, name: str, header: str) -> str:
        """The vendor's reference for a declaration of ``header``: its anchor on the header's page, else the
        reference's front page ("" without a reference)."""
        if not self.reference:
            return ""
        page = self.reference["pages"].get(header.rsplit("/", 1)[-1])
        if page is None:
            return self.reference["default"]
        return self.reference["url"].format(page=page, anchor=name.lower().replace("_", "-"))

    def tail(self, comment: str, name: str, header: str) -> list[str]:
        """The lines a docstring ends with: the header's comment, or the link to the vendor's reference."""
        if self.ship:
            return [comment] if comment else []
        link = self.link(name, header)
        return [f"Reference: {link}"] if link else []

    def type_doc(self, name: str, comment: str, header: str) -> str:
        """An enum's or struct's docstring."""
        if self.ship:
            return comment or name
        return "\n\n".join([f"{name} ({header})" if header else name] + self.tail(comment, name, header))


_SINCE = re.compile(r"\b[Ss]ince\s+(?:[A-Za-z]+\s+)?v?(\d+(?:\.\d+)+)")


def deprecation_facts(comment: str, functions: set[str] | dict[str, Any]) -> tuple[str, str]:
    """(release, replacement) from a header's ``@deprecated`` note: the version the deprecation started in and
    the declared function that replaces it ("" for what the note does not give)."""
    for line in comment.splitlines():
        if "@deprecated" in line:
            text = line.split("@deprecated", 1)[1]
            since = _SINCE.search(text)
            replacement = next((w for w in re.findall(r"[A-Za-z_]\w*", text) if w in functions), "")
            return (since.group(1) if since else "", replacement)
    return "", ""


@dataclass(frozen=True)
class RenderedParam:
    name: str
    argtype: str
    note: str
    annotation: str = "Any"
    convert: str = ""          # a statement the wrapper runs before the call (host arrays: length checks)


#: struct format letters that range-check a C integer type (by the IR's ctypes name)
STRUCT_CODES = {"c_int": "i", "c_int32": "i", "c_uint": "I", "c_uint32": "I", "c_int64": "q", "c_longlong": "q",
                "c_long": "q", "c_uint64": "Q", "c_ulonglong": "Q", "c_ulong": "Q", "c_size_t": "N",
                "c_ssize_t": "n", "c_int8": "b", "c_byte": "b", "c_uint8": "B", "c_ubyte": "B", "c_int16": "h",
                "c_short": "h", "c_uint16": "H", "c_ushort": "H"}


@dataclass(frozen=True)
class ValueCheck:
    """The integer and enum parameters of one function: one struct pack checks every range at once."""
    codes: str
    names: tuple[str, ...]
    enums: tuple[tuple[str, str], ...]       # (parameter, enum class) pairs that must not get another enum
    slow: str                                # the tuple the slow path gets: (index, value, code, enum or None)

    @property
    def spec(self) -> str:
        """The spec runtime.checks.values_ok takes: (letters, per value its enum class or None, packer)."""
        enum_of = dict(self.enums)
        classes = ", ".join(enum_of.get(n, "None") for n in self.names)
        return f"({self.codes.encode()!r}, ({classes},), _pack_{self.codes})"


@dataclass(frozen=True)
class RenderedFunction:
    name: str
    params: tuple[RenderedParam, ...]
    argtypes: str
    restype: str
    returns: str          # status | string | value | void
    doc: str
    deprecated: str | None
    result_annotation: str = "None"
    values: ValueCheck | None = None
    destroys: str = ""         # the handle a successful Destroy* frees: cleared, refused when NULL
    required: tuple[str, ...] = ()   # handles passed by value that are refused when None (NULL)
    creates: str = ""          # the output through which a Create* returns a new handle
    creates_unset: bool = False      # ... a handle that is unusable until a setter sets it (unset_handles)
    sets: str = ""             # the handle this setter sets
    needs_set: tuple[str, ...] = ()  # handles that must have been set before this call

    @property
    def assign(self) -> str:
        """What the wrapper assigns the foreign call's result to."""
        return {"status": "status = ", "void": ""}.get(self.returns, "result = ")


class TypeNames:
    """Maps IR types to ctypes expressions for one module."""

    def __init__(self, module: ir.Module):
        self.enums = {e.name: e for e in module.enums}
        self.handles = {h.name for h in module.handles}
        self.unset_types: frozenset[str] = frozenset()        # set by render() from the classification
        self.unset_setters = ""
        self.unset_partial = ""
        self.struct_names = {s.name for s in module.structs}
        self.functions = {f.name: f for f in module.functions}
        self.function_types = {c.name for c in module.callbacks if not c.pointer}   # typedef R name(...)
        self.converters: dict[str, str] = {}     # module-level name -> its definition
        self.size_tables: dict[str, str] = {}
        self.packers: set[str] = set()

    def converter(self, element: str | None, const: bool, nullable: bool, code: str | None,
                  cname: str = "") -> str:
        """The module-level name of the shared host-array converter for this element type."""
        if element is None:
            name = f"_void{'_c' if const else ''}{'_n' if nullable else ''}"
            self.converters[name] = f"_host_buffer({const}, {nullable}).convert"
            return name
        flat = re.sub(r"\W+", "_", (cname or element).replace("*", " ptr ")).strip("_")
        name = f"_arr_{flat}{'_c' if const else ''}{'_n' if nullable else ''}"
        definition = f"_host_array({element}, {const}, {nullable}, {code!r}, {cname!r}).convert"
        if self.converters.setdefault(name, definition) != definition:      # never one name for two checks
            raise ValueError(f"converter {name} would check both {self.converters[name]} and {definition}")
        return name

    def integer_code(self, t: ir.CType, byte_size: bool) -> str | None:
        if byte_size:
            return "N"
        if t.kind == "int":
            return STRUCT_CODES.get(t.name)
        if t.kind == "enum":
            return STRUCT_CODES.get(self.enum_ctype(t.name))
        return None

    def value(self, t: ir.CType) -> str:
        """A C type used by value (parameter, field, result)."""
        if t.kind in ("int", "float", "char", "bool"):
            return t.name
        if t.kind == "enum":
            return self.enum_ctype(t.name)
        if t.kind == "function" and not t.name:
            return self.function_type(t)
        if t.kind in ("handle", "struct", "union", "function"):
            return t.name
        if t.kind == "void":
            return "None"
        if t.kind == "pointer":
            return self.plain_pointer(t)
        if t.kind == "array":
            assert t.pointee is not None
            return f"({self.value(t.pointee)} * {t.length})"
        raise ValueError(f"no ctypes form for {t}")

    def function_type(self, t: ir.CType) -> str:
        """An untypedef'd function pointer, ``int (*fn)(int)``: an inline CFUNCTYPE."""
        if not t.signature:
            return "c_void_p"
        result, *args = t.signature
        parts = [self.value(result)] + [self.plain_pointer(a) if a.kind == "pointer" else self.value(a) for a in args]
        return f"CFUNCTYPE({', '.join(parts)})"

    def callback_type(self, c: ir.Callback) -> str:
        """A callback typedef's CFUNCTYPE. A pointer result is a ``c_void_p``: ctypes refuses any other
        pointer type as a Python callback's result (XLA_FFI_Handler returns XLA_FFI_Error*)."""
        result = "c_void_p" if c.result.kind == "pointer" else self.value(c.result)
        args = [self.plain_pointer(p.type) if p.type.kind == "pointer" else self.value(p.type) for p in c.params]
        return f"CFUNCTYPE({', '.join([result] + args)})"

    def enum_ctype(self, name: str) -> str:
        """C leaves an enum's underlying type to the compiler (unsigned int when no value is negative);
        every 32-bit value fits a c_int, which is what users pass (``byref(c_int())``)."""
        enum = self.enums.get(name)
        if enum is None:
            return "c_int"
        if enum.underlying in ("c_uint", "c_int") and all(-2**31 <= m.value < 2**31 for m in enum.members):
            return "c_int"
        return enum.underlying

    def plain_pointer(self, t: ir.CType) -> str:
        """A pointer in a struct field or callback: plain ctypes, no kind checks."""
        pointee = t.pointee
        assert pointee is not None
        if pointee.kind == "void":
            return "c_void_p"
        if pointee.kind == "char":
            return "c_char_p"
        if pointee.kind == "struct" and pointee.name not in self.struct_names:
            return "c_void_p"
        if pointee.kind == "function" and pointee.name in self.function_types:
            return pointee.name                     # name* for typedef R name(...): the CFUNCTYPE itself
        if pointee.kind == "function" and pointee.name:
            return f"POINTER({pointee.name})"        # a pointer to a callback typedef (itself a pointer)
        if pointee.kind == "function":
            return self.value(pointee)              # a function pointer is the CFUNCTYPE itself
        return f"POINTER({self.value(pointee)})"

    def element(self, t: ir.CType) -> str:
        """The element type of a typed host pointer."""
        if t.kind == "pointer":
            return self.plain_pointer(t)
        if t.kind == "struct" and t.name not in self.struct_names:
            return "c_void_p"
        return self.value(t)

    def annotation(self, t: ir.CType, argtype: str) -> str:
        """The Python type a stub gives a parameter with this C type and argtype."""
        by_argtype = {"DevicePointer": "DevicePointerLike", "HostPointer": "HostPointerLike",
                      "ConstHostPointer": "HostPointerLike", "EitherPointer": "EitherPointerLike",
                      "HostString": "StringLike", "ByteSize": "int"}
        if argtype in by_argtype:
            return by_argtype[argtype]
        if argtype.startswith("host_array("):
            return "HostArrayLike" if ", True)" in argtype else "HostPointerLike"
        if t.kind in ("int", "enum"):
            return "int"
        if t.kind == "float":
            return "float"
        if t.kind == "bool":
            return "bool"
        if t.kind == "char":
            return "bytes"
        if t.kind == "handle":
            return f"{t.name} | None"
        if t.kind in ("struct", "union"):
            return t.name
        if t.kind == "function":
            return f"{t.name} | CallbackLike"
        return "Any"

    def result_annotation(self, t: ir.CType, returns: str) -> str:
        if returns in ("status", "void"):
            return "None"
        if returns == "string":
            return "str | None"
        if t.kind == "pointer":
            return "int | None"
        return {"int": "int", "enum": "int", "float": "float", "bool": "bool"}.get(t.kind, "Any")

    def host_param(self, p: ir.Param, fn: ir.Function, index: int) -> tuple[str, str, str, str]:
        """A host array or buffer: (argtype, note, annotation, the conversion statement)."""
        length = p.length
        assert length is not None and p.type.pointee is not None
        pointee = p.type.pointee
        const = bool(pointee.const)
        if pointee.kind == "void":
            conv, argtype, unit = self.converter(None, const, p.nullable, None), "c_void_p", "bytes"
            annotation = "HostPointerLike"
        else:
            element = self.element(pointee)
            if pointee.kind == "function" and pointee.name:
                element = pointee.name                      # a callback typedef* (cudnnCallback_t *fptr)
            code = STRUCT_CODES.get(element) if pointee.kind in ("int", "enum") else None
            if pointee.kind == "enum":
                code = STRUCT_CODES.get(self.enum_ctype(pointee.name))
            cname = pointee.spelling.replace("const ", "").strip() or element
            conv = self.converter(element, const, p.nullable, code, cname)
            argtype, unit = "c_void_p", "elements"          # the converter checks the element type
            annotation = "HostArrayLike" if const else "HostPointerLike"
        count = self.count_expression(length, fn)
        name = py_name(p.name)
        source = name
        if length.kind == "sized" and length.handles:        # elements that are handles: typed and live
            table = f"_HANDLES_{_selector_enum(length, fn)}" + ("" if const else "_out")
            self.size_tables[table] = "{" + ", ".join(f"{member}: ({handle}, {handle!r})"
                                                      for member, handle in length.handles) + "}"
            source = f"_handle_values({name}, {py_name(length.selector)}, {table}, {index})"
        if length.kind == "sized" and length.numbers:        # elements that are numbers: of the right type
            enum = _selector_enum(length, fn)
            table, declared = f"_NUMBERS_{enum}", {m.name for m in self.enums[enum].members} if enum in self.enums else set()
            self.size_tables[table] = "{" + ", ".join(f"{member}: {number!r}" for member, number in length.numbers
                                                      if member in declared) + "}"   # what this header has
            source = f"_element_values({source}, {py_name(length.selector)}, {table}, {index})"
        kind = "input" if const else "output"
        note = f"host {kind}, {length.describe()}" + (f" {unit}" if length.kind == "fixed" else "") \
            + (", may be None" if p.nullable else "")
        return argtype, note, annotation, f"{name} = {conv}({source}, {count}, {index})"

    def count_expression(self, length: ir.Length, fn: ir.Function) -> str:
        """The Python expression for how many elements (bytes for void*) the library needs."""
        if length.kind == "fixed":
            return length.value
        if length.kind == "unchecked":
            return "None"
        if length.kind == "count":
            count = py_name(length.value)
            if length.most:
                count = f"_at_most({count}, {length.most}, {fn.name!r}, {length.value!r}, {length.most_name!r})"
            count += f" - {length.minus}" if length.minus else ""
            return f"max({count}, {length.least})" if length.least else count
        if length.kind == "sized":
            enum = _selector_enum(length, fn)
            table = f"_SIZES_{enum}"
            declared = {m.name for m in self.enums[enum].members} if enum in self.enums else set()
            self.size_tables[table] = "{" + ", ".join(f"{member}: {size}" for member, size in length.sizes
                                                      if member in declared) + "}"   # what this header has
            return (f"_sized_count({table}, {py_name(length.selector)}, {py_name(length.value)}, "
                    f"{fn.name!r}, {length.selector!r})")
        if length.kind == "query":
            query = self.functions[length.value]
            out = query.params[-1].type.pointee
            assert out is not None
            args = "".join(f"{py_name(a)}, " for a in length.args).rstrip(" ")
            return f"_query_count({length.value}, ({args}), {self.value(out)})"
        raise ValueError(f"unknown length source {length}")

    def range_note(self, t: ir.CType) -> str:
        """What the wrapper's range check accepts for an integer or enum value ("" for other values)."""
        code = self.integer_code(t, False)
        if code is None:
            return ""
        bits = 8 * struct.calcsize(code)
        low, high = (-2 ** (bits - 1), 2 ** (bits - 1) - 1) if code.islower() else (0, 2 ** bits - 1)
        if t.kind == "enum":
            return f"enum {t.name}: a member, or an int from {low} to {high}"
        return f"integer ({t.spelling.replace('const ', '')}): {low} to {high}"

    def param(self, p: ir.Param) -> tuple[str, str]:
        """(argtype expression, note for the docstring)."""
        t = p.type
        if t.kind != "pointer":
            if p.byte_size:
                return "c_size_t", "byte count (size_t, non-negative)"
            if t.kind == "handle":
                return t.name, f"handle {t.name}, " + ("may be None" if p.nullable else "refused when None")
            return self.value(t), self.range_note(t)
        pointee = t.pointee
        assert pointee is not None
        if p.kind == "device":
            return "DevicePointer", "device memory"
        if p.kind == "either":
            return "EitherPointer", "host or device memory"
        if pointee.kind == "void":
            return ("ConstHostPointer" if pointee.const else "HostPointer"), "host memory"
        if pointee.kind == "char" and pointee.const:
            return "HostString", "str or bytes"
        if pointee.kind == "function" and not pointee.name:
            return self.value(pointee), "callback"
        raise ValueError(f"host pointer {p.name} has no length source")


def _result(t: ir.CType, status_type: str, names: TypeNames) -> tuple[str, str]:
    if t.kind == "enum" and t.name == status_type:
        return "c_int", "status"
    if t.kind == "void":
        return "None", "void"
    if t.kind == "pointer" and t.pointee is not None and t.pointee.kind == "char":
        return "c_char_p", "string"
    if t.kind == "pointer":
        return "c_void_p", "value"
    return names.value(t), "value"


def _value_check(fn: ir.Function, names: TypeNames) -> ValueCheck | None:
    codes, checked, enums, slow = "", [], [], []
    for index, p in enumerate(fn.params):
        code = names.integer_code(p.type, p.byte_size) if p.type.kind != "pointer" else None
        if code is None:
            continue
        name = py_name(p.name)
        enum = p.type.name if p.type.kind == "enum" and p.type.name in names.enums else None
        codes += code
        checked.append(name)
        if enum:
            enums.append((name, enum))
        slow.append(f"({index}, {name}, {code!r}, {enum or 'None'})")
    if not checked:
        return None
    names.packers.add(codes)
    return ValueCheck(codes, tuple(checked), tuple(enums), "(" + ", ".join(slow) + ",)")


def render_function(fn: ir.Function, names: TypeNames, status_type: str, beta_note: str,
                    error_class: str, prose: Prose = Prose(True)) -> RenderedFunction:
    params = []
    for index, p in enumerate(fn.params):
        if lengths.needs_length(p) or p.length is not None:
            if p.length is None:        # only a non-strict classification (diffs of other versions) gets here
                p = replace(p, length=ir.Length("unchecked", reason="not classified"))
            argtype, note, annotation, convert = names.host_param(p, fn, index)
            params.append(RenderedParam(py_name(p.name), argtype, note, annotation, convert))
            continue
        argtype, note = names.param(p)
        convert = ""
        if p.type.kind == "bool":               # ctypes' c_bool takes any object by its truth value
            convert = f"{py_name(p.name)} = _flag({py_name(p.name)}, {index})"
        if p.type.kind == "function":           # a callback the library keeps: typed, and held while it may call
            owner = next((py_name(q.name) for q in fn.params if q.type.kind == "handle"), "None")
            name = py_name(p.name)
            convert = (f"{name} = _callback({argtype}, {name}, {index}, {(fn.name, p.name)!r}, {owner})")
        params.append(RenderedParam(py_name(p.name), argtype, note, names.annotation(p.type, argtype), convert))
    restype, returns = _result(fn.result, status_type, names)
    lines = [fn.prototype]
    flags = []
    since, replacement = deprecation_facts(fn.comment, names.functions) if fn.deprecated else ("", "")
    if fn.deprecated:
        flags.append("Deprecated by the vendor.")
        flags += [f"Deprecated since: {prose.title} {since}.".replace("  ", " ")] if since else []
        flags += [f"Replacement: {replacement}."] if replacement else []
    if fn.beta:
        flags.append(beta_note)
    if flags:
        lines += ["", " ".join(flags)]
    kinds = [f"    {p.name}: {p.note}" for p in params if p.note]
    if kinds:
        lines += ["", "Checked parameters:"] + kinds
    optional = [p.name for p in fn.params if p.rule == OPTIONAL_HANDLE]
    if optional:
        lines += ["", f"Handles that may be None (NULL), as the vendor documents: {', '.join(optional)}."]
    if returns == "status":
        lines += ["", f"Raises {error_class} when the returned status is not success."]
    tail = prose.tail(fn.comment, fn.name, fn.header)
    if tail:
        lines += [""] + tail
    argtypes = "(" + "".join(f"{p.argtype}, " for p in params).rstrip(" ") + ")" if params else "()"
    deprecated = None
    if fn.deprecated and prose.ship:
        deprecated = _deprecation_text(fn.comment)
    elif fn.deprecated:
        facts = [f"since {prose.title} {since}".replace("  ", " ")] if since else []
        facts += [f"use {replacement}"] if replacement else [f"see {prose.link(fn.name, fn.header)}"]
        deprecated = "; ".join(facts)
    return RenderedFunction(fn.name, tuple(params), argtypes, restype, returns, docstring("\n".join(lines)),
                            deprecated, names.result_annotation(fn.result, returns), _value_check(fn, names),
                            py_name(destroyed_handle(fn)) if destroyed_handle(fn) else "",
                            tuple(py_name(name) for name in required_handles(fn)),
                            py_name(created_handle(fn)) if created_handle(fn) else "",
                            *_unset_roles(fn, names))


#: what a wrapper's body calls besides its parameters and its internals (whose names all start with an underscore)
_WRAPPER_GLOBALS = frozenset({"max", "bool", "Exception", "CFUNCTYPE", "POINTER"}
                             | {n for n in dir(ctypes) if n.startswith("c_")})


def wrapper_globals(module: ir.Module) -> frozenset[str]:
    """Module-level names a wrapper's body may read: builtins, ctypes types and the module's declarations
    (a count query it calls, the enum classes and callback types its checks name)."""
    declared = [f.name for f in module.functions] + [e.name for e in module.enums] + [c.name for c in module.callbacks]
    return _WRAPPER_GLOBALS | {s.name for s in module.structs} | {h.name for h in module.handles} | set(declared)


def safe_params(fn: ir.Function, taken: frozenset[str]) -> ir.Function:
    """``fn`` with every parameter that would shadow a name its wrapper reads renamed, with a trailing underscore
    as keywords get: C allows a parameter ``_lib`` or ``max``, and the wrapper would call the argument. The
    wrapper's internals all start with an underscore and none ends with one, so ``_lib_`` is safe."""
    names = {p.name for p in fn.params}
    renamed: dict[str, str] = {}
    for p in fn.params:
        if p.name.startswith("_") or p.name in taken:
            new = p.name + "_"
            while new in names:
                new += "_"
            renamed[p.name] = new
            names.add(new)
    if not renamed:
        return fn

    def rename(name: str) -> str:
        return renamed.get(name, name)

    def length(n: ir.Length | None) -> ir.Length | None:
        if n is None:
            return None
        value = rename(n.value) if n.kind in ("count", "sized") else n.value
        return replace(n, value=value, selector=rename(n.selector), args=tuple(map(rename, n.args)))

    return replace(fn, params=tuple(replace(p, name=rename(p.name), length=length(p.length)) for p in fn.params))


def _unset_roles(fn: ir.Function, names: TypeNames) -> tuple[bool, str, tuple[str, ...]]:
    creates, sets, needs = unset_roles(fn, names.unset_types, names.unset_setters, names.unset_partial)
    return creates, py_name(sets) if sets else "", tuple(py_name(n) for n in needs)


def _selector_enum(length: ir.Length, fn: ir.Function) -> str:
    """The enum type of a sized length's selector parameter (a backend attribute type)."""
    return next(q.type.name for q in fn.params if q.name == length.selector)


def _deprecation_text(comment: str) -> str:
    """What the header's ``@deprecated`` note says, or a pointer to the vendor's documentation."""
    for line in comment.splitlines():
        if "@deprecated" in line:
            text = line.split("@deprecated", 1)[1].split("@since", 1)[0].strip(" .")
            if text:
                return text
    return "see the vendor's documentation for its replacement"


def _enum_members(enum: ir.Enum) -> list[ir.Enumerator]:
    """Current names before deprecated ones, so that an aliased value prints by its current name."""
    return [m for m in enum.members if not m.deprecated] + [m for m in enum.members if m.deprecated]


def _fields(struct: ir.Struct, names: TypeNames) -> list[str]:
    out = []
    for f in struct.fields:
        ctype = names.value(f.type) if f.type.kind != "pointer" else names.plain_pointer(f.type)
        if f.bit_width and ctype == "c_char":       # ctypes refuses c_char bit fields
            ctype = "c_byte"
        if f.bit_width:
            out.append(f"({f.name!r}, {ctype}, {f.bit_width})")
        else:
            out.append(f"({f.name!r}, {ctype})")
    return out


def _stub_fields(struct: ir.Struct, module: ir.Module, names: TypeNames) -> list[tuple[str, str]]:
    """(name, annotation) of every field reachable on the ctypes class, anonymous members flattened."""
    by_name = {s.name: s for s in module.structs}
    out: list[tuple[str, str]] = []
    for f in struct.fields:
        if f.anonymous and f.type.name in by_name:
            out += _stub_fields(by_name[f.type.name], module, names)
        elif f.type.kind in ("pointer", "array"):
            out.append((f.name, "Any"))
        else:
            out.append((f.name, names.annotation(f.type, names.value(f.type))))
    return out


def _handle_targets(module: ir.Module, taken: set[str]) -> dict[str, str]:
    targets: dict[str, str] = {}
    for h in module.handles:
        name = h.tag if h.tag and h.tag not in taken else f"_{h.name}_object"
        taken.add(name)
        targets[h.name] = name
    return targets


def _describe_step(step: tuple) -> str:
    if step[0] == "site-packages":
        return f"{step[1]} in site-packages"
    if step[0] == "env-dir":
        return f"${step[1]}/{step[2]}"
    if step[0] == "dir":
        return step[1]
    return "the system loader"


def render(module: ir.Module, classification: Classification, config: dict[str, Any]) -> str:
    """The generated module's source."""
    return _render_template("module.py.j2", module, classification, config)


def render_stub(module: ir.Module, classification: Classification, config: dict[str, Any]) -> str:
    """The type stub (.pyi) beside the generated module, so editors and mypy know every argument."""
    return _render_template("module.pyi.j2", module, classification, config)


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(cfg.GENERATOR_DIR / "templates"),
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                              undefined=jinja2.StrictUndefined)


def _render_template(name: str, module: ir.Module, classification: Classification, config: dict[str, Any]) -> str:
    names = TypeNames(module)
    names.unset_types, names.unset_setters = classification.unset_types, classification.unset_setters
    names.unset_partial = classification.unset_partial
    template = _environment().get_template(name)
    taken = {e.name for e in module.enums} | {s.name for s in module.structs} | {h.name for h in module.handles}
    beta_note = f"Beta API ({config.get('beta_macro', 'beta')}): may change between releases."
    prose = Prose.of(config)
    reserved = wrapper_globals(module)
    functions = [render_function(safe_params(fn, reserved), names, config.get("status_type", ""), beta_note,
                                 config.get("error_class", ""),
                                 prose)
                 for fn in classification.functions]
    notice = (cfg.REPO_ROOT / config["license_file"]).read_text() if config.get("license_file") else ""
    version = tuple(int(x) for x in module.version.split("."))
    library_search = [tuple(step) for step in config.get("library_search", [["system"]])]
    pins = {p["name"]: p["version"] for p in config.get("packages", [])}
    text = template.render(
        module=module, config=config, version=version, functions=functions, license_notice=notice,
        type_docs={**{e.name: prose.type_doc(e.name, e.comment, e.header) for e in module.enums},
                   **{s.name: prose.type_doc(s.name, s.comment, s.header) for s in module.structs}},
        reference=(prose.reference or {}).get("default", "") if not prose.ship else "",
        enums=[(e, _enum_members(e)) for e in module.enums if e.name],
        anonymous_enums=[e for e in module.enums if not e.name],
        structs=[(s, _fields(s, names)) for s in module.structs],
        stub_fields={s.name: _stub_fields(s, module, names) for s in module.structs},
        handles=module.handles, handle_targets=_handle_targets(module, taken),
        foreign_handles={h.name for h in module.handles if h.foreign},
        callbacks=[(c, names.callback_type(c)) for c in module.callbacks],
        converters=sorted(names.converters.items()), size_tables=sorted(names.size_tables.items()),
        packers=sorted(names.packers),
        library_search=library_search, docstring=docstring, repr=repr, tuple=tuple,
        types_only=bool(config.get("types_only")), source_pins=pins,
        sources=", ".join(f"{name} {version}" for name, version in pins.items()),
        search_text=", ".join(_describe_step(step) for step in library_search),
    )
    return text


def render_backend(module: ir.Module, model: Any, config: dict[str, Any]) -> str:
    """The typed backend-descriptor module (generator.backend's model) beside the raw module."""

    def ctype(a: Any) -> str:
        return a.ctype if a.ctype.startswith("c_") else f"_api.{a.ctype}"

    return _environment().get_template("backend.py.j2").render(module=module, model=model, config=config, repr=repr,
                                                    ctype=ctype)
