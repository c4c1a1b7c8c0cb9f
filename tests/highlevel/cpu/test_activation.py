"""activation on the cpu backend: every mode, its default alpha, derivatives at the kinks."""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel.ops import ACTIVATION_DEFAULTS

from ..gradcheck import check_gradients

MODES = list(ACTIVATION_DEFAULTS)
X = np.array([-3.0, -0.5, 0.0, 0.5, 3.0, 7.0])


def test_defaults_are_documented_values():
    assert ACTIVATION_DEFAULTS == {"relu": None, "sigmoid": None, "tanh": None, "identity": None, "elu": 1.0,
                                   "leaky_relu": 0.01, "clipped_relu": 6.0, "swish": 1.0}


@pytest.mark.parametrize("mode, alpha, expected", [
    ("relu", None, [0, 0, 0, 0.5, 3, 7]),
    ("identity", None, X),
    ("sigmoid", None, 1 / (1 + np.exp(-X))),
    ("tanh", None, np.tanh(X)),
    ("elu", None, [np.exp(-3) - 1, np.exp(-0.5) - 1, 0, 0.5, 3, 7]),
    ("elu", 2.0, [2 * (np.exp(-3) - 1), 2 * (np.exp(-0.5) - 1), 0, 0.5, 3, 7]),
    ("leaky_relu", None, [-0.03, -0.005, 0, 0.5, 3, 7]),
    ("leaky_relu", 0.2, [-0.6, -0.1, 0, 0.5, 3, 7]),
    ("clipped_relu", None, [0, 0, 0, 0.5, 3, 6]),
    ("clipped_relu", 1.0, [0, 0, 0, 0.5, 1, 1]),
    ("swish", None, X / (1 + np.exp(-X))),
    ("swish", 2.0, X / (1 + np.exp(-2 * X))),
])
def test_values_by_hand(mode, alpha, expected):
    y, _ = dnnbind.activation(X, mode, alpha=alpha)
    np.testing.assert_allclose(y, expected, rtol=1e-14, atol=1e-15)
    assert y is not X


def test_derivatives_at_kinks_follow_torch():
    x = np.array([0.0, 6.0, -0.0])
    ones = np.ones(3)
    assert list(dnnbind.activation(x, "relu")[1](ones)) == [0, 1, 0]
    assert list(dnnbind.activation(x, "leaky_relu")[1](ones)) == [0.01, 1, 0.01]
    assert list(dnnbind.activation(x, "clipped_relu")[1](ones)) == [0, 0, 0]
    assert list(dnnbind.activation(x, "elu", alpha=2.0)[1](ones)) == [2, 1, 2]


def test_sigmoid_keeps_relative_precision_far_out():
    y, _ = dnnbind.activation(np.array([-40.0, 40.0], np.float32), "sigmoid")
    np.testing.assert_allclose(y, [np.exp(-40.0), 1.0], rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_gradients(rng, mode):
    x = rng.standard_normal((3, 4, 5)) * 4
    x[np.abs(x) < 1e-3] = 0.5         # keep away from the kinks at 0 ...
    x[np.abs(x - 6) < 1e-3] = 5.5     # ... and at clipped_relu's ceiling
    alpha = None if ACTIVATION_DEFAULTS[mode] is None else 0.7
    check_gradients(lambda: dnnbind.activation(x, mode, alpha=alpha), [x], select=lambda g: [g])


def _torch_reference(torch, mode, xt, alpha):
    F = torch.nn.functional
    return {
        "relu": lambda: F.relu(xt), "sigmoid": lambda: torch.sigmoid(xt), "tanh": lambda: torch.tanh(xt),
        "identity": lambda: xt * 1, "elu": lambda: F.elu(xt, alpha), "leaky_relu": lambda: F.leaky_relu(xt, alpha),
        "clipped_relu": lambda: F.hardtanh(xt, 0.0, alpha), "swish": lambda: xt * torch.sigmoid(alpha * xt),
    }[mode]()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("custom", [False, True])
def test_matches_torch(rng, mode, custom):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((4, 5, 6)) * 5
    x.flat[:4] = [0.0, 6.0, 1.5, -0.0]   # include the kinks
    default = ACTIVATION_DEFAULTS[mode]
    alpha = None if default is None else (1.5 if custom else default)
    y, pullback = dnnbind.activation(x, mode, alpha=alpha if custom else None)
    xt = torch.tensor(x, requires_grad=True)
    yt = _torch_reference(torch, mode, xt, alpha)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-13, atol=1e-15)
    dy = rng.standard_normal(y.shape)
    np.testing.assert_allclose(pullback(dy), torch.autograd.grad(yt, xt, torch.tensor(dy))[0].numpy(),
                               rtol=1e-12, atol=1e-14)
    if mode == "swish" and not custom:
        np.testing.assert_allclose(y, torch.nn.functional.silu(torch.tensor(x)).numpy(), rtol=1e-13)
    if mode == "clipped_relu" and not custom:
        np.testing.assert_allclose(y, torch.nn.functional.relu6(torch.tensor(x)).numpy())


