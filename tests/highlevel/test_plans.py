"""The one plan cache (dnnbind.highlevel.plans): its key, what it keeps and what it never hides, its
statistics and bound, the public functions' inline key, and the explicit plan object (dnnbind.plan)."""
from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel import dispatch, plans
from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.specs import SPECS

import dnnbind.highlevel.cpu as reference_backend
ref_conv = importlib.import_module("dnnbind.highlevel.cpu.conv")
CONV, ACTIVATION = SPECS["conv"], SPECS["activation"]


@pytest.fixture(autouse=True)
def fresh_cache():
    plans.clear_plan_cache()
    yield
    plans.clear_plan_cache()


def _size() -> int:
    return dnnbind.plan_cache_info().size


def test_a_repeated_call_reuses_the_checked_dims():
    built = []

    def build():
        built.append(1)
        return ConvDims((1, 2, 5, 5), (3, 2, 3, 3), padding=1)

    first = plans.remember(("conv", (1, 2, 5, 5)), (1, 1, 1, 1, False), build)
    again = plans.remember(("conv", (1, 2, 5, 5)), (1, 1, 1, 1, False), build)
    assert again is first and len(built) == 1
    other = plans.remember(("conv", (1, 2, 5, 5)), (1, 2, 1, 1, False), build)
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
    assert _size() == 1
    for _ in range(2):
        with pytest.raises(error):
            dnnbind.conv(x, w, **bad)


def test_failures_are_not_remembered(rng):
    x, w = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((2, 2, 3, 3))
    for _ in range(2):
        with pytest.raises(ValueError, match="groups=3 does not divide"):
            dnnbind.conv(x, w, groups=3)
    assert _size() == 0 and dnnbind.plan_cache_info().misses == 0


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
    assert _size() == 0
    np.testing.assert_array_equal(y, dnnbind.conv(x, w, stride=2)[0])
    assert _size() == 1
    dnnbind.maxpool(x, [2, 2])                          # lists count like tuples
    dnnbind.maxpool(x, (2, 2))
    assert _size() == 2


def test_the_cache_is_bounded(monkeypatch, rng):
    monkeypatch.setattr(plans.CACHE, "maxsize", 3)
    w = rng.standard_normal((1, 1, 1, 1))
    for size in range(2, 8):
        dnnbind.conv(rng.standard_normal((1, 1, size, size)), w)
    assert _size() == 3


def test_the_cache_keeps_what_is_used_and_counts_hits_and_misses(monkeypatch, rng):
    """Eviction gives a plan used since the last pass a second chance: a hot loop's plan survives a
    stream of one-off problems; hits are calls that found their plan, misses plans built."""
    monkeypatch.setattr(plans.CACHE, "maxsize", 3)
    w = rng.standard_normal((1, 1, 1, 1))
    hot = rng.standard_normal((1, 1, 9, 9))
    for size in range(2, 8):
        dnnbind.conv(hot, w)
        dnnbind.conv(rng.standard_normal((1, 1, size, size)), w)
    assert plans.find(CONV, (hot, w, None), (1, 0, 1, 1, False)) is not None
    info = dnnbind.plan_cache_info()
    assert (info.hits, info.misses, info.size, info.maxsize) == (5, 7, 3, 3)
    dnnbind.clear_plan_cache()
    assert tuple(dnnbind.plan_cache_info()) == (0, 0, 0, 3)



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
    y, pullback = reference_backend.conv(x, w, None, dims, threaded=False)
    grads = pullback(np.cos(y))
    monkeypatch.setattr(ref_conv, "GATHER_MAX_ELEMENTS", 0)
    ref_conv.layout.cache_clear()
    assert ref_conv.layout(dims, x.dtype, False).gather is None
    y2, pullback2 = reference_backend.conv(x, w, None, dims, threaded=False)
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


# -- a plan's later calls skip the wrappers that only call through for them ----------------------------

