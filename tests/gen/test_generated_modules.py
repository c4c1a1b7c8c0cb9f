"""Both generated modules against libclang's own view of the headers and against the real libraries."""
from __future__ import annotations

import ctypes
import importlib
import json
import re
from pathlib import Path

import pytest

from childproc import run_python
from gen import clang_facts
from generator import config as cfg, pipeline
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


def _long_comment_lines(library: str) -> list[str]:
    """The headers' comment lines that are prose, not a lone word: three words or more."""
    return sorted(line for line in clang_facts.comment_lines(library) if len(line.split()) >= 3)


DOXYGEN = re.compile(r"[@\\](brief|param|retval|returns?|since|see|deprecated|note|details|ingroup|addtogroup)\b")


@pytest.mark.parametrize("library", LIBRARIES)
def test_header_comments_ship_only_where_the_vendor_allows(library):
    """headers.json decides per library: a library whose comments may not be shipped has none of their text in
    its generated module or stub (checked line by line against what libclang reads); one whose comments may be
    shipped carries them with the license notice that allows it."""
    skip_if_header_moved(library)
    config = cfg.load_all()[library]
    path = Path(module(library).__file__)
    texts = {p.name: p.read_text() for p in (path, path.with_suffix(".pyi"))}
    comments = _long_comment_lines(library)
    assert len(comments) > 1000
    if not config["ship_comments"]:
        for name, text in texts.items():
            assert [line for line in comments if line in text] == [], name
            assert DOXYGEN.search(text) is None, name
        assert "Reference: https://" in texts[path.name]
        return
    text = texts[path.name]
    assert len([line for line in comments if line in text]) > len(comments) // 2
    notice = (cfg.REPO_ROOT / config["license_file"]).read_text()
    assert "\n".join(("# " + line).rstrip() for line in notice.splitlines()) in text.split('"""', 1)[0]


def test_miopen_license_file_carries_the_headers_own_notice():
    """The notice shipped with MIOpen's comments is the one its header states (copyright line and terms)."""
    skip_if_header_moved("miopen")
    config = cfg.load_all()["miopen"]
    header = cfg.header_set("miopen", config).entry.read_text()
    notice_in_header = " ".join(re.sub(r"^[ /*]*", "", line) for line in header.split("#ifndef", 1)[0].splitlines()).split()
    shipped = (cfg.REPO_ROOT / config["license_file"]).read_text().split()
    start = shipped.index("MIT")
    assert " ".join(shipped[start:]) == " ".join(w for w in notice_in_header if w)
    assert f"LICENSES/{Path(config['license_file']).name}" == config["license_file"]
    pyproject = (cfg.REPO_ROOT / "pyproject.toml").read_text()
    assert re.search(r'^license-files = \[.*"LICENSES/\*\.txt"', pyproject, re.M)


def test_cudnn_docstrings_link_each_function_to_nvidias_reference():
    """Facts only, and where to read the vendor's text: its page per header, the function's own anchor."""
    mod = module("cudnn")
    doc = mod.cudnnConvolutionForward.__doc__
    assert doc.startswith("cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, ")
    assert "    workSpace: device memory" in doc
    assert doc.rstrip().endswith("Reference: https://docs.nvidia.com/deeplearning/cudnn/backend/latest/api/"
                                 "cudnn-cnn-library.html#cudnnconvolutionforward")
    assert mod.cudnnGetErrorString.__doc__.rstrip().endswith("cudnn-graph-library.html#cudnngeterrorstring")
    assert "cudnn-ops-library.html#cudnnsettensor4ddescriptor" in mod.cudnnSetTensor4dDescriptor.__doc__
    assert "cudnn-graph-library.html#cudnnmathtype-t" in mod.cudnnMathType_t.__doc__
    deprecated = mod.cudnnSetCTCLossDescriptor.__doc__
    assert "Deprecated by the vendor. Deprecated since: cuDNN 9.0.0. Replacement: cudnnSetCTCLossDescriptor_v9." \
        in deprecated
    assert mod._cudnnSetCTCLossDescriptor.deprecated == "since cuDNN 9.0.0; use cudnnSetCTCLossDescriptor_v9"


def test_docstrings_list_the_checks_per_parameter():
    """What the wrapper checks, per parameter: handles (None refused or allowed), enum and integer ranges, kinds."""
    mod = module("cudnn")
    doc = mod.cudnnSetTensor4dDescriptor.__doc__
    lines = [line.strip() for line in doc.splitlines()]
    assert "tensorDesc: handle cudnnTensorDescriptor_t, refused when None" in lines
    assert "dataType: enum cudnnDataType_t: a member, or an int from -2147483648 to 2147483647" in lines
    assert "n: integer (int): -2147483648 to 2147483647" in lines
    bn = [line.strip() for line in mod.cudnnBatchNormalizationForwardTrainingEx.__doc__.splitlines()]
    assert "zDesc: handle cudnnTensorDescriptor_t, may be None" in bn
    assert "workSpaceSizeInBytes: byte count (size_t, non-negative)" in bn
    with pytest.raises(Exception, match="-2147483648 to 2147483647"):
        mod.cudnnSetTensor4dDescriptor(None, 0, 0, 2**31, 1, 1, 1)


def test_xla_ffi_types_agree_with_libclang():
    """XLA's FFI C API (types only): every enumerator, struct-size constant and struct layout as libclang
    reads jaxlib's header; the API table's fields are the header's function types."""
    skip_if_header_moved("xla_ffi")
    mod = module("xla_ffi")
    values = clang_facts.enum_values("xla_ffi")
    assert len(values) > 80 and {n: getattr(mod, n, None) for n in values} == values
    assert mod.XLA_FFI_CallFrame_STRUCT_SIZE == mod.XLA_FFI_CallFrame.attrs.offset + ctypes.sizeof(mod.XLA_FFI_Attrs)
    layouts = clang_facts.record_layouts("xla_ffi")
    assert len(layouts) > 30
    for name, (size, offsets) in layouts.items():
        cls = getattr(mod, name)
        assert ctypes.sizeof(cls) == size, name
        for field, offset in offsets.items():
            assert getattr(cls, field).offset == offset, f"{name}.{field}"
    table = dict(mod.XLA_FFI_Api._fields_)
    assert table["XLA_FFI_Error_Create"] is mod.XLA_FFI_Error_Create
    assert mod.XLA_FFI_Handler._restype_ is ctypes.c_void_p
    assert mod.HEADER_VERSION == f"{mod.XLA_FFI_API_MAJOR}.{mod.XLA_FFI_API_MINOR}"
    assert mod.SOURCES == {"jaxlib": cfg.load_all()["xla_ffi"]["packages"][0]["version"]}
    assert not hasattr(mod, "_lib")
