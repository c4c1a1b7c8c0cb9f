"""The per-call cache of argument checking (arg_cache) and the lean dispatch of repeated calls."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel import arg_cache, dispatch
from dnnbind.highlevel.dims import ConvDims

import dnnbind.highlevel.cpu as cpu_backend
ref_conv = importlib.import_module("dnnbind.highlevel.cpu.conv")


@pytest.fixture(autouse=True)
def fresh_cache():
    arg_cache.clear()
    yield
    arg_cache.clear()


def test_a_repeated_call_reuses_the_checked_dims():
    built = []

    def build():
        built.append(1)
        return ConvDims((1, 2, 5, 5), (3, 2, 3, 3), padding=1)

    first = arg_cache.remember(("conv", (1, 2, 5, 5)), (1, 1, 1, 1, False), build)
    again = arg_cache.remember(("conv", (1, 2, 5, 5)), (1, 1, 1, 1, False), build)
    assert again is first and len(built) == 1
    other = arg_cache.remember(("conv", (1, 2, 5, 5)), (1, 2, 1, 1, False), build)
    assert len(built) == 2 and other is not first


@pytest.mark.parametrize("bad, error", [
    (dict(stride=2.0), TypeError), (dict(stride=True), TypeError), (dict(padding=(True, 1)), TypeError),
    (dict(groups=np.float64(1.0)), TypeError), (dict(flip=1), TypeError),
])
def test_hash_equal_arguments_of_another_type_never_meet_the_cached_entry(rng, bad, error):
    """2.0 == 2 and True == 1 hash alike, but the checks reject them: the cache must not hide that."""
    x, w = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((2, 2, 3, 3))
    good = {k: (2 if k == "stride" else 1 if k in ("groups",) else (1, 1) if k == "padding" else True)
            for k in bad}
    dnnbind.conv(x, w, **good)
    assert arg_cache.size() == 1
    for _ in range(2):
        with pytest.raises(error):
            dnnbind.conv(x, w, **bad)


def test_failures_are_not_remembered(rng):
    x, w = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((2, 2, 3, 3))
    for _ in range(2):
        with pytest.raises(ValueError, match="groups=3 does not divide"):
            dnnbind.conv(x, w, groups=3)
    assert arg_cache.size() == 0


def test_dtype_and_bias_are_part_of_the_key(rng):
    x, w = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((2, 2, 3, 3))
    dnnbind.conv(x, w)
    with pytest.raises(TypeError, match="w has dtype float32 but x has dtype float64"):
        dnnbind.conv(x, w.astype(np.float32))
    dnnbind.conv(x, w, np.zeros(2))
    with pytest.raises(ValueError, match=r"b has shape \(3,\)"):
        dnnbind.conv(x, w, np.zeros(3))


def test_unplain_arguments_bypass_the_cache(rng):
    x, w = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((2, 2, 3, 3))
    y, _ = dnnbind.conv(x, w, stride=np.int64(2))      # accepted by the checks, never cached
    assert arg_cache.size() == 0
    np.testing.assert_array_equal(y, dnnbind.conv(x, w, stride=2)[0])
    assert arg_cache.size() == 1
    dnnbind.maxpool(x, [2, 2])                          # lists count like tuples
    dnnbind.maxpool(x, (2, 2))
    assert arg_cache.size() == 2


def test_the_cache_is_bounded(monkeypatch, rng):
    monkeypatch.setattr(arg_cache, "MAX_ENTRIES", 3)
    w = rng.standard_normal((1, 1, 1, 1))
    for size in range(2, 8):
        dnnbind.conv(rng.standard_normal((1, 1, size, size)), w)
    assert arg_cache.size() == 3


def test_dispatch_of_numpy_arrays_is_one_lookup():
    x = np.zeros((1, 1, 3, 3))
    reference = importlib.import_module("dnnbind.highlevel.cpu")
    assert dispatch.backend_op("conv", x=x, w=x, b=None) is reference.conv
    sub = np.ma.masked_array(x)     # a subclass takes the full check
    assert dispatch.backend_op("conv", x=sub, w=x) is reference.conv
    with pytest.raises(TypeError, match="x must be a numpy or cupy array, not None"):
        dispatch.backend_op("conv", x=None)                  # x is required
    with pytest.raises(TypeError, match="no array arguments given"):
        dispatch.backend_op("conv", (), x=None)              # nothing required, nothing given


def test_reference_conv_plans_are_built_once(rng):
    dims = ConvDims((2, 4, 7, 7), (6, 2, 3, 3), padding=1, groups=2)
    assert ref_conv.layout(dims, np.dtype(np.float64), False) is ref_conv.layout(dims, np.dtype(np.float64), False)


@pytest.mark.parametrize("x_shape, w_shape, kwargs", [
    ((2, 4, 5, 6), (6, 2, 3, 2), dict(padding=1, stride=(2, 1), groups=2)),
    ((1, 3, 4, 5, 3), (2, 3, 2, 3, 2), dict(padding=(1, 0, 1), dilation=(1, 2, 1))),
    ((2, 3, 9), (4, 3, 3), dict(stride=2, dilation=2)),
])
def test_gathered_columns_equal_strided_windows(monkeypatch, rng, x_shape, w_shape, kwargs):
    """Small window layouts gather their columns through an index; the result equals the window view's."""
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    dims = ConvDims(x_shape, w_shape, **kwargs)
    assert ref_conv.layout(dims, x.dtype, False).gather is not None
    y, pullback = cpu_backend.conv(x, w, None, dims, threaded=False)
    grads = pullback(np.cos(y))
    monkeypatch.setattr(ref_conv, "GATHER_MAX_ELEMENTS", 0)
    ref_conv.layout.cache_clear()
    assert ref_conv.layout(dims, x.dtype, False).gather is None
    y2, pullback2 = cpu_backend.conv(x, w, None, dims, threaded=False)
    np.testing.assert_array_equal(y, y2)
    for a, b in zip(grads, pullback2(np.cos(y2))):
        np.testing.assert_array_equal(a, b)
    ref_conv.layout.cache_clear()


