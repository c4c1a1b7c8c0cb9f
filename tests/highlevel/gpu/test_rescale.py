"""The GPU backends' mean rescale (dnnbind.highlevel.gpu.rescale) on the CPU: what the library computes
(the mean of the explicitly padded x with symmetric padding, run here by the reference backend in the
library's mode), times the factor, is the reference's mean, for asymmetric padding, ceil_mode and
divisor_override alike; the gradient likewise."""
from __future__ import annotations

import numpy as np
import pytest

from dnnbind.highlevel import reference
from dnnbind.highlevel.dims import PoolDims
from dnnbind.highlevel.gpu.geometry import PoolGeometry, interior, pad
from dnnbind.highlevel.gpu.rescale import library_includes_pad, mean_rescale_factor


def test_the_library_runs_the_mean_that_includes_padding_for_any_divisor_override():
    assert library_includes_pad(True) and not library_includes_pad(False)
    assert library_includes_pad(False, 3) and library_includes_pad(True, -1)


def _problems(rng, count):
    for _ in range(count):
        n = int(rng.integers(1, 4))
        window = tuple(int(k) for k in rng.integers(1, 5, n))
        stride = tuple(int(s) for s in rng.integers(1, 4, n))
        pads = tuple((int(rng.integers(0, k // 2 + 1)), int(rng.integers(0, k // 2 + 1))) for k in window)
        sizes = tuple(max(1, k - lo - hi) + int(rng.integers(0, 4)) for k, (lo, hi) in zip(window, pads))
        yield PoolDims((int(rng.integers(1, 3)), int(rng.integers(1, 3))) + sizes, window, stride=stride,
                       padding=pads, ceil_mode=bool(rng.integers(2)))


@pytest.mark.parametrize("divisor_override", [None, 1, 4, -3])
@pytest.mark.parametrize("include", [True, False])
def test_library_mean_times_the_factor_is_the_true_mean(include, divisor_override, rng):
    for dims in _problems(rng, 40):
        g = PoolGeometry.of(dims)
        library_include = library_includes_pad(include, divisor_override)
        factor = mean_rescale_factor(dims, g, include, divisor_override)
        x = rng.standard_normal(dims.x_shape)
        xp = pad(np, x, g.extra_low, g.extra_high, "NCHW")
        as_library = PoolDims(xp.shape, dims.window, stride=dims.stride, padding=g.padding[-dims.spatial_rank:])
        assert as_library.y_shape == dims.y_shape
        y, pullback = reference.meanpool(xp, as_library, library_include)
        y_true, pullback_true = reference.meanpool(x, dims, include, divisor_override)
        scale = 1.0 if factor is None else factor
        if factor is not None:
            assert factor.shape == (1, 1) + dims.out_size
        np.testing.assert_allclose(y * scale, y_true, rtol=1e-12, atol=1e-14)
        dy = rng.standard_normal(y.shape)
        dxp = pullback(dy * scale)
        np.testing.assert_allclose(dxp[interior(x.shape, g.extra_low)], pullback_true(dy), rtol=1e-12, atol=1e-14)


def test_a_divisor_override_is_a_constant_factor_without_explicit_padding():
    dims = PoolDims((1, 1, 7, 7), 3, stride=2, padding=1)
    factor = mean_rescale_factor(dims, PoolGeometry.of(dims), False, -2)
    assert factor is not None
    np.testing.assert_array_equal(factor, np.full((1, 1, 4, 4), 9 / -2))
    dims = PoolDims((1, 1, 6), 1)
    assert mean_rescale_factor(dims, PoolGeometry.of(dims), True, 1) is None       # 1 / 1: nothing to do
