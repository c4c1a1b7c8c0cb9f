"""The rendered fixture module, imported for real: types, enums, macros and layouts, checked against
libclang and against what the C compiler makes of the same header. No library is loaded here."""
from __future__ import annotations

import ast
import ctypes
import enum
import inspect
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, strategies as st

import fixture_build as fb
from dnnbind.runtime.errors import LibraryNotFoundError
from generator import render


def test_import_loads_no_library(fx: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing binds nothing; with the library variable pointing nowhere, only a call fails."""
    monkeypatch.setenv(fb.LIBRARY_ENV, "/nonexistent/libfixture.so")
    assert not fx._lib.loaded
    assert fx.HEADER_VERSION == "9.1.2" and fx.FX_MODE_FAST == 0
    with pytest.raises(LibraryNotFoundError) as info:
        fx.fxFail(0)
    assert fb.LIBRARY_ENV in str(info.value) and "/nonexistent/libfixture.so" in str(info.value)
    assert not fx._lib.loaded


def test_named_enums_are_intenum_classes(fx: ModuleType) -> None:
    """Named enums become IntEnum classes whose members are also module constants."""
    for name in ("fxStatus_t", "fxSigned_t", "fxUnsigned_t", "fxBig_t", "fxMode_t"):
        cls = getattr(fx, name)
        assert issubclass(cls, enum.IntEnum)
        for member_name, member in cls.__members__.items():
            assert getattr(fx, member_name) is member
    assert fx.fxBig_t.FX_BIG_ALL == 2**64 - 1 and fx.fxUnsigned_t.FX_U_HIGH == 2**31
    assert fx.fxSigned_t(-1) is fx.FX_NEG_ONE and fx.FX_NEG_MIN == -2**31


def test_anonymous_enum_constants_only(fx: ModuleType) -> None:
    """An anonymous enum's enumerators are plain int constants; no class stands for the enum."""
    assert (fx.FX_ANON_ALPHA, fx.FX_ANON_BETA) == (7, -8)
    assert type(fx.FX_ANON_ALPHA) is int
    classes = [v for v in vars(fx).values() if isinstance(v, type) and issubclass(v, enum.IntEnum)
               and v is not enum.IntEnum]
    assert not any("FX_ANON_ALPHA" in c.__members__ for c in classes)


def test_deprecated_alias_is_not_canonical(fx: ModuleType) -> None:
    """The header lists the deprecated alias first; the current name must still be the canonical one."""
    mode = fx.fxMode_t
    assert mode(1).name == "FX_MODE_ACCURATE"
    assert mode.FX_MODE_LEGACY is mode.FX_MODE_ACCURATE
    assert fx.FX_MODE_LEGACY is mode.FX_MODE_ACCURATE
    assert [m.name for m in mode] == ["FX_MODE_FAST", "FX_MODE_ACCURATE", "FX_SEV_SHIFT"]


def test_enum_parameter_ctypes(fx: ModuleType) -> None:
    """An enum's C width decides the ctypes type: c_int when every value fits, else its own."""
    assert fx._fxEchoBig.argtypes == (ctypes.c_ulong,) and fx._fxEchoBig.restype is ctypes.c_ulong
    assert fx._fxEchoUnsigned.argtypes == (ctypes.c_uint,)
    assert fx._fxModeValue.argtypes == (ctypes.c_int,)


def test_enum_values_equal_libclang(fixture_built: fb.Built, fx: ModuleType) -> None:
    """Every enumerator of the header, as a module constant and as a member, has libclang's value."""
    assert fb.enum_problems(fixture_built.headers, fixture_built.config, fx) == []
    assert len(fb.enumerators(fixture_built.headers, fixture_built.config)) == 19


def test_enum_and_macro_values_equal_the_c_compiler(fixture_built: fb.Built, fx: ModuleType,
                                                    tmp_path: Path) -> None:
    """What gcc computes for every enumerator and every exported macro is what the module holds."""
    if fb.c_compiler() is None:
        pytest.skip("no C compiler to evaluate the header with")
    names = sorted(fb.enumerators(fixture_built.headers, fixture_built.config)) + \
        [m.name for m in fixture_built.module.macros]
    values = fb.c_values(fixture_built.headers, names, tmp_path, fixture_built.config["defines"])
    assert {n: getattr(fx, n) for n in names} == values
    assert values["FX_BIG_ALL"] == 2**64 - 1 and values["FX_MOD"] == -1


def test_macro_constants(fx: ModuleType) -> None:
    """Macro constants are plain numbers; skipped macros are absent."""
    assert (fx.FX_B, fx.FX_C, fx.FX_OCT, fx.FX_CAST_WIDE, fx.FX_FLOAT) == (12, 16, 493, 1 << 40, 2.5)
    assert not hasattr(fx, "FX_STRING") and not hasattr(fx, "FX_MAX")


def test_struct_layouts_equal_libclang(fixture_built: fb.Built, fx: ModuleType) -> None:
    """sizeof, alignment and every field offset (bitfields by their bits) equal libclang's layout."""
    tu = fb.translation_unit(fixture_built.headers, fixture_built.config)
    assert set(fb.records(tu, fixture_built.headers, fixture_built.config)) == {
        ("fxPoint_t",), ("fxRect_t", "fxRect"), ("fxValue_t",), ("fxVariant_t",), ("fxFlags_t",),
        ("fxArrays_t",), ("fxMixed_t",)}
    assert fb.all_layout_problems(fixture_built.headers, fixture_built.config, fx) == []


def test_layout_check_catches_a_wrong_layout(fixture_built: fb.Built) -> None:
    """The layout helper itself: a class with a field out of place is reported, field by field."""
    tu = fb.translation_unit(fixture_built.headers, fixture_built.config)
    record = fb.records(tu, fixture_built.headers, fixture_built.config)[("fxVariant_t",)]

    class Packed(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("kind", ctypes.c_int), ("asInt", ctypes.c_int64), ("tag", ctypes.c_char)]

    problems = fb.layout_problems(Packed, record, "Packed")
    assert any("Packed.asInt: offset 4 != libclang 8" in p for p in problems)
    assert any("Packed.asDouble: missing" in p for p in problems)
    assert any("sizeof 13 != libclang 24" in p for p in problems)


def test_anonymous_union_promotes_its_members(fx: ModuleType) -> None:
    """Members of an anonymous union are reached directly on the struct, as in C."""
    assert len(fx.fxVariant_t._anonymous_) == 1
    v = fx.fxVariant_t(kind=1)
    v.asDouble = 1.5
    assert v.asDouble == 1.5 and v.asInt == 0x3FF8000000000000


def test_handles_are_distinct_pointer_types(fx: ModuleType) -> None:
    """Each handle typedef is its own ctypes pointer type, over its own opaque structure."""
    assert issubclass(fx.fxHandle_t, ctypes._Pointer) and issubclass(fx.fxTensorDescriptor_t, ctypes._Pointer)
    assert fx.fxHandle_t is not fx.fxTensorDescriptor_t
    assert fx.fxHandle_t._type_ is fx.fxContext and fx.fxTensorDescriptor_t._type_ is fx.fxTensorStruct


def test_callback_is_cfunctype(fx: ModuleType) -> None:
    """A function-pointer typedef is a CFUNCTYPE with the C result and argument types."""
    assert issubclass(fx.fxReduce_t, ctypes._CFuncPtr)
    assert fx.fxReduce_t._restype_ is ctypes.c_int
    assert fx.fxReduce_t._argtypes_ == (ctypes.c_int, ctypes.c_int)


def test_docstrings(fx: ModuleType) -> None:
    """Docstrings carry the prototype, the checked parameters, the header comment and flags."""
    doc = fx.fxDeviceAddress.__doc__
    assert doc.startswith("fxStatus_t fxDeviceAddress(const void * x, uintptr_t * address)")
    assert "x: device memory" in doc and "Reports the address of device memory x." in doc
    assert "Beta API (FX_BETA_API)" in fx.fxBetaAnswer.__doc__
    assert "Deprecated by the vendor." in fx.fxDouble.__doc__
    assert fx.fxGetErrorString.__doc__.endswith('Returns a description of "status"')
    assert fx.fxPoint_t.__doc__ == "A point."


def test_keyword_parameter_renamed(fx: ModuleType) -> None:
    """A C parameter named like a Python keyword gets a trailing underscore."""
    assert list(inspect.signature(fx.fxKeyword).parameters) == ["lambda_", "result"]


@given(st.text(alphabet=st.sampled_from(['"', "\\", "a", " ", "\n", "'", "é"]), max_size=12))
def test_docstring_escaping_round_trips(text: str) -> None:
    """Any comment text survives as a triple-quoted docstring: quotes and backslashes included."""
    assert ast.literal_eval('"""' + render.docstring(text) + '"""') == text


REFERENCE = {"url": "https://example.invalid/{page}.html#{anchor}", "pages": {"fixture.h": "fixture-api"},
             "default": "https://example.invalid/index.html"}


def test_comments_not_shipped_leave_facts_and_links(generated_dir: Path) -> None:
    """``ship_comments: false``: no text of the header's comments, the facts, and a link per declaration."""
    built = fb.build("fixture.h", fb.fixture_config(ship_comments=False, api_reference=REFERENCE))
    m = built.module
    comments = [c for c in [f.comment for f in m.functions] + [e.comment for e in m.enums]
                + [s.comment for s in m.structs] + [h.comment for h in m.handles] + [c.comment for c in m.callbacks]
                + [x.comment for e in m.enums for x in e.members] if c]
    lines = {line.strip() for c in comments for line in c.splitlines() if len(line.split()) >= 2}
    assert "Reports the address of device memory x." in lines and "A point." in lines
    assert [line for line in lines if line in built.text] == []
    fx = fb.import_text(built.text, generated_dir)
    doc = fx.fxDeviceAddress.__doc__
    assert doc.startswith("fxStatus_t fxDeviceAddress(const void * x, uintptr_t * address)")
    assert "    x: device memory" in doc
    assert doc.endswith("Reference: https://example.invalid/fixture-api.html#fxdeviceaddress")
    assert inspect.cleandoc(fx.fxPoint_t.__doc__) == \
        "fxPoint_t (fixture.h)\n\nReference: https://example.invalid/fixture-api.html#fxpoint-t"
    assert "Deprecated by the vendor." in fx.fxDouble.__doc__
    assert fx._fxDouble.deprecated == "see https://example.invalid/fixture-api.html#fxdouble"
    assert "API reference (https://example.invalid/index.html)" in fx.__doc__


def test_deprecation_facts_are_the_release_and_the_replacement() -> None:
    names = {"cudnnSetCTCLossDescriptor_v9", "cudnnBackendCreateDescriptor"}
    assert render.deprecation_facts("Sets it.\n@since cuDNN 8.0\n@deprecated Since cuDNN 9.0.0. Use "
                                    "cudnnSetCTCLossDescriptor_v9 instead.", names) == \
        ("9.0.0", "cudnnSetCTCLossDescriptor_v9")
    assert render.deprecation_facts("@deprecated Since cuDNN 9.2. Use cudnnBackendCreateDescriptor instead",
                                    names) == ("9.2", "cudnnBackendCreateDescriptor")
    assert render.deprecation_facts("@deprecated Use graph API instead.", names) == ("", "")
    assert render.deprecation_facts("@since cuDNN 9.0.0\nNot deprecated.", names) == ("", "")