def test_cupy_arrays_take_the_type_fast_path_once_learnt(monkeypatch):
    """The stand-in for a CuPy array (a class whose module is cupy's) selects cuDNN; the first call
    records its type, later calls skip the full selection, and mixing in a numpy array still fails."""

    class FakeCupyArray:
        shape, dtype = (1, 1, 3, 3), np.dtype(np.float32)
        __cuda_array_interface__ = {"shape": (1, 1, 3, 3), "typestr": "<f4", "data": (0, False), "version": 3}

    FakeCupyArray.__module__ = "cupy._core.core"
    monkeypatch.setattr(dispatch, "_cupy_types", {})
    monkeypatch.setitem(dispatch.BACKENDS, "cudnn", "dnnbind.highlevel.cpu")   # any module with a conv
    reference = importlib.import_module("dnnbind.highlevel.cpu")
    a = FakeCupyArray()
    assert dispatch.backend_op("conv", x=a, w=a, b=None) is reference.conv
    assert dispatch._cupy_types == {FakeCupyArray: "cudnn"}
    calls = []
    monkeypatch.setattr(dispatch, "select", lambda **arrays: calls.append(arrays) or "cudnn")
    assert dispatch.backend_op("conv", x=a, w=a) is reference.conv
    assert calls == []
    monkeypatch.undo()
    with pytest.raises(TypeError, match="mixed host and device inputs"):
        dispatch.backend_op("conv", x=a, w=np.zeros((1, 1, 3, 3)))


def test_a_repeated_call_runs_its_plan_without_checks(monkeypatch, rng):
    """The second call of a problem finds its plan (plans.find) and never reaches the checks, for
    scalar and tuple arguments alike; another problem is checked again."""
    from dnnbind.highlevel import ops
    checked = []
    real = ops._conv_dims
    monkeypatch.setattr(ops, "_conv_dims", lambda *a: checked.append(a) or real(*a))
    x, w = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((2, 2, 3, 3))
    for padding in (1, (1, 1)):
        first, pullback = dnnbind.conv(x, w, padding=padding)
        again, pullback2 = dnnbind.conv(x, w, padding=padding)
        np.testing.assert_array_equal(first, again)
        assert repr(pullback2) == repr(pullback) and pullback2.cotangents[0].shape == first.shape
        for a, b in zip(pullback(np.ones_like(first)), pullback2(np.ones_like(first))):
            np.testing.assert_array_equal(a, b)
    assert len(checked) == 2
    dnnbind.conv(x, w, padding=[1, 1])      # a list finds the tuple's plan through the checked path
    assert len(checked) == 2
    dnnbind.conv(x[:, :, 1:], w, padding=1)
    assert len(checked) == 3


def test_maxpool_plans_name_the_pullback_after_y(rng):
    x = rng.standard_normal((1, 2, 6, 6))
    for _ in range(2):
        (y, indices), pullback = dnnbind.maxpool(x, 2, return_indices=True)
        assert pullback.cotangents[0].shape == y.shape == indices.shape
        assert pullback(np.ones_like(y)).shape == x.shape


def test_every_planned_op_checks_again_what_its_key_does_not_hold(rng):
    """Read-only running statistics are refused on a repeated batch-norm call too (writability is no
    part of the key); floats key by type (alpha=1 is an int, 1.0 a float) and a Generator seed never
    keys a plan."""
    x = rng.standard_normal((4, 3, 5))
    gamma, beta = np.ones(3), np.zeros(3)
    dnnbind.batchnorm(x, gamma, beta, running_mean=np.zeros(3), running_var=np.ones(3))
    frozen = np.zeros(3)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="running_mean is read-only"):
        dnnbind.batchnorm(x, gamma, beta, running_mean=frozen, running_var=np.ones(3))
    y1, _ = dnnbind.activation(x, "elu", alpha=1.0)
    y2, _ = dnnbind.activation(x, "elu", alpha=1)
    np.testing.assert_array_equal(y1, y2)
    size = arg_cache.size()
    dnnbind.dropout(x, 0.5, seed=np.random.default_rng(0))
    assert arg_cache.size() == size
    a, _ = dnnbind.dropout(x, 0.5, seed=3)
    b, _ = dnnbind.dropout(x, 0.5, seed=3)
    np.testing.assert_array_equal(a, b)
    assert arg_cache.size() == size + 1


@pytest.mark.parametrize("first, second", [(0.0, -0.0), (-0.0, 0.0)])
def test_zero_floats_of_either_sign_never_share_a_plan(first, second):
    """0.0 and -0.0 are equal, hash-equal keys; a leaky_relu slope of either gives zeros of its own sign."""
    x = np.array([-1.0, -2.0])
    for alpha in (first, second, first):
        y, _ = dnnbind.activation(x, "leaky_relu", alpha=alpha)
        np.testing.assert_array_equal(np.signbit(y), np.signbit(x * alpha))
