"""The cuDNN backend's graph path without a GPU: every graph primitive plans on every committed device, the
settings filter plans, plans persist across processes, and what cuDNN cannot plan falls back to the legacy
API with the reason in the trace. The library work runs in child processes (graph_child.py)."""
from __future__ import annotations

import json

import pytest

from dnnbind.highlevel.cudnn.graph import cache
from dnnbind.highlevel.cudnn.graph.device import Device
from dnnbind.highlevel.cudnn.graph.graphs import BUILDERS, GraphSpec, NormDims
from dnnbind.highlevel.dims import ConvDims, PoolDims
from dnnbind.highlevel.gpu.settings import Settings
from highlevel.cudnn.graph.child import DEVICEPROPS, run_child

OPS = {(op, mode) for op in BUILDERS for mode in (("max", "mean") if op.startswith("pool") else ("",))}


@pytest.mark.parametrize("deviceprop", DEVICEPROPS, ids=[p.stem for p in DEVICEPROPS])
def test_every_graph_op_plans_in_every_dtype_and_layout(deviceprop):
    rows = run_child("sweep", str(deviceprop))
    assert len(DEVICEPROPS) >= 3
    seen = {(r["op"], r["mode"], r["dtype"], r["layout"]) for r in rows}
    assert seen == {(op, mode, dtype, layout) for op, mode in OPS for dtype in ("float16", "bfloat16", "float32")
                    for layout in ("NCHW", "NHWC")}
    failed = [r for r in rows if r["plans"] < 1]
    assert not failed, failed
    for r in rows:
        assert r["configs"] >= 1 and r["workspace"] >= 0 and r["json"] > 100, r
    by_op = {r["op"]: set(r["uids"]) for r in rows if r["layout"] == "NCHW" and r["mode"] != "mean"}
    assert by_op["conv_forward"] == {"x", "w", "y"}
    assert by_op["conv_backward_data"] == {"dx", "w", "dy"}
    assert by_op["conv_backward_filter"] == {"x", "dw", "dy"}
    assert by_op["conv_bias_activation"] == {"x", "w", "bias", "y"}        # the sum and conv output are virtual
    assert by_op["layer_norm_forward"] == {"x", "scale", "bias", "mean", "inv_variance", "y"}  # epsilon: by value
    assert by_op["layer_norm_backward"] == {"x", "dy", "scale", "mean", "inv_variance", "dscale", "dbias", "dx"}
    assert by_op["pool_backward"] == {"dx", "dy", "x", "y"}
    nhwc_max = {r["op"]: set(r["uids"]) for r in rows if r["layout"] == "NHWC" and r["mode"] == "max"}
    assert nhwc_max == {"pool_forward": {"x", "y", "index"}, "pool_backward": {"dx", "dy", "index"}}


def test_settings_filter_the_plans():
    (default, deterministic, no_workspace, tf32) = run_child("filters", str(DEVICEPROPS[0]))
    assert default["plans"] and default["configs"] == deterministic["configs"]
    assert all("NONDETERMINISTIC" not in p["notes"] for p in deterministic["plans"])
    assert all("nondeterministic" in r for r in deterministic["rejected"] if "deterministic" in r)
    assert no_workspace["plans"] and all(p["workspace"] == 0 for p in no_workspace["plans"])
    assert any("workspace_limit=0" in r for r in no_workspace["rejected"])
    assert all(not {"TENSOR_CORE", "DOWN_CONVERT_INPUTS"} & set(p["notes"]) for p in default["plans"])
    assert len(tf32["plans"]) > len(default["plans"])          # float32: TF32 engines only when allowed
    assert any("TENSOR_CORE" in p["notes"] for p in tf32["plans"])


def test_plan_cache_round_trip_without_heuristics(tmp_path):
    """One process builds and saves; a fresh process loads by key: no engine heuristics, the same plans."""
    device = str(DEVICEPROPS[-1])
    saved = run_child("save", device, str(tmp_path))
    loaded = run_child("load", device, str(tmp_path))
    assert len(saved) == len(loaded) == 2
    for s, l in zip(saved, loaded):
        assert s["plans"] >= 1 and l["source"] == "cache", l
        assert l["heuristics"] == 0 and l["plans_created"] == s["plans"]
        assert (l["plans"], l["workspaces"], l["engines"]) == (s["plans"], s["workspaces"], s["engines"])
    stored = json.loads(open(saved[0]["file"]).read())
    assert stored["key"]["graph"][0] == "conv_bias_activation" and stored["plans"][0]["json"].startswith("{")
    # another device's properties: a different key, so the heuristics run again and nothing is loaded
    other = run_child("load", str(DEVICEPROPS[0]), str(tmp_path))
    assert all(r["source"] == "heuristics" and r["heuristics"] >= 1 for r in other)


