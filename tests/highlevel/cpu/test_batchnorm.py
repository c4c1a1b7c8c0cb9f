"""batchnorm on the cpu backend: statistics, running-stat updates, gradients, PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind

from ..gradcheck import check_gradients

# every test on dnnbind's C kernels and on numpy alone (conftest.kernels)
pytestmark = pytest.mark.usefixtures("kernels")


def test_training_by_hand():
    x = np.array([1.0, 2.0, 3.0, 4.0]).reshape(4, 1)
    rm, rv = np.zeros(1), np.ones(1)
    y, _ = dnnbind.batchnorm(x, np.array([2.0]), np.array([0.5]), running_mean=rm, running_var=rv, eps=1e-300)
    # mean 2.5, biased variance 1.25
    np.testing.assert_allclose(y[:, 0], 2 * (x[:, 0] - 2.5) / np.sqrt(1.25) + 0.5)
    # running stats: momentum 0.1, unbiased variance 5/3
    np.testing.assert_allclose(rm, [0.25])
    np.testing.assert_allclose(rv, [0.9 + 0.1 * 5 / 3])


def test_inference_by_hand():
    x = np.array([[1.0, 10.0], [3.0, 20.0]])
    rm, rv = np.array([1.0, 10.0]), np.array([4.0, 25.0])
    y, pullback = dnnbind.batchnorm(x, np.array([1.0, 2.0]), np.array([0.0, 1.0]), running_mean=rm,
                                    running_var=rv, training=False, eps=1e-300)
    np.testing.assert_allclose(y, [[0.0, 1.0], [1.0, 1.0 + 2 * 10 / 5]])
    dx, dgamma, dbeta = pullback(np.ones_like(x))
    np.testing.assert_allclose(dx, [[0.5, 0.4], [0.5, 0.4]])
    np.testing.assert_allclose(dgamma, [0 + 1, 0 + 2])
    np.testing.assert_allclose(dbeta, [2, 2])
    np.testing.assert_array_equal(rm, [1.0, 10.0])   # inference leaves the running stats alone


def test_training_without_running_stats(rng):
    x = rng.standard_normal((5, 3, 4)) * 3 + 2
    y, _ = dnnbind.batchnorm(x, np.ones(3), np.zeros(3))
    np.testing.assert_allclose(y.mean(axis=(0, 2)), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=(0, 2)), 1, rtol=1e-4)


@pytest.mark.parametrize("shape", [(6, 3), (3, 2, 5), (2, 3, 3, 4), (2, 2, 3, 2, 2)])
@pytest.mark.parametrize("training", [True, False])
def test_gradients(rng, shape, training):
    c = shape[1]
    x, gamma, beta = rng.standard_normal(shape), rng.standard_normal(c), rng.standard_normal(c)
    rm, rv = rng.standard_normal(c), rng.uniform(0.5, 2.0, c)
    check_gradients(lambda: dnnbind.batchnorm(x, gamma, beta, running_mean=rm, running_var=rv, training=training,
                                              eps=1e-3),
                    [x, gamma, beta])


def test_pullback_keeps_its_own_statistics(rng):
    x, gamma, beta = rng.standard_normal((4, 3, 5)), rng.standard_normal(3), rng.standard_normal(3)
    rm, rv = np.zeros(3), np.ones(3)
    for training in (True, False):
        y, pullback = dnnbind.batchnorm(x, gamma, beta, running_mean=rm, running_var=rv, training=training)
        dy = rng.standard_normal(y.shape)
        first = pullback(dy)
        dnnbind.batchnorm(x * 5 + 1, gamma, beta, running_mean=rm, running_var=rv)   # moves the running stats
        rm += 1.0
        for a, b in zip(first, pullback(dy)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 6), (2, 3, 4, 5), (2, 3, 2, 3, 4)])
@pytest.mark.parametrize("training", [True, False])
def test_matches_torch(rng, shape, training):
    torch = pytest.importorskip("torch")
    c = shape[1]
    x, gamma, beta = rng.standard_normal(shape) * 2 + 1, rng.standard_normal(c), rng.standard_normal(c)
    rm, rv = rng.standard_normal(c), rng.uniform(0.5, 2.0, c)
    rm_t, rv_t = torch.tensor(rm), torch.tensor(rv)
    y, pullback = dnnbind.batchnorm(x, gamma, beta, running_mean=rm, running_var=rv, training=training,
                                    momentum=0.3, eps=1e-4)
    xt, gt, bt = (torch.tensor(a, requires_grad=True) for a in (x, gamma, beta))
    yt = torch.nn.functional.batch_norm(xt, rm_t, rv_t, gt, bt, training=training, momentum=0.3, eps=1e-4)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rm, rm_t.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rv, rv_t.numpy(), rtol=1e-12)
    dy = rng.standard_normal(shape)
    for ours, theirs in zip(pullback(dy), torch.autograd.grad(yt, (xt, gt, bt), torch.tensor(dy))):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10, atol=1e-11)


def test_dtypes(rng):
    x, gamma, beta = rng.standard_normal((4, 3, 5)), rng.standard_normal(3), rng.standard_normal(3)
    ref, ref_pb = dnnbind.batchnorm(x, gamma, beta)
    dy = rng.standard_normal(x.shape)
    ref_grads = ref_pb(dy)
    for dtype, tol in ((np.float32, 1e-5), (np.float16, 1e-2)):
        rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)   # float32 stats, as mixed precision keeps them
        y, pullback = dnnbind.batchnorm(x.astype(dtype), gamma.astype(dtype), beta.astype(dtype), running_mean=rm,
                                        running_var=rv)
        assert y.dtype == dtype and rm.dtype == np.float32
        assert np.all(rm != 0)
        np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * 5)
        grads = pullback(dy.astype(dtype))
        for g, r in zip(grads, ref_grads):
            assert g.dtype == dtype
            np.testing.assert_allclose(g, r, rtol=tol * 5, atol=tol * 20)
    rm16 = np.zeros(3, np.float16)
    dnnbind.batchnorm(x.astype(np.float16), gamma.astype(np.float16), beta.astype(np.float16), running_mean=rm16,
                      running_var=np.ones(3, np.float16))
    np.testing.assert_allclose(rm16, 0.1 * x.mean(axis=(0, 2)), rtol=1e-2, atol=1e-3)


def test_float16_is_computed_in_float32(rng):
    """A realistic float16 batch around 50: sums of squares over 64*32*32 values overflow float16 (65504),
    so a float16 computation gives inf/NaN; float32 accumulation gives torch's float32 result."""
    torch = pytest.importorskip("torch")
    x = (50 + rng.standard_normal((64, 3, 32, 32))).astype(np.float16)
    gamma, beta = np.ones(3, np.float16), np.zeros(3, np.float16)
    mean, var = np.zeros(3, np.float16), np.ones(3, np.float16)
    y, pullback = dnnbind.batchnorm(x, gamma, beta, running_mean=mean, running_var=var)
    dy = rng.standard_normal(x.shape).astype(np.float16)
    grads = pullback(dy)
    assert all(np.isfinite(a).all() for a in (y, mean, var, *grads))
    t = torch.tensor(x.astype(np.float32), requires_grad=True)
    tg = torch.ones(3, requires_grad=True)
    tb = torch.zeros(3, requires_grad=True)
    ty = torch.nn.functional.batch_norm(t, None, None, tg, tb, training=True)
    ty.backward(torch.tensor(dy.astype(np.float32)))
    np.testing.assert_allclose(y, ty.detach().numpy(), atol=4e-3, rtol=4e-3)
    np.testing.assert_allclose(grads[0], t.grad.numpy(), atol=4e-3, rtol=1e-2)
    np.testing.assert_allclose(grads[1], tg.grad.numpy(), rtol=1e-2, atol=1.0)
    np.testing.assert_allclose(grads[2], tb.grad.numpy(), rtol=1e-2, atol=1.0)
    np.testing.assert_allclose(mean, 0.1 * 50, rtol=1e-2)


