"""MIOpen's layer norm on the host: the plan's descriptors as the real libMIOpen 3.4 holds them, the
library's layer-norm entry points, what the backend refuses (supports) and the residual spec."""
from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

from dnnbind.gen import miopen as lib
from dnnbind.highlevel.residual import ArraySpec

layer_norm = importlib.import_module("dnnbind.highlevel.miopen.layer_norm")

# (x shape, normalized_ndim, dtype)
PLANS = [((4, 6), 1, "float32"), ((2, 3, 5), 2, "float16"), ((2, 3, 4, 5), 3, "float64"), ((7,), 1, "bfloat16"),
         ((2, 3, 4, 5, 6, 7, 8, 9, 2), 1, "float32")]

CHILD = r"""
import importlib, json, sys
from dnnbind.gen import miopen as lib
out = {"import": {"loaded": lib._lib.loaded}}
mod = importlib.import_module("dnnbind.highlevel.miopen.layer_norm")
out["import"]["cupy"] = "cupy" in sys.modules
def plan(shape, n, dtype):
    p = mod.plan_for(*mod.rows(tuple(shape), n), dtype)
    return {"x": p.x.read(), "param": p.param.read(), "stat": p.stat.read(), "stat_dtype": p.stat_dtype,
            "mode": int(p.mode), "normalized_dim": p.normalized_dim, "x_bytes": p.x.nbytes()}
out["plans"] = [plan(*c) for c in json.loads(CONFIG)]
for name in ("miopenLayerNormForward", "miopenLayerNormBackward"):     # bound from the loaded library
    stub = getattr(lib, "_" + name, None)
    try:
        stub.resolve()
        out[name] = "bound"
    except Exception as exc:
        out[name] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def facts(miopen_run):
    result = miopen_run(f"CONFIG = {json.dumps(json.dumps(PLANS))}\n" + CHILD)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_module_loads_neither_miopen_nor_cupy(facts):
    assert facts["import"] == {"loaded": False, "cupy": False}


def test_miopen_has_the_forward_and_no_backward(facts):
    """MIOpen 3.4 exports miopenLayerNormForward; its header has no backward (hence CuPy gradients)."""
    assert facts["miopenLayerNormForward"] == "bound"
    assert facts["miopenLayerNormBackward"] == "AttributeError"      # not even generated: not in the header
    assert not hasattr(lib, "miopenLayerNormBackward")


@pytest.mark.parametrize("i", range(len(PLANS)))
def test_plan_describes_rows(facts, i):
    shape, n, dtype = PLANS[i]
    got = facts["plans"][i]
    outer, inner = layer_norm.rows(shape, n)
    assert outer * inner == int(np.prod(shape))
    code = {"float16": lib.miopenHalf, "bfloat16": lib.miopenBFloat16, "float32": lib.miopenFloat,
            "float64": lib.miopenDouble}[dtype]
    stat_dtype = "float64" if dtype == "float64" else "float32"
    stat_code = lib.miopenDouble if dtype == "float64" else lib.miopenFloat
    assert got["x"] == [int(code), [outer, inner], [inner, 1]]          # packed (outer, inner)
    assert got["param"] == [int(code), [inner], [1]]
    assert got["stat"] == [int(stat_code), [outer], [1]]
    assert got["stat_dtype"] == stat_dtype
    assert got["x_bytes"] == outer * inner * {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}[dtype]
    assert got["mode"] == int(lib.MIOPEN_WEIGHT_BIAS) and got["normalized_dim"] == 1


def test_rows_split_at_the_normalized_dims():
    assert layer_norm.rows((2, 3, 4, 5), 2) == (6, 20)
    assert layer_norm.rows((5,), 1) == (1, 5)                  # unbatched: one row
    assert layer_norm.rows((0, 4), 1) == (0, 4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_supports_every_float_dtype(dtype):
    assert layer_norm.supports(np.dtype(dtype) if dtype != "bfloat16" else "bfloat16", (8, 1024), 1) is None


@pytest.mark.parametrize("dtype, shape, n, words", [
    ("int32", (4, 5), 1, ["not available on this backend", "no int32 kernel"]),
    ("float32", (2**31, 3), 1, ["not available on this backend", "int32 lengths", "2147483648 slices"]),
    ("float32", (3, 2**16, 2**15), 2, ["not available on this backend", "2147483648 elements"]),
    ("float16", (2**12, 2**12, 3), 1, ["not available on this backend", "16777216 normalized slices",
                                        "at most 16777215"]),
])
def test_supports_says_why_not(dtype, shape, n, words):
    reason = layer_norm.supports(np.dtype(dtype), shape, n)
    assert reason is not None
    for word in words:
        assert word in reason
    assert layer_norm.supports(np.dtype("float32"), (2**24 - 1, 3), 1) is None      # the last that fits


def test_forward_refuses_what_it_does_not_support_before_anything_runs():
    with pytest.raises(NotImplementedError, match="layer_norm is not available on this backend: .*int32 lengths"):
        layer_norm._checked(np.dtype("float32"), (2**31, 3), 1)


@pytest.mark.parametrize("dtype, stat", [("float16", "float32"), ("float32", "float32"), ("float64", "float64")])
def test_residual_spec(dtype, stat):
    x, w = ArraySpec((2, 3, 4), np.dtype(dtype)), ArraySpec((3, 4), np.dtype(dtype))
    assert layer_norm.layer_norm_residuals(x, w, None, 2, 1e-5) == (
        x, ArraySpec((2,), np.dtype(stat)), ArraySpec((2,), np.dtype(stat)), w)
    assert layer_norm.layer_norm_residuals(ArraySpec((4,), np.dtype(dtype)), None, w, 1, 1e-5)[1:] == (
        ArraySpec((), np.dtype(stat)), ArraySpec((), np.dtype(stat)))
