"""ConvDims, PoolDims, RNNDims and the small checks: normalisation, derived shapes, every error."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dnnbind.highlevel.dims import (ConvDims, PoolDims, RNNDims, check_batchnorm, check_dtype, check_probability,
                                    normalize_axis, rnn_weight_entries)

# ---------------------------------------------------------------------------------------------- ConvDims


def test_conv_dims_normalises_every_spelling():
    d = ConvDims((2, 6, 10, 12), (4, 3, 3, 5), stride=(2, 1), padding=((1, 0), 2), dilation=2, groups=2,
                 dtype=np.float32)
    assert d.stride == (2, 1) and d.dilation == (2, 2)
    assert d.pad_low == (1, 2) and d.pad_high == (0, 2)
    assert d.dtype == "float32" and d.groups == 2 and d.flip is False
    assert d.spatial_rank == 2 and d.kernel_size == (3, 5) and d.dilated_kernel == (5, 9)
    assert d.padded_size == (11, 16)
    # (11 - 5) // 2 + 1 = 4, (16 - 9) // 1 + 1 = 8
    assert d.out_size == (4, 8) and d.y_shape == (2, 4, 4, 8)
    assert d.output_padding == (0, 0) and d.transpose_input_shape == d.y_shape


def test_conv_dims_int_padding_means_both_sides():
    d = ConvDims((1, 1, 5), (1, 1, 3), padding=2)
    assert (d.pad_low, d.pad_high) == ((2,), (2,)) and d.y_shape == (1, 1, 7)


def test_conv_dims_is_frozen_hashable_and_keyed():
    a = ConvDims((1, 4, 8, 8), (2, 4, 3, 3), padding=1)
    b = ConvDims((1, 4, 8, 8), (2, 4, 3, 3), padding=(1, 1))
    c = ConvDims((1, 4, 8, 8), (2, 4, 3, 3), padding=1, flip=True)
    assert a == b and hash(a) == hash(b) and a.key() == b.key()
    assert a.key() != c.key() and len({a, b, c}) == 2
    assert a.key() != ConvDims((1, 4, 8, 8), (2, 4, 3, 3), padding=1, dtype="float64").key()
    hash(a.key())
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.groups = 2  # type: ignore[misc]


def test_equal_problems_share_one_key_and_plans_share_one_problem(rng):
    """Equal dims (of any kind) share their key tuple, so comparing them is an identity check; an op's
    plan holds the first of equal problems made, also when it is built again after the plan cache was
    cleared (the caches keyed by it then find it by identity)."""
    import dnnbind
    from dnnbind.highlevel import arg_cache, plans
    from dnnbind.highlevel.dims import interned
    for make in (lambda: ConvDims((1, 4, 8, 8), (2, 4, 3, 3), padding=1),
                 lambda: PoolDims((1, 2, 6, 6), (2, 2)),
                 lambda: RNNDims((3, 2, 4), [((2, 4), (2, 2), (2,), (2,))], mode="rnn_tanh", hidden_size=2)):
        a, b = make(), make()
        assert a is not b and a == b and a.key() is b.key() and hash(a) == hash(b)
        assert interned((a, 1))[0] is interned((b, 1))[0]
    assert ConvDims((1, 4, 8, 8), (2, 4, 3, 3), padding=1) != PoolDims((1, 2, 6, 6), (2, 2))
    x, w = rng.standard_normal((1, 2, 9, 9)), rng.standard_normal((3, 2, 3, 3))

    def planned_dims():
        dnnbind.conv(x, w, padding=2)
        plan = plans.find("conv", (x, w, None), (1, 2, 1, 1, False))     # conv's arguments, as ops.conv
        return next(s for s in plan.static if isinstance(s, ConvDims)) if plan is not None else None

    first = planned_dims()
    arg_cache.clear()
    again = planned_dims()
    assert first is not None and again is first


def test_a_pickled_problem_hashes_anew_where_it_is_loaded():
    """The cached key and hash stay behind: a string's hash is per process (PYTHONHASHSEED)."""
    import copy
    import pickle
    import subprocess
    import sys
    d = ConvDims((1, 4, 8, 8), (2, 4, 3, 3), padding=1, dtype="float32")
    hash(d)
    for other in (pickle.loads(pickle.dumps(d)), copy.deepcopy(d)):
        assert "_hash" not in other.__dict__ and other == d and hash(other) == hash(d)
    code = ("import pickle, sys\n"
            "from dnnbind.highlevel.dims import ConvDims\n"
            "d = pickle.loads(sys.stdin.buffer.read())\n"
            "fresh = ConvDims((1, 4, 8, 8), (2, 4, 3, 3), padding=1, dtype='float32')\n"
            "raise SystemExit(0 if d == fresh and hash(d) == hash(fresh) and {fresh: 1}[d] == 1 else 3)\n")
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(d), env={"PYTHONHASHSEED": "123",
                          **{k: v for k, v in __import__("os").environ.items() if k != "PYTHONHASHSEED"}})
    assert done.returncode == 0


