"""ConvDims (dnnbind.highlevel.dims.conv): normalisation, derived shapes, identity, every error."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.dims.rnn import RNNDims

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


def test_equal_problems_compare_and_hash_equal_and_a_plan_holds_its_problem(rng):
    """Equal dims (of any kind) are equal, hash equal and have equal keys (plain frozen dataclasses, no
    interning); an op's plan holds the problem its checks made, and a plan built again after the plan
    cache was cleared holds an equal one."""
    import dnnbind
    from dnnbind.highlevel import plans
    from dnnbind.highlevel.specs import SPECS

    for make in (lambda: ConvDims((1, 4, 8, 8), (2, 4, 3, 3), padding=1),
                 lambda: PoolDims((1, 2, 6, 6), (2, 2)),
                 lambda: RNNDims((3, 2, 4), [((2, 4), (2, 2), (2,), (2,))], mode="rnn_tanh", hidden_size=2)):
        a, b = make(), make()
        assert a is not b and a == b and a.key() == b.key() and hash(a) == hash(b)
    assert ConvDims((1, 4, 8, 8), (2, 4, 3, 3), padding=1) != PoolDims((1, 2, 6, 6), (2, 2))
    x, w = rng.standard_normal((1, 2, 9, 9)), rng.standard_normal((3, 2, 3, 3))

    def planned_dims():
        dnnbind.conv(x, w, padding=2)
        plan = plans.find(SPECS["conv"], (x, w, None), (1, 2, 1, 1, False))     # conv's arguments, as ops.conv
        return next(s for s in plan.static if isinstance(s, ConvDims)) if plan is not None else None

    first = planned_dims()
    plans.clear_plan_cache()
    again = planned_dims()
    assert first is not None and again == first and again.y_shape == (1, 3, 11, 11)


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
    src = str(__import__("pathlib").Path(__file__).resolve().parents[3] / "src")       # this tree's dnnbind
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(d), env={"PYTHONHASHSEED": "123",
                          **{k: v for k, v in __import__("os").environ.items() if k != "PYTHONHASHSEED"},
                          "PYTHONPATH": src})
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
