"""dropout on the cpu backend: seeding, scaling, p = 0 and p = 1, the saved mask."""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind

from ..gradcheck import check_gradients


def test_seeded_mask_and_scaling(rng):
    x = rng.standard_normal((64, 128)) + 3.0
    y, pullback = dnnbind.dropout(x, 0.25, seed=7)
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(y[kept], x[kept] / 0.75)
    again, _ = dnnbind.dropout(x, 0.25, seed=7)
    np.testing.assert_array_equal(y, again)
    other, _ = dnnbind.dropout(x, 0.25, seed=8)
    assert not np.array_equal(y, other)
    mask = np.random.default_rng(7).random(x.shape, dtype=np.float32) >= 0.25
    np.testing.assert_array_equal(kept, mask)
    np.testing.assert_array_equal(pullback.mask, mask)
    dy = rng.standard_normal(x.shape)
    np.testing.assert_allclose(pullback(dy), dy * mask / 0.75)


def test_unseeded_calls_differ(rng):
    x = rng.standard_normal(1000)
    assert not np.array_equal(dnnbind.dropout(x, 0.5)[0], dnnbind.dropout(x, 0.5)[0])


def test_generator_seed_advances():
    x = np.ones(100)
    gen = np.random.default_rng(3)
    a, _ = dnnbind.dropout(x, 0.5, seed=gen)
    b, _ = dnnbind.dropout(x, 0.5, seed=gen)
    assert not np.array_equal(a, b)


def test_p_zero_and_one(rng):
    x = rng.standard_normal((3, 4))
    y, pullback = dnnbind.dropout(x, 0.0, seed=1)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(pullback(x), x)
    y, pullback = dnnbind.dropout(x, 1.0, seed=1)
    np.testing.assert_array_equal(y, np.zeros_like(x))
    np.testing.assert_array_equal(pullback(x), np.zeros_like(x))
    assert not np.any(np.isnan(y))


def test_same_mask_for_every_dtype(rng):
    x = rng.standard_normal((5, 7))
    masks = [dnnbind.dropout(x.astype(t), 0.4, seed=11)[0] != 0 for t in (np.float16, np.float32, np.float64)]
    assert all(np.array_equal(masks[0], m) for m in masks)
    y, pullback = dnnbind.dropout(x.astype(np.float16), 0.4, seed=11)
    assert y.dtype == np.float16 and pullback(np.ones((5, 7), np.float16)).dtype == np.float16


def test_gradients_and_saved_mask(rng):
    x = rng.standard_normal((4, 5))
    check_gradients(lambda: dnnbind.dropout(x, 0.3, seed=5), [x], select=lambda g: [g])
    _, pullback = dnnbind.dropout(x, 0.3, seed=5)
    with pytest.raises(ValueError, match="read-only"):
        pullback.mask[0, 0] = not pullback.mask[0, 0]


def test_matches_torch_statistics(rng):
    """torch draws its mask from another generator: compare the law, not the values."""
    torch = pytest.importorskip("torch")
    x = np.ones((200, 200))
    y, _ = dnnbind.dropout(x, 0.3, seed=0)
    yt = torch.nn.functional.dropout(torch.tensor(x), 0.3, training=True).numpy()
    assert set(np.unique(y)) == set(np.unique(yt)) == {0.0, 1 / 0.7}
    assert abs((y == 0).mean() - (yt == 0).mean()) < 0.01


def test_errors():
    x = np.zeros(3)
    with pytest.raises(ValueError, match=r"p=1.5 must be in \[0, 1\]"):
        dnnbind.dropout(x, 1.5)
    with pytest.raises(ValueError, match=r"p=-0.1 must be in \[0, 1\]"):
        dnnbind.dropout(x, -0.1)
    with pytest.raises(TypeError, match=r"p=None must be a real number"):
        dnnbind.dropout(x, None)
    with pytest.raises(ValueError, match=r"seed=-1 must be non-negative"):
        dnnbind.dropout(x, 0.5, seed=-1)
    with pytest.raises(TypeError, match=r"seed=1.5 must be None, a non-negative int or a numpy.random.Generator"):
        dnnbind.dropout(x, 0.5, seed=1.5)
    with pytest.raises(TypeError, match=r"x has dtype bool"):
        dnnbind.dropout(x.astype(bool), 0.5)
