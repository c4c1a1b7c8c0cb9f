"""A maintainer's mistakes in headers.json and pointer_overrides.json end in one line each, naming the file,
the entry and the problem, with exit status 1; nothing is parsed or generated from a file that breaks its schema.

Each test edits a temporary copy of the real file (one mistake at a time) and runs the command line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import jsonschema
import pytest

from generator import __main__ as cli
from generator import config as cfg, inputs

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "python -m generator check: error: "


def _original(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _errors(capsys: pytest.CaptureFixture[str], argv: list[str], status: int = 1) -> list[str]:
    assert cli.main(argv) == status
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert lines, "no message"
    assert all(line.startswith(f"python -m generator {argv[0]}: error: ") for line in lines), captured.err
    assert "Traceback" not in captured.err
    return [line.split(": error: ", 1)[1] for line in lines]


def _with_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pointer_overrides.json"
    path.write_text(text)
    monkeypatch.setattr(cfg, "OVERRIDES_FILE", path)
    return path


def _with_headers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> Path:
    path = tmp_path / "headers.json"
    path.write_text(text)
    monkeypatch.setattr(cfg, "HEADERS_FILE", path)
    return path


def _edited(path: Path, change: Callable[[dict[str, Any]], None]) -> str:
    data = _original(path)
    change(data)
    return json.dumps(data, indent=2)


def _rule(data: dict[str, Any], rule_id: str, section: str = "", library: str = "cudnn") -> dict[str, Any]:
    rules = data[library][section]["rules"] if section else data[library]["rules"]
    return next(r for r in rules if r["id"] == rule_id)


# ------------------------------------------------------------------- the committed files and schemas

def test_committed_files_name_their_schemas_and_pass_them():
    for path, schema in ((cfg.HEADERS_FILE, "headers.schema.json"),
                         (cfg.OVERRIDES_FILE, "pointer_overrides.schema.json")):
        data = _original(path)
        assert data["$schema"] == f"schemas/{schema}"
        assert (path.parent / data["$schema"]).is_file()
        schema_doc = json.loads((inputs.SCHEMA_DIR / schema).read_text())
        jsonschema.Draft202012Validator.check_schema(schema_doc)
        assert list(inputs.problems_of(json.loads(path.read_text()), schema)) == []
    cfg.validate()


def test_every_overrides_section_has_its_own_sub_schema():
    """One sub-schema per section (so a section is added in one place), every section of the file among them."""
    schema = json.loads((inputs.SCHEMA_DIR / "pointer_overrides.schema.json").read_text())
    sections = schema["$defs"]["library"]["properties"]
    for name, sub in sections.items():
        assert sub["$ref"].startswith("#/$defs/") and sub["$ref"][8:] in schema["$defs"], name
    used = {key for library in _original(cfg.OVERRIDES_FILE).values() if isinstance(library, dict) for key in library}
    assert used <= set(sections)
    assert schema["$defs"]["library"]["additionalProperties"] is False


# -------------------------------------------------------------------- the mistakes of the table

def test_json_syntax_error_is_file_line_column(monkeypatch, capsys, tmp_path):
    original = cfg.OVERRIDES_FILE.read_text()
    marker = '"pointee": [\n          "void"\n        ],'
    broken = original.replace(marker, '"pointee": [\n          "void"\n        ', 1)     # an unfinished list
    path = _with_overrides(monkeypatch, tmp_path, broken)
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads(broken)
    lines = _errors(capsys, ["check", "cudnn"])
    assert lines == [f"{path}:{info.value.lineno}:{info.value.colno}: JSON syntax error: {info.value.msg}"]


def test_json_syntax_error_in_a_fresh_process_has_no_traceback(tmp_path):
    path = tmp_path / "headers.json"
    path.write_text(cfg.HEADERS_FILE.read_text().replace('"source": "pypi",', '"source": "pypi"', 1))
    code = ("import sys; from pathlib import Path; from generator import config as cfg, __main__ as cli; "
            f"cfg.HEADERS_FILE = Path({str(path)!r}); sys.exit(cli.main(['report', 'cudnn']))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"python -m generator report: error: {path}:")
    assert "JSON syntax error: Expecting ',' delimiter" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_misspelled_key_in_a_rule(monkeypatch, capsys, tmp_path):
    def change(data):
        rule = _rule(data, "scaling-factors")
        rule["nmae"] = rule.pop("name")
    path = _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    lines = _errors(capsys, ["check", "cudnn"])
    assert lines == [f"{path}: cudnn.rules[scaling-factors]: unknown key 'nmae' "
                     "(valid keys here: id, kind, pointee, name, name_not, function, why)"]


def test_misspelled_key_never_changes_a_generated_module(monkeypatch, capsys, tmp_path):
    """`generate` refuses before writing anything: the committed module is untouched."""
    module = ROOT / cfg.load_all()["miopen"]["module"]
    before = module.read_bytes(), module.stat().st_mtime_ns

    def change(data):
        rule = _rule(data, "scratch", library="miopen")
        rule["nmae"] = rule.pop("name")
    _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    lines = _errors(capsys, ["generate", "miopen"])
    assert len(lines) == 1 and "miopen.rules[scratch]: unknown key 'nmae'" in lines[0]
    assert (module.read_bytes(), module.stat().st_mtime_ns) == before


def test_invalid_kind_in_a_rule(monkeypatch, capsys, tmp_path):
    def change(data):
        _rule(data, "tensor-data")["kind"] = "devise"
    path = _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    assert _errors(capsys, ["check", "cudnn"]) == [
        f'{path}: cudnn.rules[tensor-data].kind: "devise" is not one of: device, host, either']


def test_unbalanced_regular_expression_in_a_rule_name(monkeypatch, capsys, tmp_path):
    def change(data):
        _rule(data, "scaling-factors")["name"] = r"(alpha|beta\w*"
    path = _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    lines = _errors(capsys, ["check", "cudnn"])
    assert len(lines) == 1
    assert lines[0].startswith(f"{path}: cudnn.rules[scaling-factors].name: invalid regular expression "
                               r"'(alpha|beta\\w*': missing ), unterminated subpattern")


def test_key_no_rule_has(monkeypatch, capsys, tmp_path):
    def change(data):
        _rule(data, "scaling-factors")["nmae_not"] = "x"
    path = _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    lines = _errors(capsys, ["check", "cudnn"])
    assert lines == [f"{path}: cudnn.rules[scaling-factors]: unknown key 'nmae_not' "
                     "(valid keys here: id, kind, pointee, name, name_not, function, why)"]


def test_rule_id_used_twice(monkeypatch, capsys, tmp_path):
    def change(data):
        _rule(data, "host-values")["id"] = "scaling-factors"
    path = _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    lines = _errors(capsys, ["check", "cudnn"])
    assert len(lines) == 1
    assert lines[0].startswith(f"{path}: cudnn.rules[scaling-factors]: rule id 'scaling-factors' is used 2 times")


def test_misspelled_section(monkeypatch, capsys, tmp_path):
    def change(data):
        data["cudnn"]["nullabel"] = {"rules": []}
    path = _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    lines = _errors(capsys, ["check", "cudnn"])
    assert len(lines) == 1
    assert lines[0].startswith(f"{path}: cudnn: unknown key 'nullabel' (valid keys here: rules, exceptions, ")


def test_syntax_error_in_a_vendor_header_names_file_and_line(capsys, tmp_path):
    include = tmp_path / "nvidia" / "cudnn" / "include"
    include.mkdir(parents=True)
    (include / "cudnn.h").write_text("int fine(void);\nint broken(;\n")
    lines = _errors(capsys, ["report", "cudnn", "--headers", str(tmp_path)])
    assert lines[0].endswith("error diagnostic(s) parsing cudnn.h:")
    assert len(lines) >= 2 and all(f"{include / 'cudnn.h'}:2: " in line for line in lines[1:])


# ----------------------------------------------------------------------- more mistakes of the same kinds

OVERRIDE_MISTAKES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("missing required key",
     lambda d: _rule(d, "scratch").pop("kind"),
     "cudnn.rules[scratch]: missing required key 'kind'"),
    ("missing rule id in lengths",
     lambda d: _rule(d, "message-buffer", "lengths").pop("id"),
     "cudnn.lengths.rules[4]: missing required key 'id'"),
    ("wrong type: pointee as a string",
     lambda d: _rule(d, "scratch").update(pointee="void"),
     'cudnn.rules[scratch].pointee: must be a list, not a string ("void")'),
    ("wrong type: fixed length as a string",
     lambda d: _rule(d, "scaling-factors", "lengths").update(fixed="4"),
     'cudnn.lengths.rules[scaling-factors].fixed: must be an integer, not a string ("4")'),
    ("wrong type: nullable as a string",
     lambda d: _rule(d, "outputs-required", "nullable").update(nullable="no"),
     'cudnn.nullable.rules[outputs-required].nullable: must be true or false, not a string ("no")'),
    ("unknown pointee kind",
     lambda d: _rule(d, "scratch", library="miopen").update(pointee=["viod"]),
     'miopen.rules[scratch].pointee[0]: "viod" is not one of: void, int, float'),
    ("unknown kind in an exception",
     lambda d: d["cudnn"]["exceptions"]["cudnnGetFusedOpsVariantParamPackAttribute"].update(ptr="hots"),
     'cudnn.exceptions.cudnnGetFusedOpsVariantParamPackAttribute.ptr: "hots" is not one of: device, host, either'),
    ("bad regex in byte_sizes",
     lambda d: d["miopen"].update(byte_sizes=r"\w*[sS]izeInBytes|[workspace"),
     r"miopen.byte_sizes: invalid regular expression '\\w*[sS]izeInBytes|[workspace': unterminated character set"),
    ("bad regex in a length rule's count",
     lambda d: _rule(d, "message-buffer", "lengths").update(count="max_size)"),
     "cudnn.lengths.rules[message-buffer].count: invalid regular expression 'max_size)': unbalanced parenthesis"),
    ("bad regex in unset_handles.setters",
     lambda d: d["miopen"]["unset_handles"].update(setters="miopen(Set|Init\\w*"),
     "miopen.unset_handles.setters: invalid regular expression"),
    ("duplicate id in lengths rules",
     lambda d: _rule(d, "message-buffer", "lengths").update(id="sequence-lengths"),
     "cudnn.lengths.rules[sequence-lengths]: rule id 'sequence-lengths' is used 2 times in this list (positions 1, 4)"),
    ("duplicate id in nullable rules",
     lambda d: d["miopen"]["nullable"]["rules"].append(dict(d["miopen"]["nullable"]["rules"][0])),
     "miopen.nullable.rules[outputs-required]: rule id 'outputs-required' is used 2 times"),
    ("unknown key in a length exception",
     lambda d: d["cudnn"]["lengths"]["exceptions"]["cudnnSetTensorTransformDescriptor"]["foldA"].update(minsu=2),
     "cudnn.lengths.exceptions.cudnnSetTensorTransformDescriptor.foldA: unknown key 'minsu'"),
    ("two length sources",
     lambda d: d["cudnn"]["lengths"]["exceptions"]["cudnnSetSeqDataDescriptor"]["paddingFill"].update(count="n"),
     "cudnn.lengths.exceptions.cudnnSetSeqDataDescriptor.paddingFill: needs exactly one of fixed, count, query, "
     "unchecked (has fixed, count)"),
    ("no length source",
     lambda d: d["cudnn"]["lengths"]["exceptions"]["cudnnSetSeqDataDescriptor"]["paddingFill"].pop("fixed"),
     "cudnn.lengths.exceptions.cudnnSetSeqDataDescriptor.paddingFill: needs exactly one of fixed, count, query, "
     "unchecked (has none)"),
    ("size_by without sizes",
     lambda d: _rule(d, "backend-attribute-values", "lengths").pop("sizes"),
     "cudnn.lengths.rules[backend-attribute-values]: 'size_by' needs 'sizes'"),
    ("function name that is not an identifier",
     lambda d: d["cudnn"]["nullable"]["exceptions"].update({"cudnnGetLRN Descriptor": ["lrnN"]}),
     "cudnn.nullable.exceptions: key 'cudnnGetLRN Descriptor' is not a C identifier"),
    ("handle type list given as a string",
     lambda d: d["cudnn"]["nullable_handles"].update(types="cudnnHandle_t"),
     'cudnn.nullable_handles.types: must be a list, not a string ("cudnnHandle_t")'),
    ("element size that is not a number",
     lambda d: d["cudnn"]["element_sizes"]["cudnnBackendAttributeType_t"].update(CUDNN_TYPE_INT64="8"),
     'cudnn.element_sizes.cudnnBackendAttributeType_t.CUDNN_TYPE_INT64: must be an integer, not a string ("8")'),
    ("misspelled key in handle_values",
     lambda d: d["cudnn"]["handle_values"].update(input=d["cudnn"]["handle_values"].pop("inputs")),
     "cudnn.handle_values: unknown key 'input' (valid keys here: inputs, outputs, why)"),
    ("schema not named",
     lambda d: d.pop("$schema"),
     '(top level): "$schema" must name the file\'s schema: "schemas/pointer_overrides.schema.json"'),
]


@pytest.mark.parametrize("change, expected", [pytest.param(c, e, id=name) for name, c, e in OVERRIDE_MISTAKES])
def test_override_mistakes_are_one_line_naming_file_and_entry(monkeypatch, capsys, tmp_path, change, expected):
    path = _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    lines = _errors(capsys, ["check", "cudnn"])
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{path}: {expected}"), lines[0]


def test_every_mistake_is_listed_not_only_the_first(monkeypatch, capsys, tmp_path):
    def change(data):
        _rule(data, "scratch")["kind"] = "devise"
        _rule(data, "scaling-factors", library="miopen")["nmae"] = "alpha"
    _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    lines = _errors(capsys, ["check", "cudnn"])
    assert len(lines) == 2
    assert "cudnn.rules[scratch].kind" in lines[0] and "miopen.rules[scaling-factors]: unknown key 'nmae'" in lines[1]


def test_function_given_twice_in_one_object(monkeypatch, capsys, tmp_path):
    text = cfg.OVERRIDES_FILE.read_text().replace(
        '"exceptions": {\n      "miopenKthvalueForward": {',
        '"exceptions": {\n      "miopenKthvalueForward": {"indices": "host"},\n      "miopenKthvalueForward": {', 1)
    path = _with_overrides(monkeypatch, tmp_path, text)
    assert _errors(capsys, ["check", "cudnn"]) == [
        f"{path}: miopen.exceptions: key 'miopenKthvalueForward' is given more than once (JSON keeps only the last)"]


def test_library_without_overrides(monkeypatch, capsys, tmp_path):
    path = _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, lambda d: d.pop("miopen")))
    assert _errors(capsys, ["check", "cudnn"]) == [
        f"{path}: (top level): no entry for library 'miopen' (headers.json has one; libraries here: cudnn)"]


def test_types_only_library_needs_no_loader_keys_and_no_overrides():
    """A types-only API (XLA's FFI) names no library, status type or error class, and needs no entry in
    pointer_overrides.json (it has no functions, so no pointer parameters)."""
    data = _original(cfg.HEADERS_FILE)
    assert data["xla_ffi"]["types_only"] is True and "sonames" not in data["xla_ffi"]
    assert list(inputs.problems_of(data, "headers.schema.json")) == []
    assert "xla_ffi" not in _original(cfg.OVERRIDES_FILE)
    assert cfg.load_overrides("xla_ffi") == {"rules": [], "exceptions": {}}


def test_same_rule_id_in_two_sections_is_allowed():
    """Rule ids are counted per section (``length:scaling-factors`` beside the kind rule ``scaling-factors``)."""
    data = _original(cfg.OVERRIDES_FILE)
    kinds = {r["id"] for r in data["cudnn"]["rules"]}
    lengths = {r["id"] for r in data["cudnn"]["lengths"]["rules"]}
    assert "scaling-factors" in kinds & lengths
    assert list(inputs.problems_of(data, "pointer_overrides.schema.json")) == []


def test_stale_function_name_is_a_message_naming_the_entry(monkeypatch, capsys, tmp_path):
    def change(data):
        exceptions = data["cudnn"]["nullable"]["exceptions"]
        exceptions["cudnnGetLRNDescriptorr"] = exceptions.pop("cudnnGetLRNDescriptor")
    _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    lines = _errors(capsys, ["report", "cudnn"])
    assert lines[0].startswith("1 problem(s) in pointer_overrides.json for cudnn")
    assert lines[1:] == ["pointer_overrides.json: cudnn: stale nullable exception: function cudnnGetLRNDescriptorr "
                         "is not declared by the headers"]


# ---------------------------------------------------------------------------------------- headers.json

HEADER_MISTAKES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("unknown key", lambda d: d["cudnn"].update(soname=["libcudnn.so.9"]), "cudnn: unknown key 'soname'"),
    ("missing entry", lambda d: d["miopen"].pop("entry"), "miopen: missing required key 'entry'"),
    ("sonames as a string", lambda d: d["cudnn"].update(sonames="libcudnn.so.9"),
     'cudnn.sonames: must be a list, not a string ("libcudnn.so.9")'),
    ("unknown source", lambda d: d["cudnn"].update(source="conda"),
     'cudnn.source: "conda" is not one of: pypi, debian'),
    ("a pin that is no sha256", lambda d: d["cudnn"]["packages"][0]["sha256"].update(
        {next(iter(d["cudnn"]["packages"][0]["sha256"])): "abc"}),
     "cudnn.packages[nvidia-cudnn-cu13].sha256."),
    ("comments not shipped without a reference to link",
     lambda d: d["cudnn"].pop("api_reference"), "cudnn: missing required key 'api_reference'"),
    ("comments shipped without the license notice",
     lambda d: d["miopen"].pop("license_file"), "miopen: missing required key 'license_file'"),
    ("ship_comments as a string", lambda d: d["miopen"].update(ship_comments="yes"),
     'miopen.ship_comments: must be true or false, not a string ("yes")'),
    ("misspelled library search step", lambda d: d["miopen"]["library_search"].append(["dirr", "/opt/rocm/lib"]),
     'miopen.library_search[3]: ["dirr", "/opt/rocm/lib"] is none of the forms allowed here'),
    ("a library that loads one names its sonames", lambda d: d["cudnn"].pop("sonames"),
     "cudnn: missing required key 'sonames'"),
    ("types_only as a string", lambda d: d["xla_ffi"].update(types_only="yes"),
     'xla_ffi.types_only: must be true or false, not a string ("yes")'),
    ("a library to load without what it loads", lambda d: d["xla_ffi"].update(types_only=False),
     "xla_ffi: missing required key 'sonames', 'status_type', 'error_string', 'version_function', 'library_env', "
     "'library_search', 'install_hint', 'error_class', 'version_reader'"),
]


@pytest.mark.parametrize("change, expected", [pytest.param(c, e, id=name) for name, c, e in HEADER_MISTAKES])
def test_headers_mistakes_are_one_line_naming_file_and_entry(monkeypatch, capsys, tmp_path, change, expected):
    path = _with_headers(monkeypatch, tmp_path, _edited(cfg.HEADERS_FILE, change))
    lines = _errors(capsys, ["check", "cudnn"])
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{path}: {expected}"), lines[0]


# ------------------------------------------------------------------ entries checked against the headers

def _query_entry(data: dict[str, Any]) -> dict[str, Any]:
    return data["miopen"]["lengths"]["exceptions"]["miopenGetTensorDescriptor"]["dimsA"]


HEADER_CROSSCHECKS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("query without args", lambda d: _query_entry(d).pop("args"),
     "lengths.exceptions.miopenGetTensorDescriptor.dimsA: args gives 0 argument(s) (none); query "
     "miopenGetTensorDescriptorSize takes 1 before its count output"),
    ("query args naming no parameter", lambda d: _query_entry(d).update(args=["tensorDescc"]),
     "lengths.exceptions.miopenGetTensorDescriptor.dimsA: args names 'tensorDescc', no parameter of "
     "miopenGetTensorDescriptor"),
    ("query naming no function", lambda d: _query_entry(d).update(query="miopenGetTensorDescriptorSizee"),
     "lengths.exceptions.miopenGetTensorDescriptor.dimsA: query 'miopenGetTensorDescriptorSizee' is not a "
     "function of the headers"),
    ("query naming no count query", lambda d: _query_entry(d).update(query="miopenCreateTensorDescriptor"),
     "lengths.exceptions.miopenGetTensorDescriptor.dimsA: query 'miopenCreateTensorDescriptor' is no count query"),
    ("count naming no parameter",
     lambda d: d["miopen"]["lengths"]["exceptions"]["miopenCatForward"]["xs"].update(count="xCnt"),
     "lengths.exceptions.miopenCatForward.xs: count 'xCnt' names no integer parameter of miopenCatForward"),
    ("element size of a member the enum lacks",
     lambda d: d["cudnn"]["element_sizes"]["cudnnBackendAttributeType_t"].update(CUDNN_TYPE_FOO=4),
     "element_sizes.cudnnBackendAttributeType_t: CUDNN_TYPE_FOO is no member of the headers' "
     "cudnnBackendAttributeType_t"),
    ("element sizes of an enum the headers lack",
     lambda d: d["cudnn"]["element_sizes"].update(cudnnBackendAttributeTypo_t={"CUDNN_TYPE_FLOAT": 4}),
     "element_sizes.cudnnBackendAttributeTypo_t: cudnnBackendAttributeTypo_t is no enum of the headers"),
]


@pytest.mark.parametrize("change, expected", [pytest.param(c, e, id=name) for name, c, e in HEADER_CROSSCHECKS])
def test_entries_naming_what_the_headers_lack(monkeypatch, capsys, tmp_path, change, expected):
    """Entries the schema accepts but the headers contradict: a problem line naming the file, the library, the
    entry and the bad value, exit status 1 (never a module that does not compile, nor a traceback)."""
    _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    library = "miopen" if "miopen" in expected else "cudnn"
    lines = _errors(capsys, ["check", library])
    assert any(line.startswith(f"pointer_overrides.json: {library}: {expected}") for line in lines), lines


def test_library_that_headers_json_lacks(monkeypatch, capsys, tmp_path):
    path = _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE,
                                                          lambda d: d.update(cudnnn={"rules": [], "exceptions": {}})))
    assert _errors(capsys, ["check", "cudnn"]) == [
        f"{path}: cudnnn: no library of that name in headers.json (libraries there: cudnn, miopen, xla_ffi)"]


@pytest.mark.parametrize("key, value", [("error_string", "cudnnGetErrorStrin"),
                                        ("last_error", "cudnnGetLastErrorMessage"),
                                        ("version_function", "cudnnGetVersio")])
def test_headers_json_functions_the_headers_lack(monkeypatch, capsys, tmp_path, key, value):
    """A function headers.json names (the module calls it at import or on every error) that the headers do not
    declare: refused, naming headers.json, the key and the function."""
    path = _with_headers(monkeypatch, tmp_path, _edited(cfg.HEADERS_FILE, lambda d: d["cudnn"].update({key: value})))
    assert _errors(capsys, ["check", "cudnn"]) == [
        "1 problem(s) in headers.json for cudnn:", f"{path}: cudnn.{key}: {value} is not a function of the headers"]


def test_backend_problems_come_with_the_others_in_one_run(monkeypatch, capsys, tmp_path):
    """Backend-attribute problems are reported in the same run as the other override problems, and their lines
    name the file and library like every other problem line."""
    def change(data):
        data["cudnn"]["backend_attributes"]["attributes"]["CUDNN_ATTR_POINTWISE_MODE"]["type"] = "CUDNN_TYPE_MOD"
        data["cudnn"]["exceptions"]["cudnnGnnMhaGatForward"]["dropoutMsk"] = "device"
    _with_overrides(monkeypatch, tmp_path, _edited(cfg.OVERRIDES_FILE, change))
    assert _errors(capsys, ["check", "cudnn"]) == [
        "2 problem(s) in pointer_overrides.json for cudnn:",
        "pointer_overrides.json: cudnn: stale exception: cudnnGnnMhaGatForward has no parameter 'dropoutMsk'",
        "pointer_overrides.json: cudnn: backend_attributes.attributes.CUDNN_ATTR_POINTWISE_MODE: type "
        "'CUDNN_TYPE_MOD' is no member of cudnnBackendAttributeType_t"]