def test_conv_dims_holds_no_numpy_state():
    d = ConvDims((1, 4, 8, 8), (2, 4, 3, 3), stride=np.int64(2), padding=[np.int32(1), 1])
    for f in dataclasses.fields(d):
        value = getattr(d, f.name)
        items = value if isinstance(value, tuple) else (value,)
        assert all(type(v) in (int, bool, str) for v in items), f.name


@pytest.mark.parametrize("kwargs, error, pattern", [
    (dict(x=(2, 30, 8, 8), w=(8, 7, 3, 3), groups=4), ValueError, r"groups=4 does not divide the 30 input channels of x"),
    (dict(x=(2, 8, 8, 8), w=(6, 2, 3, 3), groups=4), ValueError, r"groups=4 does not divide the 6 output channels of w"),
    (dict(x=(2, 8, 8, 8), w=(4, 3, 3, 3), groups=2), ValueError, r"x has 8 channels but w.shape\[1\] \* groups = 3 \* 2 = 6"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), groups=0), ValueError, r"groups=0 must be positive"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), groups=1.0), TypeError, r"groups=1.0 must be an int"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), stride=0), ValueError, r"stride=0 must be positive"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), stride=(1, -2)), ValueError, r"stride=\(1, -2\) must be positive"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), stride=(1, 2, 3)), ValueError, r"stride=\(1, 2, 3\) must be an int or 2 ints"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), stride=True), TypeError, r"stride=True must be an int"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), stride=1.5), TypeError, r"stride=1.5 must be an int"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), dilation=0), ValueError, r"dilation=0 must be positive"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), padding=-1), ValueError, r"padding=-1 must be non-negative"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), padding=((0, -1), 0)), ValueError, r"padding=.* must be non-negative"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), padding=(1, 1, 1)), ValueError, r"padding=\(1, 1, 1\) must be an int, 2 ints or 2 \(low, high\) pairs"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), padding=((1, 2, 3), 0)), ValueError, r"padding=.*\(low, high\) pair"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3, 3), padding="same"), TypeError, r"padding='same' must be an int"),
    (dict(x=(2, 3, 8, 8), w=(4, 3, 3)), ValueError, r"w has shape \(4, 3, 3\) \(3 dimensions\) but x has shape"),
    (dict(x=(2, 3), w=(4, 3)), ValueError, r"x has shape \(2, 3\) \(2 dimensions\) but must have 3 to 5"),
    (dict(x=(1, 1, 2, 2, 2, 2), w=(1, 1, 1, 1, 1, 1)), ValueError, r"x has shape .* \(6 dimensions\)"),
    (dict(x=(1, 0, 8, 8), w=(4, 0, 3, 3)), ValueError,
     r"x has shape \(1, 0, 8, 8\): a zero-size dimension 1 is not supported; only the batch N may be 0"),
    (dict(x=(1, 3, 8, 8), w=(4, 3, 0, 3)), ValueError, r"w has shape \(4, 3, 0, 3\): a zero-size dimension 2"),
    (dict(x=(1, 3, 4, 8), w=(4, 3, 5, 3)), ValueError, r"output would be empty.*\(4, 8\).*\(5, 3\)"),
    (dict(x=(1, 3, 4, 8), w=(4, 3, 3, 3), dilation=(2, 1)), ValueError, r"output would be empty.*dilated to \(5, 3\)"),
    (dict(x=(1, 3, 8, 8), w=(4, 3, 3, 3), flip=1), TypeError, r"flip=1 must be a bool"),
    (dict(x=(1, 3, 8, 8), w=(4, 3, 3, 3), dtype=np.int32), TypeError, r"x has dtype int32; dnnbind supports float16"),
])
def test_conv_dims_errors_name_the_argument(kwargs, error, pattern):
    kwargs = dict(kwargs)
    x, w = kwargs.pop("x"), kwargs.pop("w")
    with pytest.raises(error, match=pattern):
        ConvDims(x, w, **kwargs)


