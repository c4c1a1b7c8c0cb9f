"""The MIOpen backend on an AMD GPU: the shared GPU cases against the reference backend, and MIOpen's own
machinery (Find per handle, immediate mode, the pooling workspace, dropout's states, float16).

Needs CuPy built for ROCm and a visible AMD GPU (marker gpu); skipped everywhere else, CUDA machines
included. Run on a ROCm machine: PYTHONPATH=src python -m pytest -q -m gpu tests/highlevel/miopen
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel import dispatch
from dnnbind.highlevel.dims import ConvDims

from .gpu_cases import assert_close, rnn_inputs, run_case
from .limits import RUNS, tolerance
from .rocm import count_calls, missing

REASON = missing()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

PARAMS = [pytest.param(case, dtype, id=f"{case.name}-{dtype}") for case, dtype in RUNS]


@pytest.fixture
def cp():
    import cupy
    return cupy


def _module(name: str):
    return importlib.import_module(f"dnnbind.highlevel.miopen.{name}")


def test_cupy_arrays_on_rocm_select_miopen(cp):
    assert dispatch.select(x=cp.zeros(3)) == "miopen"
    assert dispatch.backend_function("miopen", "conv") is importlib.import_module("dnnbind.highlevel.miopen").conv


@pytest.mark.parametrize("case, dtype", PARAMS)
def test_equals_the_reference_backend(cp, case, dtype):
    run_case(case, dtype, cp.asarray, cp.asnumpy, tolerance=tolerance(case.op, dtype))


def test_cotangents_are_checked(cp):
    y, back = dnnbind.softmax(cp.zeros((2, 3), cp.float32))
    with pytest.raises(ValueError, match=r"dy has shape \(3, 2\) but must have shape \(2, 3\)"):
        back(cp.zeros((3, 2), cp.float32))
    with pytest.raises(TypeError, match="dy"):
        back(np.zeros((2, 3), np.float32))


def test_float64_rnns_are_refused(cp):
    args, kwargs = rnn_inputs("lstm", 3, 2, 3, 4)(np.random.default_rng(0), "float64")
    with pytest.raises(TypeError, match="runs RNNs in float16 and float32 only"):
        dnnbind.rnn(cp.asarray(args[0]), [[cp.asarray(a) for a in e] for e in args[1]], **kwargs)


# ---------------------------------------------------------------------------------------- convolution


def _conv_inputs(cp, seed=0, shape=(2, 3, 13, 11), w_shape=(5, 3, 3, 3)):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    return x, w, cp.asarray(x), cp.asarray(w)


def test_find_runs_once_per_handle_and_problem(cp, monkeypatch):
    finds = count_calls(monkeypatch, "miopenFindConvolutionForwardAlgorithm")
    runs = count_calls(monkeypatch, "miopenConvolutionForward")
    x, w, xd, wd = _conv_inputs(cp, shape=(1, 3, 17, 19))     # a problem no other test runs
    for _ in range(3):
        y, _ = dnnbind.conv(xd, wd, padding=1)
    assert (len(finds), len(runs)) == (1, 3)
    np.testing.assert_allclose(cp.asnumpy(y), dnnbind.conv(x, w, padding=1)[0], rtol=1e-4, atol=1e-4)
    lib = _module("_lib")
    h = lib.handle(xd.device.id, cp.cuda.get_current_stream().ptr)
    plan = _module("conv_plan").plan_for(ConvDims(x.shape, w.shape, padding=1, dtype="float32"), "NCHW",
                                         _module("settings").settings.current(), xd.device.id)
    assert plan.choices(h, "forward")


def test_find_runs_again_on_another_thread_s_handle(cp, monkeypatch):
    import threading
    finds = count_calls(monkeypatch, "miopenFindConvolutionForwardAlgorithm")
    _, _, xd, wd = _conv_inputs(cp, shape=(1, 3, 15, 19))
    dnnbind.conv(xd, wd)
    thread = threading.Thread(target=lambda: dnnbind.conv(xd, wd))
    thread.start()
    thread.join()
    assert len(finds) == 2


def test_immediate_mode_needs_no_find(cp, monkeypatch):
    finds = count_calls(monkeypatch, "miopenFindConvolutionForwardAlgorithm")
    compiles = count_calls(monkeypatch, "miopenConvolutionForwardCompileSolution")
    x, w, xd, wd = _conv_inputs(cp, shape=(2, 3, 14, 9))
    with _module("settings").settings(immediate=True):
        y, back = dnnbind.conv(xd, wd, stride=2)
        y2, _ = dnnbind.conv(xd, wd, stride=2)
        dx, dw = back(cp.ones_like(y))[:2]
    ref, ref_back = dnnbind.conv(x, w, stride=2)
    np.testing.assert_allclose(cp.asnumpy(y), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(cp.asnumpy(y2), cp.asnumpy(y))
    assert_close([cp.asnumpy(dx), cp.asnumpy(dw)], list(ref_back(np.ones_like(ref))), 1e-3, "gradients")
    assert finds == [] and len(compiles) >= 1


def test_benchmark_and_deterministic_settings_run(cp):
    x, w, xd, wd = _conv_inputs(cp, seed=3)
    with _module("settings").settings(algo="benchmark", deterministic=True):
        y, back = dnnbind.conv(xd, wd, padding=1)
        g1, g2 = back(cp.ones_like(y)), back(cp.ones_like(y))
    np.testing.assert_allclose(cp.asnumpy(y), dnnbind.conv(x, w, padding=1)[0], rtol=1e-4, atol=1e-4)
    for a, b in zip(g1, g2):
        np.testing.assert_array_equal(cp.asnumpy(a), cp.asnumpy(b))


def test_channels_last_memory(cp):
    x, w, _, wd = _conv_inputs(cp, seed=4, shape=(2, 4, 8, 8), w_shape=(6, 4, 3, 3))
    xl = cp.ascontiguousarray(cp.asarray(x).transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)     # NHWC memory
    ref = dnnbind.conv(x, w, padding=1)[0]
    np.testing.assert_allclose(cp.asnumpy(dnnbind.conv(xl, wd, padding=1)[0]), ref, rtol=1e-4, atol=1e-4)
    dims = ConvDims(x.shape, w.shape, padding=1, dtype="float32")
    miopen = importlib.import_module("dnnbind.highlevel.miopen")
    y, _ = miopen.conv(xl, wd, None, dims, layout="NHWC")
    np.testing.assert_allclose(cp.asnumpy(y), ref, rtol=1e-4, atol=1e-4)
    y, (xp, wr) = miopen.conv_forward(xl, wd, None, dims, layout="NHWC")       # saved in the layout run
    assert not xp.flags.c_contiguous and xp.transpose(0, 2, 3, 1).flags.c_contiguous
    for op, kw in (("softmax", {"axis": 1}), ("softmax", {"axis": 2}), ("activation", {"mode": "relu"})):
        np.testing.assert_allclose(cp.asnumpy(getattr(dnnbind, op)(xl, **kw)[0]), getattr(dnnbind, op)(x, **kw)[0],
                                   rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------------------------------------- pooling


def test_max_pooling_keeps_miopen_s_index_workspace(cp):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    dims = dnnbind.PoolDims(x.shape, 2, dtype="float32")
    miopen = importlib.import_module("dnnbind.highlevel.miopen")
    y, saved = miopen.maxpool_forward(cp.asarray(x), dims)
    workspace = saved[2]
    assert workspace.dtype == np.uint8 and workspace.nbytes == _module("pool").plan_for(dims, "max").workspace > 0
    before = workspace.copy()
    miopen.maxpool_backward(saved, (cp.ones_like(y),), dims)
    np.testing.assert_array_equal(cp.asnumpy(workspace), cp.asnumpy(before))   # the backward only reads it


# -------------------------------------------------------------------------------------------- dropout


def test_dropout_masks(cp):
    x = cp.asarray(np.random.default_rng(6).standard_normal((64, 128)).astype(np.float32))
    y, back = dnnbind.dropout(x, 0.3, seed=7)
    mask = back.mask
    keep = float(mask.mean())
    assert 0.65 < keep < 0.75
    np.testing.assert_allclose(cp.asnumpy(y), cp.asnumpy(cp.where(mask, x / 0.7, 0)), rtol=1e-6, atol=1e-6)
    dy = cp.ones_like(x)
    np.testing.assert_allclose(cp.asnumpy(back(dy)), cp.asnumpy(mask / 0.7), rtol=1e-6)
    y_same, _ = dnnbind.dropout(x, 0.3, seed=7)
    np.testing.assert_array_equal(cp.asnumpy(y_same), cp.asnumpy(y))            # same seed, same mask
    y_other, _ = dnnbind.dropout(x, 0.3, seed=8)
    assert not np.array_equal(cp.asnumpy(y_other), cp.asnumpy(y))
    y_a, _ = dnnbind.dropout(x, 0.3)
    y_b, _ = dnnbind.dropout(x, 0.3)
    assert not np.array_equal(cp.asnumpy(y_a), cp.asnumpy(y_b))                  # seed=None: fresh masks
    gen = np.random.default_rng(1)
    y_g1, _ = dnnbind.dropout(x, 0.3, seed=gen)
    y_g2, _ = dnnbind.dropout(x, 0.3, seed=gen)
    assert not np.array_equal(cp.asnumpy(y_g1), cp.asnumpy(y_g2))                # the generator advances


def test_dropout_edges(cp):
    x = cp.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    y0, back0 = dnnbind.dropout(x, 0.0)
    np.testing.assert_array_equal(cp.asnumpy(y0), cp.asnumpy(x))
    y1, back1 = dnnbind.dropout(x, 1.0)
    assert not cp.asnumpy(y1).any() and not cp.asnumpy(back1(cp.ones_like(x))).any()
    assert bool(back0.mask.all()) and not bool(back1.mask.any())
    yh, backh = dnnbind.dropout(x.astype(cp.float16), 0.5, seed=1)
    assert yh.dtype == cp.float16 and backh(cp.ones_like(yh)).dtype == cp.float16


# ---------------------------------------------------------------------------------------------- caches


def test_cache_info_reports_miopen_plans(cp):
    miopen = importlib.import_module("dnnbind.highlevel.miopen")
    dnnbind.softmax(cp.zeros((2, 3), cp.float32))
    info = miopen.cache_info()
    assert "miopen.softmax" in info and info["miopen.softmax"].size >= 1
    miopen.clear_caches()
    assert miopen.cache_info()["miopen.softmax"].size == 0

