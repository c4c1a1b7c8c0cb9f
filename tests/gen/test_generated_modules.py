"""Both generated modules against libclang's own view of the headers and against the real libraries."""
from __future__ import annotations

import ctypes
import importlib
import json

import pytest

from childproc import run_python
from gen import clang_facts
from generator import pipeline
from header_state import skip_if_header_moved

LIBRARIES = ["cudnn", "miopen"]
EXPECTED_FUNCTIONS = {"cudnn": 239, "miopen": 258}


def module(library: str):
    return importlib.import_module(f"dnnbind.gen.{library}")


def generated_functions(library: str) -> set[str]:
    return set(pipeline.prototypes(open(module(library).__file__).read()))


@pytest.mark.parametrize("library", LIBRARIES)
def test_every_declared_function_is_generated(library):
    skip_if_header_moved(library)
    declared = clang_facts.function_names(library)
    assert len(declared) == EXPECTED_FUNCTIONS[library]
    assert generated_functions(library) == declared


@pytest.mark.parametrize("library", LIBRARIES)
def test_enum_values_agree_with_libclang(library):
    skip_if_header_moved(library)
    mod = module(library)
    values = clang_facts.enum_values(library)
    assert len(values) > 500
    wrong = {name: (getattr(mod, name, None), value) for name, value in values.items()
             if getattr(mod, name, None) != value}
    assert not wrong


@pytest.mark.parametrize("library", LIBRARIES)
def test_struct_layouts_agree_with_libclang(library):
    skip_if_header_moved(library)
    mod = module(library)
    layouts = clang_facts.record_layouts(library)
    assert layouts, "expected some structs"
    for name, (size, offsets) in layouts.items():
        cls = getattr(mod, name)
        assert ctypes.sizeof(cls) == size, name
        assert not getattr(cls, "_pack_", 0), f"{name} uses _pack_"
        for field, offset in offsets.items():
            assert getattr(cls, field).offset == offset, f"{name}.{field}"


def test_anonymous_union_and_unsigned_enum_in_miopen():
    mod = module("miopen")
    perf = mod.miopenConvAlgoPerf_t()
    perf.fwd_algo = mod.miopenConvolutionFwdAlgoWinograd      # a member of the anonymous union
    assert perf.bwd_weights_algo == perf.fwd_algo
    assert max(mod.miopenTensorArgumentId_t) >= 1 << 31


def test_every_cudnn_function_resolves_in_the_library():
    from dnnbind.gen import cudnn
    library = ctypes.CDLL(cudnn.library_path())
    missing = sorted(name for name in generated_functions("cudnn") if not hasattr(library, name))
    assert not missing


def test_every_miopen_function_is_exported(miopen_run):
    names = sorted(generated_functions("miopen"))
    result = miopen_run(f"""
        import ctypes, json
        from dnnbind.gen import miopen
        library = ctypes.CDLL(miopen.library_path())
        print(json.dumps([n for n in {names!r} if not hasattr(library, n)]))
        """)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("library", LIBRARIES)
def test_import_loads_no_library(library):
    result = run_python(f"""
        import sys
        import dnnbind.gen.{library} as mod
        assert not mod._lib.loaded
        assert "numpy" not in sys.modules
        print("ok")
        """)
    assert result.stdout.strip() == "ok", result.stderr
