"""dnnbind.no_grad(): inference forwards that save nothing, and pullbacks that say so."""
from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel import grad_mode
from dnnbind.highlevel.dims import ConvDims

reference_conv = importlib.import_module("dnnbind.highlevel.cpu")    # (the cpu backend)
RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 6, 9, 9), dtype=np.float32)
CASES = {
    "conv": lambda: dnnbind.conv(X, RNG.standard_normal((4, 6, 3, 3), dtype=np.float32), padding=1),
    "depthwise conv": lambda: dnnbind.conv(X, RNG.standard_normal((6, 1, 3, 3), dtype=np.float32), stride=2,
                                           groups=6),
    "maxpool": lambda: dnnbind.maxpool(X, 2),
    "batchnorm": lambda: dnnbind.batchnorm(X, np.ones(6, np.float32), np.zeros(6, np.float32)),
    "activation": lambda: dnnbind.activation(X, "tanh"),
    "dropout": lambda: dnnbind.dropout(X, 0.5, seed=3),
    "rnn": lambda: dnnbind.rnn(X[0, 0, :, :4].reshape(9, 1, 4),
                               [[RNG.standard_normal(s, dtype=np.float32) for s in ((12, 4), (12, 3), (12,), (12,))]],
                               hidden_size=3),
}


@pytest.mark.parametrize("name", CASES)
def test_results_equal_and_the_pullback_refuses(name):
    state = RNG.bit_generator.state
    expected, pullback = CASES[name]()
    RNG.bit_generator.state = state              # the same weights again
    with dnnbind.no_grad():
        result, unsaved = CASES[name]()
    for a, b in zip(*(r if isinstance(r, tuple) else (r,) for r in (result, expected))):
        np.testing.assert_array_equal(a, b)
    first = result[0] if isinstance(result, tuple) else result
    with pytest.raises(RuntimeError, match=r"ran under dnnbind\.no_grad\(\)"):
        unsaved(np.ones_like(first))
    pullback(np.ones_like(first))                # outside the block the pullback runs


def test_the_cpu_convolution_keeps_no_copy_of_x():
    w = RNG.standard_normal((6, 1, 3, 3), dtype=np.float32)
    dims = ConvDims(X.shape, w.shape, padding=1, groups=6, dtype=X.dtype)
    _, saved = reference_conv.conv_forward(X, w, None, dims)
    assert any(s.shape == X.shape for s in saved)
    with dnnbind.no_grad():
        y, unsaved = reference_conv.conv_forward(X, w, None, dims)
    assert unsaved == ()
    np.testing.assert_array_equal(y, reference_conv.conv_forward(X, w, None, dims)[0])


def test_the_setting_comes_back_after_the_block_also_after_an_error():
    assert grad_mode.saving()
    with pytest.raises(ValueError):
        with dnnbind.no_grad():
            assert not grad_mode.saving()
            with grad_mode.saving_residuals(True):
                assert grad_mode.saving()
            assert not grad_mode.saving()
            raise ValueError("inside")
    assert grad_mode.saving()


def test_another_thread_keeps_saving():
    seen = []
    with dnnbind.no_grad():
        thread = threading.Thread(target=lambda: seen.append(grad_mode.saving()))
        thread.start()
        thread.join()
    assert seen == [True]


def test_forwards_own_their_residuals_unless_lent_the_arrays():
    """By default a forward's residuals are its own; a caller that lends its arrays (an adapter whose
    framework guards them) lets it keep them instead, inside the block only; no_grad keeps nothing."""
    assert (grad_mode.residual_mode(), grad_mode.borrowing()) == (grad_mode.OWN, False)
    with grad_mode.saving_residuals(True, borrowed=True):
        assert grad_mode.saving() and grad_mode.borrowing()
        with dnnbind.no_grad():
            assert (grad_mode.residual_mode(), grad_mode.borrowing()) == (grad_mode.NOTHING, False)
        assert grad_mode.borrowing()
    assert (grad_mode.residual_mode(), grad_mode.borrowing()) == (grad_mode.OWN, False)
    a = np.arange(12.0).reshape(3, 4)
    owned = grad_mode.own(a)
    assert not np.shares_memory(owned, a) and np.array_equal(owned, a)
    with grad_mode.saving_residuals(True, borrowed=True):
        assert grad_mode.own(a) is a
        strided = grad_mode.own(a.T)            # a residual is C-contiguous: a copy where the array is not
        assert strided.flags.c_contiguous and not np.shares_memory(strided, a) and np.array_equal(strided, a.T)


def test_a_lent_softmax_keeps_its_result_and_its_gradient_is_the_owning_ones():
    """softmax's backward reads y: lent, the forward keeps the result it returns, not a copy."""
    x = np.random.default_rng(0).standard_normal((4, 5))
    y, pullback = dnnbind.softmax(x, axis=1)
    with grad_mode.saving_residuals(True, borrowed=True):
        y_lent, saved = reference_conv.softmax_forward(x, 1)
    assert saved[0] is y_lent
    dy = np.arange(20.0).reshape(4, 5)
    np.testing.assert_array_equal(reference_conv.softmax_backward(saved, (dy,), 1), pullback(dy))