def test_what_cudnn_cannot_plan_falls_back_to_legacy_with_the_reason_in_the_trace(tmp_path):
    """A Kepler-class device (sm 3.5, hand-written): cuDNN 9 plans nothing for it (ARCH_MISMATCH), so the
    convolution plan keeps the legacy API and the trace says why; a float64 pooling has no engine on any."""
    props = json.loads(DEVICEPROPS[0].read_text())
    props.update(deviceName="Tesla K40 (hand-written)", deviceVer=350, multiProcessorCount=15)
    kepler = tmp_path / "sm35.json"
    kepler.write_text(json.dumps(props))
    rows = {r["what"]: r for r in run_child("fallback", str(kepler))}
    for direction in ("forward", "backward_data", "backward_filter"):
        row = rows[f"conv {direction}"]
        assert row["plans"] == 0 and len(row["notes"]) == 1, row
        assert "ARCH_MISMATCH" in row["notes"][0] and "conv_" in row["notes"][0]
    again = rows["conv forward again"]
    assert again["plans"] == 0 and again["heuristics"] == 0 and again["notes"] == rows["conv forward"]["notes"]
    assert rows["pool float64"]["plans"] == 0 and "none usable" in rows["pool float64"]["notes"][0]
    assert rows["pool dilated"]["plans"] == 0 and "resample has no dilation" in rows["pool dilated"]["notes"][0]
    good = {r["what"]: r for r in run_child("fallback", str(DEVICEPROPS[0]))}
    assert good["conv forward again"]["plans"] >= 1 and good["conv forward again"]["heuristics"] == 0
    assert all(good[f"conv {d}"]["plans"] >= 1 and not good[f"conv {d}"]["notes"]
               for d in ("forward", "backward_data", "backward_filter"))


def test_autotune_reorders_the_first_plans_and_the_order_persists(tmp_path):
    """autotune() with a given measure (here: smallest workspace first): the first
    four are sorted by it (the heuristics put the largest workspace first here), the rest keep the heuristics' order, and a load from the cache keeps the tuned order."""
    (out,) = run_child("autotune", str(DEVICEPROPS[1]), str(tmp_path))
    before, after = [tuple(p) for p in out["before"]], [tuple(p) for p in out["after"]]
    assert len(before) > 4 and sorted(after[:4]) == sorted(before[:4]) and after[4:] == before[4:]
    assert [w for _, w in after[:4]] == sorted(w for _, w in before[:4]) and after[:4] != before[:4]
    assert out["tuned"] and out["loaded_tuned"] and [tuple(p) for p in out["loaded"]] == after


# ---------------------------------------------------------------- no library needed below

def test_cache_key_holds_everything_that_defines_the_plans(tmp_path):
    a100, h100 = (Device.from_file(p) for p in DEVICEPROPS[:2])
    conv = ConvDims((2, 8, 9, 9), (8, 8, 3, 3), padding=1, dtype="float16")
    spec = GraphSpec("conv_forward", conv, "NHWC")
    base = cache.path(spec, a100, Settings(), tmp_path)
    assert base.parent == tmp_path / f"cudnn-{cache.key(spec, a100, Settings())['cudnn']}" / a100.fingerprint
    others = [cache.path(spec, h100, Settings(), tmp_path), cache.path(GraphSpec("conv_forward", conv, "NCHW"), a100,
                                                                     Settings(), tmp_path),
              cache.path(GraphSpec("conv_bias_activation", conv, "NHWC", activation="gelu"), a100, Settings(), tmp_path),
              cache.path(GraphSpec("conv_bias_activation", conv, "NHWC", activation="relu"), a100, Settings(), tmp_path),
              cache.path(spec, a100, Settings(deterministic=True), tmp_path),
              cache.path(spec, a100, Settings(workspace_limit=0), tmp_path),
              cache.path(GraphSpec("conv_forward", ConvDims((2, 8, 9, 9), (8, 8, 3, 3), padding=(1, 2),
                                                            dtype="float16"), "NHWC"), a100, Settings(), tmp_path)]
    assert len({base, *others}) == len(others) + 1
    assert cache.path(spec, Device.from_file(DEVICEPROPS[0]), Settings(), tmp_path) == base      # stable
    assert cache.load(spec, a100, Settings(), tmp_path) is None                                    # nothing stored


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("DNNBIND_PLAN_CACHE", str(tmp_path / "x"))
    assert cache.default_dir() == tmp_path / "x"
    monkeypatch.delenv("DNNBIND_PLAN_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.default_dir() == tmp_path / "dnnbind" / "plans"


@pytest.mark.parametrize("make, error, match", [
    (lambda: GraphSpec("conv_sideways", ConvDims((1, 1, 3, 3), (1, 1, 1, 1))), ValueError, "op='conv_sideways'"),
    (lambda: GraphSpec("conv_forward", PoolDims((1, 1, 4, 4), 2)), TypeError, "takes a ConvDims, not PoolDims"),
    (lambda: GraphSpec("layer_norm_forward", NormDims((2, 3, 1, 1), "float32"), "NCWH"), ValueError, "NCWH"),
    (lambda: GraphSpec("conv_bias_activation", ConvDims((1, 1, 3, 3), (1, 1, 1, 1)), activation="mish"),
     ValueError, "activation='mish'"),
    (lambda: NormDims((2, 3), "float32"), ValueError, r"x_shape=\(2, 3\) must be four positive ints"),
    (lambda: NormDims((2, 3, 1, 1), "int8"), TypeError, "x has dtype int8"),
    (lambda: Device.from_json("[1]"), ValueError, "no cuDNN device-properties object"),
    (lambda: Device.from_json("{"), ValueError, "is not JSON"),
])
def test_bad_arguments_are_named(make, error, match):
    with pytest.raises(error, match=match):
        make()
