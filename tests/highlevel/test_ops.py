"""Contract shared by every public op: (result, pullback), dtypes, and argument errors via the public API."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dnnbind


def _calls(dtype):
    """One small call per op, all arrays of ``dtype``; returns name -> (thunk, pullback args maker)."""
    rng = np.random.default_rng(0)

    def a(*shape):
        return rng.standard_normal(shape).astype(dtype)

    x4 = a(2, 4, 6, 6)
    w_lstm = [(a(8, 3), a(8, 2), a(8), a(8))]
    return {
        "conv": lambda: dnnbind.conv(x4, a(2, 2, 3, 3), a(2), groups=2, padding=1),
        "conv_transpose": lambda: dnnbind.conv_transpose(x4, a(4, 3, 2, 2), stride=2),
        "maxpool": lambda: dnnbind.maxpool(x4, 2),
        "meanpool": lambda: dnnbind.meanpool(x4, 3, stride=1, padding=1, count_include_pad=False),
        "softmax": lambda: dnnbind.softmax(x4, axis=-1),
        "logsoftmax": lambda: dnnbind.logsoftmax(x4),
        "activation": lambda: dnnbind.activation(x4, "swish"),
        "batchnorm": lambda: dnnbind.batchnorm(x4, a(4), a(4)),
        "dropout": lambda: dnnbind.dropout(x4, 0.5, seed=0),
        "rnn": lambda: dnnbind.rnn(a(5, 2, 3), w_lstm, hidden_size=2),
    }


def _cotangents(result):
    parts = result if isinstance(result, tuple) else (result,)
    return [None if r is None else np.ones_like(r) for r in parts]


def _arrays(tree):
    if isinstance(tree, (tuple, list)):
        return [a for t in tree for a in _arrays(t)]
    return [] if tree is None else [tree]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
@pytest.mark.parametrize("op", list(_calls(np.float64)))
def test_every_op_keeps_the_dtype(op, dtype):
    result, pullback = _calls(dtype)[op]()
    outputs = _arrays(result)
    grads = _arrays(pullback(*_cotangents(result)))
    assert outputs and grads
    for arr in outputs + grads:
        assert arr.dtype == dtype, (op, arr.dtype)
        assert np.all(np.isfinite(arr))


@pytest.mark.parametrize("op", list(_calls(np.float64)))
def test_every_op_refuses_integer_arrays(op):
    with pytest.raises(TypeError, match=r"has dtype int32; dnnbind supports float16, bfloat16, float32 and float64"):
        _calls(np.int32)[op]()


@pytest.mark.parametrize("op", list(_calls(np.float64)))
def test_every_op_refuses_arrays_in_non_native_byte_order(op):
    """Big-endian float64 is still float64 by name: it passed the dtype checks and failed (or misread) deep in a
    kernel; it is refused at the door, as torch.from_numpy refuses it."""
    with pytest.raises(TypeError, match=r"has dtype >f8, float64 in non-native byte order, which the kernels cannot "
                                        r"read; convert it first, for example \w+\.astype\('float64'\)"):
        _calls(">f8")[op]()


@pytest.mark.parametrize("op", list(_calls(np.float64)))
def test_every_pullback_takes_cotangents_in_non_native_byte_order(op):
    result, pullback = _calls(np.float64)[op]()
    native = _arrays(pullback(*_cotangents(result)))
    swapped = _arrays(pullback(*[None if c is None else c.astype(">f8") for c in _cotangents(result)]))
    assert len(native) == len(swapped)
    for a, b in zip(native, swapped):
        np.testing.assert_array_equal(a, b)


@st.composite
def bad_pool_args(draw):
    size = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    window = [draw(st.integers(-1, 4)) for _ in size]
    stride = [draw(st.integers(-1, 3)) for _ in size]
    padding = [draw(st.integers(-1, 3)) for _ in size]
    return size, window, stride, padding


@settings(max_examples=100, deadline=None)
@given(bad_pool_args())
def test_pool_geometry_is_accepted_exactly_when_valid(args):
    size, window, stride, padding = args
    x = np.zeros((1, 1) + tuple(size))
    reasons = []
    if min(window) < 1:
        reasons.append("window")
    if min(stride) < 1:
        reasons.append("stride")
    if min(padding) < 0:
        reasons.append("padding")
    if not reasons and any(2 * p > k for p, k in zip(padding, window)):
        reasons.append("padding")
    if not reasons and any(s + 2 * p < k for s, p, k in zip(size, padding, window)):
        reasons.append("empty")
    for op in (dnnbind.maxpool, dnnbind.meanpool):
        if reasons:
            with pytest.raises(ValueError, match="|".join(reasons)):
                op(x, tuple(window), stride=tuple(stride), padding=tuple(padding))
        else:
            y, _ = op(x, tuple(window), stride=tuple(stride), padding=tuple(padding))
            assert y.shape[2:] == tuple((s + 2 * p - k) // st_ + 1
                                        for s, p, k, st_ in zip(size, padding, window, stride))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(-1, 3), st.integers(-1, 2), st.integers(0, 3),
       st.integers(1, 3))
def test_conv_geometry_through_the_public_op(size, kernel, stride, padding, output_padding, dilation):
    x = np.ones((1, 2, size))
    w = np.ones((2, 2, kernel))   # conv: (C_out, C_in, k); conv_transpose: (C_in, C_out, k)
    valid = stride >= 1 and padding >= 0 and size + 2 * padding >= dilation * (kernel - 1) + 1
    if not valid:
        with pytest.raises(ValueError, match="stride|padding|empty"):
            dnnbind.conv(x, w, stride=stride, padding=padding, dilation=dilation)
    else:
        y, _ = dnnbind.conv(x, w, stride=stride, padding=padding, dilation=dilation)
        assert y.shape[-1] == (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    out = (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
    valid_t = (stride >= 1 and padding >= 0 and (output_padding < stride or output_padding < dilation)
               and out >= 1)
    if not valid_t:
        with pytest.raises(ValueError, match="stride|padding|output_padding|empty"):
            dnnbind.conv_transpose(x, w, stride=stride, padding=padding, output_padding=output_padding,
                                   dilation=dilation)
    else:
        y, _ = dnnbind.conv_transpose(x, w, stride=stride, padding=padding, output_padding=output_padding,
                                      dilation=dilation)
        assert y.shape == (1, 2, out)


@pytest.mark.parametrize("op,arrays,kwargs", [
    ("softmax", (np.array(1.0),), {"axis": 1}),
    ("activation", (np.ones(3),), {"mode": "relu", "alpha": 0.5}),
    ("batchnorm", (np.ones((2, 3)), np.ones(3), np.ones(3), np.zeros(3, np.int64), None), {"training": True}),
    ("meanpool", (np.ones((1, 1, 4, 4)),), {"window": 2, "count_include_pad": 1}),
    ("meanpool", (np.ones((1, 1, 4, 4)),), {"window": 2, "ceil_mode": 1}),
    ("meanpool", (np.ones((1, 1, 4, 4)),), {"window": 2, "divisor_override": 0}),
    ("meanpool", (np.ones((1, 1, 4, 4)),), {"window": 2, "divisor_override": True}),
    ("maxpool", (np.ones((1, 1, 4, 4)),), {"window": 2, "ceil_mode": "no"}),
    ("maxpool", (np.ones((1, 1, 4, 4)),), {"window": 2, "dilation": 0}),
    ("maxpool", (np.ones((1, 1, 4, 4)),), {"window": 3, "dilation": 2}),
    ("maxpool", (np.ones((1, 1, 4, 4)),), {"window": 2, "return_indices": None}),
    ("dropout", (np.ones(3),), {"p": 1.5}),
])
def test_frameworks_get_the_public_ops_checks(op, arrays, kwargs):
    """ops.residual_static (what dnnbind.torch's custom ops check with) and the public op are one check."""
    from dnnbind.highlevel.ops import residual_static
    with pytest.raises((TypeError, ValueError)) as public:
        if op == "batchnorm":
            getattr(dnnbind, op)(*arrays[:3], running_mean=arrays[3], running_var=arrays[4], **kwargs)
        else:
            getattr(dnnbind, op)(*arrays, **kwargs)
    with pytest.raises(type(public.value), match=re.escape(str(public.value))):
        residual_static(op, *arrays, **kwargs)
