"""The GPU backends' dilated max pooling (dnnbind.highlevel.gpu.window_max) is array code for any
numpy-like module: run with numpy here against the reference backend and PyTorch (values, winners,
gradients, return_indices), and with CuPy on a GPU (marked gpu)."""
from __future__ import annotations

import numpy as np
import pytest

from dnnbind.highlevel import reference
from dnnbind.highlevel.dims import PoolDims
from dnnbind.highlevel.gpu import window_max

CASES = [
    ((2, 3, 13), 3, dict(stride=2, padding=1, dilation=3, ceil_mode=True)),
    ((2, 2, 9, 10), (3, 2), dict(stride=(2, 1), padding=((1, 0), (0, 1)), dilation=(2, 3))),
    ((1, 2, 6, 7, 8), 2, dict(stride=1, padding=1, dilation=(1, 2, 3), ceil_mode=True)),
    ((2, 2, 7, 7), 3, dict(stride=2, padding=1, ceil_mode=True)),                  # undilated works too
    ((1, 1, 2), 2, dict(stride=1, padding=1, dilation=3)),                         # a window of padding only
]


def _inputs(rng, shape, ties):
    x = rng.standard_normal(shape)
    return np.round(x) if ties else x


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("shape, window, kw", CASES)
def test_window_max_on_numpy_equals_the_reference(rng, shape, window, kw, ties):
    x = _inputs(rng, shape, ties)
    if ties:
        x.flat[min(3, x.size - 1)] = np.nan            # NaN wins its windows, as in the reference
    dims = PoolDims(shape, window, dtype="float64", **kw)
    y, winners = window_max.forward(np, x, dims)
    y_ref, (argmax,) = reference.maxpool_forward(x, dims)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(winners, argmax)
    assert winners.dtype == dims.winner_dtype == reference.maxpool_residuals(x, dims)[0].dtype
    dy = rng.standard_normal(y.shape)
    # where windows overlap, the reference's C kernels add an input's shares in output order, window_max
    # in window-position order: equal up to that rounding
    np.testing.assert_allclose(window_max.backward(np, winners, dy, dims), reference.maxpool_backward((argmax,), (dy,), dims),
                               rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("shape, window, kw", [CASES[0], CASES[2], CASES[3]])    # torch's symmetric padding
def test_flat_indices_are_torchs_return_indices(rng, shape, window, kw):
    torch = pytest.importorskip("torch")
    x = np.round(rng.standard_normal(shape) * 2)
    dims = PoolDims(shape, window, dtype="float64", **kw)
    _, winners = window_max.forward(np, x, dims)
    indices = window_max.flat_indices(np, winners, dims)
    f = getattr(torch.nn.functional, f"max_pool{dims.spatial_rank}d")
    _, expected = f(torch.tensor(x), window, return_indices=True, **kw)
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices, expected.numpy())


@pytest.mark.gpu
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("shape, window, kw", CASES)
def test_window_max_on_cupy_equals_the_reference(cuda, rng, shape, window, kw, ties):
    cp = cuda
    x = _inputs(rng, shape, ties)
    dims = PoolDims(shape, window, dtype="float64", **kw)
    y, winners = window_max.forward(cp, cp.asarray(x), dims)
    y_ref, (argmax,) = reference.maxpool_forward(x, dims)
    np.testing.assert_array_equal(cp.asnumpy(y), y_ref)
    np.testing.assert_array_equal(cp.asnumpy(winners), argmax)
    dy = rng.standard_normal(y.shape)
    np.testing.assert_allclose(cp.asnumpy(window_max.backward(cp, winners, cp.asarray(dy), dims)),
                               reference.maxpool_backward((argmax,), (dy,), dims), rtol=1e-15, atol=0)
    np.testing.assert_array_equal(cp.asnumpy(window_max.flat_indices(cp, winners, dims)),
                                  window_max.flat_indices(np, argmax, dims))
