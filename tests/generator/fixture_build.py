"""Building generated modules from the C header fixtures in ``fixtures/``, for the generator's tests.

Everything here is real: libclang parses the headers, the generator classifies and renders them, the
rendered text is imported as a module, and a C compiler builds the fixture library it calls. The
layout and value checks (:func:`layout_problems`, :func:`enum_problems`, :func:`c_values`) take any
header set and generated module, so a later header can use them unchanged.
"""
from __future__ import annotations

import ctypes
import fnmatch
import importlib.util
import itertools
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Iterator

from clang import cindex
from clang.cindex import CursorKind, TypeKind

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT, ROOT / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from generator import classify, ir, parse, render  # noqa: E402
from generator.config import HeaderSet  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LIBRARY_ENV = "DNNBIND_FIXTURE_LIBRARY"


def fixture_config(entry: str = "fixture.h", **changes: Any) -> dict[str, Any]:
    """A headers.json-style entry for a fixture library (every key the template reads is present)."""
    config: dict[str, Any] = {
        "title": "Fixture",
        "entry": entry,
        "language": "c",
        "defines": ["FX_BETA_API=1"],
        "beta_macro": "FX_BETA_API",
        "keep": ["fixture*.h", entry],
        "version_macros": ["FIXTURE_MAJOR", "FIXTURE_MINOR", "FIXTURE_PATCHLEVEL"],
        "sonames": ["libfixture.so.9"],
        "status_type": "fxStatus_t",
        "success": "FX_STATUS_SUCCESS",
        "error_string": "fxGetErrorString",
        "last_error": None,
        "version_function": "fxGetVersion",
        "version_reader": "cudnn",
        "module": "fixture_generated.py",
        "library_env": LIBRARY_ENV,
        "library_search": [["system"]],
        "install_hint": "Build the fixture library (tests/generator/fixtures/fixture.c).",
        "error_class": "CudnnError",
        "ship_comments": True,
    }
    config.update(changes)
    return config


TYPED = ["int", "float", "char", "bool", "enum", "handle", "struct", "union", "pointer", "function"]


def fixture_overrides(**changes: Any) -> dict[str, Any]:
    """A pointer_overrides.json-style entry: rules, one exception, the byte-size pattern."""
    overrides: dict[str, Any] = {
        "rules": [
            {"id": "scaling-factors", "kind": "host", "pointee": ["void"], "name": "alpha|beta"},
            {"id": "tensor-data", "kind": "device", "pointee": ["void"], "name": "x|y|workSpace"},
            {"id": "user-data", "kind": "either", "pointee": ["void"], "name": "userData"},
            {"id": "host-buffer", "kind": "host", "pointee": ["void"], "name": "hostBuffer"},
            {"id": "typed-host", "kind": "host",
             "pointee": ["int", "float", "char", "bool", "enum", "handle", "struct", "union", "pointer",
                         "function"]},
        ],
        "exceptions": {"fxExceptionAddress": {"buffer": "device"}},
        "byte_sizes": r"\w*SizeInBytes|workSpaceSize",
        "lengths": {"rules": [
            {"id": "counted-arrays", "pointee": ["int"], "name": r"\w*A|values", "count": "nbDims|nbValues"},
            {"id": "message-buffer", "pointee": ["char"], "name": "message", "count": "max_size"},
            {"id": "host-buffer", "pointee": ["void"], "name": "hostBuffer", "count": "count"},
            {"id": "scaling-factors", "pointee": ["void"], "name": "alpha|beta", "fixed": 4},
            {"id": "single-values", "pointee": TYPED, "declared": "pointer", "fixed": 1},
        ]},
        "nullable": {"rules": [{"id": "outputs-required", "nullable": False, "const": False,
                                "pointee": TYPED + ["void"]}]},
    }
    overrides.update(changes)
    return overrides


def header_set(entry: str, directory: Path = FIXTURES) -> HeaderSet:
    """The fixture headers as the generator's parse() takes them."""
    return HeaderSet("fixture", (directory,), directory / entry, "tests")


def parse_fixture(entry: str, config: dict[str, Any] | None = None, directory: Path = FIXTURES) -> ir.Module:
    """libclang -> IR for one fixture header."""
    return parse.parse(header_set(entry, directory), config or fixture_config(entry))


