"""API diffs between header versions, without downloads: two releases of a small fixture library
(diff_fixtures/v1, v2) through the real libclang parse, and the committed modules read back."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fixture_build import all_layout_problems, fixture_config, fixture_overrides, header_set, import_text
from generator import __main__ as cli
from generator import api, classify, diff, parse, pipeline, render, suites, versions

FIXTURES = Path(__file__).resolve().parent / "diff_fixtures"
CONFIG = fixture_config("dx.h", title="Dx", keep=["dx.h"], defines=["DX_BETA_API=1"], beta_macro="DX_BETA_API",
                        version_macros=["DX_MAJOR", "DX_MINOR", "DX_PATCH"], status_type="dxStatus_t",
                        success="DX_OK", error_string="dxGetErrorString", version_function="dxGetVersion")
OVERRIDES = fixture_overrides(exceptions={"dxOldApi": {"x": "device"}})


def side(version: str):
    """Parse, classify (non-strict) and render one fixture release."""
    module = parse.parse(header_set("dx.h", FIXTURES / version), CONFIG)
    classification = classify.classify(module, OVERRIDES, strict=False)
    return module, classification, render.render(module, classification, CONFIG)


@pytest.fixture(scope="module")
def changes() -> diff.Changes:
    (m1, c1, _), (m2, c2, _) = side("v1"), side("v2")
    return diff.compare(api.api_of_ir(m1, c1), api.api_of_ir(m2, c2))


def test_functions_added_removed_changed_deprecated_beta_and_kinds(changes):
    assert changes.old.version == "1.0.0" and changes.new.version == "1.1.0"
    assert changes.functions_added == ["dxExecute"]
    assert changes.functions_removed == ["dxOldApi", "dxPlanCreate"]
    assert changes.functions_changed == ["dxQuery", "dxScale"]
    assert changes.new.functions["dxScale"].prototype.endswith("void * x, int64_t n)")
    assert changes.newly_deprecated == ["dxCopy"] and changes.no_longer_deprecated == []
    assert changes.beta_changed == [("dxFuse", True, False)]
    assert changes.kinds_changed == [("dxQuery", "userData", "host", "either")]


def test_enums_macros_handles_callbacks(changes):
    assert changes.enums_added == ["dxMode_t"] and changes.enums_removed == []
    assert changes.values_added == [("dxDataType_t", "DX_BFLOAT", 2), ("dxDataType_t", "DX_FP8", 7),
                                    ("dxStatus_t", "DX_INTERNAL", 4000)]
    assert changes.values_removed == [("dxDataType_t", "DX_OLD_TYPE", 7)]
    assert changes.values_renumbered == [("dxStatus_t", "DX_BAD_PARAM", 1, 2000),
                                         ("dxStatus_t", "DX_NOT_SUPPORTED", 2, 3000)]
    assert (changes.macros_added, changes.macros_removed) == (["DX_NEW_LIMIT"], ["DX_OLD_LIMIT"])
    assert changes.macros_changed == ["DX_MAX_DIMS", "DX_MINOR", "DX_VERSION"]
    assert changes.old.macros["DX_VERSION"] == 1000 and changes.new.macros["DX_VERSION"] == 1100
    assert (changes.handles_added, changes.handles_removed) == (["dxGraph_t"], ["dxPlan_t"])
    assert changes.callbacks_changed == ["dxCallback_t"]


def test_struct_layouts(changes):
    layouts = dict(changes.structs_changed)
    assert layouts["dxParams_t"] == ["size 8 -> 24", "align 4 -> 8", "field `flags` added at offset 16 (c_int)",
                                     "field `scale` moved offset 4 -> offset 8", "field `scale` type c_float -> c_double"]
    assert layouts["dxValue"] == ["size 4 -> 8", "align 4 -> 8", "field `d` added at offset 0 (c_double)"]
    assert layouts["dxPair_t"] == ["size 8 -> 16", "align 4 -> 8", "field `tag` moved offset 4 -> offset 8"]


def test_override_problems_of_each_side(changes):
    assert changes.old.problems == ()
    assert set(changes.new.problems) == {"stale exception: function dxOldApi is not declared by the headers",
                                         "unclassified pointer: dxExecute.buffer (void *)"}
    module, _, _ = side("v2")
    with pytest.raises(classify.ClassificationError, match="dxExecute.buffer"):
        classify.classify(module, OVERRIDES)                      # strict stays the default


def test_markdown_lists_every_change(changes):
    text = diff.markdown(changes, "v1 dir", "v2 dir", diff.counts_table(changes.old, changes.new))
    assert text.startswith("## Dx API diff: 1.0.0 -> 1.1.0")
    assert "| functions | 1 | 2 | 2 |" in text and "| enum values (in kept enums) | 3 | 1 | 2 |" in text
    assert "| unclassified | 0 | 1 |" in text
    assert "- `dxQuery`\n  - old: `dxStatus_t dxQuery(dxHandle_t handle, int * userData)`\n" \
           "  - new: `dxStatus_t dxQuery(dxHandle_t handle, void * userData)`" in text
    assert "### Functions removed (2)" in text and "- `dxStatus_t dxOldApi(dxHandle_t handle, void * x)`" in text
    assert "- `dxStatus_t.DX_BAD_PARAM`: 1 -> 2000" in text
    assert "- `dxDataType_t.DX_OLD_TYPE` (was 7; `DX_FP8` added with this value)" in text
    assert "- `DX_MAX_DIMS`: 8 -> 12" in text
    assert "- `dxPair_t`: size 8 -> 16; align 4 -> 8; field `tag` moved offset 4 -> offset 8" in text
    assert "- unclassified pointer: dxExecute.buffer (void *)" in text
    same = diff.compare(changes.new, changes.new)
    assert same.empty and "No API change." not in diff.markdown(same)   # the new side has problems to list
    assert "No API change." in diff.markdown(diff.compare(changes.old, changes.old))


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_rendered_fixture_reads_back_and_matches_libclang(version, tmp_path):
    """A named union defined inside a struct (dxPair_t's dxValue) is emitted; layouts equal libclang's."""
    module, classification, text = side(version)
    from_ir, from_text = api.api_of_ir(module, classification), api.api_of_text(text)
    assert "dxValue" in from_ir.structs
    for name, fn in from_ir.functions.items():       # an unclassified pointer renders as a host pointer
        kinds = tuple((p, k or "host") for p, k in fn.kinds)
        from_ir.functions[name] = api.FunctionApi(fn.prototype, fn.deprecated, fn.beta, kinds)
    assert from_ir.same_surface(from_text)
    generated = import_text(text, tmp_path, "dx_generated")
    assert all_layout_problems(header_set("dx.h", FIXTURES / version), CONFIG, generated) == []


@pytest.mark.parametrize("library", ["cudnn", "miopen", "xla_ffi"])
def test_committed_module_reads_back_as_its_ir(library):
    result = pipeline.build(library)
    from_ir = api.api_of_ir(result.module, result.classification)
    from_text = api.api_of_text(result.path.read_text(), library)
    assert from_ir.same_surface(from_text)
    assert len(from_text.functions) == len(result.module.functions)
    assert len(from_text.functions) > 200 or result.config.get("types_only") and len(from_text.callbacks) >= 20
    assert from_text.structs and all(s.size for s in from_text.structs.values() if s.fields)


def test_generation_changes_reads_the_committed_module():
    result = pipeline.build("cudnn")
    committed = result.path.read_text()
    assert diff.generation_changes(committed, result) == "no change against the committed module"
    older = committed.replace("cudnnGetVersion", "cudnnGetVersionOld") \
                     .replace("    CUDNN_STATUS_BAD_PARAM = 2000", "    CUDNN_STATUS_BAD_PARAM = 3") \
                     .replace("    ('time', c_float),", "    ('time', c_double),", 1)
    text = diff.generation_changes(older, result)
    assert "- old: committed module" in text and "| functions | 1 | 1 | 0 |" in text
    assert "- `size_t cudnnGetVersion(void)`" in text
    assert "- `cudnnStatus_t.CUDNN_STATUS_BAD_PARAM`: 3 -> 2000" in text
    assert "- `cudnnConvolutionFwdAlgoPerf_t`: " in text and "field `time` type c_double -> c_float" in text
    assert "line(s) differ in total" in text.splitlines()[-1]
    fallback = diff.generation_changes("", result)
    assert "functions added: 239" in fallback and "could not be read back" in fallback


def test_versions_resolve_a_directory_holding_the_entry_header(tmp_path, capsys):
    include = versions.resolve("cudnn", "pinned").headers.entry.parent
    shutil.copytree(include, tmp_path / "include")
    source = versions.resolve("cudnn", str(tmp_path / "include"))
    assert source.headers.include_dirs[0] == tmp_path / "include"
    assert all(not (d / "cudnn.h").exists() for d in source.headers.include_dirs[1:])   # CUDA's, from the cache
    result = versions.build(source)
    assert result.module.version == "9.28.1" and result.classification.problems == []
    assert cli.main(["diff", "cudnn", "--old", str(tmp_path / "include")]) == 0
    out = capsys.readouterr().out
    assert "## cuDNN API diff: 9.28.1 -> 9.28.1" in out and "No API change." in out


def test_version_specs_and_package_names():
    assert versions.candidate_names("nvidia-cudnn-cu13") == ["nvidia-cudnn-cu13", "nvidia-cudnn-cu12",
                                                             "nvidia-cudnn-cu11"]
    assert versions.candidate_names("libfoo") == ["libfoo"]
    m = versions.VERSION.match("nvidia-cudnn-cu12==8.9.7.29")
    assert m and (m.group("name"), m.group("version")) == ("nvidia-cudnn-cu12", "8.9.7.29")
    assert versions.VERSION.match("9.1.1.17").group("name") is None
    with pytest.raises(ValueError, match="neither a directory nor a version"):
        versions.resolve("cudnn", "latest!")
    with pytest.raises(ValueError, match="Debian suite"):
        versions.resolve("miopen", "3.5.1")
    assert suites.soname_packages("libhiprtc.so.7") == ["libhiprtc7", "libhiprtc7t64"]
    assert suites.soname_packages("libroctx64.so.4")[0] == "libroctx64-4"
    assert suites.soname_packages("libamd_comgr.so.3")[0] == "libamd-comgr3"
    assert suites.soname_packages("ld-linux-x86-64.so.2") == []
