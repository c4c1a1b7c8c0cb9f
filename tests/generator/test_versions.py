"""Older and newer vendor releases than the pinned ones, with the generator unchanged (slow: the first
run downloads ~1.4 GB of cuDNN wheels from PyPI and ~0.3 GB of Debian packages into .cache/; run them
with `make test-versions`).

cuDNN 8.9.7.29 and 9.1.1.17 (nvidia-cudnn-cu12) parse with the pinned CUDA 13.5 headers, render, and
read back; their diffs against the pinned 9.28.1 are checked; the pinned module runs against the 9.1
library. MIOpen: Debian experimental's release, against sid's pinned one, in both directions. XLA's FFI C API:
jaxlib 0.8.1's header against the pinned jaxlib's.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import miopen_runner
from fixture_build import clang_fields, enum_problems, import_text, layout_problems, records, translation_unit
from generator import __main__ as cli
from generator import api, config as cfg, diff, pipeline, suites, versions

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CUDNN = {"8.9.7.29": ("8.9.7", 264), "9.1.1.17": ("9.1.1", 218), "pinned": ("9.28.1", 239)}


def quiet(_: str) -> None:
    """Progress lines of the fetchers are not test output."""


@pytest.fixture(scope="module")
def cudnn_builds() -> dict[str, tuple[versions.HeaderSource, pipeline.Result]]:
    sources = {spec: versions.resolve("cudnn", spec, log=quiet) for spec in CUDNN}
    return {spec: (source, versions.build(source)) for spec, source in sources.items()}


def cudnn_changes(builds, old: str) -> diff.Changes:
    (_, before), (_, after) = builds[old], builds["pinned"]
    return diff.compare(api.api_of_ir(before.module, before.classification),
                        api.api_of_ir(after.module, after.classification))


def exported(library: Path) -> set[str]:
    """The dynamic symbols a shared object defines (``nm -D --defined-only``), version suffixes dropped."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def record_problems(source: versions.HeaderSource, generated) -> list[str]:
    """Every difference between the generated ctypes layouts and libclang's, for every record with fields
    (MIOpen's C++ handle tags are empty records, used only through their pointers)."""
    problems: list[str] = []
    tu = translation_unit(source.headers, source.config)
    for names, record in sorted(records(tu, source.headers, source.config).items()):
        if clang_fields(record):
            cls = next((getattr(generated, n) for n in names if hasattr(generated, n)), None)
            problems += layout_problems(cls, record, names[0]) if cls is not None else [f"{names}: missing"]
    return problems


def without_unclassified(a: api.Api) -> api.Api:
    """An unclassified pointer renders as a host pointer; compare the rest exactly."""
    functions = {n: api.FunctionApi(f.prototype, f.deprecated, f.beta, tuple((p, k or "host") for p, k in f.kinds))
                 for n, f in a.functions.items()}
    return api.Api(a.library, a.title, a.version, functions, a.enums, a.macros, a.structs, a.handles, a.callbacks)


@pytest.mark.parametrize("spec", list(CUDNN))
def test_cudnn_release_parses_renders_and_matches_libclang(spec, cudnn_builds, tmp_path):
    version, functions = CUDNN[spec]
    source, result = cudnn_builds[spec]
    assert result.module.version == version and len(result.module.functions) == functions
    report = pipeline.report_text(result)
    assert report.startswith(f"cuDNN {version} (cudnn.h)") and f"functions:   {functions} (" in report
    generated = import_text(result.text, tmp_path, f"cudnn_{version.replace('.', '_')}")
    assert generated.HEADER_VERSION == version and not generated._lib.loaded
    assert without_unclassified(api.api_of_ir(result.module, result.classification)).same_surface(
        api.api_of_text(result.text))
    assert record_problems(source, generated) == []
    assert enum_problems(source.headers, source.config, generated) == []


