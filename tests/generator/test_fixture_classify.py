"""classify() against the override file: every failure it must report, on fixtures/classify_errors.h."""
from __future__ import annotations

from typing import Any

import pytest

import fixture_build as fb
from generator import classify, ir

RULES: list[dict[str, Any]] = [
    {"id": "scaling-factors", "kind": "host", "pointee": ["void"], "name": "alpha"},
    {"id": "scratch", "kind": "device", "pointee": ["void"], "name": "workSpace"},
    {"id": "typed-host", "kind": "host", "pointee": ["int", "float", "char", "enum", "handle", "struct"]},
]
CLEAN_EXCEPTIONS = {"fxOrphan": {"mystery": "device"}}
SIZES = r"\w*SizeInBytes"
#: what every call below also passes: host pointers' lengths and nullability (tested on their own at the end)
LENGTHS: dict[str, Any] = {
    "lengths": {"rules": [{"id": "scaling-factors", "pointee": ["void"], "name": "alpha", "fixed": 4},
                          {"id": "single-values", "pointee": ["int"], "fixed": 1}]},
    "nullable": {"rules": [{"id": "outputs-required", "nullable": False, "const": False, "pointee": ["int"]}]},
}


@pytest.fixture(scope="module")
def errors_module() -> ir.Module:
    """fixtures/classify_errors.h parsed once."""
    return fb.parse_fixture("classify_errors.h", fb.fixture_config("classify_errors.h", version_macros=[],
                                                                  beta_macro=None, defines=[]))


def _problems(module: ir.Module, **overrides: Any) -> str:
    with pytest.raises(classify.ClassificationError) as info:
        classify.classify(module, {"rules": RULES, "byte_sizes": "", **LENGTHS, **overrides})
    return str(info.value)


def test_consistent_overrides_classify(errors_module: ir.Module) -> None:
    """Without the int-sized byte counts, the same header classifies cleanly (the baseline)."""
    module = ir.Module(**{**errors_module.__dict__, "functions": [
        f for f in errors_module.functions if not f.name.startswith("fxShortSize")]})
    result = classify.classify(module, {"rules": RULES, "exceptions": CLEAN_EXCEPTIONS, "byte_sizes": SIZES,
                                        **LENGTHS})
    kinds = {(f.name, p.name): (p.kind, p.rule) for f in result.functions for p in f.params if p.kind}
    assert kinds == {("fxOrphan", "mystery"): ("device", "exception:fxOrphan"),
                     ("fxFine", "alpha"): ("host", "scaling-factors")}
    assert result.byte_sizes == 1
    assert result.unused_rules == ["scratch", "typed-host", "length:single-values", "nullable:outputs-required"]


def test_unclassified_pointer(errors_module: ir.Module) -> None:
    """A ``void*`` that matches no rule and no exception fails generation, by function and parameter."""
    message = _problems(errors_module)
    assert "unclassified pointer: fxOrphan.mystery (void *)" in message
    assert "fxFine.alpha" not in message and "fxShortSize.workSpace " not in message


def test_stale_exception_for_a_missing_function(errors_module: ir.Module) -> None:
    """An exception naming a function the header no longer declares is reported as stale."""
    message = _problems(errors_module, exceptions={**CLEAN_EXCEPTIONS, "fxRemoved": {"x": "device"}})
    assert "stale exception: function fxRemoved is not declared by the headers" in message
    assert "unclassified" not in message


def test_stale_exception_for_a_missing_parameter(errors_module: ir.Module) -> None:
    """An exception naming a parameter the function no longer has is reported as stale."""
    message = _problems(errors_module, exceptions={"fxOrphan": {"mystery": "device", "renamed": "host"}})
    assert "stale exception: fxOrphan has no parameter 'renamed'" in message


def test_exception_on_a_value_parameter(errors_module: ir.Module) -> None:
    """An exception on a parameter that is not a pointer (any more) is stale too."""
    message = _problems(errors_module, exceptions={"fxOrphan": {"mystery": "device", "count": "host"}})
    assert "stale exception: fxOrphan.count is no longer a pointer" in message


def test_byte_size_not_64_bit(errors_module: ir.Module) -> None:
    """A parameter matching byte_sizes but declared int (or unsigned int*) fails generation."""
    message = _problems(errors_module, exceptions=CLEAN_EXCEPTIONS, byte_sizes=SIZES)
    assert "byte size not 64-bit: fxShortSize.workSpaceSizeInBytes is 'int', expected size_t or size_t*" \
        in message
    assert "byte size not 64-bit: fxShortSizeOut.reserveSizeInBytes is 'unsigned int *'" in message
    assert "fxFine" not in message
    assert message.startswith("2 problem(s) in pointer_overrides.json for fixture:")


def test_every_problem_listed_at_once(errors_module: ir.Module) -> None:
    """All problems come in one error, so a header update is fixed in one pass."""
    message = _problems(errors_module, exceptions={"fxGone": {"p": "host"}}, byte_sizes=SIZES)
    assert message.startswith("4 problem(s)")
    for expected in ("stale exception: function fxGone", "unclassified pointer: fxOrphan.mystery",
                     "byte size not 64-bit: fxShortSize.", "byte size not 64-bit: fxShortSizeOut."):
        assert expected in message


def test_bad_kind_in_rule_or_exception(errors_module: ir.Module) -> None:
    """A kind outside device/host/either is refused, in a rule and in an exception."""
    with pytest.raises(classify.ClassificationError, match="rule 'odd': kind must be one of"):
        classify.classify(errors_module, {"rules": [{"id": "odd", "kind": "gpu", "pointee": ["void"]}]})
    message = _problems(errors_module, exceptions={"fxOrphan": {"mystery": "gpu"}})
    assert "exception fxOrphan.mystery: kind 'gpu' is not one of" in message


