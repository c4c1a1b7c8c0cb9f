"""Typed cuDNN backend descriptors (dnnbind.gen.cudnn_backend) against the real library, without a GPU.

The library parts run in child processes (tests/gen/backend_sweep.py, tests/gen/deviceless_plan.py): a
misclassified descriptor-valued attribute can crash cuDNN, and libcuda / cuBLASLt are loaded there only.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import deviceless_libs
from childproc import run_python
from dnnbind.gen import cudnn as c, cudnn_backend as b
from dnnbind.runtime import DnnRangeError
from generator import config as cfg

HERE = Path(__file__).resolve().parent
DEVICEPROPS = sorted((HERE.parent / "data" / "deviceprop").glob("*.json"))
CLASSIFIED = cfg.load_overrides("cudnn")["backend_attributes"]["attributes"]
#: attributes cuDNN 9.28 documents as settable (9.27's reduction bodies) but refuses with every element type on a
#: fresh descriptor (CUDNN_STATUS_NOT_SUPPORTED): their classification comes from the header alone
UNSUPPORTED_HERE = {f"CUDNN_ATTR_OPERATION_REDUCTION_{s}" for s in (
    "DIMS", "INIT_VALUES", "SUBGRAPH", "SUBGRAPH_ACCUMULATOR_UIDS", "SUBGRAPH_CURRENT_UIDS", "SUBGRAPH_OUTPUT_UIDS",
    "SUBGRAPH_COMPUTE_TYPES")}
#: what cuDNN answers for an element type an attribute does not take
REFUSALS = {"CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE", "CUDNN_STATUS_BAD_PARAM", "CUDNN_STATUS_NOT_SUPPORTED"}


def _child(script: str, *args: str, timeout: float = 300) -> list[dict]:
    code = f"import runpy, sys; sys.argv = [{script!r}, *{list(args)!r}]; runpy.run_path({script!r}, run_name='__main__')"
    result = run_python(code, env=deviceless_libs.child_env(), timeout=timeout)
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    started = [r["attr"] for r in rows if r.get("start")]
    assert result.returncode == 0, (f"child died ({result.returncode}) at {started[-1] if started else '?'}:\n"
                                    f"{result.stderr[-3000:]}")
    return [r for r in rows if not r.get("start")]


def test_every_classified_attribute_against_the_library():
    """The declared element type is accepted (a handle type cannot be made without a device: only the refusals
    are checked), every other one is refused, except the ones listed in 'also'; read-only attributes cannot be
    set at all; three JSON representations take any element type (library_checks_type: false)."""
    rows = {r["attr"]: r for r in _child(str(HERE / "backend_sweep.py"))}
    assert set(rows) == set(CLASSIFIED) == {m.name for m in c.cudnnBackendAttributeName_t}
    uncreatable = {r["attr"] for r in rows.values() if "create" in r}
    assert {CLASSIFIED[a]["descriptor"] for a in uncreatable} == {"CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR"}
    problems = []
    for name, row in sorted(rows.items()):
        if name in uncreatable:
            continue
        entry, declared, wrong = CLASSIFIED[name], row["declared"], row["wrong"]
        if declared.startswith("element "):       # its element type cannot be created here
            ok = entry["element"] == "CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR"
        elif entry.get("access") == "get":
            ok = declared in REFUSALS
        elif name in UNSUPPORTED_HERE:
            ok = declared == "CUDNN_STATUS_NOT_SUPPORTED" and set(wrong.values()) == {"CUDNN_STATUS_NOT_SUPPORTED"}
        elif entry["type"] == "CUDNN_TYPE_HANDLE":
            ok = declared == "skipped" and set(wrong.values()) <= REFUSALS | {"CUDNN_STATUS_NOT_INITIALIZED"}
        else:
            ok = declared == "OK"
        accepted = {t for t, status in wrong.items() if status == "OK"}
        if entry.get("library_checks_type", True):
            ok = ok and accepted == set(entry.get("also", ())) \
                and set(wrong.values()) - {"OK"} <= REFUSALS | {"CUDNN_STATUS_NOT_INITIALIZED"}
        else:
            ok = ok and len(accepted) == len(wrong)
        if not ok:
            problems.append(f"{name}: classified {entry}, library: declared {declared}, accepts also {sorted(accepted)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("deviceprop", DEVICEPROPS, ids=[p.stem for p in DEVICEPROPS])
def test_deviceless_convolution_plans(deviceprop):
    """One NHWC float16 convolution: operation graph, heuristics mode A, every plan, workspace, JSON; read-only
    attributes read back with their declared type and refuse another."""
    assert len(DEVICEPROPS) >= 3
    (out,) = _child(str(HERE / "deviceless_plan.py"), str(deviceprop))
    assert out["device"] == json.loads(deviceprop.read_text())["deviceName"]
    assert out["configs"] >= 10 and out["plans"] >= 1, out
    assert out["plans"] + len(out["failures"]) == out["configs"]
    assert all(isinstance(w, int) and w >= 0 for w in out["workspaces"]) and len(out["workspaces"]) == out["plans"]
    plan, props = json.loads(out["plan_json"]), json.loads(deviceprop.read_text())
    assert plan["cudnnVersion"] == c.cudnnGetVersion()
    assert [(t["name"], t["dim"], t["stride"], t["dataType"]) for t in plan["operationGraph"]["tensors"]] == [
        ("1", [8, 64, 56, 56], [200704, 1, 3584, 64], "CUDNN_DATA_HALF"),
        ("2", [64, 64, 3, 3], [576, 1, 192, 64], "CUDNN_DATA_HALF"),
        ("3", [8, 64, 56, 56], [200704, 1, 3584, 64], "CUDNN_DATA_HALF")]
    assert plan["GPUProfile"]["deviceName"] == props["deviceName"]
    assert plan["engine"]["smVersion"] == props["deviceVer"]
    assert "dimensions=[8, 64, 56, 56], strides=[200704, 1, 3584, 64]" in out["tensor_repr"]
    assert "ops=[<OperationConvolutionForwardDescriptor>]" in out["graph_repr"]
    assert out["without_deviceprop"] == {"count": 0, "results": []}     # (an empty list, not an error)
    assert out["read_back"] and all(v in ("ok", "get failed: CUDNN_STATUS_NOT_SUPPORTED")
                                    for v in out["read_back"].values()), out["read_back"]
    assert "ExecutionPlanDescriptor.workspace_size" in out["read_back"]


def test_committed_device_properties_have_the_keys_cudnn_needs():
    """The 24 keys cuDNN 9.28's DEVICEPROP finalize asks for (it names each missing one with CUDNN_LOGERR_DBG=1);
    a file written by `make gpu-check` on a real device may hold more (smCountOrigin, ...)."""
    keys = {"maxGridSize", "maxBlockSize", "regsPerBlock", "multiProcessorCount", "warpSize", "maxSharedMemoryPerBlock",
            "maxSharedMemoryPerBlockOptin", "reservedSharedMemoryPerBlock", "maxRegistersPerSM", "maxCtasPerSM",
            "maxThreadsPerBlock", "maxThreadsPerSM", "pciDeviceId", "isTccDriver", "supportCoopLaunch",
            "totalGlobalMem", "smClockRateKHz", "memClockRateKHz", "memoryBusWidth", "l2CacheSize", "cudaDeviceId",
            "deviceVer", "driverVer", "deviceName"}
    assert len(keys) == 24
    versions = set()
    for path in DEVICEPROPS:
        props = json.loads(path.read_text())
        assert keys <= set(props), (path.name, keys - set(props))
        versions.add(props["deviceVer"])
    assert {800, 900, 1000} <= versions


# ---------------------------------------------------------------- the typed layer's own checks (no finalize needed)

def test_keywords_are_the_classified_attributes():
    t = b.TensorDescriptor(dimensions=[2, 3], strides=[3, 1], unique_id=5, data_type=c.CUDNN_DATA_FLOAT,
                           byte_alignment=4)
    assert "dimensions=[2, 3]" in repr(t) and "not finalized" in repr(t)
    with pytest.raises(TypeError, match=r"TensorDescriptor has no attribute 'dims'; it has: .*dimensions"):
        b.TensorDescriptor(dims=[1])
    assert set(b.CLASSES) == set(c.cudnnBackendDescriptorType_t)
    assert sum(len(cls.attributes) for cls in b.CLASSES.values()) == len(c.cudnnBackendAttributeName_t)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"dimensions": "1,2"}, TypeError, r"TensorDescriptor.dimensions needs a sequence of c_(long|int64): got str"),
    ({"dimensions": [1, 2.5]}, TypeError, r"element \[1\] is float 2.5, not an int"),
    ({"dimensions": [1, 1 << 63]}, DnnRangeError, r"element \[1\] 9223372036854775808 is outside"),
    ({"unique_id": [1]}, TypeError, r"TensorDescriptor.unique_id needs one .*: got a list of 1"),
    ({"data_type": 12345}, ValueError, r"12345 is no member of cudnnDataType_t"),
    ({"is_virtual": 2}, TypeError, r"is int 2, not a bool"),
    ({"ragged_offset_desc": 7}, TypeError, r"ragged_offset_desc needs one TensorDescriptor: is int"),
    ({"data_type": c.CUDNN_POOLING_MAX_DETERMINISTIC}, ValueError,
     r"data_type needs one cudnnDataType_t: cudnnPoolingMode_t.CUDNN_POOLING_MAX_DETERMINISTIC is a member of "
     r"another enum"),
    ({"data_type": 0.0}, TypeError, r"data_type needs one cudnnDataType_t: is float 0.0, not a member or an int"),
    ({"data_type": True}, TypeError, r"is bool True, not a member or an int"),
    ({"dimensions": {4: "a", 2: "b"}}, TypeError, r"dimensions needs a sequence of .*: got dict"),
    ({"dimensions": {4, 2}}, TypeError, r"dimensions needs a sequence of .*: got set"),
    ({"dimensions": np.ones((2, 2), np.int64)}, TypeError, r"dimensions needs a sequence of .*: got"),
])
def test_bad_values_are_refused_by_name_before_the_library(kwargs, error, match):
    with pytest.raises(error, match=match):
        b.TensorDescriptor(**kwargs)


def test_sequences_in_order_are_taken():
    """A list, a tuple, a range or a 1-d numpy array sets an array attribute (cuDNN takes it)."""
    for dims in ([2, 3], (2, 3), range(2, 4), np.array([2, 3], np.int64)):
        assert b.TensorDescriptor(dimensions=dims)._values["dimensions"] is dims


@pytest.mark.parametrize("value, match", [
    (10 ** 400, r"relu_lower_clip needs one c_double: 1000.* is outside the range of a 64-bit float"),
    (-(10 ** 309), r"is outside the range of a 64-bit float"),
])
def test_floats_beyond_a_double_are_refused_by_name(value, match):
    with pytest.raises(DnnRangeError, match=match):
        b.PointwiseDescriptor(relu_lower_clip=value)
    assert "relu_lower_clip=inf" in repr(b.PointwiseDescriptor(relu_lower_clip=float("inf")))


def test_pointer_values_are_addresses_or_device_arrays():
    class DeviceArray:                  # the one allowed stand-in: an object exposing __cuda_array_interface__
        __cuda_array_interface__ = {"data": (1 << 20, False), "shape": (4,), "typestr": "<f4", "version": 3}

    pack = b.VariantPackDescriptor(unique_ids=[1, 2], data_pointers=[DeviceArray(), 1 << 21], workspace=None)
    assert "unique_ids=[1, 2], data_pointers=[<" in repr(pack) and "workspace=None" in repr(pack)
    with pytest.raises(TypeError, match=r"VariantPackDescriptor.data_pointers needs a sequence of c_void_p: "
                                        r"element \[0\] is bytes, not an address"):
        b.VariantPackDescriptor(data_pointers=[b"abc"])
    with pytest.raises(OverflowError, match=r"element \[0\] is 36893488147419103232, which does not fit"):
        b.VariantPackDescriptor(data_pointers=[1 << 65])


def test_a_descriptor_of_the_wrong_class_is_refused():
    """cuDNN aborts (std::bad_alloc) on a descriptor of the wrong type where it expects an operation graph, an
    engine configuration, a softmax operation..."""
    tensor = b.TensorDescriptor()
    with pytest.raises(TypeError, match=r"ExecutionPlanDescriptor.engine_config needs one EngineCfgDescriptor: "
                                        r"is TensorDescriptor"):
        b.ExecutionPlanDescriptor(engine_config=tensor)
    graph = b.OperationGraphDescriptor()
    with pytest.raises(TypeError, match=r"OperationGraphDescriptor.ops needs a sequence of .*OperationConvolution"
                                        r".*: element \[0\] is TensorDescriptor"):
        graph.set("ops", [tensor])
    closed = b.OperationGraphDescriptor()
    closed.close()
    with pytest.raises(TypeError, match="was closed"):
        b.EngineDescriptor(operation_graph=closed)


def test_read_only_attributes_and_unset_descriptors():
    with pytest.raises(TypeError, match=r"ExecutionPlanDescriptor.workspace_size is read-only"):
        b.ExecutionPlanDescriptor(workspace_size=0)
    tensor = b.TensorDescriptor()
    tensor.finalized = True            # as after finalize(): reading back is allowed
    with pytest.raises(TypeError, match=r"ragged_offset_desc was not set \(cuDNN crashes"):
        tensor.get("ragged_offset_desc")
