"""Types-only APIs (headers.json ``types_only``): function-type typedefs, tables of function pointers and
struct-size enumerators, on a fixture shaped like XLA's FFI C API (fixtures/table_api.h)."""
from __future__ import annotations

import ctypes
from pathlib import Path
from types import ModuleType

import pytest

import fixture_build as fb

ENTRY = "table_api.h"


@pytest.fixture(scope="module")
def built() -> fb.Built:
    config = fb.fixture_config(ENTRY, types_only=True, version_macros=["TB_API_MAJOR", "TB_API_MINOR"],
                               keep=[ENTRY], defines=[])
    for key in ("sonames", "status_type", "success", "error_string", "last_error", "version_function",
                "version_reader", "library_env", "library_search", "install_hint", "error_class", "beta_macro"):
        del config[key]                    # a types-only entry names no library (the schema lets it)
    return fb.build(ENTRY, config, {"rules": [], "exceptions": {}})


@pytest.fixture
def tb(built: fb.Built, generated_dir: Path) -> ModuleType:
    return fb.import_text(built.text, generated_dir, "table_api_generated")


def test_no_library_and_no_functions(built: fb.Built, tb: ModuleType) -> None:
    """The module names no library and wraps no function; TB_GetApi is left out."""
    assert built.module.functions == []
    assert not hasattr(tb, "TB_GetApi") and not hasattr(tb, "_lib") and not hasattr(tb, "library_path")
    assert "_Library" not in built.text and tb.HEADER_VERSION == "2.7"


def test_function_typedefs_are_callbacks(built: fb.Built, tb: ModuleType) -> None:
    """``typedef R name(args)`` becomes a CFUNCTYPE like ``typedef R (*name)(args)``; a pointer result is a
    c_void_p (ctypes takes no other pointer result from a Python callback)."""
    assert {c.name: c.pointer for c in built.module.callbacks} == {
        "TB_Error_Create": False, "TB_Add": False, "TB_Task": False, "TB_Handler": False}
    assert tb.TB_Add._restype_ is ctypes.c_int64 and tb.TB_Add._argtypes_ == (ctypes.c_int64, ctypes.c_int64)
    assert tb.TB_Handler._restype_ is ctypes.c_void_p
    assert tb.TB_Error_Create._argtypes_ == (ctypes.POINTER(tb.TB_Error_Create_Args),)
    handler = tb.TB_Handler(lambda frame: 1234)        # a Python handler may return an error pointer
    assert handler(None) == 1234


def test_table_fields_are_the_function_types(tb: ModuleType) -> None:
    """A ``name*`` field of a function type is that CFUNCTYPE: a table filled from C or Python calls through."""
    fields = dict(tb.TB_Api._fields_)
    assert fields["TB_Error_Create"] is tb.TB_Error_Create and fields["add"] is tb.TB_Add
    assert fields["task"] is tb.TB_Task
    api = tb.TB_Api()
    api.add = tb.TB_Add(lambda a, b: a + b)
    assert api.add(40, 2) == 42
    assert not api.task                                   # a NULL function pointer reads as false


def test_layouts_and_struct_sizes_equal_the_compiler(built: fb.Built, tb: ModuleType, tmp_path: Path) -> None:
    """Layouts equal libclang's, and the STRUCT_SIZE enumerators (offsetof + sizeof in a macro) equal what
    gcc computes: the size up to the last field the API version knows, not sizeof."""
    assert fb.all_layout_problems(built.headers, built.config, tb) == []
    assert tb.TB_Frame_STRUCT_SIZE == ctypes.sizeof(tb.TB_Frame)
    assert tb.TB_Api_STRUCT_SIZE == tb.TB_Api.task.offset + ctypes.sizeof(ctypes.c_void_p) < ctypes.sizeof(tb.TB_Api)
    if fb.c_compiler() is None:
        pytest.skip("no C compiler to evaluate the header with")
    names = ["TB_Frame_STRUCT_SIZE", "TB_Api_STRUCT_SIZE", "TB_Error_Create_Args_STRUCT_SIZE", "TB_CODE_BAD"]
    assert fb.c_values(built.headers, names, tmp_path) == {n: getattr(tb, n) for n in names}


def test_stub_has_the_types(built: fb.Built) -> None:
    """The .pyi stub of a types-only module declares the version, the pins and the callback types, no loader."""
    from generator import render
    stub = render.render_stub(built.module, built.classification, built.config)
    assert "SOURCES: dict[str, str]" in stub and "class TB_Handler(_CFuncPtr): ..." in stub
    assert "def library_path" not in stub
