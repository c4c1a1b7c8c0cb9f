"""Activation modules, Softmax, LogSoftmax and Dropout are torch.nn's, computed by dnnbind's ops: values
and gradients equal torch's, including at the kinks."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import dnnbind.torch as dt
from layer_checks import assert_layer_matches

# the kinks (0, the clip ceilings) and both sides of them
X = torch.tensor([[-7.0, -2.0, -1.0, -0.25, 0.0, 0.25, 1.0, 1.5, 2.0, 6.0, 7.0]], dtype=torch.float64)


@pytest.mark.parametrize("name, args", [
    ("ReLU", ()), ("Sigmoid", ()), ("Tanh", ()), ("ELU", ()), ("ELU", (0.3,)),
    ("LeakyReLU", ()), ("LeakyReLU", (0.2,)), ("LeakyReLU", (-0.5,)), ("ReLU6", ()), ("Hardtanh", (0.0, 1.5)),
    ("Hardtanh", (0, 2.0)), ("SiLU", ()),
], ids=lambda v: str(v))
def test_activations_equal_torch_with_gradients(name, args):
    assert_layer_matches(getattr(dt, name)(*args), getattr(nn, name)(*args), X)


INPLACE = [("ReLU", ()), ("ELU", ()), ("LeakyReLU", ()), ("ReLU6", ()), ("SiLU", ()), ("Hardtanh", (0.0, 2.0)),
           ("Dropout", (0.4,))]


def _inplace_twins(name, args):
    ours, theirs = getattr(dt, name)(*args, inplace=True), getattr(nn, name)(*args, inplace=True)
    assert repr(ours) == repr(theirs)
    return ours, theirs


@pytest.mark.parametrize("name,args", INPLACE, ids=[n for n, _ in INPLACE])
def test_inplace_layers_write_into_their_input_as_torchs(name, args):
    """inplace=True: the input holds the result and is returned; through autograd the gradient is torch's
    (the in-place change recorded on a non-leaf), and a leaf that requires grad is refused as torch refuses."""
    ours, theirs = _inplace_twins(name, args)
    results = []
    for layer in (ours, theirs):
        torch.manual_seed(0)
        leaf = X.clone().requires_grad_(True)
        x = leaf * 1.5 + 0.1                      # a non-leaf (no zeros), written in place
        y = layer(x)
        assert y is x
        if layer is ours:                          # (autograd's errors name the node: the op's, in place)
            assert type(y.grad_fn).__name__.startswith(f"dnnbind_{'dropout' if name == 'Dropout' else 'activation'}_inplace")
        (y * torch.arange(1, y.numel() + 1, dtype=y.dtype).reshape(y.shape)).sum().backward()
        results.append((y.detach(), leaf.grad))
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            layer(X.clone().requires_grad_(True))
    if name == "Dropout":                          # (its own masks: the same kept entries, scaled alike)
        (ours_y, ours_grad), (theirs_y, theirs_grad) = results
        assert torch.equal((ours_y != 0), (ours_grad != 0)) and torch.equal((theirs_y != 0), (theirs_grad != 0))
        return
    torch.testing.assert_close(results[0], results[1])


# (Dropout with p = 1: no random mask, the same as torch's)
EXACT_INPLACE = [*INPLACE[:-1], ("Dropout", (1.0,))]


@pytest.mark.parametrize("name,args", EXACT_INPLACE, ids=[n for n, _ in EXACT_INPLACE])
def test_inplace_layers_on_views_without_grad_and_differentiated_twice_as_torchs(name, args):
    """inplace=True on a view (the base's other elements keep their gradient), under no_grad (the input
    itself is returned, a leaf still requiring grad), one version counted, and a gradient of the gradient
    (which reads x's own values, not the result written over them)."""
    ours, theirs = _inplace_twins(name, args)
    found = []
    for layer in (ours, theirs):
        leaf = X.clone().requires_grad_(True)
        base = leaf * 1.5 + 0.1
        layer(base[:, 2:7])
        view_grad, = torch.autograd.grad((base * base).sum(), leaf)
        leaf = X.clone().requires_grad_(True)
        version = leaf._version
        with torch.no_grad():
            kept = layer(leaf)
        assert kept is leaf and kept.requires_grad and leaf._version == version + 1
        leaf = X.clone().requires_grad_(True)
        grad, = torch.autograd.grad(layer(leaf * 1.5 + 0.1).pow(3).sum(), leaf, create_graph=True)
        second, = torch.autograd.grad((grad * grad).sum(), leaf)
        found.append((view_grad, kept.detach(), grad.detach(), second))
    torch.testing.assert_close(found[0], found[1])


def test_an_inplace_layer_first_in_a_sequential_writes_into_its_input_as_torchs():
    """A run of fused layers does not start with an in-place layer (it would not write into the run's input)."""
    torch.manual_seed(0)
    make = lambda nn: nn.Sequential(nn.ReLU(inplace=True), nn.Conv2d(3, 2, 3), nn.ReLU(inplace=True),   # noqa: E731
                                    nn.MaxPool2d(2))
    ours, theirs = make(dt.nn).double(), make(nn).double()
    ours.load_state_dict(theirs.state_dict())
    base = torch.randn(2, 3, 7, 7, dtype=torch.float64)
    for _ in range(2):                             # (the second call runs the planned, fused path)
        xs = [base.clone() for _ in range(2)]
        outs = [ours(xs[0]), theirs(xs[1])]
        torch.testing.assert_close(outs[0], outs[1])
        torch.testing.assert_close(xs[0], xs[1])
        assert torch.equal(xs[0], base.clamp(min=0))


@pytest.mark.parametrize("args", [(), (-0.5, 1.0), (-1.0, 6.0, False)], ids=["default", "negative-min", "relu-like"])
def test_hardtanh_with_a_nonzero_min_is_refused(args):
    with pytest.raises(NotImplementedError, match=r"Hardtanh: min_val=-\d\.\d+ is not supported.*clipped_relu"):
        dt.Hardtanh(*args)


def test_relu6_is_a_hardtanh_reading_its_range_at_each_call_as_torchs():
    """torch's ReLU6 is a Hardtanh whose min_val and max_val a user may change: the call reads them, also
    in a fused Sequential run; a min_val other than 0 is refused as Hardtanh's."""
    from dnnbind.torch import nn as dnn
    x = torch.linspace(-3, 8, 24).reshape(2, 1, 3, 4)
    ours, theirs = dt.ReLU6(), nn.ReLU6()
    assert isinstance(ours, nn.ReLU6) and isinstance(ours, nn.Hardtanh) and isinstance(ours, dt.Hardtanh)
    assert repr(ours) == repr(theirs) and repr(dt.ReLU6(inplace=True)) == repr(nn.ReLU6(inplace=True))
    for layer in (ours, theirs):
        layer.max_val = 2.5
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)
    model = dnn.Sequential(dt.Conv2d(1, 1, 1), dt.ReLU6())
    model(x)
    model[1].max_val = 0.5
    assert float(model(x * 10).max()) == 0.5                 # (the second call runs fused)
    ours.min_val = -1.0
    with pytest.raises(NotImplementedError, match="ReLU6: min_val=-1.0 is not supported"):
        ours(x)


