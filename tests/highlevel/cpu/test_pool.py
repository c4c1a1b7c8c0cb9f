"""maxpool and meanpool on the cpu backend: hand-worked cases, ties, finite differences, PyTorch."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dnnbind

from ..gradcheck import check_gradients
from ..torch_oracle import torch_pad

X44 = np.array([[1.0, 5.0, 2.0, 0.0],
                [3.0, 4.0, 8.0, 1.0],
                [0.0, 2.0, 7.0, 7.0],
                [9.0, 1.0, 7.0, 6.0]]).reshape(1, 1, 4, 4)

# every test on dnnbind's C kernels and on numpy alone (conftest.kernels)
pytestmark = pytest.mark.usefixtures("kernels")


def test_maxpool_by_hand():
    y, pullback = dnnbind.maxpool(X44, 2)
    np.testing.assert_array_equal(y[0, 0], [[5, 8], [9, 7]])
    dx = pullback(np.array([[[[10.0, 20.0], [30.0, 40.0]]]]))
    expected = np.zeros((4, 4))
    expected[0, 1], expected[1, 2], expected[3, 0] = 10, 20, 30
    expected[2, 2] = 40  # the window [7 7; 7 6] has three maxima: the first in row-major order wins
    np.testing.assert_array_equal(dx[0, 0], expected)


def test_maxpool_ties_with_overlap_and_padding_by_hand():
    x = np.array([[[2.0, 2.0, 1.0, 2.0]]])
    y, pullback = dnnbind.maxpool(x, 3, stride=1, padding=1)
    # windows: [pad 2 2] [2 2 1] [2 1 2] [1 2 pad]; padding never wins
    np.testing.assert_array_equal(y, [[[2, 2, 2, 2]]])
    dx = pullback(np.array([[[1.0, 10.0, 100.0, 1000.0]]]))
    # first maxima: x0 in windows 0 and 1, x1 in window 2, x3 in window 3
    np.testing.assert_array_equal(dx, [[[11.0, 100.0, 0.0, 1000.0]]])


def test_maxpool_all_negative_with_padding():
    x = -np.arange(1.0, 5.0).reshape(1, 1, 4)
    y, _ = dnnbind.maxpool(x, 2, padding=1)
    np.testing.assert_array_equal(y, [[[-1, -2, -4]]])


def test_meanpool_by_hand():
    y, pullback = dnnbind.meanpool(X44, 2)
    np.testing.assert_array_equal(y[0, 0], [[13 / 4, 11 / 4], [12 / 4, 27 / 4]])
    np.testing.assert_array_equal(pullback(np.full((1, 1, 2, 2), 4.0))[0, 0], np.ones((4, 4)))
    x = np.array([[[1.0, 2.0, 3.0]]])
    y, pullback = dnnbind.meanpool(x, 2, stride=1, padding=1)
    np.testing.assert_allclose(y, [[[0.5, 1.5, 2.5, 1.5]]])
    y, pullback = dnnbind.meanpool(x, 2, stride=1, padding=1, count_include_pad=False)
    np.testing.assert_allclose(y, [[[1.0, 1.5, 2.5, 3.0]]])
    np.testing.assert_allclose(pullback(np.ones((1, 1, 4))), [[[1.5, 1.0, 1.5]]])


def test_meanpool_without_pad_counts_padding_only_on_the_high_side():
    """count_include_pad=False divides by the elements inside x; here only the last window is padded."""
    x = np.array([[[1.0, 2.0, 3.0]]])
    y, pullback = dnnbind.meanpool(x, 2, padding=[(0, 1)], count_include_pad=False)
    np.testing.assert_array_equal(y, [[[1.5, 3.0]]])
    np.testing.assert_array_equal(pullback(np.ones((1, 1, 2))), [[[0.5, 0.5, 1.0]]])
    x = np.arange(1.0, 26.0).reshape(1, 1, 5, 5)
    y, _ = dnnbind.meanpool(x, (3, 2), stride=(2, 2), padding=[(0, 1), (0, 1)], count_include_pad=False)
    expected = [[x[0, 0, i:i + 3, j:j + 2].mean() for j in range(0, 5, 2)] for i in range(0, 4, 2)]
    np.testing.assert_allclose(y[0, 0], expected, rtol=1e-15)


def test_maxpool_nan_propagates_like_torch():
    x = np.array([[[1.0, np.nan, 3.0, 2.0]]])
    y, pullback = dnnbind.maxpool(x, 2)
    assert np.isnan(y[0, 0, 0]) and y[0, 0, 1] == 3
    np.testing.assert_array_equal(pullback(np.ones((1, 1, 2))), [[[0, 1, 1, 0]]])


# ---------------------------------------------------------------------------------------------- finite differences

POOLS = [
    dict(x=(2, 2, 7), window=3, stride=2, padding=((1, 0),)),
    dict(x=(1, 3, 5, 6), window=(2, 3), stride=(1, 2), padding=((1, 0), 1)),
    dict(x=(1, 2, 4, 5, 3), window=2, stride=(1, 2, 1), padding=(0, 1, (1, 0))),
    dict(x=(2, 1, 6, 6), window=2, stride=None, padding=0),
]


@pytest.mark.parametrize("config", POOLS)
def test_maxpool_gradients(rng, config):
    c = dict(config)
    x = rng.standard_normal(c.pop("x"))
    check_gradients(lambda: dnnbind.maxpool(x, c["window"], stride=c["stride"], padding=c["padding"]), [x],
                    select=lambda g: [g])


@pytest.mark.parametrize("config", POOLS)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_meanpool_gradients(rng, config, count_include_pad):
    c = dict(config)
    x = rng.standard_normal(c.pop("x"))
    check_gradients(lambda: dnnbind.meanpool(x, c["window"], stride=c["stride"], padding=c["padding"],
                                             count_include_pad=count_include_pad), [x], select=lambda g: [g])


def test_float16(rng):
    x = rng.standard_normal((2, 3, 6, 6))
    for op in (dnnbind.maxpool, dnnbind.meanpool):
        ref, ref_pb = op(x, 2, padding=1, stride=1)
        y, pullback = op(x.astype(np.float16), 2, padding=1, stride=1)
        assert y.dtype == np.float16
        np.testing.assert_allclose(y, ref, rtol=2e-3, atol=2e-3)
        dy = rng.standard_normal(y.shape)
        dx = pullback(dy.astype(np.float16))
        assert dx.dtype == np.float16
        np.testing.assert_allclose(dx, ref_pb(dy), rtol=5e-3, atol=5e-3)


CEIL_DILATED = [
    dict(x=(2, 2, 8), window=3, stride=2, padding=1, dilation=2, ceil_mode=True),
    dict(x=(1, 2, 7, 6), window=(2, 3), stride=(2, 2), padding=((1, 0), 1), dilation=(3, 1), ceil_mode=True),
    dict(x=(1, 1, 5, 4, 5), window=2, stride=(2, 1, 3), padding=(1, 0, 1), dilation=1, ceil_mode=True),
]


@pytest.mark.parametrize("config", CEIL_DILATED)
def test_ceil_mode_and_dilation_gradients(rng, config):
    c = dict(config)
    x = rng.standard_normal(c.pop("x"))
    check_gradients(lambda: dnnbind.maxpool(x, **c), [x], select=lambda g: [g])
    if c.pop("dilation") == 1:
        for include in (True, False):
            check_gradients(lambda: dnnbind.meanpool(x, **c, count_include_pad=include), [x], select=lambda g: [g])


def test_ceil_mode_mean_divisors_by_hand():
    """Size 6, window 3, stride 2, padding 1, ceil_mode: windows [-1, 2) [1, 4) [3, 6) and [5, 8), which
    runs one past the padding; torch counts the user's padding (not ceil_mode's) with count_include_pad."""
    x = np.array([[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]])
    y, pullback = dnnbind.meanpool(x, 3, stride=2, padding=1, ceil_mode=True)
    np.testing.assert_allclose(y, [[[3 / 3, 9 / 3, 15 / 3, 6 / 2]]])
    np.testing.assert_allclose(pullback(np.ones((1, 1, 4))), [[[1 / 3, 2 / 3, 1 / 3, 2 / 3, 1 / 3, 1 / 3 + 1 / 2]]])
    y, _ = dnnbind.meanpool(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
    np.testing.assert_allclose(y, [[[3 / 2, 9 / 3, 15 / 3, 6 / 1]]])
    dims = dnnbind.PoolDims(x.shape, 3, stride=2, padding=1, ceil_mode=True)
    assert dims.out_size == (4,) and dims.ceil_extra == (1,) and dims.pad_high == (2,) and dims.user_pad_high == (1,)
    assert dims.mean_counts(True) == ((3, 3, 3, 2),) and dims.mean_counts(False) == ((2, 3, 3, 1),)
    dims = dnnbind.PoolDims((1, 1, 5), 3, stride=2, padding=1, ceil_mode=True)
    assert dims.out_size == (3,) and dims.ceil_extra == (0,)               # no window left over: as floor
    dims = dnnbind.PoolDims((1, 1, 5), 2, stride=2, padding=1, ceil_mode=True)
    assert dims.out_size == (3,) and dims.ceil_extra == (0,)               # a 4th window would start past x


def test_dilated_maxpool_by_hand():
    x = np.array([[[3.0, 9.0, 1.0, 9.0, 2.0, 0.0, 5.0]]])
    y, pullback = dnnbind.maxpool(x, 3, stride=2, dilation=2)           # windows read 0,2,4 and 2,4,6
    np.testing.assert_array_equal(y, [[[3.0, 5.0]]])
    np.testing.assert_array_equal(pullback(np.array([[[1.0, 10.0]]])), [[[1, 0, 0, 0, 0, 0, 10]]])


def test_return_indices_by_hand_and_in_half_precision():
    (y, indices), pullback = dnnbind.maxpool(X44, 2, return_indices=True)
    np.testing.assert_array_equal(y[0, 0], [[5, 8], [9, 7]])
    np.testing.assert_array_equal(indices[0, 0], [[1, 6], [12, 10]])         # first of the three 7s
    assert pullback(np.ones((1, 1, 2, 2))).sum() == 4
    (y16, indices16), _ = dnnbind.maxpool(X44.astype(np.float16), 2, return_indices=True)
    assert y16.dtype == np.float16 and indices16.dtype == np.int64
    np.testing.assert_array_equal(indices16, indices)
    (y, indices), _ = dnnbind.maxpool(np.zeros((0, 2, 4)), 2, return_indices=True)     # empty batch
    assert y.shape == indices.shape == (0, 2, 2) and indices.dtype == np.int64


def test_errors(rng):
    x = rng.standard_normal((1, 1, 4, 4))
    with pytest.raises(TypeError, match=r"return_indices=1 must be a bool"):
        dnnbind.maxpool(x, 2, return_indices=1)
    with pytest.raises(TypeError, match=r"ceil_mode=1 must be a bool"):
        dnnbind.maxpool(x, 2, ceil_mode=1)
    with pytest.raises(TypeError, match=r"ceil_mode='yes' must be a bool"):
        dnnbind.meanpool(x, 2, ceil_mode="yes")
    with pytest.raises(ValueError, match=r"dilation=0 must be positive"):
        dnnbind.maxpool(x, 2, dilation=0)
    with pytest.raises(TypeError, match=r"dilation=1.5 must be an int"):
        dnnbind.maxpool(x, 2, dilation=1.5)
    with pytest.raises(ValueError, match=r"dilation=\(1, 2, 3, 4\) must be an int or 2 ints"):
        dnnbind.maxpool(x, 2, dilation=(1, 2, 3, 4))     # (1, 2, 3) would make x one unbatched 3-d sample
    with pytest.raises(ValueError, match=r"output would be empty.*window=\(3, 3\) dilated to \(5, 5\)"):
        dnnbind.maxpool(x, 3, dilation=2)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'dilation'"):
        dnnbind.meanpool(x, 2, dilation=2)
    with pytest.raises(ValueError, match=r"padding=2 must be at most half the window \(3, 3\)"):
        dnnbind.maxpool(x, 3, padding=2)
    with pytest.raises(TypeError, match=r"count_include_pad=1 must be a bool"):
        dnnbind.meanpool(x, 2, count_include_pad=1)
    with pytest.raises(TypeError, match=r"x has dtype int32"):
        dnnbind.maxpool(x.astype(np.int32), 2)
    y, pullback = dnnbind.maxpool(x, 2)
    with pytest.raises(ValueError, match=r"dy has shape \(1, 1, 4, 4\) but must have shape \(1, 1, 2, 2\)"):
        pullback(x)


# ---------------------------------------------------------------------------------------------- against PyTorch


@st.composite
def pool_case(draw):
    rank = draw(st.integers(1, 3))
    window = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    pads = tuple((draw(st.integers(0, k // 2)), draw(st.integers(0, k // 2))) for k in window)
    size = tuple(max(1, k - lo - hi) + draw(st.integers(0, 3)) for k, (lo, hi) in zip(window, pads))
    return dict(x=(draw(st.integers(1, 2)), draw(st.integers(1, 3))) + size, window=window, stride=stride,
                pads=pads, ties=draw(st.booleans()), count_include_pad=draw(st.booleans()))


@settings(max_examples=40, deadline=None)
@given(pool_case())
def test_pools_match_torch(case):
    """Asymmetric padding goes through F.pad (-inf for max; zeros and a count of ones for mean)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(2)
    x = rng.standard_normal(case["x"])
    if case["ties"]:
        x = np.round(x)  # many equal values: checks which maximum gets the gradient
    rank = len(case["x"]) - 2
    window, stride, pad = case["window"], case["stride"], torch_pad(case["pads"])
    dy = rng.standard_normal(dnnbind.PoolDims(x.shape, window, stride=stride, padding=case["pads"]).y_shape)

    y, pullback = dnnbind.maxpool(x, window, stride=stride, padding=case["pads"])
    xt = torch.tensor(x, requires_grad=True)
    yt = getattr(F, f"max_pool{rank}d")(F.pad(xt, pad, value=-np.inf), window, stride)
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_allclose(pullback(dy), torch.autograd.grad(yt, xt, torch.tensor(dy))[0].numpy(), atol=1e-12)

    cip = case["count_include_pad"]
    y, pullback = dnnbind.meanpool(x, window, stride=stride, padding=case["pads"], count_include_pad=cip)
    avg = getattr(F, f"avg_pool{rank}d")
    xt = torch.tensor(x, requires_grad=True)
    yt = avg(F.pad(xt, pad), window, stride)
    if not cip:
        yt = yt * np.prod(window) / (avg(F.pad(torch.ones_like(xt), pad), window, stride) * np.prod(window))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pullback(dy), torch.autograd.grad(yt, xt, torch.tensor(dy))[0].numpy(),
                               rtol=1e-12, atol=1e-12)