def _handle_params(overrides: dict[str, Any]) -> tuple[dict[str, list[str]], list[str]]:
    """Per function of fixture.h: the handles refused as None; and the problems, without raising."""
    module = fb.parse_fixture("fixture.h")
    result = classify.classify(module, fb.fixture_overrides(**overrides), strict=False)
    required = {fn.name: classify.required_handles(fn) for fn in result.functions if classify.required_handles(fn)}
    return required, result.problems


def test_handles_by_value_are_required_unless_listed() -> None:
    """A handle passed by value refuses None unless its type or (function, parameter) is listed; a Destroy*'s
    handle has its own check; the listed entries must exist."""
    required, problems = _handle_params({})
    assert required == {"fxGetWorkspaceSize": ["handle"]} and not problems
    required, problems = _handle_params({"nullable_handles": {"exceptions": {"fxGetWorkspaceSize": ["handle"]}}})
    assert required == {} and not problems
    required, problems = _handle_params({"nullable_handles": {"types": ["fxHandle_t"]}})
    assert required == {} and not problems
    _, problems = _handle_params({"nullable_handles": {"types": ["fxGone_t"], "exceptions": {
        "fxGone": ["handle"], "fxGetWorkspaceSize": ["workspaceSizeInBytes"]}}})
    assert problems == ["stale nullable_handles type: fxGone_t is not a handle the headers declare",
                        "stale nullable_handles exception: fxGetWorkspaceSize has no handle parameter "
                        "'workspaceSizeInBytes'",
                        "stale nullable_handles exception: function fxGone is not declared by the headers"]


def _dims_length(most: Any) -> tuple[ir.Length | None, list[str]]:
    rule = {"id": "counted-arrays", "pointee": ["int"], "name": r"\w*A|values", "count": "nbDims|nbValues",
            "most": most, "most_for": "nbDims"}
    overrides = fb.fixture_overrides()
    overrides["lengths"]["rules"] = [rule] + overrides["lengths"]["rules"][1:]
    result = classify.classify(fb.parse_fixture("fixture.h"), overrides, strict=False)
    fn = next(fn for fn in result.functions if fn.name == "fxSumDims")
    return next(p.length for p in fn.params if p.name == "dimA"), result.problems


def test_count_limits_come_from_a_number_or_a_header_macro() -> None:
    """A count source can carry the largest count the library takes; a macro that the headers do not define
    as an integer is a problem, not a silent missing check."""
    length, problems = _dims_length(3)
    assert length is not None and (length.most, length.most_name) == (3, "") and not problems
    assert length.describe() == "count nbDims, at most 3"
    _, problems = _dims_length("FX_NO_SUCH_LIMIT")
    assert problems == ["length of fxSumDims.dimA: 'most' 'FX_NO_SUCH_LIMIT' is no integer macro of the headers"]


def test_unset_roles_of_creates_setters_and_readers() -> None:
    """With a handle type tracked as unusable until set: its Create* starts it unset, a setter sets its first
    parameter, a one-field setter does neither, and every other function needs it set."""
    module = fb.parse_fixture("fixture.h")
    fns = {fn.name: fn for fn in classify.classify(module, fb.fixture_overrides()).functions}
    types = frozenset({"fxHandle_t"})
    assert classify.unset_roles(fns["fxCreate"], types, r"fxSet\w*") == (True, "", [])
    assert classify.unset_roles(fns["fxGetWorkspaceSize"], types, r"fxGet\w*") == (False, "handle", [])
    assert classify.unset_roles(fns["fxGetWorkspaceSize"], types, r"fxSet\w*") == (False, "", ["handle"])
    assert classify.unset_roles(fns["fxGetWorkspaceSize"], types, r"fxGet\w*", r"fxGetWork\w*") == (False, "", [])
    assert classify.unset_roles(fns["fxDestroy"], types, r"fxSet\w*") == (False, "", [])
    assert classify.unset_roles(fns["fxCreate"], frozenset(), r"fxSet\w*") == (False, "", [])


def test_count_sources_can_name_a_floor() -> None:
    """``least``: the library writes at least that many elements whatever the count says."""
    rule = {"id": "counted-arrays", "pointee": ["int"], "name": r"\w*A|values", "count": "nbDims|nbValues",
            "least": 2}
    overrides = fb.fixture_overrides()
    overrides["lengths"]["rules"] = [rule] + overrides["lengths"]["rules"][1:]
    result = classify.classify(fb.parse_fixture("fixture.h"), overrides)
    fn = next(fn for fn in result.functions if fn.name == "fxSumDims")
    length = next(p.length for p in fn.params if p.name == "dimA")
    assert length is not None and length.least == 2 and length.describe() == "count nbDims, at least 2"


def test_handle_values_must_name_declared_members_and_handles() -> None:
    module = fb.parse_fixture("fixture.h")
    overrides = fb.fixture_overrides(handle_values={"inputs": {"fxNoEnum_t": {"FX_GONE": "fxNoHandle_t"}}})
    problems = classify.classify(module, overrides, strict=False).problems
    assert problems == ["handle_values.fxNoEnum_t: FX_GONE is no member of the headers' fxNoEnum_t",
                        "handle_values.fxNoEnum_t: fxNoHandle_t is not a handle the headers declare"]