def test_cudnn_8_9_to_pinned_diff(cudnn_builds, tmp_path, capsys):
    c = cudnn_changes(cudnn_builds, "8.9.7.29")
    assert (len(c.functions_added), len(c.functions_removed), len(c.functions_changed)) == (30, 55, 0)
    assert {"cudnnRNNForwardTraining", "cudnnRNNBackwardData", "cudnnGetRNNWorkspaceSize", "cudnnSetRNNDescriptor_v6",
            "cudnnGetRNNDescriptor_v6", "cudnnFindRNNForwardTrainingAlgorithmEx", "cudnnCreateAlgorithmDescriptor",
            "cudnnGetAlgorithmSpaceSize", "cudnnCreatePersistentRNNPlan"} <= set(c.functions_removed)
    assert {"cudnnGetLastErrorString", "cudnnGraphVersionCheck", "cudnnRNNSetClip_v9"} <= set(c.functions_added)
    assert ("cudnnStatus_t", "CUDNN_STATUS_BAD_PARAM", 3, 2000) in c.values_renumbered
    assert c.handles_removed == ["cudnnAlgorithmDescriptor_t", "cudnnAlgorithmPerformance_t", "cudnnPersistentRNNPlan_t"]
    assert c.structs_removed == ["Algorithm", "cudnnAlgorithm_t"]
    assert c.new.problems == () and "unclassified pointer: cudnnSaveAlgorithm.algoSpace (void *)" in c.old.problems
    assert cli.main(["diff", "cudnn", "--old", "8.9.7.29", "--output", str(tmp_path / "diff.md")]) == 0
    text = (tmp_path / "diff.md").read_text()
    assert text in capsys.readouterr().out
    assert text.startswith("## cuDNN API diff: 8.9.7 -> 9.28.1") and "| functions | 30 | 55 | 0 |" in text
    assert "- `CUDNN_MAJOR`: 8 -> 9" in text and "### Functions newly deprecated (135)" in text


def test_cudnn_9_1_to_pinned_diff(cudnn_builds):
    c = cudnn_changes(cudnn_builds, "9.1.1.17")
    assert (len(c.functions_added), c.functions_removed, c.functions_changed) == (21, [], [])
    assert c.newly_deprecated == ["cudnnBackendInitialize"]
    assert ("cudnnBackendKnobType_t", "CUDNN_KNOB_TYPE_COUNTS", 37, 46) in c.values_renumbered
    assert c.old.problems == tuple(f"stale exception: function cudnnGnnMhaGat{v} is not declared by the headers"
                                   for v in ("Backward", "Forward", "V2Backward", "V2Forward"))


CUDNN_CHILD = """
    import json, warnings
    from ctypes import byref
    import numpy as np
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from dnnbind.gen import cudnn
        from dnnbind.runtime.errors import SymbolNotFoundError
        loaded_at_import = cudnn._lib.loaded
        x = cudnn.cudnnTensorDescriptor_t(); cudnn.cudnnCreateTensorDescriptor(byref(x))
        cudnn.cudnnSetTensor4dDescriptor(x, cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_DATA_FLOAT, 8, 64, 56, 56)
        w = cudnn.cudnnFilterDescriptor_t(); cudnn.cudnnCreateFilterDescriptor(byref(w))
        cudnn.cudnnSetFilter4dDescriptor(w, cudnn.CUDNN_DATA_FLOAT, cudnn.CUDNN_TENSOR_NCHW, 128, 64, 3, 3)
        conv = cudnn.cudnnConvolutionDescriptor_t(); cudnn.cudnnCreateConvolutionDescriptor(byref(conv))
        cudnn.cudnnSetConvolutionNdDescriptor(conv, 2, [1, 1], [2, 2], [1, 1], cudnn.CUDNN_CROSS_CORRELATION,
                                              cudnn.CUDNN_DATA_FLOAT)
        out = np.zeros(4, np.int32)
        cudnn.cudnnGetConvolutionNdForwardOutputDim(conv, x, w, 4, out)
        errors = {}
        for name in MISSING:
            try:                          # binding the symbol is what fails (arguments are checked first)
                getattr(cudnn.unchecked, name)
            except SymbolNotFoundError as exc:
                errors[name] = str(exc)
    print(json.dumps({"loaded_at_import": loaded_at_import, "version": cudnn.library_version(),
                      "path": cudnn.library_path(), "out": out.tolist(), "errors": errors,
                      "runtime_warnings": [str(c.message) for c in caught if c.category is RuntimeWarning]}))
"""


