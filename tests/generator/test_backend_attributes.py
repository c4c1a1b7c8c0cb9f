"""The backend_attributes section of pointer_overrides.json against the real cuDNN headers: generation fails,
listing them, on an attribute nobody classified, on stale entries and on entries that name nothing real."""
from __future__ import annotations

import copy

import pytest

from generator import backend, config as cfg, parse


@pytest.fixture(scope="module")
def module():
    config = cfg.load_all()["cudnn"]
    return parse.parse(cfg.header_set("cudnn", config), config)


@pytest.fixture
def overrides():
    return copy.deepcopy(cfg.load_overrides("cudnn"))


def _problems(module, overrides) -> list[str]:
    problems: list[str] = []
    backend.build(module, overrides, problems)
    return problems


def test_the_committed_section_classifies_every_attribute(module, overrides):
    problems: list[str] = []
    model = backend.build(module, overrides, problems)
    assert problems == [] and model is not None
    names = [a.name for d in model.descriptors for a in d.attributes]
    assert sorted(names) == sorted(m.name for e in module.enums if e.name == "cudnnBackendAttributeName_t"
                                   for m in e.members)
    tensor = next(d for d in model.descriptors if d.cls == "TensorDescriptor")
    dims = next(a for a in tensor.attributes if a.py_name == "dimensions")
    assert (dims.type, dims.ctype, dims.kind, dims.count) == ("CUDNN_TYPE_INT64", "c_int64", "int", "array")
    plan = next(d for d in model.descriptors if d.cls == "ExecutionPlanDescriptor")
    config = next(a for a in plan.attributes if a.py_name == "engine_config")
    assert config.kind == "descriptor" and config.elements == ("EngineCfgDescriptor",)
    assert config.ctype == "cudnnBackendDescriptor_t"           # from handle_values.inputs


def test_an_unclassified_attribute_fails(module, overrides):
    del overrides["backend_attributes"]["attributes"]["CUDNN_ATTR_TENSOR_STRIDES"]
    assert _problems(module, overrides) == [
        "unclassified backend attribute: CUDNN_ATTR_TENSOR_STRIDES (no entry in backend_attributes.attributes)"]


def test_stale_and_wrong_entries_fail(module, overrides):
    section = overrides["backend_attributes"]
    attrs = section["attributes"]
    attrs["CUDNN_ATTR_TENSOR_GONE"] = dict(attrs["CUDNN_ATTR_TENSOR_STRIDES"])
    attrs["CUDNN_ATTR_TENSOR_STRIDES"]["type"] = "CUDNN_TYPE_INT128"
    attrs["CUDNN_ATTR_TENSOR_DIMENSIONS"]["count"] = "many"
    attrs["CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG"]["element"] = "CUDNN_BACKEND_NO_SUCH_DESCRIPTOR"
    attrs["CUDNN_ATTR_TENSOR_UNIQUE_ID"]["descriptor"] = "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR"
    del section["element_types"]["CUDNN_TYPE_FLOAT"]
    section["element_types"]["CUDNN_TYPE_GONE"] = "c_float"
    del section["descriptors"]["CUDNN_BACKEND_RNG_DESCRIPTOR"]
    problems = _problems(module, overrides)
    expected = [
        "backend_attributes.element_types: cudnnBackendAttributeType_t member CUDNN_TYPE_FLOAT has no C type "
        "(nor a handle type in handle_values.inputs)",
        "stale backend_attributes.element_types entry: CUDNN_TYPE_GONE is no member of cudnnBackendAttributeType_t",
        "backend_attributes.descriptors: CUDNN_BACKEND_RNG_DESCRIPTOR (a cudnnBackendDescriptorType_t member) has no entry",
        "stale backend_attributes.attributes entry: CUDNN_ATTR_TENSOR_GONE is no member of cudnnBackendAttributeName_t",
        "backend_attributes.attributes.CUDNN_ATTR_TENSOR_DIMENSIONS: count 'many' is not one of ('scalar', 'array') "
        "or a positive number",
        "backend_attributes.attributes.CUDNN_ATTR_TENSOR_STRIDES: type 'CUDNN_TYPE_INT128' is no member of "
        "cudnnBackendAttributeType_t",
        "backend_attributes.attributes.CUDNN_ATTR_TENSOR_UNIQUE_ID: does not start with its descriptor's prefix "
        "CUDNN_ATTR_CONVOLUTION_",
        "backend_attributes.attributes.CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG: element "
        "'CUDNN_BACKEND_NO_SUCH_DESCRIPTOR' is neither a descriptor type nor a group",
    ]
    for line in expected:
        assert line in problems, (line, problems)
    assert any(p.startswith("backend_attributes.attributes.CUDNN_ATTR_RNG_") and "has no entry in "
               "backend_attributes.descriptors" in p for p in problems)


def test_element_types_must_exist_and_have_the_element_size(module, overrides):
    types = overrides["backend_attributes"]["element_types"]
    types["CUDNN_TYPE_INT64"] = "c_int32"
    types["CUDNN_TYPE_DATA_TYPE"] = "cudnnNoSuchType_t"
    assert _problems(module, overrides) == [
        "backend_attributes.element_types: CUDNN_TYPE_DATA_TYPE -> cudnnNoSuchType_t is no type of the headers",
        "backend_attributes.element_types: CUDNN_TYPE_INT64 -> c_int32 is 4 bytes, element_sizes says 8"]


def test_class_names_must_be_python_classes_of_their_own(module, overrides):
    """A class named like a Python keyword would not compile; one class name for two descriptor types would let
    the second replace the first."""
    descriptors = overrides["backend_attributes"]["descriptors"]
    descriptors["CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR"]["class"] = "class"
    descriptors["CUDNN_BACKEND_RNG_DESCRIPTOR"]["class"] = "PointwiseDescriptor"
    assert _problems(module, overrides) == [
        "backend_attributes.descriptors.CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR: class 'class' is a Python keyword",
        "backend_attributes.descriptors: class 'PointwiseDescriptor' is given to 2 descriptor types "
        "(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_BACKEND_RNG_DESCRIPTOR)"]


def test_descriptor_handle_and_needs_must_name_what_exists(module, overrides):
    section = overrides["backend_attributes"]
    section["descriptor_handle"] = "cudnnBackendDescriptr_t"
    section["descriptors"]["CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR"]["needs"] = ["libcuda.so.1", "libcublasLt.so.12"]
    problems: list[str] = []
    backend.build(module, overrides, problems, cfg.sonames(cfg.load_all()["cudnn"]))
    assert problems == [
        "backend_attributes.descriptor_handle: 'cudnnBackendDescriptr_t' is not a handle the headers declare",
        "backend_attributes.descriptors.CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR.needs: 'libcublasLt.so.12' is no library "
        "headers.json names (sonames, deviceless)"]


def test_the_committed_needs_are_libraries_headers_json_names(module, overrides):
    problems: list[str] = []
    backend.build(module, overrides, problems, cfg.sonames(cfg.load_all()["cudnn"]))
    assert problems == []