def test_innermost_skips_the_marked_wrappers_that_pass_and_stops_at_any_other():
    import functools

    from dnnbind.highlevel.residual import innermost, passes_when

    def op(x, k):
        return x + k

    def wrap(predicate, inner, marked=True):
        @functools.wraps(inner)
        def wrapper(*args, **kwargs):
            return inner(*args, **kwargs) * 10
        return passes_when(predicate)(wrapper) if marked else wrapper

    small = wrap(lambda x, k: k < 5, op)
    assert innermost(small, (1, 2), {}) is op and innermost(small, (1, 7), {}) is small
    outer = wrap(lambda x, k: True, small)
    assert innermost(outer, (1, 2), {}) is op and innermost(outer, (1, 7), {}) is small
    assert innermost(wrap(lambda x, k: True, small, marked=False), (1, 2), {}).__wrapped__ is small


def test_innermost_keeps_a_wrapper_every_call_runs_in_around_what_is_left():
    """kept_around (the numpy backends' quiet floating-point scope): stripped, the rest stripped as far
    as it passes, then wrapped again."""
    import functools

    from dnnbind.highlevel.residual import innermost, kept_around, passes_when

    def op(x, k):
        return x + k

    def times(factor):
        def around(inner):
            @functools.wraps(inner)
            def wrapper(*args, **kwargs):
                return inner(*args, **kwargs) * factor
            return wrapper
        return around

    small = passes_when(lambda x, k: k < 5)(times(10)(op))
    kept = kept_around(times(100), small)
    outer = passes_when(lambda x, k: True)(times(1000)(kept))
    direct = innermost(outer, (1, 2), {})
    assert direct.__wrapped__ is op and direct(1, 2) == 300
    assert innermost(outer, (1, 7), {}).__wrapped__ is small and innermost(outer, (1, 7), {})(1, 7) == 8000