@st.composite
def conv_geometry(draw):
    rank = draw(st.integers(1, 3))
    size = draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank))
    kernel = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    stride = draw(st.lists(st.integers(-1, 3), min_size=rank, max_size=rank))
    dilation = draw(st.lists(st.integers(-1, 3), min_size=rank, max_size=rank))
    pads = draw(st.lists(st.tuples(st.integers(-1, 3), st.integers(-1, 3)), min_size=rank, max_size=rank))
    groups = draw(st.integers(-1, 4))
    cin = draw(st.integers(1, 6))
    cout = draw(st.integers(1, 6))
    return size, kernel, stride, dilation, pads, groups, cin, cout


@settings(max_examples=150, deadline=None)
@given(conv_geometry())
def test_conv_dims_accepts_exactly_the_valid_geometries(geometry):
    size, kernel, stride, dilation, pads, groups, cin, cout = geometry
    x_shape = (2, cin) + tuple(size)
    w_shape = (cout, max(1, cin // max(groups, 1))) + tuple(kernel)
    problems = []
    if groups < 1:
        problems.append("groups")
    elif cin % groups or cout % groups or w_shape[1] * groups != cin:
        problems.append("groups")
    if min(stride) < 1:
        problems.append("stride")
    if min(dilation) < 1:
        problems.append("dilation")
    if min(p for pair in pads for p in pair) < 0:
        problems.append("padding")
    if not problems:
        extent = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
        if any(s + lo + hi < e for s, (lo, hi), e in zip(size, pads, extent)):
            problems.append("empty")
    kwargs = dict(stride=tuple(stride), dilation=tuple(dilation), padding=tuple(pads), groups=groups)
    if problems:
        with pytest.raises(ValueError, match="groups|stride|dilation|padding|empty"):
            ConvDims(x_shape, w_shape, **kwargs)
        return
    d = ConvDims(x_shape, w_shape, **kwargs)
    expected = tuple((s + lo + hi - dl * (k - 1) - 1) // st_ + 1
                     for s, (lo, hi), dl, k, st_ in zip(size, pads, dilation, kernel, stride))
    assert d.y_shape == (2, cout) + expected
    assert min(expected) >= 1


def test_transposed_dims_describe_the_forward_convolution():
    # torch: out = (in - 1) * stride - 2 * pad + dilation * (k - 1) + output_padding + 1
    d = ConvDims.transposed((2, 6, 5, 4), (6, 2, 3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                            dilation=1, groups=3)
    assert d.x_shape == (2, 6, (5 - 1) * 2 - 2 + 2 + 1 + 1, (4 - 1) * 3 + 1 + 2 + 1)
    assert d.w_shape == (6, 2, 3, 2) and d.groups == 3
    assert d.y_shape == (2, 6, 5, 4) == d.transpose_input_shape
    assert d.output_padding == (1, 2)
    assert d.key() != ConvDims(d.x_shape, d.w_shape, stride=(2, 3), padding=(1, 0), groups=3).key()


def test_transposed_output_padding_at_least_stride_needs_dilation():
    # stride 1, dilation 2, output_padding 1: the output grows by one row that no input reaches
    d = ConvDims.transposed((1, 2, 4), (2, 3, 3), stride=1, dilation=2, output_padding=1)
    assert d.x_shape == (1, 3, 4 - 1 + 4 + 1 + 1)
    assert d.transpose_input_shape == (1, 2, 4)
    assert d.y_shape == (1, 2, 5)


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(output_padding=2, stride=2), r"output_padding=2 must be smaller than either stride=2 or dilation=1"),
    (dict(output_padding=(0, 1), stride=1, dilation=1), r"output_padding=\(0, 1\) must be smaller"),
    (dict(output_padding=-1, stride=2), r"output_padding=-1 must be non-negative"),
    (dict(padding=5), r"output would be empty.*padding=5"),
    (dict(groups=4), r"groups=4 does not divide the 6 input channels of x"),
])
def test_transposed_dims_errors(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        ConvDims.transposed((2, 6, 3, 3), (6, 2, 3, 3), **kwargs)


def test_transposed_dims_channel_errors():
    with pytest.raises(ValueError, match=r"x has 6 channels but w.shape\[0\] = 4"):
        ConvDims.transposed((2, 6, 3, 3), (4, 2, 3, 3))
    with pytest.raises(ValueError, match=r"w has shape \(6, 2, 3\) \(3 dimensions\)"):
        ConvDims.transposed((2, 6, 3, 3), (6, 2, 3))


# ---------------------------------------------------------------------------------------------- PoolDims


def test_pool_dims_defaults_stride_to_window():
    d = PoolDims((2, 3, 7, 9), (2, 3))
    assert d.stride == (2, 3) and d.y_shape == (2, 3, 3, 3)
    d = PoolDims((2, 3, 7, 9), 3, stride=1, padding=((1, 0), 1))
    assert d.window == (3, 3) and d.pad_low == (1, 1) and d.pad_high == (0, 1)
    assert d.y_shape == (2, 3, 6, 9)
    assert d.key() == PoolDims((2, 3, 7, 9), (3, 3), stride=(1, 1), padding=((1, 0), (1, 1))).key()


def test_pool_dims_ceil_mode_and_dilation():
    # torch: out = ceil((size + 2p - d(k - 1) - 1) / s) + 1, less one when the last window starts past x
    d = PoolDims((2, 3, 8, 9), 3, stride=2, padding=1, ceil_mode=True)
    assert d.out_size == (5, 5) and d.ceil_extra == (1, 0) and d.pad_high == (2, 1) and d.user_pad_high == (1, 1)
    assert PoolDims((2, 3, 8, 9), 3, stride=2, padding=1).out_size == (4, 5)
    with pytest.raises(ValueError, match="at most half the window"):      # the same padding asked for: refused
        PoolDims((2, 3, 8, 9), 3, stride=2, padding=((1, 2), 1))
    d = PoolDims((1, 1, 1), 6, stride=2, padding=3, ceil_mode=True)           # extra padding past half the window
    assert d.out_size == (2,) and d.ceil_extra == (1,)
    d = PoolDims((1, 1, 9, 10), (3, 2), stride=1, dilation=(2, 3))
    assert d.extent == (5, 4) and d.out_size == (5, 7) and d.dilated
    assert not PoolDims((1, 1, 9, 10), (1, 2), dilation=(3, 1)).dilated      # dilating a 1-wide window: no-op
    assert d.key() != PoolDims((1, 1, 9, 10), (3, 2), stride=1).key()


@pytest.mark.parametrize("args, kwargs, error, pattern", [
    (((1, 1, 4, 4), 3), dict(padding=2), ValueError, r"padding=2 must be at most half the window \(3, 3\)"),
    (((1, 1, 6), 2), dict(padding=2, dilation=3), ValueError, r"padding=2 must be at most half the window \(2,\)"),
    (((1, 1, 6), 2), dict(dilation=0), ValueError, r"dilation=0 must be positive"),
    (((1, 1, 6), 2), dict(dilation=(1, 2)), ValueError, r"dilation=\(1, 2\) must be an int or 1 ints"),
    (((1, 1, 6), 2), dict(ceil_mode=None), TypeError, r"ceil_mode=None must be a bool"),
    (((1, 1, 4), 3), dict(dilation=2), ValueError, r"output would be empty.*window=\(3,\) dilated to \(5,\)"),
    (((1, 1, 1), 6), dict(padding=2, stride=1, ceil_mode=True), ValueError, r"output would be empty"),
    (((1, 1, 4, 4), 2), dict(padding=((0, 2), 0)), ValueError, r"padding=.* must be at most half the window"),
    (((1, 1, 4, 4), 0), {}, ValueError, r"window=0 must be positive"),
    (((1, 1, 4, 4), (2, 2, 2)), {}, ValueError, r"window=\(2, 2, 2\) must be an int or 2 ints"),
    (((1, 1, 4, 4), 2), dict(stride=0), ValueError, r"stride=0 must be positive"),
    (((1, 1, 4, 4), 2), dict(padding=-1), ValueError, r"padding=-1 must be non-negative"),
    (((1, 1, 2, 4), 3), {}, ValueError, r"output would be empty.*window=\(3, 3\)"),
    (((1, 4, 4), 2.0), {}, TypeError, r"window=2.0 must be an int"),
    (((4, 4), 2), {}, ValueError, r"x has shape \(4, 4\) \(2 dimensions\)"),
    (((1, 1, 4, 4), 2), dict(dtype="int64"), TypeError, r"x has dtype int64"),
])
def test_pool_dims_errors(args, kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        PoolDims(*args, **kwargs)


# ---------------------------------------------------------------------------------------------- small checks


def test_check_dtype():
    assert check_dtype("x", np.float16) == "float16"
    assert check_dtype("x", np.dtype("float64")) == "float64"
    # the same names by the fast lookup and the long way
    for dtype in ("float16", "float32", "float64", "=f4", "<f8", np.float32, "bfloat16"):
        if dtype == "bfloat16":
            pytest.importorskip("ml_dtypes")
            import ml_dtypes
            dtype = ml_dtypes.bfloat16
        assert check_dtype("x", dtype) == np.dtype(dtype).name
    with pytest.raises(TypeError, match=r"^x has dtype"):
        check_dtype("x", [np.float32])          # unhashable: the long way's error
    with pytest.raises(TypeError, match=r"^x has dtype >f4, float32 in non-native byte order"):
        check_dtype("x", ">f4")                 # float32 by name, but the kernels cannot read it
    for bad in (np.int64, np.complex64, bool, "float128" if hasattr(np, "float128") else np.uint8):
        with pytest.raises(TypeError, match=r"^x has dtype \w+; dnnbind supports"):
            check_dtype("x", bad)


def test_normalize_axis():
    assert normalize_axis(-1, 3) == 2 and normalize_axis(0, 1) == 0
    with pytest.raises(ValueError, match=r"axis=3 is out of range for an array with 3 dimensions"):
        normalize_axis(3, 3)
    with pytest.raises(ValueError, match=r"axis=-4 is out of range"):
        normalize_axis(-4, 3)
    with pytest.raises(TypeError, match=r"axis=1.0 must be an int"):
        normalize_axis(1.0, 3)


def test_check_probability():
    assert check_probability("p", 0) == 0.0 and check_probability("p", 1) == 1.0
    for bad in (-0.1, 1.01):
        with pytest.raises(ValueError, match=r"p=.* must be in \[0, 1\]"):
            check_probability("p", bad)
    with pytest.raises(ValueError, match=r"p=nan must be finite"):
        check_probability("p", float("nan"))
    with pytest.raises(TypeError, match=r"p='0.5' must be a real number"):
        check_probability("p", "0.5")


def test_check_batchnorm():
    assert check_batchnorm((4, 3, 5), (3,), (3,), None, None, True) == 3
    with pytest.raises(ValueError, match=r"gamma has shape \(4,\) but must have shape \(3,\)"):
        check_batchnorm((4, 3), (4,), (3,), None, None, True)
    with pytest.raises(ValueError, match=r"beta has shape"):
        check_batchnorm((4, 3), (3,), (3, 1), None, None, True)
    with pytest.raises(ValueError, match=r"running_mean and running_var must be given together"):
        check_batchnorm((4, 3), (3,), (3,), (3,), None, True)
    with pytest.raises(ValueError, match=r"running_var has shape \(2,\)"):
        check_batchnorm((4, 3), (3,), (3,), (3,), (2,), True)
    with pytest.raises(ValueError, match=r"training=False needs running_mean and running_var"):
        check_batchnorm((4, 3), (3,), (3,), None, None, False)
    with pytest.raises(ValueError, match=r"more than one value per channel"):
        check_batchnorm((1, 3, 1, 1), (3,), (3,), None, None, True)
    assert check_batchnorm((1, 3), (3,), (3,), (3,), (3,), False) == 3
    with pytest.raises(ValueError, match=r"x has shape \(3,\) \(1 dimensions\)"):
        check_batchnorm((3,), (3,), (3,), None, None, True)


# ---------------------------------------------------------------------------------------------- RNNDims


def _shapes(mode_gates, hidden, inp, layers, dirs, bias=True):
    out = []
    for i in range(layers * dirs):
        layer_in = inp if i < dirs else hidden * dirs
        g = mode_gates * hidden
        out.append(((g, layer_in), (g, hidden), (g,) if bias else None, (g,) if bias else None))
    return out


def test_rnn_dims_shapes():
    d = RNNDims((7, 3, 5), _shapes(4, 6, 5, 2, 2), mode="lstm", hidden_size=6, num_layers=2, bidirectional=True,
                lengths=np.array([7, 1, 4]))
    assert d.gates == 4 and d.num_directions == 2 and d.has_bias
    assert d.y_shape == (7, 3, 12) and d.h_shape == (4, 3, 6)
    assert d.layer_input_size(0) == 5 and d.layer_input_size(1) == 12
    assert d.lengths == (7, 1, 4) and all(type(v) is int for v in d.lengths)
    hash(d.key())
    d = RNNDims((7, 3, 5), _shapes(3, 6, 5, 1, 1, bias=False), mode="gru", hidden_size=6)
    assert d.gates == 3 and not d.has_bias and d.lengths is None


@pytest.mark.parametrize("kwargs, error, pattern", [
    (dict(mode="lstm2"), ValueError, r"mode='lstm2' must be one of rnn_relu, rnn_tanh, lstm, gru"),
    (dict(hidden_size=0), ValueError, r"hidden_size=0 must be positive"),
    (dict(num_layers=0), ValueError, r"num_layers=0 must be positive"),
    (dict(bidirectional=1), TypeError, r"bidirectional=1 must be a bool"),
    (dict(num_layers=2), ValueError, r"weights has 1 entries but num_layers=2 and bidirectional=False need 2"),
    (dict(hidden_size=5), ValueError, r"weights\[0\]\[0\] \(w_ih\) has shape \(24, 5\) but must have shape \(20, 5\)"),
    (dict(x=(7, 3, 4)), ValueError, r"weights\[0\]\[0\] \(w_ih\) has shape \(24, 5\) but must have shape \(24, 4\)"),
    (dict(x=(7, 3)), ValueError, r"x has shape \(7, 3\) \(2 dimensions\) but must have 3 to 3 dimensions \(seq, batch, input\)"),
    (dict(h0_shape=(1, 3, 5)), ValueError, r"h0 has shape \(1, 3, 5\) but must have shape \(1, 3, 6\)"),
    (dict(c0_shape=(2, 3, 6)), ValueError, r"c0 has shape \(2, 3, 6\) but must have shape \(1, 3, 6\)"),
    (dict(lengths=[7, 7]), ValueError, r"lengths has 2 entries but x has a batch of 3"),
    (dict(lengths=[7, 0, 3]), ValueError, r"lengths\[1\]=0 must be between 1 and the sequence length 7"),
    (dict(lengths=[8, 1, 3]), ValueError, r"lengths\[0\]=8 must be between 1"),
    (dict(lengths=[1.5, 1, 3]), TypeError, r"lengths\[0\]=1.5 must be an int"),
    (dict(lengths=3), TypeError, r"lengths must be a sequence of ints"),
])
def test_rnn_dims_errors(kwargs, error, pattern):
    kwargs = dict(kwargs)
    x = kwargs.pop("x", (7, 3, 5))
    args = dict(mode="lstm", hidden_size=6)
    args.update(kwargs)
    with pytest.raises(error, match=pattern):
        RNNDims(x, _shapes(4, 6, 5, 1, 1), **args)


def test_rnn_dims_c0_only_for_lstm():
    with pytest.raises(ValueError, match=r"c0 is only used by mode='lstm', not mode='gru'"):
        RNNDims((7, 3, 5), _shapes(3, 6, 5, 1, 1), mode="gru", hidden_size=6, c0_shape=(1, 3, 6))


def test_rnn_dims_bias_all_or_none():
    shapes = _shapes(4, 6, 5, 2, 1)
    shapes[1] = shapes[1][:2] + (None, None)
    with pytest.raises(ValueError, match=r"weights\[1\]: every entry must have biases, or none"):
        RNNDims((7, 3, 5), shapes, mode="lstm", hidden_size=6, num_layers=2)


def test_rnn_weight_entries():
    a = np.zeros((4, 2))
    assert rnn_weight_entries([[a, a, None, None]]) == ((a, a, None, None),)
    with pytest.raises(TypeError, match=r"weights must be a list of \(w_ih, w_hh, b_ih, b_hh\) tuples, not ndarray"):
        rnn_weight_entries(a)
    with pytest.raises(TypeError, match=r"weights\[0\] must be a \(w_ih, w_hh, b_ih, b_hh\) tuple \(with w_hr as "
                                        r"a 5th array for an LSTM with proj_size\), got tuple of length 3"):
        rnn_weight_entries([(a, a, a)])
    assert rnn_weight_entries([[a, a, None, None, a]]) == ((a, a, None, None, a),)
    with pytest.raises(TypeError, match=r"weights\[0\]: w_hr \(the 5th entry\) must be an array, not None"):
        rnn_weight_entries([(a, a, None, None, None)])
    with pytest.raises(ValueError, match=r"weights\[1\] has 4 arrays but weights\[0\] has 5"):
        rnn_weight_entries([(a, a, None, None, a), (a, a, None, None)])
    with pytest.raises(TypeError, match=r"weights\[0\]: w_ih and w_hh must be arrays"):
        rnn_weight_entries([(None, a, a, a)])
    with pytest.raises(ValueError, match=r"weights\[0\]: b_ih and b_hh must both be arrays or both be None"):
        rnn_weight_entries([(a, a, a, None)])


def _proj_shapes(hidden, proj, inp, layers, dirs, bias=True):
    g = 4 * hidden
    out = []
    for i in range(layers * dirs):
        layer_in = inp if i < dirs else proj * dirs
        out.append(((g, layer_in), (g, proj)) + (((g,), (g,)) if bias else (None, None)) + ((proj, hidden),))
    return out


def test_rnn_dims_projection():
    d = RNNDims((7, 3, 5), _proj_shapes(6, 4, 5, 2, 2), mode="lstm", hidden_size=6, num_layers=2,
                bidirectional=True, proj_size=4, h0_shape=(4, 3, 4), c0_shape=(4, 3, 6))
    assert (d.proj_size, d.out_size) == (4, 4)
    assert d.y_shape == (7, 3, 8) and d.h_shape == (4, 3, 4) and d.c_shape == (4, 3, 6)
    assert d.layer_input_size(1) == 8
    assert d.key() != RNNDims((7, 3, 5), _shapes(4, 6, 5, 2, 2), mode="lstm", hidden_size=6, num_layers=2,
                              bidirectional=True).key()
    plain = RNNDims((7, 3, 5), _shapes(4, 6, 5, 1, 1), mode="lstm", hidden_size=6)
    assert (plain.proj_size, plain.out_size, plain.c_shape) == (0, 6, plain.h_shape)
    RNNDims((7, 3, 5), _proj_shapes(6, 2, 5, 1, 1, bias=False), mode="lstm", hidden_size=6, proj_size=2)


@pytest.mark.parametrize("kwargs, shapes, error, match", [
    (dict(proj_size=6), _proj_shapes(6, 6, 5, 1, 1), ValueError, r"proj_size=6 must be smaller than hidden_size=6"),
    (dict(proj_size=-1), _shapes(4, 6, 5, 1, 1), ValueError, r"proj_size=-1 must be 0 \(no projection\) or positive"),
    (dict(proj_size=2.5), _shapes(4, 6, 5, 1, 1), TypeError, r"proj_size"),
    (dict(proj_size=2, mode="gru"), _shapes(3, 6, 5, 1, 1), ValueError,
     r"proj_size=2 is only supported for mode='lstm', not mode='gru'"),
    (dict(proj_size=2), _shapes(4, 6, 5, 1, 1), ValueError,
     r"weights\[0\] has 4 arrays but proj_size=2 takes 5: \(w_ih, w_hh, b_ih, b_hh, w_hr\)"),
    (dict(), _proj_shapes(6, 2, 5, 1, 1), ValueError, r"weights\[0\] has 5 arrays but proj_size=0 takes 4"),
    (dict(proj_size=3), _proj_shapes(6, 2, 5, 1, 1), ValueError, r"weights\[0\]\[1\] \(w_hh\)"),
    (dict(proj_size=2), [s[:4] + ((2, 5),) for s in _proj_shapes(6, 2, 5, 1, 1)], ValueError,
     r"weights\[0\]\[4\] \(w_hr\)"),
    (dict(proj_size=2, num_layers=2), [s if i == 0 else ((24, 6),) + s[1:] for i, s in
                                       enumerate(_proj_shapes(6, 2, 5, 2, 1))], ValueError,
     r"weights\[1\]\[0\] \(w_ih\).*layer 1 input size 2"),
    (dict(proj_size=2, h0_shape=(1, 3, 6)), _proj_shapes(6, 2, 5, 1, 1), ValueError, r"h0.*proj_size\)"),
    (dict(proj_size=2, c0_shape=(1, 3, 2)), _proj_shapes(6, 2, 5, 1, 1), ValueError, r"c0.*hidden_size\)"),
])
def test_rnn_dims_projection_errors(kwargs, shapes, error, match):
    kwargs = dict(dict(mode="lstm", hidden_size=6), **kwargs)
    with pytest.raises(error, match=match):
        RNNDims((7, 3, 5), shapes, **kwargs)
