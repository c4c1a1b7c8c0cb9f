"""The plan key (dnnbind.highlevel.plans): the C build of it (csrc/plankey.c) equals the Python one for
every kind of call, and fails the same way on what is not an array. (How plans are found and reused:
test_arg_cache.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from dnnbind.highlevel import plans


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
    assert plans._key is not plans._python_key, "the plan key extension is not built: run make setup"


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
    with pytest.raises(TypeError, match="arrays and arguments are tuples"):
        plans._key("conv", [np.zeros(1)], ())
    assert plans.find("conv", ([1, 2], None, None), (1, 0, 1, 1, False)) is None
    assert plans.find("conv", (np.zeros((1, 1, 3, 3)), np.zeros((1, 1, 1, 1)), None), ([1], 0, 1, 1, False)) is None


def test_the_c_lookup_finds_what_the_python_lookup_finds(rng):
    """plans.find (C) against plans._python_find on calls with and without plans: tuple arguments whose
    bools must not meet ints, zero floats of either sign (kept under their tagged key: both find None
    and the checked path finds the plan), non-arrays and unhashable arguments."""
    import dnnbind
    assert plans.find is not plans._python_find
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