def test_a_plan_runs_the_innermost_forward_from_its_second_call(rng):
    """The cpu conv's wrappers (edge policy, half precision, memory check, BLAS threads) all pass
    for a small float32 problem: the plan's run is rebuilt on conv_forward itself, with equal results."""
    import dnnbind
    from dnnbind.highlevel import cpu as reference
    x, w = rng.standard_normal((2, 3, 6, 6)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    arguments = (1, 1, 1, 1, False)                  # stride, padding, dilation, groups, flip
    y0, pullback0 = dnnbind.conv(x, w, padding=1)
    plan = plans.find(CONV, (x, w, None), arguments)
    assert plan is not None and plan.run is not reference.conv          # rebuilt by the first call
    y1, pullback1 = dnnbind.conv(x, w, padding=1)
    np.testing.assert_array_equal(y0, y1)
    for a, b in zip(pullback0(np.ones_like(y0)), pullback1(np.ones_like(y1))):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", ["empty", "0-d", "float16", "bfloat16"])
def test_repeated_calls_keep_the_wrappers_their_problem_needs(case):
    """Zero-size and 0-d arrays keep the edge policy, half precision its float32 computation, on every
    call of their plans."""
    import dnnbind
    for _ in range(3):
        if case == "empty":
            y, pullback = dnnbind.conv(np.zeros((0, 2, 5, 5)), np.ones((3, 2, 3, 3)))
            assert y.shape == (0, 3, 3, 3) and pullback(np.zeros(y.shape))[1].shape == (3, 2, 3, 3)
        elif case == "0-d":
            y, pullback = dnnbind.activation(np.array(-2.0), "relu")
            assert y.shape == () and y == 0 and pullback(np.array(1.0)).shape == ()
        else:
            if case == "bfloat16":
                ml_dtypes = pytest.importorskip("ml_dtypes")
                dtype = np.dtype(ml_dtypes.bfloat16)
            else:
                dtype = np.dtype(np.float16)
            x = np.full((1, 1, 4, 4), 1.0, dtype)
            y, _ = dnnbind.conv(x, np.full((1, 1, 3, 3), 1.0, dtype), padding=1)
            assert y.dtype == dtype and float(y[0, 0, 1, 1]) == 9.0


def test_a_repeated_call_runs_its_plan_without_checks(monkeypatch, rng):
    """The second call of a problem finds its plan and never reaches the checks, for scalar and tuple
    arguments alike; another problem is checked again."""
    conv_spec = importlib.import_module("dnnbind.highlevel.specs.conv")
    checked = []
    real = conv_spec.ConvDims
    monkeypatch.setattr(conv_spec, "ConvDims", lambda *a, **k: checked.append(a) or real(*a, **k))
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
    size = _size()
    dnnbind.dropout(x, 0.5, seed=np.random.default_rng(0))
    assert _size() == size
    a, _ = dnnbind.dropout(x, 0.5, seed=3)
    b, _ = dnnbind.dropout(x, 0.5, seed=3)
    np.testing.assert_array_equal(a, b)
    assert _size() == size + 1


@pytest.mark.parametrize("first, second", [(0.0, -0.0), (-0.0, 0.0)])
def test_zero_floats_of_either_sign_never_share_a_plan(first, second):
    """0.0 and -0.0 are equal, hash-equal keys; a leaky_relu slope of either gives zeros of its own sign."""
    x = np.array([-1.0, -2.0])
    for alpha in (first, second, first):
        y, _ = dnnbind.activation(x, "leaky_relu", alpha=alpha)
        np.testing.assert_array_equal(np.signbit(y), np.signbit(x * alpha))


# -- the key ----------------------------------------------------------------------------------------

class _DeviceArray:
    """Stands for a device array: shape, dtype and the CUDA array interface, no data."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.__cuda_array_interface__ = {"shape": shape, "typestr": self.dtype.str, "data": (0, False), "version": 3}


@pytest.mark.parametrize("op, call, arrays, arguments", [
    ("conv", lambda x, w: dnnbind.conv(x, w, padding=1), "xw", (1, 1, 1, 1, False)),
    ("conv", lambda x, w: dnnbind.conv(x, w, padding=((0, 1), (1, 0)), flip=True), "xw", (1, ((0, 1), (1, 0)), 1, 1, True)),
    ("maxpool", lambda x, w: dnnbind.maxpool(x, (2, 2), ceil_mode=True), "x", ((2, 2), None, 0, 1, True, False)),
    ("softmax", lambda x, w: dnnbind.softmax(x, axis=-1), "x", (-1,)),
    ("activation", lambda x, w: dnnbind.activation(x, "leaky_relu", alpha=-0.0), "x", ("leaky_relu", -0.0)),
    ("batchnorm", lambda x, w: dnnbind.batchnorm(x, np.ones(2), np.zeros(2)), "xgb", (True, 0.1, 1e-5)),
])
def test_the_public_functions_inline_key_is_call_key(rng, op, call, arrays, arguments):
    """The key a public function builds inline finds the entry call_key names: the plan a first call
    built under call_key's key is the one the second call runs (its hits count it)."""
    x, w = rng.standard_normal((2, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    given = {"xw": (x, w, None), "x": (x,), "xgb": (x, None, None, None, None)}[arrays]
    call(x, w)
    spec = SPECS[op]
    if arrays == "xgb":
        return _batchnorm_key(spec, x, call, w)
    plan = plans.find(spec, given, arguments)
    assert plan is not None and plan.hits == 0
    call(x, w)
    assert plan.hits == 1 and plans.find(spec, given, arguments) is plan


def _batchnorm_key(spec, x, call, w):
    (key,) = [k for k, p in plans.CACHE.entries.items() if k[0] is spec]
    assert key[3:6] == (np.ndarray, x.shape, x.dtype) and key[-2:] == (None, None)
    plan = plans.CACHE.entries[key]
    call(x, w)
    assert plan.hits == 1


def test_argument_types_tell_equal_values_apart():
    x = (np.zeros((1, 1, 3, 3)),)
    spec = SPECS["softmax"]
    assert plans.call_key(spec, x, (1,)) != plans.call_key(spec, x, (True,)) != plans.call_key(spec, x, (1.0,))


def test_what_is_not_an_array_fails_and_finds_nothing():
    with pytest.raises(AttributeError):
        plans.call_key(CONV, ([1, 2], None, None), ())
    with pytest.raises(AttributeError):
        plans.call_key(CONV, (object(), np.zeros(1), None), ())
    with pytest.raises(TypeError):
        plans.call_key(CONV, (np.zeros(1), np.zeros(1), None), ([1],))
    assert plans.find(CONV, ([1, 2], None, None), (1, 0, 1, 1, False)) is None
    assert plans.find(CONV, (np.zeros((1, 1, 3, 3)), np.zeros((1, 1, 1, 1)), None), ([1], 0, 1, 1, False)) is None
    device = _DeviceArray((2, 3), "f4")
    assert plans.call_key(SPECS["softmax"], (device,), (1,))[3:] == (_DeviceArray, (2, 3), np.dtype("f4"))


def test_tuple_arguments_with_bools_never_find_the_ints_plan(rng):
    x, w = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    dnnbind.conv(x, w, padding=(1, 1))
    assert plans.find(CONV, (x, w, None), (1, (1, 1), 1, 1, False)) is not None
    assert plans.find(CONV, (x, w, None), (1, (True, 1), 1, 1, False)) is None
    assert plans.find(CONV, (x, w, None), (1, (1, 2), 1, 1, False)) is None


def test_tuple_arguments_with_floats_never_find_the_ints_plan(rng):
    """A float in a tuple (2.0, hash-equal to 2) is refused by the op's checks, however many calls with
    the int came before (the key tags it)."""
    x, w = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    dnnbind.conv(x, w, padding=(1, 1))
    assert plans.find(CONV, (x, w, None), (1, (1.0, 1), 1, 1, False)) is None
    assert plans.plain((2.0, -0.0)) != plans.plain((2, 0))
    with pytest.raises(TypeError, match="must be an int"):
        dnnbind.conv(x, w, padding=(1.0, 1))


@pytest.mark.parametrize("alpha, padding", [(0.0, 1), (-0.0, (1, 1)), (0.0, [1, 1])])
def test_calls_with_tagged_arguments_take_the_per_call_path_too(rng, alpha, padding):
    """A zero float is tagged with its sign in the plan's key; the plan is kept under the call's own key
    as well, so a repeated call finds it, and the other sign's call still gets its own. (A list argument
    is kept as the tuple it equals; its own calls take the checked path.)"""
    x, w = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    dnnbind.activation(x, "leaky_relu", alpha=alpha)
    assert plans.find(ACTIVATION, (x,), ("leaky_relu", alpha)) is not None
    dnnbind.conv(x, w, padding=padding)
    assert plans.find(CONV, (x, w, None), (1, tuple(padding) if isinstance(padding, list) else padding,
                                           1, 1, False)) is not None
    other = -alpha
    assert plans.find(ACTIVATION, (x,), ("leaky_relu", other)) is None      # the other sign: not this plan
    negative = -np.abs(x) - 1
    y, _ = dnnbind.activation(negative, "leaky_relu", alpha=other)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(negative * other))     # zeros of its own sign
    assert plans.find(ACTIVATION, (x,), ("leaky_relu", other)) is not None


# -- the explicit plan ------------------------------------------------------------------------------

def test_an_explicit_plan_runs_the_op_on_arrays_like_its_own(rng):
    x, w, b = rng.standard_normal((2, 3, 7, 7)), rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4)
    p = dnnbind.plan(dnnbind.conv, x, w, b, stride=2, padding=1)
    assert isinstance(p, dnnbind.BoundPlan) and "stride=2" in repr(p)
    x2 = rng.standard_normal(x.shape)
    y, pullback = p(x2, w, b)
    want, want_pullback = dnnbind.conv(x2, w, b, stride=2, padding=1)
    np.testing.assert_array_equal(y, want)
    for a, c in zip(pullback(np.ones_like(y)), want_pullback(np.ones_like(y))):
        np.testing.assert_array_equal(a, c)
    with pytest.raises(ValueError, match=r"x is a ndarray of shape \(1, 3, 7, 7\) and dtype float64 but this conv "
                                         r"plan was made for a ndarray of shape \(2, 3, 7, 7\)"):
        p(x[:1], w, b)
    with pytest.raises(ValueError, match=r"w is a ndarray of shape \(4, 3, 3, 3\) and dtype float32"):
        p(x, w.astype(np.float32), b)
    with pytest.raises(ValueError, match=r"b is None but this conv plan was made for a ndarray"):
        p(x, w, None)
    with pytest.raises(ValueError, match=r"b is None but this conv plan was made for a ndarray"):
        p(x, w)                                  # (b left out: None)
    with pytest.raises(TypeError, match=r"this conv plan takes 2 to 3 arrays \(x, w, b\), got 1"):
        p(x)
    y_named, _ = p(x2, w=w, b=b)                 # by name, as dnnbind.plan and the op take them
    np.testing.assert_array_equal(y_named, y)
    with pytest.raises(TypeError, match=r"^this conv plan takes the arrays x, w, b, not 'bias'$"):
        p(x, w, bias=b)
    with pytest.raises(TypeError, match=r"^this conv plan got w twice, by position and by name$"):
        p(x, w, w=w)
    with pytest.raises(TypeError, match=r"^this maxpool plan takes 1 array \(x\), got 2$"):
        dnnbind.plan(dnnbind.maxpool, x, 2)(x, x)


def test_an_explicit_plan_checks_its_arguments_once_and_names_them(rng):
    x = rng.standard_normal((2, 3, 6, 6))
    with pytest.raises(ValueError, match=r"window=0 must be positive"):
        dnnbind.plan(dnnbind.maxpool, x, 0)
    with pytest.raises(TypeError, match="must be one of dnnbind's ops"):
        dnnbind.plan(np.add, x)
    p = dnnbind.plan(dnnbind.maxpool, x, 2, return_indices=True)
    (y, indices), pullback = p(x)
    assert y.shape == indices.shape == (2, 3, 3, 3) and pullback(np.ones_like(y)).shape == x.shape
    weights = [(np.ones((1, 6)), np.ones((1, 1)), None, None)]
    rnn_plan = dnnbind.plan(dnnbind.rnn, x[0], weights, mode="rnn_tanh", hidden_size=1)
    (y2, _, c), back = rnn_plan(x[0], weights)
    assert y2.shape == (3, 6, 1) and c is None and back(np.ones_like(y2))[0].shape == (3, 6, 6)


# -- the public functions are made from the specs ----------------------------------------------------

def test_the_specs_name_the_residual_forms_parameters():
    """What the residual form takes and returns, as the spec derives it (what frameworks read)."""
    conv, maxpool, rnn = SPECS["conv"], SPECS["maxpool"], SPECS["rnn"]
    assert (conv.array_names, conv.static, conv.output_names, conv.gradients) == (
        ("x", "w", "b"), ("dims",), ("y",), ("dx", "dw", "db"))
    assert maxpool.output_names == ("y", "indices") and maxpool.static == ("dims", "return_indices")
    assert rnn.gradients == ("dx", "dh0", "dc0", "dweights") and rnn.output_names == ("y", "hy", "cy")
    assert SPECS["batchnorm"].updated == slice(2, 4) and SPECS["batchnorm"].gradients == ("dx", "dgamma", "dbeta")
    assert [op for op, s in SPECS.items() if s.skippable] == ["conv", "conv_transpose", "conv_bias_activation",
                                                               "layer_norm", "rnn"]
    assert rnn.needs((False, True, True, False)) == (False, True, False, True)     # per array -> per gradient


@pytest.mark.parametrize("name", list(SPECS))
def test_public_functions_have_their_specs_signature_and_docstring(name):
    fn = getattr(dnnbind, name)
    assert inspect.signature(fn) == SPECS[name].signature() and fn.__doc__ == SPECS[name].doc
    assert fn.__name__ == name and fn.__module__ == "dnnbind.highlevel.ops"


def test_the_committed_stub_is_the_specs():
    from pathlib import Path

    from dnnbind.highlevel.ops import stub_source
    stub = Path(importlib.import_module("dnnbind.highlevel.public").__file__).with_suffix(".pyi")
    assert stub.read_text() == stub_source(), "regenerate public.pyi from dnnbind.highlevel.ops.stub_source()"
