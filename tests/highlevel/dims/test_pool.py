"""PoolDims (dnnbind.highlevel.dims.pool): defaults, ceil_mode and dilation, every error."""
from __future__ import annotations

import pytest

from dnnbind.highlevel.dims.pool import PoolDims

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
