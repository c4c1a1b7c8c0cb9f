"""The ops the cuDNN backend runs through the graph API, without a GPU: for their call signatures the plans
build on every committed device in float16/bfloat16/float32, the operands the op hands to cuDNN match
the graph's tensors, and what cuDNN cannot plan, or the graph path switched off, is said clearly. The
library work runs in child processes (wired_child.py); execution needs a GPU (test_gpu_graph.py)."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

import deviceless_libs
from childproc import run_python
from dnnbind.highlevel.cudnn.graph import choose
from highlevel.cudnn.graph.child import DEVICEPROPS

layer_norm = importlib.import_module("dnnbind.highlevel.cudnn.layer_norm")
CHILD = Path(__file__).resolve().parent / "wired_child.py"


def wired(*args: str, timeout: float = 600) -> list[dict]:
    code = f"import runpy, sys; sys.argv = [{str(CHILD)!r}, *{list(args)!r}]; runpy.run_path({str(CHILD)!r}, run_name='__main__')"
    result = run_python(code, env=deviceless_libs.child_env(), timeout=timeout)
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stderr[-3000:]}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def _fit(row: dict) -> None:
    """The plans exist and the op's operands are exactly the graph's tensors (a short one refused)."""
    assert row["plans"] >= 1 and row["configs"] >= 1, row
    assert row["roles"] == row["graph_roles"], row
    assert f"arrays[{row['checked']!r}] has" in row["refused"] and "graph's tensor" in row["refused"], row


@pytest.mark.parametrize("deviceprop", DEVICEPROPS, ids=[p.stem for p in DEVICEPROPS])
def test_layer_norm_plans_for_its_call_signatures(deviceprop):
    rows = wired("layer_norm", str(deviceprop))
    graphs = [r for r in rows if r["graph"] in ("forward", "backward")]
    assert {(r["dtype"], r["graph"]) for r in graphs} == {(d, g) for d in ("float16", "bfloat16", "float32")
                                                          for g in ("forward", "backward")}
    for r in graphs:
        _fit(r)
        assert r["dims"] == [int(np.prod(r["shape"][:len(r["shape"]) - r["ndim"]])),
                             int(np.prod(r["shape"][len(r["shape"]) - r["ndim"]:])), 1, 1]
    assert {tuple(r["graph_roles"]) for r in graphs if r["graph"] == "forward"} == {
        ("bias", "inv_variance", "mean", "scale", "x", "y")}
    assert {tuple(r["graph_roles"]) for r in graphs if r["graph"] == "backward"} == {
        ("dbias", "dscale", "dx", "dy", "inv_variance", "mean", "scale", "x")}
    (f64,) = [r for r in rows if r["graph"] == "float64"]
    assert f64["error"].startswith("layer_norm is not available on the cuDNN backend for layer_norm_forward")
    assert "cuDNN has no engine for this graph: the operation graph does not finalize" in f64["error"]


def test_layer_norm_norm_dims_fold_any_normalized_shape():
    assert layer_norm.norm_dims((2, 3, 4, 5), 2, "float32").x_shape == (6, 20, 1, 1)
    assert layer_norm.norm_dims((7,), 1, "float16").x_shape == (1, 7, 1, 1)            # unbatched
    assert layer_norm.norm_dims((2, 3, 4), 3, "bfloat16").x_shape == (1, 24, 1, 1)
    forward, backward = layer_norm.specs((2, 3, 4), 1, "float32")
    assert (forward.op, backward.op) == ("layer_norm_forward", "layer_norm_backward")
    assert forward.dims == backward.dims and forward.dims.x_shape == (6, 4, 1, 1)


def test_layer_norm_without_the_graph_path_says_so(monkeypatch):
    monkeypatch.delenv(choose.ENV, raising=False)
    x = np.ones((2, 3), np.float32)
    for call in (lambda: layer_norm.layer_norm_forward(x, None, None, 1, 1e-5),
                 lambda: layer_norm.layer_norm_backward((x,), (x,), 1, 1e-5),
                 lambda: layer_norm.layer_norm_residuals(x, None, None, 1, 1e-5)):
        with pytest.raises(NotImplementedError) as info:
            call()
        assert str(info.value) == layer_norm.OFF and "graph API path is off" in str(info.value)
    assert layer_norm.supports(x.dtype, x.shape, 1) == layer_norm.OFF
    monkeypatch.setenv(choose.ENV, "1")
    assert layer_norm.supports(x.dtype, x.shape, 1) is None
    from dnnbind.highlevel.residual import ArraySpec
    f16 = np.dtype(np.float16)
    saved = layer_norm.layer_norm_residuals(ArraySpec((4, 3, 5), f16), ArraySpec((5,), f16), None, 1, 1e-5)
    assert [(s.shape, s.dtype) for s in saved] == [((4, 3, 5), f16), ((4, 3), np.float32), ((4, 3), np.float32),
                                                   ((5,), f16)]


@pytest.mark.parametrize("deviceprop", DEVICEPROPS, ids=[p.stem for p in DEVICEPROPS])
def test_pooling_plans_through_resample_and_the_rest_falls_back_with_the_reason(deviceprop):
    rows = wired("pool", str(deviceprop))
    graphs = [r for r in rows if "fallback" not in r]
    kinds = {"max", "mean_include_pad", "mean_exclude_pad"}
    assert {(r["graph"], r["dtype"], r["layout"], r["kind"]) for r in graphs} == {
        (g, d, lay, k) for g in ("pool_forward", "pool_backward") for d in ("float16", "bfloat16", "float32")
        for lay in ("NCHW", "NHWC") for k in kinds}
    nhwc_max_back = [r for r in graphs if (r["graph"], r["layout"], r["kind"]) == ("pool_backward", "NHWC", "max")]
    for r in graphs:
        if r in nhwc_max_back:
            assert r["plans"] == 0 and len(r["notes"]) == 1 and "forward's index" in r["notes"][0], r
            continue
        _fit(r)
        assert r["notes"] == [], r
        want = {"pool_forward": ["index", "x", "y"] if (r["layout"], r["kind"]) == ("NHWC", "max") else ["x", "y"],
                "pool_backward": ["dx", "dy", "x", "y"] if r["kind"] == "max" else ["dx", "dy"]}[r["graph"]]
        assert r["roles"] == want, r
    falls = {(r["fallback"], r["graph"]): r for r in rows if "fallback" in r}
    for op in ("pool_forward", "pool_backward"):
        assert "ceil_mode) is padded explicitly" in falls["ceil_mode", op]["notes"][0]
        assert "divisor differs from cuDNN's" in falls["divisor_override", op]["notes"][0]
        assert all(falls[what, op]["plans"] == 0 for what in ("ceil_mode", "divisor_override"))
    assert falls["nhwc max", "pool_forward"]["plans"] >= 1 and not falls["nhwc max", "pool_forward"]["notes"]
    assert falls["nhwc max", "pool_backward"]["plans"] == 0


@pytest.mark.parametrize("deviceprop", DEVICEPROPS, ids=[p.stem for p in DEVICEPROPS])
def test_fused_conv_bias_activation_plans_and_falls_back_with_the_reason(deviceprop):
    rows = wired("fused", str(deviceprop))
    calls = [r for r in rows if "case" not in r]
    assert len(calls) == 3 * 2 * 3
    assert {(r["dtype"], r["layout"]) for r in calls} == {(d, lay) for d in ("float16", "bfloat16", "float32")
                                                          for lay in ("NCHW", "NHWC")}
    for r in calls:
        _fit(r)
        assert r["notes"] == [] and r["roles"] == ["bias", "w", "x", "y"], r     # the sums stay virtual
    cases = {r["case"]: r for r in rows if "case" in r}
    _fit(cases["alpha"])
    assert cases["alpha"]["key"][-4:] == ["activation", "clipped_relu", "alpha", "4.0"]
    assert cases["no engine"]["plans"] == 0 and "none usable" in cases["no engine"]["notes"][0]
    assert cases["no mode"]["plans"] == 0 and "no activation mode='mish'" in cases["no mode"]["notes"][0]


def test_fused_conv_bias_activation_is_none_without_the_graph_path(monkeypatch):
    import dnnbind
    from dnnbind.highlevel.cudnn.fused import conv_bias_activation
    from dnnbind.highlevel.dims import ConvDims
    monkeypatch.delenv(choose.ENV, raising=False)
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    with dnnbind.trace(file=None) as calls:
        assert conv_bias_activation(x, w, None, ConvDims(x.shape, w.shape, dtype="float32"), "relu", None) is None
    (note,) = [dict(r.arguments)["reason"] for r in calls if r.function == "graph API -> legacy API"]
    assert note.startswith("conv_bias_activation[relu] ConvDims(") and "(NCHW): the graph path is off" in note


def test_fused_alpha_is_part_of_the_graph():
    from dnnbind.highlevel.cudnn.graph.graphs import GraphSpec
    from dnnbind.highlevel.dims import ConvDims
    dims = ConvDims((1, 2, 5, 5), (3, 2, 3, 3), dtype="float16")
    default = GraphSpec("conv_bias_activation", dims, activation="leaky_relu")
    assert default.activation_alpha == 0.01 and GraphSpec("conv_bias_activation", dims).activation_alpha is None
    assert default.key() != GraphSpec("conv_bias_activation", dims, activation="leaky_relu", alpha=0.2).key()
    assert default.key() == GraphSpec("conv_bias_activation", dims, activation="leaky_relu", alpha=0.01).key()
    with pytest.raises(ValueError, match="alpha=0.5 is not used by activation='relu'"):
        GraphSpec("conv_bias_activation", dims, activation="relu", alpha=0.5)
