"""The plan key (dnnbind.highlevel.plans): the C build of it (csrc/plankey.c) equals the Python one for
every kind of call, and fails the same way on what is not an array. (How plans are found and reused:
test_arg_cache.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from dnnbind.highlevel import plans
from native_parts import require


class _DeviceArray:
    """Stands for a device array: shape, dtype and the CUDA array interface, no data."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.__cuda_array_interface__ = {"shape": shape, "typestr": self.dtype.str, "data": (0, False), "version": 3}


CALLS = [
    ("conv", (np.zeros((1, 1, 4, 4), np.float32), np.zeros((1, 1, 3, 3), np.float32), None), (1, 1, 1, 1, False)),
    ("conv", (np.zeros((2, 3, 5)), np.zeros((4, 3, 2)), np.zeros(4)), ((2,), ((0, 1),), 1.0, 1, True)),
    ("maxpool", (np.zeros((1, 2, 3), np.float16),), ()),
    ("softmax", (np.zeros(()),), (-1,)),
    ("dropout", (np.zeros((0, 3)), None), (0.0, None, "x")),
    ("batchnorm", (_DeviceArray((2, 3), "f4"), None, None, None, None), (True, 0.1, 1e-5)),
    ("conv", (np.ma.zeros((1, 1, 3, 3)), np.zeros((1, 1, 1, 1)), None), (1, 0, 1, 1, False)),
]


def test_the_c_key_is_built():
    require(plans._key is not plans._python_key, "dnnbind_native._plankey (the plan key)")


@pytest.mark.parametrize("op, arrays, arguments", CALLS)
def test_the_c_key_equals_the_python_key(op, arrays, arguments):
    key = plans._key(op, arrays, arguments)
    assert key == plans._python_key(op, arrays, arguments)
    assert [type(part) for part in key] == [type(part) for part in plans._python_key(op, arrays, arguments)]
    assert hash(key) == hash(plans._python_key(op, arrays, arguments))


def test_argument_types_tell_equal_values_apart():
    x = (np.zeros((1, 1, 3, 3)),)
    assert plans._key("op", x, (1,)) != plans._key("op", x, (True,)) != plans._key("op", x, (1.0,))


def test_what_is_not_an_array_fails_as_in_python():
    for key in (plans._key, plans._python_key):
        with pytest.raises(AttributeError):
            key("conv", ([1, 2], None), ())
        with pytest.raises(AttributeError):
            key("conv", (object(),), ())
    assert plans.find("conv", ([1, 2], None, None), (1, 0, 1, 1, False)) is None
    assert plans.find("conv", (np.zeros((1, 1, 3, 3)), np.zeros((1, 1, 1, 1)), None), ([1], 0, 1, 1, False)) is None


def test_the_c_key_refuses_arrays_and_arguments_that_are_not_tuples():
    require(plans._key is not plans._python_key, "dnnbind_native._plankey (the plan key)")
    with pytest.raises(TypeError, match="arrays and arguments are tuples"):
        plans._key("conv", [np.zeros(1)], ())


def test_the_c_lookup_finds_what_the_python_lookup_finds(rng):
    """plans.find (C) against plans._python_find on calls with and without plans: tuple arguments whose
    bools must not meet ints, zero floats of either sign (kept under their tagged key: both find None
    and the checked path finds the plan), non-arrays and unhashable arguments."""
    import dnnbind
    require(plans.find is not plans._python_find, "dnnbind_native._plankey (the plan key)")
    x, w = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    dnnbind.conv(x, w, padding=(1, 1))
    dnnbind.activation(x, "leaky_relu", alpha=-0.0)
    calls = [("conv", (x, w, None), (1, (1, 1), 1, 1, False)), ("conv", (x, w, None), (1, (True, 1), 1, 1, False)),
             ("conv", (x, w, None), (1, (1, 2), 1, 1, False)), ("activation", (x,), ("leaky_relu", -0.0)),
             ("activation", (x,), ("leaky_relu", 0.0)), ("conv", ([1], w, None), (1, 1, 1, 1, False)),
             ("conv", (x, w, None), (1, [1, 1], 1, 1, False)), ("softmax", (x,), (1,))]
    for call in calls:
        assert plans.find(*call) is plans._python_find(*call), call
    assert plans.find(*calls[0]) is not None and plans.find(*calls[1]) is None


@pytest.mark.parametrize("alpha, padding", [(0.0, 1), (-0.0, (1, 1)), (0.0, [1, 1])])
def test_calls_with_tagged_arguments_take_the_per_call_path_too(rng, alpha, padding):
    """A zero float is tagged with its sign in the plan's key; the plan is kept under the call's own key
    as well, so a repeated call finds it, and the other sign's call still gets its own. (A list argument
    is kept as the tuple it equals; its own calls take the checked path.)"""
    import dnnbind
    x, w = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((3, 2, 3, 3))
    dnnbind.activation(x, "leaky_relu", alpha=alpha)
    assert plans.find("activation", (x,), ("leaky_relu", alpha)) is not None
    dnnbind.conv(x, w, padding=padding)
    assert plans.find("conv", (x, w, None), (1, tuple(padding) if isinstance(padding, list) else padding,
                                             1, 1, False)) is not None
    other = -alpha
    assert plans.find("activation", (x,), ("leaky_relu", other)) is None      # the other sign: not this plan
    negative = -np.abs(x) - 1
    y, _ = dnnbind.activation(negative, "leaky_relu", alpha=other)
    np.testing.assert_array_equal(np.signbit(y), np.signbit(negative * other))     # zeros of its own sign
    assert plans.find("activation", (x,), ("leaky_relu", other)) is not None


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


def test_a_plan_runs_the_innermost_forward_from_its_second_call(rng):
    """The reference conv's wrappers (edge policy, half precision, memory check, BLAS threads) all pass
    for a small float32 problem: the plan's run is rebuilt on conv_forward itself, with equal results."""
    import dnnbind
    from dnnbind.highlevel import reference
    x, w = rng.standard_normal((2, 3, 6, 6)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    arguments = (1, 1, 1, 1, False)                  # stride, padding, dilation, groups, flip
    y0, pullback0 = dnnbind.conv(x, w, padding=1)
    plan = plans.find("conv", (x, w, None), arguments)
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
