"""NCHW/NHWC memory layouts and the geometry the libraries run (symmetric padding, >= 2 spatial dims).

The layout and padding helpers take the array module as an argument; numpy stands in for CuPy here
(same API), so their index arithmetic is checked on the CPU.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from dnnbind.highlevel import reference
from dnnbind.highlevel.dims import ConvDims, PoolDims
from dnnbind.highlevel.gpu import layout
from dnnbind.highlevel.gpu.geometry import (ConvGeometry, PoolGeometry, crop, interior, pad, padded_shape,
                                            split_padding, window_counts)


def channels_last(a: np.ndarray) -> np.ndarray:
    """An NCHW-shaped view of a channels-last copy of ``a``."""
    return np.ascontiguousarray(a.transpose(layout.to_last(a.ndim))).transpose(layout.to_first(a.ndim))


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 3, 4, 5), (2, 3, 4, 5, 6)])
def test_strides_describe_the_memory(shape):
    a = np.zeros(shape, np.float32)
    assert layout.strides(shape, "NCHW") == tuple(s // 4 for s in a.strides)
    b = channels_last(a)
    assert layout.strides(shape, "NHWC") == tuple(s // 4 for s in b.strides)
    assert layout.layout_of(a) == "NCHW" and layout.layout_of(b) == "NHWC"
    assert layout.has_layout(b, "NHWC") and not layout.has_layout(b, "NCHW")
    assert layout.layout_of(a[:, :, ::2]) is None


def test_ambiguous_arrays_count_as_nchw():
    one_channel = np.zeros((2, 1, 4, 4))
    assert layout.layout_of(one_channel) == "NCHW" and layout.has_layout(one_channel, "NHWC")
    assert layout.layout_of(np.zeros((5, 3))) == "NCHW"
    assert not layout.has_layout(np.zeros((5, 3)).T, "NHWC")


def test_lift():
    assert layout.lift((8, 3)) == (8, 3, 1, 1)
    assert layout.lift((8, 3, 10)) == (8, 3, 1, 10)
    assert layout.lift((8, 3, 5, 6)) == (8, 3, 5, 6)
    assert layout.lift_spatial((2,), 1) == (1, 2) and layout.lift_spatial((2, 3), 1) == (2, 3)
    # the lifted NHWC strides address the same memory as the 1-d channels-last array
    a = channels_last(np.arange(24.0).reshape(2, 3, 4))
    lifted = np.lib.stride_tricks.as_strided(a, layout.lift(a.shape),
                                             [s * 8 for s in layout.strides(layout.lift(a.shape), "NHWC")])
    np.testing.assert_array_equal(lifted[:, :, 0, :], a)


def test_empty_and_in_layout():
    e = layout.empty(np, (2, 3, 4, 5), np.float16, "NHWC")
    assert e.shape == (2, 3, 4, 5) and e.dtype == np.float16 and layout.layout_of(e) == "NHWC"
    a = np.arange(120.0).reshape(2, 3, 4, 5)
    assert layout.in_layout(np, a, "NCHW") is a
    b = layout.in_layout(np, a, "NHWC")
    assert layout.layout_of(b) == "NHWC"
    np.testing.assert_array_equal(b, a)
    c = layout.in_layout(np, b, "NHWC", np.float32)
    assert c.dtype == np.float32 and layout.layout_of(c) == "NHWC"
    with pytest.raises(ValueError, match=r"layout='NCDHW' must be 'NCHW' or 'NHWC'"):
        layout.check_layout("NCDHW")


def test_split_padding():
    assert split_padding((1, 3, 0), (2, 1, 0)) == ((1, 1, 0), (0, 2, 0), (1, 0, 0))


def test_conv_geometry():
    dims = ConvDims((2, 4, 9), (6, 2, 3), stride=2, padding=((1, 3),), dilation=2, groups=2, flip=True)
    g = ConvGeometry.of(dims)
    assert g.x_shape == (2, 4, 1, 11) and g.w_shape == (6, 2, 1, 3) and g.y_shape == (2, 6, 1, 5)
    assert (g.padding, g.stride, g.dilation) == ((0, 1), (1, 2), (1, 2))
    assert (g.extra_low, g.extra_high, g.groups, g.flip) == ((0,), (2,), 2, True)
    assert g.bias_shape == (1, 6, 1, 1) and g.explicit_padding
    assert not ConvGeometry.of(ConvDims((1, 1, 5, 5), (1, 1, 3, 3), padding=1)).explicit_padding


@pytest.mark.parametrize("padding", [((1, 2), (0, 3)), ((2, 0), 1), 1])
@pytest.mark.parametrize("lay", ["NCHW", "NHWC"])
def test_explicit_padding_gives_the_asymmetric_convolution(padding, lay, rng):
    """What a GPU backend runs (x padded by the extra part, symmetric padding in the library) equals the
    reference's asymmetric convolution, and cropping the padded gradient gives the reference's dx."""
    x, w = rng.standard_normal((2, 3, 6, 7)), rng.standard_normal((4, 3, 3, 2))
    dims = ConvDims(x.shape, w.shape, padding=padding, stride=(1, 2))
    g = ConvGeometry.of(dims)
    xl = x if lay == "NCHW" else channels_last(x)
    xp = pad(np, xl, g.extra_low, g.extra_high, lay)
    assert xp.shape == padded_shape(x.shape, g.extra_low, g.extra_high) and layout.has_layout(xp, lay)
    symmetric = ConvDims(xp.shape, w.shape, padding=g.padding, stride=g.stride)
    y, pullback = reference.conv(np.ascontiguousarray(xp), w, None, symmetric)
    y_ref, pullback_ref = reference.conv(x, w, None, dims)
    np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    dxp = pullback(dy)[0]
    dx = crop(np, layout.in_layout(np, dxp, lay), x.shape, g.extra_low, lay)
    assert dx.shape == x.shape and layout.has_layout(dx, lay)
    np.testing.assert_allclose(dx, pullback_ref(dy)[0], rtol=1e-12, atol=1e-12)


def test_pad_fills_and_keeps_the_interior():
    x = np.arange(12.0).reshape(1, 1, 3, 4)
    xp = pad(np, x, (1, 0), (0, 2), "NCHW", fill=-np.inf)
    assert xp.shape == (1, 1, 4, 6)
    np.testing.assert_array_equal(xp[interior(x.shape, (1, 0))], x)
    assert np.isneginf(xp[0, 0, 0]).all() and np.isneginf(xp[0, 0, :, 4:]).all()
    assert pad(np, x, (0, 0), (0, 0), "NCHW") is x


def test_pool_geometry_and_window_counts():
    dims = PoolDims((2, 3, 7), 3, stride=2, padding=((1, 0),))
    g = PoolGeometry.of(dims)
    assert g.x_shape == (2, 3, 1, 8) and g.y_shape == (2, 3, 1, 3)
    assert (g.window, g.padding, g.stride, g.extra_low, g.extra_high) == ((1, 3), (0, 0), (1, 2), (1,), (0,))
    # positions of a 3-window, stride 2, pad_low 1 over 7 elements: [-1, 2), [1, 4), [3, 6)
    assert window_counts((7,), (3,), (2,), (1,), (3,)) == [[2, 3, 3]]
    for size, k, s, lo, hi in itertools.product((4, 5, 7), (2, 3), (1, 2), (0, 1), (0, 1)):
        out = (size + lo + hi - k) // s + 1
        expected = [sum(0 <= i * s - lo + j < size for j in range(k)) for i in range(out)]
        assert window_counts((size,), (k,), (s,), (lo,), (out,)) == [expected]
