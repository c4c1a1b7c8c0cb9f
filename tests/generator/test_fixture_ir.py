"""What parse() and classify() make of fixtures/fixture.h: the IR, before anything is rendered."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import fixture_build as fb
from generator import ir, parse


def _enum(built: fb.Built, name: str) -> ir.Enum:
    return next(e for e in built.module.enums if e.name == name)


def _struct(built: fb.Built, name: str) -> ir.Struct:
    return next(s for s in built.module.structs if s.name == name)


def _params(built: fb.Built, function: str) -> dict[str, ir.Param]:
    fn = next(f for f in built.classification.functions if f.name == function)
    return {p.name: p for p in fn.params}


def test_version_from_the_version_macros(fixture_built: fb.Built) -> None:
    """The header version is read from the config's version macros."""
    assert fixture_built.module.version == "9.1.2"


def test_anonymous_enum_has_no_name(fixture_built: fb.Built) -> None:
    """An anonymous enum keeps its constants under the name "" (constants only, no class)."""
    anonymous = [e for e in fixture_built.module.enums if not e.name]
    assert [[(m.name, m.value) for m in e.members] for e in anonymous] == [[("FX_ANON_ALPHA", 7),
                                                                           ("FX_ANON_BETA", -8)]]


@pytest.mark.parametrize("name, underlying, values", [
    ("fxSigned_t", "c_int", {"FX_NEG_ONE": -1, "FX_NEG_MIN": -2**31, "FX_POS": 5}),
    ("fxUnsigned_t", "c_uint", {"FX_U_HIGH": 2**31, "FX_U_ALL": 2**32 - 1, "FX_U_ONE": 1}),
    ("fxBig_t", "c_ulong", {"FX_BIG_ALL": 2**64 - 1, "FX_BIG_PAST_32": 2**32, "FX_BIG_SMALL": 3}),
])
def test_enum_values_and_underlying_types(fixture_built: fb.Built, name: str, underlying: str,
                                          values: dict[str, int]) -> None:
    """Negative, unsigned and 64-bit enumerators keep their exact values and the enum its C width."""
    enum = _enum(fixture_built, name)
    assert enum.underlying == underlying
    assert {m.name: m.value for m in enum.members} == values


def test_deprecated_enumerator_is_marked(fixture_built: fb.Built) -> None:
    """``__attribute__((deprecated))`` on an enumerator is recorded on that enumerator only."""
    members = {m.name: m for m in _enum(fixture_built, "fxMode_t").members}
    assert members["FX_MODE_LEGACY"].deprecated
    assert not members["FX_MODE_ACCURATE"].deprecated
    assert members["FX_MODE_LEGACY"].value == members["FX_MODE_ACCURATE"].value == 1


def test_integer_and_float_macros(fixture_built: fb.Built) -> None:
    """Object-like macros: literals, expressions over macros and enumerators, casts, a float."""
    macros = {m.name: m.value for m in fixture_built.module.macros}
    assert macros == {
        "FIXTURE_MAJOR": 9, "FIXTURE_MINOR": 1, "FIXTURE_PATCHLEVEL": 2,
        "FX_A": 3, "FX_B": 12, "FX_C": 16, "FX_HEX": 0x7F, "FX_OCT": 0o755, "FX_CAST": 42,
        "FX_CAST_WIDE": 1 << 40, "FX_DIV": -3, "FX_MOD": -1, "FX_PAREN": 3, "FX_PRECEDENCE": 62,
        "FX_NEG_SHIFT": -4, "FX_FLOAT": 2.5,
    }
    assert isinstance(macros["FX_FLOAT"], float) and isinstance(macros["FX_OCT"], int)


def test_string_macro_skipped_function_like_macro_ignored(fixture_built: fb.Built) -> None:
    """A string macro is listed as skipped; a function-like macro is not a constant at all."""
    assert "FX_STRING" in fixture_built.module.skipped_macros
    names = {m.name for m in fixture_built.module.macros}
    assert "FX_STRING" not in names and "FX_MAX" not in names and "FX_DEPRECATED" not in names


def test_handles(fixture_built: fb.Built) -> None:
    """``typedef struct X *name`` gives an opaque handle with its tag."""
    assert [(h.name, h.tag) for h in fixture_built.module.handles] == [
        ("fxHandle_t", "fxContext"), ("fxTensorDescriptor_t", "fxTensorStruct")]