@st.composite
def torch_case(draw):
    """torch's own arguments: symmetric padding, dilation (max pooling) and ceil_mode."""
    rank = draw(st.integers(1, 3))
    window = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    dilation = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    pads = tuple(draw(st.integers(0, k // 2)) for k in window)
    size = tuple(max(1, d * (k - 1) + 1 - 2 * p) + draw(st.integers(0, 4))
                 for k, d, p in zip(window, dilation, pads))
    return dict(x=(draw(st.integers(1, 2)), draw(st.integers(1, 3))) + size, window=window, stride=stride,
                padding=pads, dilation=dilation, ceil_mode=draw(st.booleans()), ties=draw(st.booleans()),
                minus_infinity=draw(st.sampled_from([0.0, 0.5, 1.0])))


def _some_window_reads_padding_only(y_shape, case):
    """Whether a (dilated) window has no element in x: torch's backward writes its gradient out of bounds."""
    for o, k, s, d, p, size in zip(y_shape[2:], case["window"], case["stride"], case["dilation"], case["padding"],
                                   case["x"][2:]):
        start = np.arange(o) * s - p
        first = -(-np.maximum(-start, 0) // d)
        if ((first >= k) | (start + first * d >= size)).any():
            return True
    return False


@settings(max_examples=60, deadline=None)
@given(torch_case())
def test_ceil_mode_and_dilation_match_torch_directly(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(3)
    x = rng.standard_normal(case["x"])
    if case["ties"]:
        x = np.round(x)
    x[rng.random(x.shape) < case["minus_infinity"]] = -np.inf      # -inf ties with padding: torch's winner wins
    rank = len(case["x"]) - 2
    kw = dict(stride=case["stride"], padding=case["padding"], ceil_mode=case["ceil_mode"])
    xt = torch.tensor(x, requires_grad=True)
    yt, it = getattr(F, f"max_pool{rank}d")(xt, case["window"], dilation=case["dilation"], return_indices=True, **kw)
    (y, indices), pullback = dnnbind.maxpool(x, case["window"], dilation=case["dilation"], return_indices=True, **kw)
    np.testing.assert_array_equal(y, yt.detach().numpy())
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices, it.numpy())
    dy = rng.standard_normal(y.shape)
    if not _some_window_reads_padding_only(y.shape, case):
        # a dilated window can read padding only (-inf); torch's index for it may lie past its plane, and
        # torch's backward then adds its gradient to the next plane: dnnbind drops it (it has no source)
        np.testing.assert_allclose(pullback(dy), torch.autograd.grad(yt, xt, torch.tensor(dy))[0].numpy(),
                                   rtol=1e-13, atol=1e-13)
    if np.isneginf(x).any():
        return                 # mean pooling of -inf: inf - inf in torch's and dnnbind's gradients alike
    if rank == 3 and any(s < k for s, k in zip(case["x"][2:], case["window"])):
        return          # torch's avg_pool3d refuses an input smaller than the window even where padding covers it
    for cip in (True, False):
        yt = getattr(F, f"avg_pool{rank}d")(xt, case["window"], count_include_pad=cip, **kw)
        y, pullback = dnnbind.meanpool(x, case["window"], count_include_pad=cip, **kw)
        np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
        dy = rng.standard_normal(y.shape)
        np.testing.assert_allclose(pullback(dy), torch.autograd.grad(yt, xt, torch.tensor(dy))[0].numpy(),
                                   rtol=1e-12, atol=1e-12)


def test_symmetric_padding_matches_torch_directly(rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = np.round(rng.standard_normal((2, 3, 7, 8)) * 2)
    xt = torch.tensor(x, requires_grad=True)
    dy = rng.standard_normal((2, 3, 4, 4))
    y, pullback = dnnbind.maxpool(x, 3, stride=2, padding=1)
    yt = F.max_pool2d(xt, 3, 2, 1)
    np.testing.assert_array_equal(y, yt.detach().numpy())
    # gradients summed in another order from overlapping windows: equal up to rounding
    np.testing.assert_allclose(pullback(dy), torch.autograd.grad(yt, xt, torch.tensor(dy))[0].numpy(),
                               rtol=1e-13, atol=1e-13)
    for cip in (True, False):
        y, pullback = dnnbind.meanpool(x, 3, stride=2, padding=1, count_include_pad=cip)
        yt = F.avg_pool2d(xt, 3, 2, 1, count_include_pad=cip)
        np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(pullback(dy), torch.autograd.grad(yt, xt, torch.tensor(dy))[0].numpy(),
                                   rtol=1e-12)


# ---------------------------------------------------------------------------------------------- divisor_override


def test_divisor_override_by_hand():
    """Windows [-1, 2) [1, 4) [3, 6) [5, 8) of 1..6 (as in the ceil_mode case above): every sum over 2,
    with padding adding nothing and count_include_pad not mattering; the gradient is the number of
    windows that read an element, over 2."""
    x = np.array([[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]])
    for include in (True, False):
        y, pullback = dnnbind.meanpool(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=include,
                                       divisor_override=2)
        np.testing.assert_array_equal(y, [[[3 / 2, 9 / 2, 15 / 2, 6 / 2]]])
        np.testing.assert_array_equal(pullback(np.ones((1, 1, 4))), [[[0.5, 1.0, 0.5, 1.0, 0.5, 1.0]]])
    y, _ = dnnbind.meanpool(x, 2, divisor_override=-4)
    np.testing.assert_array_equal(y, [[[-3 / 4, -7 / 4, -11 / 4]]])
    dims = dnnbind.PoolDims(x.shape, 3, stride=2, padding=1, ceil_mode=True)
    assert dims.mean_divisor(True) == (((3, 3, 3, 2),), 1) and dims.mean_divisor(False) == (((2, 3, 3, 1),), 1)
    assert dims.mean_divisor(False, -5) == (((1, 1, 1, 1),), -5)


DIVISOR_POOLS = [
    dict(x=(2, 2, 7), window=3, stride=2, padding=((1, 0),), ceil_mode=True, divisor_override=-3),
    dict(x=(1, 3, 5, 6), window=(2, 3), stride=(1, 2), padding=((1, 0), 1), ceil_mode=False, divisor_override=5),
    dict(x=(1, 2, 4, 5, 3), window=2, stride=(1, 2, 1), padding=(0, 1, (1, 0)), ceil_mode=True, divisor_override=1),
]


@pytest.mark.parametrize("config", DIVISOR_POOLS)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_divisor_override_gradients(rng, config, count_include_pad):
    c = dict(config)
    x = rng.standard_normal(c.pop("x"))
    check_gradients(lambda: dnnbind.meanpool(x, **c, count_include_pad=count_include_pad), [x],
                    select=lambda g: [g])


@st.composite
def divisor_case(draw):
    """torch's own arguments (symmetric padding, ceil_mode, count_include_pad) and a non-zero divisor."""
    rank = draw(st.integers(1, 3))
    window = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    pads = tuple(draw(st.integers(0, k // 2)) for k in window)
    # avg_pool3d refuses an input smaller than the window even where padding covers it: 3-d stays >= window
    size = tuple((k if rank == 3 else max(1, k - 2 * p)) + draw(st.integers(0, 4)) for k, p in zip(window, pads))
    return dict(x=(draw(st.integers(1, 2)), draw(st.integers(1, 3))) + size, window=window, stride=stride,
                padding=pads, ceil_mode=draw(st.booleans()), count_include_pad=draw(st.booleans()),
                divisor_override=draw(st.integers(-9, 9).filter(bool)))


def torch_avg_pool(torch, xt, window, stride, padding, **kw):
    """torch's avg_pool{1,2,3}d; 1-d through avg_pool2d on a height of 1 (avg_pool1d has no divisor_override)."""
    F = torch.nn.functional
    if len(window) == 1:
        y = F.avg_pool2d(xt.unsqueeze(-2), (1,) + window, (1,) + stride, (0,) + padding, **kw)
        return y.squeeze(-2)
    return getattr(F, f"avg_pool{len(window)}d")(xt, window, stride, padding, **kw)


@settings(max_examples=80, deadline=None)
@given(divisor_case())
def test_divisor_override_matches_torch(case):
    """Forward and backward against torch's autograd, float64, over ceil_mode, padding, both
    count_include_pad values and negative divisors."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    c = dict(case)
    x = rng.standard_normal(c.pop("x"))
    xt = torch.tensor(x, requires_grad=True)
    yt = torch_avg_pool(torch, xt, c["window"], c["stride"], c["padding"], ceil_mode=c["ceil_mode"],
                        count_include_pad=c["count_include_pad"], divisor_override=c["divisor_override"])
    y, pullback = dnnbind.meanpool(x, **c)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    np.testing.assert_allclose(pullback(dy), torch.autograd.grad(yt, xt, torch.tensor(dy))[0].numpy(),
                               rtol=1e-12, atol=1e-12)


def test_divisor_override_in_half_precision(rng):
    x = rng.standard_normal((2, 3, 6, 6))
    y64, pullback64 = dnnbind.meanpool(x, 3, stride=2, padding=1, ceil_mode=True, divisor_override=-7)
    y, pullback = dnnbind.meanpool(x.astype(np.float16), 3, stride=2, padding=1, ceil_mode=True, divisor_override=-7)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, y64, rtol=2e-3, atol=2e-3)
    dy = rng.standard_normal(y.shape)
    np.testing.assert_allclose(pullback(dy.astype(np.float16)), pullback64(dy), rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("value, error, message", [
    (0, ValueError, r"divisor_override=0 must be a non-zero int"),
    (True, TypeError, r"divisor_override=True must be None or a non-zero int, not bool"),
    (False, TypeError, r"divisor_override=False must be None or a non-zero int, not bool"),
    (np.True_, TypeError, r"divisor_override=np.True_ must be None or a non-zero int, not bool"),
    (2.0, TypeError, r"divisor_override=2.0 must be None or a non-zero int, not float"),
    ("2", TypeError, r"divisor_override='2' must be None or a non-zero int, not str"),
])
def test_divisor_override_errors(value, error, message):
    with pytest.raises(error, match=message):
        dnnbind.meanpool(np.ones((1, 1, 4, 4)), 2, divisor_override=value)


def test_divisor_override_takes_numpy_ints():
    y, _ = dnnbind.meanpool(np.ones((1, 1, 4, 4)), 2, divisor_override=np.int64(2))
    np.testing.assert_array_equal(y, np.full((1, 1, 2, 2), 2.0))


def test_minus_infinity_beside_padding_gets_the_gradient_like_torch():
    """A window whose elements in x are all -inf ties with its padding; the first element in x wins (PyTorch's
    winner), not the padding, so the gradient reaches x."""
    x = np.array([[[-np.inf, 3.0, -np.inf, -np.inf]]])
    (y, indices), pullback = dnnbind.maxpool(x, 2, padding=1, return_indices=True)
    np.testing.assert_array_equal(indices, [[[0, 1, 3]]])
    np.testing.assert_array_equal(pullback(np.array([[[1.0, 10.0, 100.0]]])), [[[1.0, 10.0, 0.0, 100.0]]])


def test_a_window_on_padding_only_gives_minus_infinity_and_no_gradient():
    """Dilated windows whose every tap lands on padding (height 1, padding 1, dilation 2: rows -1 and 1):
    -inf, and a gradient that goes nowhere (torch's own CPU backward writes it out of bounds)."""
    x = np.arange(4.0).reshape(1, 1, 1, 4)
    (y, indices), pullback = dnnbind.maxpool(x, 2, stride=1, padding=1, dilation=2, return_indices=True)
    assert y.shape == (1, 1, 1, 4) and np.isneginf(y).all() and indices.dtype == np.int64
    np.testing.assert_array_equal(pullback(np.ones_like(y)), np.zeros_like(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("size", [(5,), (7, 7), (1, 1), (3, 4, 5), (37,)])
def test_global_pooling_matches_torch(rng, dtype, size):
    """A window that is the whole plane (global pooling) reduces each plane as one row: the values,
    the first maximum's index and gradient on ties, NaN from the last NaN (its gradient too), a plane
    of -inf, and the mean with and without a divisor override, against torch."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = np.round(rng.standard_normal((3, 4) + size) * 2).astype(dtype)     # many ties
    flat = x.reshape(12, -1)
    flat[1, :] = -np.inf
    if flat.shape[1] > 2:
        flat[2, [0, flat.shape[1] - 2]] = np.nan
        flat[3, 1] = np.nan
    rank = len(size)
    dy = rng.standard_normal((3, 4) + (1,) * rank).astype(dtype)
    wide = torch.float32 if dtype == np.float16 else None     # torch's CPU max-pool indices in half
    xt = torch.tensor(x, dtype=wide, requires_grad=True)

    y, pullback = dnnbind.maxpool(x, size)
    (_, indices), _ = dnnbind.maxpool(x, size, return_indices=True)
    yt, it = getattr(F, f"max_pool{rank}d")(xt, size, return_indices=True)
    assert y.dtype == dtype and y.shape == yt.shape
    np.testing.assert_array_equal(y, yt.detach().numpy().astype(dtype))
    np.testing.assert_array_equal(indices, it.numpy())
    dxt = torch.autograd.grad(yt, xt, torch.tensor(dy, dtype=wide))[0].numpy().astype(dtype)
    np.testing.assert_array_equal(pullback(dy), dxt)

    for override in (None, 3):
        xt = torch.tensor(np.nan_to_num(x, posinf=0, neginf=0), dtype=torch.float64, requires_grad=True)
        y, pullback = dnnbind.meanpool(np.nan_to_num(x, posinf=0, neginf=0), size, divisor_override=override)
        kwargs = {} if rank == 1 or override is None else {"divisor_override": override}
        yt = getattr(F, f"avg_pool{rank}d")(xt, size, **kwargs)
        if rank == 1 and override is not None:     # avg_pool1d has no divisor_override
            yt = yt * math.prod(size) / override
        tol = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-14}[dtype]
        assert y.dtype == dtype
        np.testing.assert_allclose(y, yt.detach().numpy(), rtol=tol, atol=tol)
        dxt = torch.autograd.grad(yt, xt, torch.tensor(dy, dtype=torch.float64))[0].numpy()
        np.testing.assert_allclose(pullback(dy), dxt, rtol=tol, atol=tol)