def test_elu_gradient_keeps_its_precision_far_below_zero_and_is_nan_at_nan():
    """ELU's derivative alpha e^x is computed as such (not alpha (expm1(x) + 1), which cancels to 0 below
    x = -17 in float32), and is NaN at NaN, as torch's."""
    x = torch.tensor([-90.0, -40.0, -20.0, -17.0, -10.0, -1.0, -0.0, 0.0, 1.0, float("nan")] * 4)
    for dtype in (torch.float32, torch.float64):
        grads = []
        for layer in (dt.ELU(0.7), nn.ELU(0.7)):
            xg = x.to(dtype).requires_grad_()
            layer(xg).sum().backward()
            grads.append(xg.grad)
        torch.testing.assert_close(grads[0], grads[1], equal_nan=True, rtol=4e-7 if dtype == torch.float32 else 1e-15,
                                   atol=0)


def test_activation_errors_name_the_layers_argument():
    with pytest.raises(ValueError, match="negative_slope=nan"):
        dt.LeakyReLU(float("nan"))(X)
    with pytest.raises(ValueError, match="max_val=inf"):
        dt.Hardtanh(0.0, float("inf"))(X)


@pytest.mark.parametrize("name", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dim, shape", [(1, (2, 5)), (-1, (2, 3, 4)), (0, (3, 4))], ids=["1", "-1", "0"])
def test_softmax_layers_equal_torch(name, dim, shape):
    assert_layer_matches(getattr(dt, name)(dim), getattr(nn, name)(dim), torch.randn(shape, dtype=torch.float64))


@pytest.mark.parametrize("name", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), (2, 3), (2, 3, 4, 5)])
def test_softmax_without_dim_uses_torchs_legacy_choice_and_warns_in_its_words(shape, name):
    x = torch.randn(shape, dtype=torch.float64)
    found = []
    for layer in (getattr(dt, name)(), getattr(nn, name)()):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found.append((layer(x), [str(w.message) for w in caught if "Implicit dimension" in str(w.message)]))
    torch.testing.assert_close(found[0][0], found[1][0])
    assert found[0][1] == found[1][1] and len(found[0][1]) == 1


@pytest.mark.parametrize("name", ["Softmax", "LogSoftmax"])
def test_softmax_without_dim_compiles_with_fullgraph(name):
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    ours = torch.compile(dt.nn.Sequential(dt.ReLU(), getattr(dt, name)(), dt.Tanh()), fullgraph=True)
    theirs = torch.nn.Sequential(torch.nn.ReLU(), getattr(torch.nn, name)(), torch.nn.Tanh())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.testing.assert_close(ours(x), theirs(x))


def test_dropout_is_identity_in_eval_and_inverted_dropout_in_training():
    d = dt.Dropout(0.5)
    assert repr(d) == repr(nn.Dropout(0.5))
    x = torch.ones(4000)
    y = d(x)
    kept = y != 0
    assert torch.all(y[kept] == 2.0) and 0.45 < kept.float().mean() < 0.55
    d.eval()
    assert d(x) is x


def test_dropout_follows_torchs_seed():
    x = torch.ones(100)
    torch.manual_seed(3)
    a = dt.Dropout(0.3)(x)
    torch.manual_seed(3)
    assert torch.equal(dt.Dropout(0.3)(x), a)


@pytest.mark.parametrize("name,args", [("ReLU", ()), ("LeakyReLU", (0.1,)), ("Hardtanh", (0.0, 1.0))])
def test_a_compiled_inplace_layer_on_an_input_that_takes_a_gradient_as_torchs(name, args):
    """Compiled, an in-place layer whose result stands for x (its spec's result_stands_for_x) writes into
    the graph's input, which takes a gradient: its op keeps the result rather than x (as torch's relu_
    does), so the write fails no backward, and the gradient is torch's."""
    grads = []
    for nn_ in (nn, dt):
        torch._dynamo.reset()
        layer = torch.compile(getattr(nn_, name)(*args, inplace=True), fullgraph=True)
        x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
        h = x * 1
        y = layer(h)
        (y * torch.arange(30.0).reshape(6, 5)).sum().backward()
        grads.append((y.detach(), x.grad))
    torch.testing.assert_close(grads[1], grads[0])