def test_structs_unions_bitfields_arrays(fixture_built: fb.Built) -> None:
    """Struct kinds, the anonymous union member, bitfield widths and fixed array types."""
    assert _struct(fixture_built, "fxValue_t").kind == "union"
    variant = _struct(fixture_built, "fxVariant_t")
    anonymous = [f for f in variant.fields if f.anonymous]
    assert len(anonymous) == 1 and anonymous[0].type.kind == "union"
    assert [f.name for f in _struct(fixture_built, anonymous[0].type.name).fields] == ["asInt", "asDouble"]
    flags = {f.name: f.bit_width for f in _struct(fixture_built, "fxFlags_t").fields}
    assert flags == {"ready": 1, "mode": 3, "count": 12, "delta": 5, "tail": 0, "wide": 40, "top": 24}
    arrays = {f.name: f.type for f in _struct(fixture_built, "fxArrays_t").fields}
    assert (arrays["dims"].kind, arrays["dims"].length) == ("array", 8)
    matrix = arrays["matrix"]
    assert (matrix.length, matrix.pointee.kind, matrix.pointee.length) == (2, "array", 3)
    rect = _struct(fixture_built, "fxRect_t")
    assert rect.tag == "fxRect" and [f.type.kind for f in rect.fields] == ["struct"] * 3


def test_callback_typedef(fixture_built: fb.Built) -> None:
    """A function-pointer typedef becomes a callback with its parameter names and types."""
    (callback,) = fixture_built.module.callbacks
    assert callback.name == "fxReduce_t"
    assert callback.result.name == "c_int"
    assert [(p.name, p.type.name) for p in callback.params] == [("acc", "c_int"), ("value", "c_int")]


def test_function_flags(fixture_built: fb.Built) -> None:
    """Deprecated and beta functions are marked; the others are not."""
    functions = {f.name: f for f in fixture_built.module.functions}
    assert functions["fxDouble"].deprecated and not functions["fxSumDims"].deprecated
    assert functions["fxBetaAnswer"].beta and not functions["fxCreate"].beta
    assert functions["fxDouble"].header == "fixture.h"
    assert functions["fxSumDims"].prototype.startswith("fxStatus_t fxSumDims(int nbDims, ")
    assert functions["fxSumDims"].prototype.endswith(", int64_t * sum)")


@pytest.mark.parametrize("function, param, kind, rule", [
    ("fxDeviceAddress", "x", "device", "tensor-data"),
    ("fxDeviceAddress", "address", "host", "typed-host"),
    ("fxScale", "alpha", "host", "scaling-factors"),
    ("fxEitherAddress", "userData", "either", "user-data"),
    ("fxExceptionAddress", "buffer", "device", "exception:fxExceptionAddress"),
    ("fxSumDims", "dimA", "host", "typed-host"),
    ("fxCreate", "handle", "host", "typed-host"),
    ("fxApply", "fn", "", ""),             # a callback is a value, not a data pointer
])
def test_pointer_kinds(fixture_built: fb.Built, function: str, param: str, kind: str, rule: str) -> None:
    """Every pointer parameter gets the kind of the first matching rule, or of its exception."""
    p = _params(fixture_built, function)[param]
    assert (p.kind, p.rule) == (kind, rule)


def test_byte_sizes_marked(fixture_built: fb.Built) -> None:
    """Parameters matching the byte_sizes pattern are marked, value and pointer alike."""
    assert _params(fixture_built, "fxWorkspace")["workSpaceSizeInBytes"].byte_size
    assert _params(fixture_built, "fxGetWorkspaceSize")["workspaceSizeInBytes"].byte_size
    assert not _params(fixture_built, "fxNameLength")["length"].byte_size
    assert fixture_built.classification.byte_sizes == 2
    assert fixture_built.classification.unused_rules == []


def test_syntax_error_raises_parse_error() -> None:
    """A header with an error diagnostic stops generation; the message lists file, line and text."""
    with pytest.raises(parse.ParseError) as info:
        fb.parse_fixture("syntax_error.h")
    message = str(info.value)
    assert "1 error diagnostic(s) parsing syntax_error.h" in message
    assert "syntax_error.h:6: expected parameter declarator" in message


def test_rendering_is_deterministic_and_pathless(tmp_path: Path, fixture_built: fb.Built) -> None:
    """The same header renders byte-identically, wherever it lies, and the text names no path."""
    copy = tmp_path / "include"
    shutil.copytree(fb.FIXTURES, copy)
    first = fb.build(directory=copy).text
    second = fb.build(directory=copy).text
    assert first == second == fixture_built.text
    for path in (str(tmp_path), str(fb.FIXTURES), str(fb.ROOT), "/work", "/tmp"):
        assert path not in first
    assert "unnamed" not in first and "anonymous at" not in first