@dataclass
class Built:
    """One fixture run through parse, classify and render."""
    headers: HeaderSet
    config: dict[str, Any]
    module: ir.Module
    classification: classify.Classification
    text: str


def build(entry: str = "fixture.h", config: dict[str, Any] | None = None,
          overrides: dict[str, Any] | None = None, directory: Path = FIXTURES) -> Built:
    """Parse, classify and render a fixture header with an explicit config and overrides."""
    config = config or fixture_config(entry)
    headers = header_set(entry, directory)
    module = parse.parse(headers, config)
    classification = classify.classify(module, overrides if overrides is not None else fixture_overrides())
    return Built(headers, config, module, classification, render.render(module, classification, config))


_counter = itertools.count()


def import_text(text: str, directory: Path, stem: str = "fixture_generated") -> ModuleType:
    """Write a rendered module to ``directory`` and import it under a fresh name (a fresh Library too)."""
    name = f"{stem}_{next(_counter)}"
    path = directory / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


# -- C compiler ------------------------------------------------------------------------------------
def c_compiler() -> str | None:
    """The C compiler to build fixtures with, or None when the machine has none."""
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def compile_shared(sources: Iterable[Path], output: Path, include_dirs: Iterable[Path] = (FIXTURES,),
                   defines: Iterable[str] = ()) -> Path:
    """``cc -shared -fPIC -o output sources``; raises with the compiler's output on failure."""
    compiler = c_compiler()
    if compiler is None:
        raise FileNotFoundError("no C compiler (cc, gcc or clang) on PATH")
    command = [compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Wno-deprecated-declarations",
               *(f"-I{d}" for d in include_dirs), *(f"-D{d}" for d in defines), "-o", str(output),
               *map(str, sources)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
    return output


def c_values(headers: HeaderSet, names: Iterable[str], workdir: Path,
             defines: Iterable[str] = ()) -> dict[str, int | float]:
    """What the C compiler itself makes of each name (a macro or enumerator) after including the header.

    Each value is printed with its C type's signedness (``_Generic``), so ``1U << 31`` and ``~0U`` come
    back as C computes them.
    """
    names = list(names)
    lines = [f'#include "{headers.entry.name}"', "#include <stdio.h>",
             "static void s(const char *n, long long v) { printf(\"%s i %lld\\n\", n, v); }",
             "static void u(const char *n, unsigned long long v) { printf(\"%s i %llu\\n\", n, v); }",
             "static void f(const char *n, long double v) { printf(\"%s f %.21Lg\\n\", n, v); }",
             "#define SHOW(n, x) _Generic((x), unsigned int: u, unsigned long: u, unsigned long long: u, "
             "float: f, double: f, long double: f, default: s)(n, x)",
             "int main(void) {"]
    lines += [f'    SHOW("{n}", {n});' for n in names]
    lines += ["    return 0;", "}"]
    source = workdir / "c_values.c"
    source.write_text("\n".join(lines) + "\n")
    compiler = c_compiler()
    if compiler is None:
        raise FileNotFoundError("no C compiler (cc, gcc or clang) on PATH")
    exe = workdir / "c_values"
    command = [compiler, "-std=gnu11", "-w", *(f"-I{d}" for d in headers.include_dirs),
               *(f"-D{d}" for d in defines), "-o", str(exe), str(source)]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{built.stderr}")
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    values: dict[str, int | float] = {}
    for line in out.splitlines():
        name, kind, text = line.split(" ", 2)
        values[name] = int(text) if kind == "i" else float(text)
    return values


# -- libclang as the oracle ------------------------------------------------------------------------
def translation_unit(headers: HeaderSet, config: dict[str, Any]) -> cindex.TranslationUnit:
    """A fresh libclang parse of the headers (the same arguments the generator uses)."""
    return parse.translation_unit(headers, config, config.get("defines", []))


def _kept(cursor: cindex.Cursor, headers: HeaderSet, config: dict[str, Any]) -> bool:
    f = cursor.location.file
    if f is None:
        return False
    path = Path(f.name).resolve()
    for d in headers.include_dirs:
        try:
            rel = path.relative_to(d.resolve()).as_posix()
        except ValueError:
            continue
        if any(fnmatch.fnmatch(rel, p) for p in config["keep"]):
            return True
    return False


def _top_level(tu: cindex.TranslationUnit) -> Iterator[cindex.Cursor]:
    for c in tu.cursor.get_children():
        if c.kind in (CursorKind.LINKAGE_SPEC, CursorKind.UNEXPOSED_DECL):
            yield from c.get_children()
        else:
            yield c


def _named(t: cindex.Type) -> cindex.Type:
    return t.get_named_type() if t.kind == TypeKind.ELABORATED else t


def records(tu: cindex.TranslationUnit, headers: HeaderSet,
            config: dict[str, Any]) -> dict[tuple[str, ...], cindex.Type]:
    """Every struct/union the kept headers define at top level, keyed by the names C gives it
    (typedef names first, then the tag)."""
    names: dict[str, list[str]] = {}
    types: dict[str, cindex.Type] = {}
    for c in _top_level(tu):
        if not _kept(c, headers, config):
            continue
        if c.kind in (CursorKind.STRUCT_DECL, CursorKind.UNION_DECL) and c.is_definition():
            types.setdefault(c.get_usr(), c.type.get_canonical())
            names.setdefault(c.get_usr(), [])
        elif c.kind == CursorKind.TYPEDEF_DECL:
            target = _named(c.underlying_typedef_type)
            if target.kind == TypeKind.RECORD and target.get_declaration().is_definition():
                names.setdefault(target.get_declaration().get_usr(), []).append(c.spelling)
    found: dict[tuple[str, ...], cindex.Type] = {}
    for usr, t in types.items():
        decl = t.get_declaration()
        tag = [decl.spelling] if decl.spelling and not decl.is_anonymous() else []
        found[tuple(dict.fromkeys(names.get(usr, []) + tag))] = t
    return found


@dataclass(frozen=True)
class CField:
    """One field as libclang lays it out: offsets in bits from the start of the outermost record."""
    name: str
    type: cindex.Type
    offset_bits: int
    bit_width: int


def clang_fields(record: cindex.Type) -> list[CField]:
    """The named fields of a record, anonymous struct/union members flattened into it (as C does)."""
    decl = record.get_declaration()
    children = list(decl.get_children())
    fields: list[CField] = []
    used = {_named(c.type).get_declaration().hash for c in children if c.kind == CursorKind.FIELD_DECL}
    for c in children:
        if c.kind in (CursorKind.STRUCT_DECL, CursorKind.UNION_DECL) and c.is_anonymous() \
                and c.hash not in used:
            fields.extend(clang_fields(c.type))          # anonymous member: offsets via the outer type
        elif c.kind == CursorKind.FIELD_DECL and c.spelling:
            fields.append(CField(c.spelling, c.type, -1, c.get_bitfield_width() if c.is_bitfield() else 0))
    return [CField(f.name, f.type, record.get_offset(f.name), f.bit_width) for f in fields]


def _ctypes_field_type(cls: type, name: str) -> type:
    """The ctypes type of ``name`` in ``cls``, looking through ``_anonymous_`` members."""
    for entry in getattr(cls, "_fields_", ()):
        if entry[0] == name:
            return entry[1]
    for anon in getattr(cls, "_anonymous_", ()):
        inner = _ctypes_field_type(cls, anon)
        try:
            return _ctypes_field_type(inner, name)
        except KeyError:
            continue
    raise KeyError(name)


def _probe_bits(cls: type, name: str, width: int, ctype: type) -> int:
    """Set one bitfield to all ones in a zeroed instance; the bit positions it occupies, as an int."""
    instance = cls()
    signed = ctype(-1).value == -1 if issubclass(ctype, ctypes._SimpleCData) else False
    setattr(instance, name, -1 if signed else (1 << width) - 1)
    return int.from_bytes(bytes(instance), sys.byteorder)


def layout_problems(ctype_cls: type, record: cindex.Type, where: str) -> list[str]:
    """Every difference between a generated ctypes class and libclang's layout of the same record:
    size, alignment, each field's offset and size (bitfields by the bits they occupy), recursively."""
    problems: list[str] = []
    if ctypes.sizeof(ctype_cls) != record.get_size():
        problems.append(f"{where}: sizeof {ctypes.sizeof(ctype_cls)} != libclang {record.get_size()}")
    if ctypes.alignment(ctype_cls) != record.get_align():
        problems.append(f"{where}: alignment {ctypes.alignment(ctype_cls)} != libclang {record.get_align()}")
    for f in clang_fields(record):
        path = f"{where}.{f.name}"
        descriptor = getattr(ctype_cls, f.name, None)
        if descriptor is None:
            problems.append(f"{path}: missing from the ctypes class")
            continue
        ftype = _ctypes_field_type(ctype_cls, f.name)
        if f.bit_width:
            expected = ((1 << f.bit_width) - 1) << f.offset_bits
            got = _probe_bits(ctype_cls, f.name, f.bit_width, ftype)
            if got != expected:
                problems.append(f"{path}: bitfield occupies bits {got:#x}, libclang says {expected:#x}")
            continue
        if descriptor.offset * 8 != f.offset_bits:
            problems.append(f"{path}: offset {descriptor.offset} != libclang {f.offset_bits // 8}")
        if ctypes.sizeof(ftype) != f.type.get_size():
            problems.append(f"{path}: size {ctypes.sizeof(ftype)} != libclang {f.type.get_size()}")
        problems += _nested_problems(ftype, f.type.get_canonical(), path)
    return problems


def _nested_problems(ftype: type, t: cindex.Type, path: str) -> list[str]:
    if t.kind == TypeKind.RECORD:
        return layout_problems(ftype, t, path)
    if t.kind == TypeKind.CONSTANTARRAY:
        if getattr(ftype, "_length_", None) != t.element_count:
            return [f"{path}: array length {getattr(ftype, '_length_', None)} != libclang {t.element_count}"]
        return _nested_problems(ftype._type_, t.element_type.get_canonical(), f"{path}[]")
    return []


def all_layout_problems(headers: HeaderSet, config: dict[str, Any], generated: ModuleType) -> list[str]:
    """:func:`layout_problems` for every struct/union the kept headers define, found in ``generated``
    by one of its C names (typedef or tag). A record the module lacks is a problem too."""
    tu = translation_unit(headers, config)
    problems: list[str] = []
    for names, record in sorted(records(tu, headers, config).items()):
        cls = next((getattr(generated, n) for n in names if hasattr(generated, n)), None)
        if cls is None:
            problems.append(f"{' / '.join(names)}: no class in the generated module")
            continue
        problems += layout_problems(cls, record, names[0])
    return problems


def enumerators(headers: HeaderSet, config: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """Every enumerator in the kept headers: name -> (enum name or "", libclang's enum_value)."""
    tu = translation_unit(headers, config)
    found: dict[str, tuple[str, int]] = {}
    typedef_of: dict[int, str] = {}
    for c in _top_level(tu):
        if c.kind == CursorKind.TYPEDEF_DECL:
            target = _named(c.underlying_typedef_type)
            if target.kind == TypeKind.ENUM:
                typedef_of.setdefault(target.get_declaration().hash, c.spelling)
    for c in _top_level(tu):
        if c.kind == CursorKind.ENUM_DECL and _kept(c, headers, config):
            owner = typedef_of.get(c.hash) or ("" if c.is_anonymous() else c.spelling)
            for e in c.get_children():
                if e.kind == CursorKind.ENUM_CONSTANT_DECL:
                    found[e.spelling] = (owner, e.enum_value)
    return found


def enum_problems(headers: HeaderSet, config: dict[str, Any], generated: ModuleType) -> list[str]:
    """Every enumerator whose module constant (and IntEnum member) differs from libclang's value."""
    problems = []
    for name, (owner, value) in sorted(enumerators(headers, config).items()):
        constant = getattr(generated, name, None)
        if constant is None or int(constant) != value:
            problems.append(f"{name}: module has {constant!r}, libclang {value}")
        if owner:
            cls = getattr(generated, owner, None)
            member = getattr(cls, name, None) if cls is not None else None
            if member is None or int(member) != value:
                problems.append(f"{owner}.{name}: enum member {member!r}, libclang {value}")
    return problems