def test_pinned_cudnn_module_against_the_9_1_library(cudnn_builds):
    """Host-side calls work; what 9.1 lacks fails when called, by name; no warning (same major)."""
    root = versions.fetch_pypi_version("cudnn", "9.1.1.17", libraries=True, log=quiet)
    library = root / "nvidia/cudnn/lib/libcudnn.so.9"
    module_functions = set(api.api_of_text(cudnn_builds["pinned"][1].path.read_text()).functions)
    missing = sorted(module_functions - exported(library))
    assert missing == cudnn_changes(cudnn_builds, "9.1.1.17").functions_added   # the header diff predicts it
    code = f"MISSING = {missing!r}\n" + textwrap.dedent(CUDNN_CHILD)
    env = {"DNNBIND_CUDNN_LIBRARY": str(library), "PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert child.returncode == 0, child.stderr
    facts = json.loads(child.stdout.strip().splitlines()[-1])
    assert facts["loaded_at_import"] is False and facts["path"] == str(library)
    assert facts["version"] == [9, 1, 1] and facts["out"] == [8, 128, 28, 28]
    assert facts["runtime_warnings"] == []
    assert sorted(facts["errors"]) == missing
    assert facts["errors"]["cudnnGetExecutionPlanWorkspaceSize"].startswith(
        "cudnnGetExecutionPlanWorkspaceSize is not in libcudnn.so.9 9.1.1 (loaded from ")
    assert "declared in the 9.28.1 headers" in facts["errors"]["cudnnGetExecutionPlanWorkspaceSize"]


# -------------------------------------------------------------------------------------------------- MIOpen

@pytest.fixture(scope="module")
def miopen_next() -> tuple[versions.HeaderSource, pipeline.Result, diff.Changes]:
    """Debian experimental's MIOpen headers and their diff against the pinned (sid) ones."""
    pinned = versions.build(versions.resolve("miopen", "pinned"))
    source = versions.resolve("miopen", "experimental", log=quiet)
    result = versions.build(source)
    if result.module.version == pinned.module.version:
        pytest.skip(f"Debian experimental has no other MIOpen than the pinned {pinned.module.version}")
    changes = diff.compare(api.api_of_ir(pinned.module, pinned.classification),
                           api.api_of_ir(result.module, result.classification))
    return source, result, changes


def test_miopen_experimental_headers(miopen_next, tmp_path):
    source, result, changes = miopen_next
    assert result.module.version.split(".")[0] == "3" and result.classification.problems == []
    assert changes.functions_added and changes.functions_removed == []
    generated = import_text(result.text, tmp_path, "miopen_next")
    assert record_problems(source, generated) == []
    assert api.api_of_ir(result.module, result.classification).same_surface(api.api_of_text(result.text))


def debian_root(root: Path) -> miopen_runner.DebianRoot:
    dirs = tuple(root / d for d in cfg.load_all()["miopen"]["library_dirs"])
    return miopen_runner.DebianRoot(root, dirs, dirs[0] / miopen_runner.LOADER, dirs[0] / "libMIOpen.so.1",
                                    "DNNBIND_MIOPEN_LIBRARY")


MIOPEN_CHILD = """
    import json, warnings
    from ctypes import byref, c_int
    import numpy as np
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import importlib
        m = importlib.import_module(MODULE)
        from dnnbind.runtime.errors import SymbolNotFoundError
        x = m.miopenTensorDescriptor_t(); m.miopenCreateTensorDescriptor(byref(x))
        w = m.miopenTensorDescriptor_t(); m.miopenCreateTensorDescriptor(byref(w))
        m.miopenSet4dTensorDescriptor(x, m.miopenFloat, 8, 64, 56, 56)
        m.miopenSet4dTensorDescriptor(w, m.miopenFloat, 128, 64, 3, 3)
        conv = m.miopenConvolutionDescriptor_t(); m.miopenCreateConvolutionDescriptor(byref(conv))
        m.miopenInitConvolutionNdDescriptor(conv, 2, [1, 1], [2, 2], [1, 1], m.miopenConvolution)
        n = c_int(); out = np.zeros(4, np.int32)
        m.miopenGetConvolutionNdForwardOutputDim(conv, x, w, byref(n), out)
        errors = {}
        for name in MISSING:
            try:                          # binding the symbol is what fails (arguments are checked first)
                getattr(m.unchecked, name)
            except SymbolNotFoundError as exc:
                errors[name] = str(exc)
    print(json.dumps({"version": m.library_version(), "header": m.HEADER_VERSION, "out": out.tolist(),
                      "errors": errors, "runtime_warnings": [str(c.message) for c in caught
                                                             if c.category is RuntimeWarning]}))
"""


def run_miopen(root: miopen_runner.DebianRoot, module: str, missing: list[str], path: Path) -> dict:
    code = f"MODULE = {module!r}\nMISSING = {missing!r}\n" + textwrap.dedent(MIOPEN_CHILD)
    env = miopen_runner.environment(root)
    env["PYTHONPATH"] = f"{path}:{env['PYTHONPATH']}"
    child = subprocess.run(miopen_runner.command(["-c", code], root), env=env, capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_pinned_miopen_module_against_the_experimental_library(miopen_next, tmp_path):
    _, result, _ = miopen_next
    root = debian_root(suites.fetch_runtime("miopen", "experimental", log=quiet))
    pinned_functions = set(api.api_of_text((ROOT / "src/dnnbind/gen/miopen.py").read_text()).functions)
    assert pinned_functions <= exported(root.library)          # a newer library keeps the older API
    facts = run_miopen(root, "dnnbind.gen.miopen", [], tmp_path)
    assert facts["header"] == "3.4.0" and ".".join(map(str, facts["version"])) == result.module.version
    assert facts["out"] == [8, 128, 28, 28] and facts["runtime_warnings"] == []


def test_experimental_miopen_module_against_the_pinned_library(miopen_next, tmp_path):
    _, result, changes = miopen_next
    root = miopen_runner.find_root()
    missing = sorted(set(changes.functions_added) - exported(root.library))
    assert missing, "the pinned library should lack what the newer headers added"
    (tmp_path / "miopen_next.py").write_text(result.text)
    facts = run_miopen(root, "miopen_next", missing, tmp_path)
    assert facts["version"] == [3, 4, 0] and facts["header"] == result.module.version
    assert facts["out"] == [8, 128, 28, 28] and facts["runtime_warnings"] == []
    assert sorted(facts["errors"]) == missing
    first = facts["errors"][missing[0]]
    assert first.startswith(f"{missing[0]} is not in libMIOpen.so.1 3.4.0 (loaded from ")
    assert f"declared in the {result.module.version} headers" in first


def test_xla_ffi_0_2_to_pinned_diff(tmp_path, capsys):
    """XLA's FFI C API from jaxlib 0.8.1 (API 0.2) against the pinned jaxlib's (0.3): the diff shows the layout
    change a minor version brought (why dnnbind.jax accepts only the API version it was generated for)."""
    assert cli.main(["diff", "xla_ffi", "--old", "0.8.1", "--output", str(tmp_path / "diff.md")]) == 0
    text = (tmp_path / "diff.md").read_text()
    assert text in capsys.readouterr().out
    assert text.startswith("## XLA FFI API diff: 0.2 -> 0.3") and "- `XLA_FFI_API_MINOR`: 2 -> 3" in text
    assert "- `XLA_FFI_State_Get_Args`: size 40 -> 48; field `stage` added at offset 24 (c_int)" in text