def test_errors(rng):
    x = rng.standard_normal((4, 3, 2))
    g = np.ones(3)
    with pytest.raises(ValueError, match=r"gamma has shape \(2,\) but must have shape \(3,\)"):
        dnnbind.batchnorm(x, np.ones(2), g)
    with pytest.raises(TypeError, match=r"beta has dtype float32 but x has dtype float64"):
        dnnbind.batchnorm(x, g, g.astype(np.float32))
    with pytest.raises(TypeError, match=r"running_mean has dtype int64"):
        dnnbind.batchnorm(x, g, g, running_mean=np.zeros(3, np.int64), running_var=g)
    with pytest.raises(ValueError, match=r"training=False needs running_mean and running_var"):
        dnnbind.batchnorm(x, g, g, training=False)
    with pytest.raises(TypeError, match=r"training=1 must be a bool"):
        dnnbind.batchnorm(x, g, g, training=1)
    with pytest.raises(ValueError, match=r"eps=0 must be positive"):
        dnnbind.batchnorm(x, g, g, eps=0)                    # in training, as torch
    with pytest.raises(ValueError, match=r"eps=-0.1 must not be negative"):
        dnnbind.batchnorm(x, g, g, running_mean=g, running_var=g, training=False, eps=-0.1)
    with pytest.raises(ValueError, match=r"momentum=nan"):
        dnnbind.batchnorm(x, g, g, momentum=float("nan"))
    with pytest.raises(ValueError, match=r"more than one value per channel"):
        dnnbind.batchnorm(x[:1, :, :1], g, g)


def test_eps_zero_in_inference_and_momentum_outside_the_unit_interval_as_torch(rng):
    """torch takes eps=0 in inference (a zero running variance then gives inf/nan) and any momentum (an affine
    mix of old and new statistics); so does dnnbind."""
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((4, 3, 5))
    for eps, momentum, training in ((0.0, 0.1, False), (1e-5, 1.5, True), (1e-5, -0.5, True)):
        rm, rv = np.zeros(3), np.array([1.0, 0.0, 2.0])
        y, _ = dnnbind.batchnorm(x, np.ones(3), np.zeros(3), running_mean=rm, running_var=rv, momentum=momentum,
                                 eps=eps, training=training)
        trm, trv = torch.zeros(3, dtype=torch.float64), torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64)
        yt = torch.nn.functional.batch_norm(torch.tensor(x), trm, trv, torch.ones(3, dtype=torch.float64),
                                            torch.zeros(3, dtype=torch.float64), training, momentum, eps)
        finite = np.isfinite(yt.numpy())     # eps = 0 on a zero variance: inf in dnnbind, nan (0 * inf) in torch
        assert not np.isfinite(y[~finite]).any()
        np.testing.assert_allclose(y[finite], yt.numpy()[finite], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(rm, trm.numpy(), rtol=1e-12)
        np.testing.assert_allclose(rv, trv.numpy(), rtol=1e-12)
