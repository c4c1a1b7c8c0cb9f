"""Ops declared as two ops in a row (conv_bias_activation): composed once from a backend's two ops, a
backend's fused primitive used where nothing is saved for a backward."""
import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel import reference
from dnnbind.highlevel.conv_composed import conv_ops
import importlib
from dnnbind.highlevel.residual import install_forms
from dnnbind.highlevel.specs import SPECS
from dnnbind.highlevel.support import matrix

# the modules themselves (the package's names conv, ... are the installed ops)
ref_conv = importlib.import_module("dnnbind.highlevel.reference.conv")
ref_pointwise = importlib.import_module("dnnbind.highlevel.reference.pointwise")
rng = np.random.default_rng(3)
X, W, B = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 2)), rng.standard_normal(4)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("mode", ["relu", "elu", "swish", "clipped_relu"])
def test_the_chain_is_the_activation_of_the_convolution_with_its_gradients(backend, mode):
    from dnnbind.highlevel.dispatch import backend_function
    run = backend_function(backend, "conv_bias_activation")
    y, pullback = run(X, W, B, *SPECS["conv_bias_activation"].check(X, W, B, padding=1, stride=(2, 1), mode=mode))
    between, conv_pullback = dnnbind.conv(X, W, B, padding=1, stride=(2, 1))
    expected, act_pullback = dnnbind.activation(between, mode)
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    for got, want in zip(pullback(dy), conv_pullback(act_pullback(dy))):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_residuals_are_both_ops_and_the_backward_skips_what_is_not_needed():
    args = (X, W, None, *SPECS["conv_bias_activation"].check(X, W, None, mode="swish"))
    y, saved = reference.conv_bias_activation_forward(*args)
    specs = reference.conv_bias_activation_residuals(*args)
    assert [(s.shape, np.dtype(s.dtype)) for s in specs] == [(a.shape, a.dtype) for a in saved]
    assert len(saved) == len(reference.conv_residuals(X, W, None, args[3])) + len(
        reference.activation_residuals(y, "swish", 1.0))
    dx, dw, db = reference.conv_bias_activation_backward(saved, (np.ones_like(y),), *args[3:],
                                                        needs=(False, True, False))
    assert dx is None and db is None and dw.shape == W.shape


def test_a_fused_primitive_runs_only_when_nothing_is_saved_and_may_decline():
    calls = []

    def conv_bias_activation_fused(x, w, b, dims, mode, alpha):
        calls.append(mode)
        if mode == "tanh":
            return None                           # declines: the composed ops run
        y, _ = reference.conv_forward(x, w, b, dims)
        return ref_pointwise.activation_forward(y, mode, alpha)[0]

    class Fused:                                  # a backend module holding only the fused primitive
        pass
    Fused.conv_bias_activation_fused = staticmethod(conv_bias_activation_fused)
    namespace: dict = {}
    installed = install_forms(namespace, (Fused, conv_ops(ref_conv.PRIMITIVES), ref_pointwise))
    assert "conv_bias_activation" in installed
    static = SPECS["conv_bias_activation"].check(X, W, B, mode="relu")
    y, pullback = namespace["conv_bias_activation"](X, W, B, *static)
    assert calls == [] and pullback(np.ones_like(y))[0].shape == X.shape       # saving: composed
    with dnnbind.no_grad():
        fused, _ = namespace["conv_bias_activation"](X, W, B, *static)
        static_tanh = SPECS["conv_bias_activation"].check(X, W, B, mode="tanh")
        declined, _ = namespace["conv_bias_activation"](X, W, B, *static_tanh)
    assert calls == ["relu", "tanh"]
    np.testing.assert_allclose(fused, y, rtol=1e-12)
    np.testing.assert_allclose(declined, np.tanh(dnnbind.conv(X, W, B)[0]), rtol=1e-12)


def test_the_support_matrix_row_is_derived_from_the_two_ops():
    row = matrix()["conv_bias_activation"]
    for backend, support in row.items():
        conv, act = matrix()["conv"][backend], matrix()["activation"][backend]
        assert support is not None and conv is not None and act is not None
        assert support.dtypes == tuple(d for d in conv.dtypes if d in act.dtypes), backend
        assert support.blas == (conv.blas or act.blas), backend


def test_bad_mode_and_alpha_are_refused_naming_them():
    with pytest.raises(ValueError, match="mode='gelu2'"):
        dnnbind.conv_bias_activation(X, W, B, mode="gelu2")
    with pytest.raises(ValueError, match="alpha=0.5 is not used by mode='relu'"):
        dnnbind.conv_bias_activation(X, W, B, alpha=0.5)
