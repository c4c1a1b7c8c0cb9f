"""softmax and logsoftmax on the cpu backend."""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind

from ..gradcheck import check_gradients


def test_softmax_by_hand():
    x = np.log(np.array([[1.0, 2.0, 5.0]]))
    y, _ = dnnbind.softmax(x, axis=1)
    np.testing.assert_allclose(y, [[0.125, 0.25, 0.625]], rtol=1e-15)
    y, _ = dnnbind.logsoftmax(x, axis=-1)
    np.testing.assert_allclose(y, np.log([[0.125, 0.25, 0.625]]), rtol=1e-15)


def test_softmax_gradient_by_hand():
    # y = (1/2, 1/2): dx = y * (dy - sum(dy * y)) = (1/2 * (1 - 1/2), 1/2 * (0 - 1/2))
    y, pullback = dnnbind.softmax(np.zeros((1, 2)))
    np.testing.assert_allclose(pullback(np.array([[1.0, 0.0]])), [[0.25, -0.25]])


def test_large_inputs_are_stable():
    x = np.array([[1000.0, 1000.0, -1000.0]], dtype=np.float32)
    y, _ = dnnbind.softmax(x)
    np.testing.assert_allclose(y, [[0.5, 0.5, 0.0]])
    y, _ = dnnbind.logsoftmax(x)
    np.testing.assert_allclose(y, [[-np.log(2), -np.log(2), -2000 - np.log(2)]], rtol=1e-6)


@pytest.mark.parametrize("op", [dnnbind.softmax, dnnbind.logsoftmax])
@pytest.mark.parametrize("shape, axis", [((3, 4), 1), ((2, 3, 4, 2), 1), ((2, 3, 4), -1), ((5,), 0), ((2, 3, 4), -3)])
def test_gradients(rng, op, shape, axis):
    x = rng.standard_normal(shape)
    check_gradients(lambda: op(x, axis=axis), [x], select=lambda g: [g])


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_matches_torch(rng, name, axis):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((3, 4, 5)) * 3
    op = dnnbind.softmax if name == "softmax" else dnnbind.logsoftmax
    y, pullback = op(x, axis=axis)
    xt = torch.tensor(x, requires_grad=True)
    yt = getattr(torch.nn.functional, name)(xt, dim=axis)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-13, atol=1e-14)
    dy = rng.standard_normal(y.shape)
    np.testing.assert_allclose(pullback(dy), torch.autograd.grad(yt, xt, torch.tensor(dy))[0].numpy(),
                               rtol=1e-12, atol=1e-13)


def test_float16(rng):
    x = rng.standard_normal((4, 6))
    for op in (dnnbind.softmax, dnnbind.logsoftmax):
        ref, ref_pb = op(x)
        y, pullback = op(x.astype(np.float16))
        assert y.dtype == np.float16
        np.testing.assert_allclose(y, ref, rtol=3e-3, atol=3e-3)
        dy = rng.standard_normal(y.shape)
        np.testing.assert_allclose(pullback(dy.astype(np.float16)), ref_pb(dy), rtol=1e-2, atol=1e-2)


def test_errors():
    with pytest.raises(ValueError, match=r"axis=2 is out of range for an array with 2 dimensions"):
        dnnbind.softmax(np.zeros((2, 3)), axis=2)
    with pytest.raises(ValueError, match=r"axis=1 is out of range for a 0-d array x \(it takes axis 0 or -1"):
        dnnbind.logsoftmax(np.array(1.0))
    with pytest.raises(TypeError, match=r"x has dtype int64"):
        dnnbind.softmax(np.zeros((2, 3), np.int64))
    with pytest.raises(TypeError, match=r"axis=None must be an int"):
        dnnbind.softmax(np.zeros((2, 3)), axis=None)
