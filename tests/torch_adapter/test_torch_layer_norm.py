"""dnnbind's LayerNorm (dnnbind.torch.nn.LayerNorm, on the layer_norm custom op derived from its spec) as a
drop-in for torch.nn.LayerNorm: same constructor, parameters, repr and state_dict; outputs and gradients
equal torch's for every float dtype, normalized shapes of 1 to 3 dims, weight and bias present or not,
unbatched and empty inputs; gradcheck in float64; bad arguments named in torch's words."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from dnnbind.torch import layer_norm
from dnnbind.torch.nn import LayerNorm

TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5, torch.float64: 1e-12}

# (input shape, normalized_shape as given to the constructor)
SHAPES = [((4, 6), 6), ((2, 3, 5), (3, 5)), ((2, 3, 4, 5), [3, 4, 5]), ((3, 2, 7), (7,)), ((5,), 5),
          ((3, 4), (3, 4))]
AFFINE = [dict(), dict(elementwise_affine=False), dict(bias=False)]


def _pair(normalized_shape, dtype, **kwargs):
    """A torch.nn.LayerNorm with random parameters and a dnnbind LayerNorm loaded from its state_dict."""
    theirs = torch.nn.LayerNorm(normalized_shape, dtype=dtype, **kwargs)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape, dtype=torch.float64))
    ours = LayerNorm(normalized_shape, dtype=dtype, **kwargs)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def _assert_close(actual, expected, dtype, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(actual.double(), expected.double(), rtol=tol, atol=tol, msg=what)


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("kwargs", AFFINE, ids=["affine", "no_affine", "no_bias"])
@pytest.mark.parametrize("shape, normalized_shape", SHAPES)
def test_matches_torch_layer_norm(shape, normalized_shape, kwargs, dtype):
    torch.manual_seed(len(shape))
    ours, theirs = _pair(normalized_shape, dtype, **kwargs)
    x = (torch.randn(shape, dtype=torch.float64) * 3 + 1).to(dtype)
    dy = torch.randn(shape, dtype=torch.float64).to(dtype)
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ours, y_theirs = ours(x_ours), theirs(x_theirs)
    _assert_close(y_ours, y_theirs, dtype, "y")
    y_ours.backward(dy)
    y_theirs.backward(dy)
    _assert_close(x_ours.grad, x_theirs.grad, dtype, "input.grad")
    if dtype in (torch.float16, torch.bfloat16):
        # torch's CPU kernel sums the parameter gradients of half data less exactly than dnnbind (float32
        # throughout): compare with torch computing the same rounded numbers in float64
        theirs = copy.deepcopy(theirs).double()
        theirs(x.double().requires_grad_()).backward(dy.double())
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        _assert_close(p.grad, q.grad.to(dtype), dtype, f"{name}.grad")


@pytest.mark.parametrize("kwargs", AFFINE, ids=["affine", "no_affine", "no_bias"])
def test_same_module_as_torch(kwargs):
    ours, theirs = LayerNorm((3, 4), eps=1e-6, **kwargs), torch.nn.LayerNorm((3, 4), eps=1e-6, **kwargs)
    assert isinstance(ours, torch.nn.LayerNorm)
    assert repr(ours) == repr(theirs)
    assert ours.normalized_shape == theirs.normalized_shape == (3, 4)
    assert [(n, p.shape, p.dtype) for n, p in ours.named_parameters()] == \
        [(n, p.shape, p.dtype) for n, p in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    theirs.load_state_dict(ours.state_dict())                       # both ways
    if ours.weight is not None:
        with torch.no_grad():
            ours.weight.fill_(3.0)
        ours.reset_parameters()
        assert torch.equal(ours.weight, torch.ones(3, 4))


def test_gradcheck_float64():
    torch.manual_seed(0)
    x = torch.randn(3, 2, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: layer_norm(x, (2, 4), w, b), (x, w, b))
    assert torch.autograd.gradcheck(lambda x: layer_norm(x, 4), (x,))
    module = LayerNorm(4, dtype=torch.float64)
    assert torch.autograd.gradcheck(module, (x,))


def test_only_the_needed_gradients():
    module = LayerNorm(4)
    module.weight.requires_grad_(False)
    x = torch.randn(2, 4)                         # no input gradient either
    module(x).sum().backward()
    assert module.weight.grad is None and module.bias.grad is not None
    torch.testing.assert_close(module.bias.grad, torch.full((4,), 2.0))


@pytest.mark.parametrize("shape, normalized", SHAPES)
@pytest.mark.parametrize("affine", AFFINE)
def test_second_derivatives_equal_torchs_and_pass_gradgradcheck(shape, normalized, affine):
    """The backward is differentiable (the spec's second-order rule): a gradient penalty and its gradients
    equal torch's layer norm's, in float64, for every normalized shape, weight and bias present or not."""
    ours, theirs = _pair(normalized, torch.float64, **affine)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    results = []
    for layer in (ours, theirs):
        (dx,) = torch.autograd.grad(layer(x).pow(3).sum(), x, create_graph=True)
        params = [x, *layer.parameters()]
        results.append(torch.autograd.grad(dx.pow(2).sum(), params))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
    weight = None if ours.weight is None else ours.weight.detach().requires_grad_()
    bias = None if ours.bias is None else ours.bias.detach().requires_grad_()
    given = [t for t in (x, weight, bias) if t is not None]
    assert torch.autograd.gradgradcheck(
        lambda x, *wb: layer_norm(x, normalized, *(wb if weight is not None else (None, *wb))), given)


@pytest.mark.parametrize("shape, normalized", [((0, 4), 4), ((0, 3, 2), (3, 2)), ((3, 0), 0)])
def test_empty_input_like_torch(shape, normalized):
    ours, theirs = _pair(normalized, torch.float32)
    x_ours, x_theirs = torch.randn(shape, requires_grad=True), torch.zeros(shape, requires_grad=True)
    y_ours, y_theirs = ours(x_ours), theirs(x_theirs)
    assert y_ours.shape == y_theirs.shape
    y_ours.sum().backward()
    y_theirs.sum().backward()
    assert x_ours.grad.shape == shape
    for p, q in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_input_with_float32_parameters_like_torch(dtype):
    ours, theirs = _pair(5, torch.float32)
    x = torch.randn(3, 5).to(dtype)
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ours, y_theirs = ours(x_ours), theirs(x_theirs)
    _assert_close(y_ours, y_theirs, dtype, "y")
    y_ours.sum().backward()
    y_theirs.sum().backward()
    _assert_close(x_ours.grad, x_theirs.grad, dtype, "input.grad")
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-2, atol=1e-2)


def test_in_a_model_trains_like_torch():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), LayerNorm(6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    reference = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.LayerNorm(6), torch.nn.Tanh(),
                                    torch.nn.Linear(6, 1)).double()
    model.double()
    reference.load_state_dict(model.state_dict())
    x, target = torch.randn(16, 8, dtype=torch.float64), torch.randn(16, 1, dtype=torch.float64)
    for net in (model, reference):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(net(x), target).backward()
            opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call, error, words", [
    (lambda x: LayerNorm(5)(x), ValueError, ["input has shape (2, 3, 4)", "normalized_shape=(5,)"]),
    (lambda x: layer_norm(x, (5,)), ValueError, ["x has shape (2, 3, 4)", "normalized_shape=(5,)"]),
    (lambda x: layer_norm(x, (4,), torch.ones(3)), ValueError, ["weight has shape (3,)", "(4,)"]),
    (lambda x: layer_norm(x, (4,), None, torch.ones(4, 1)), ValueError, ["bias has shape (4, 1)"]),
    (lambda x: layer_norm(x, (4,), torch.ones(4, dtype=torch.float64)), TypeError,
     ["weight has dtype torch.float64", "x has dtype torch.float32"]),
    (lambda x: layer_norm(x, (4,), eps=-1.0), ValueError, ["eps=-1.0", "negative"]),
    (lambda x: layer_norm(x, (4,), eps=float("nan")), ValueError, ["eps=nan"]),
    (lambda x: layer_norm(x, ()), ValueError, ["normalized_shape=()"]),
    (lambda x: layer_norm(x, (4.0,)), TypeError, ["normalized_shape=(4.0,)"]),
    (lambda x: layer_norm(torch.tensor(1.0), (1,)), ValueError, ["x has shape ()"]),
    (lambda x: LayerNorm(4)(x.int()), TypeError, ["input has dtype torch.int32"]),
    (lambda x: layer_norm([[1.0]], (1,)), TypeError, ["x must be a torch.Tensor"]),
])
def test_bad_arguments_named(call, error, words):
    with pytest.raises(error) as info:
        call(torch.randn(2, 3, 4))
    for word in words:
        assert word in str(info.value)


def test_inference_saves_nothing():
    module = LayerNorm(4)
    x = torch.randn(2, 4)
    with torch.no_grad():
        y = module(x)
    assert y.grad_fn is None
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (4,), module.weight, module.bias))