@pytest.mark.parametrize("mode", MODES)
def test_dtypes(rng, mode):
    x = rng.standard_normal((3, 7)) * 3
    ref, ref_pb = dnnbind.activation(x, mode)
    dy = rng.standard_normal(x.shape)
    for dtype, tol in ((np.float32, 1e-6), (np.float16, 4e-3)):
        y, pullback = dnnbind.activation(x.astype(dtype), mode)
        assert y.dtype == dtype
        np.testing.assert_allclose(y, ref, rtol=tol, atol=tol)
        dx = pullback(dy.astype(dtype))
        assert dx.dtype == dtype
        np.testing.assert_allclose(dx, ref_pb(dy), rtol=4 * tol, atol=4 * tol)


def test_errors():
    x = np.zeros(3)
    with pytest.raises(ValueError, match=r"mode='gelu' must be one of relu, sigmoid, tanh, identity, elu"):
        dnnbind.activation(x, "gelu")
    with pytest.raises(ValueError, match=r"alpha=0.5 is not used by mode='relu'; leave it None"):
        dnnbind.activation(x, "relu", alpha=0.5)
    with pytest.raises(TypeError, match=r"alpha='1' must be a real number"):
        dnnbind.activation(x, "elu", alpha="1")
    with pytest.raises(ValueError, match=r"alpha=inf must be finite"):
        dnnbind.activation(x, "leaky_relu", alpha=float("inf"))
    with pytest.raises(TypeError, match=r"x has dtype complex128"):
        dnnbind.activation(x.astype(complex), "tanh")
    with pytest.raises(ValueError, match=r"^alpha=-1.0 \(clipped_relu's ceiling\) must be >= 0$"):
        dnnbind.activation(x, "clipped_relu", alpha=-1.0)
    with pytest.raises(ValueError, match=r"^alpha=1e\+300 does not fit in float32, the precision an op on float16 "
                                         r"computes in$"):
        dnnbind.activation(x.astype(np.float16), "elu", alpha=1e300)
    with pytest.raises(ValueError, match=r"alpha=-1e\+39 does not fit in float32"):
        dnnbind.conv_bias_activation(np.zeros((1, 1, 2, 2), np.float32), np.ones((1, 1, 1, 1), np.float32),
                                     np.zeros(1, np.float32), mode="leaky_relu", alpha=-1e39)
    assert dnnbind.activation(x, "elu", alpha=1e300)[0].dtype == np.float64      # (float64 holds it)
    assert dnnbind.activation(x, "clipped_relu", alpha=0.0)[0].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_keeps_minus_zero_and_passes_the_gradient_at_nan_as_torch(kernels, dtype):
    """torch's relu: -0 stays -0, NaN stays NaN, and its threshold backward passes dy unless x <= 0.
    Long enough for the C kernels' vector loops and their tails."""
    import torch
    x = np.tile(np.array([np.nan, -0.0, 0.0, -1.0, 1.0], dtype), 7)
    y, pullback = dnnbind.activation(x, "relu")
    t = torch.from_numpy(x.copy()).requires_grad_()
    r = torch.relu(t)
    r.backward(torch.full_like(r, 2.0))
    np.testing.assert_array_equal(y, r.detach().numpy())
    assert (np.signbit(y) == np.signbit(r.detach().numpy())).all()
    np.testing.assert_array_equal(pullback(np.full_like(x, 2.0)), t.grad.numpy())


@pytest.mark.parametrize("borrowed", [False, True], ids=["mask", "from-y-or-x"])
@pytest.mark.parametrize("mode, torch_op", [("relu", "relu"), ("clipped_relu", "relu6")])
def test_a_non_finite_dy_where_the_slope_is_zero_gives_zero_as_torch(kernels, mode, torch_op, borrowed):
    """relu's and clipped_relu's backwards select dy where the gradient passes, as torch's threshold and
    hardtanh backwards do: an inf or NaN dy at an inactive unit gives 0 (dy * 0 would be NaN), both from
    the forward's mask and from the lent array the backward reads (the torch adapter's). Long enough for
    the C kernels' vector loops and their tails."""
    import torch
    from dnnbind.highlevel.grad_mode import saving_residuals
    x = np.tile(np.array([-1.0, 2.0, 8.0, 0.0, 3.0], np.float32), 7)
    dy = np.tile(np.array([np.inf, 1.0, np.nan, -np.inf, np.nan], np.float32), 7)
    with saving_residuals(True, borrowed=borrowed):
        _, pullback = dnnbind.activation(x, mode, alpha=6.0 if mode == "clipped_relu" else None)
    t = torch.from_numpy(x.copy()).requires_grad_()
    getattr(torch.nn.functional, torch_op)(t).backward(torch.from_numpy(dy))
    np.testing.assert_array_equal(pullback(dy), t.grad.numpy())
