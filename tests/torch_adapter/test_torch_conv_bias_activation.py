"""dnnbind.torch.conv_bias_activation against torch's conv followed by its activation."""
import pytest
import torch
import torch.nn.functional as F

import dnnbind.torch as dt

TORCH = {"relu": lambda y, a: F.relu(y), "leaky_relu": lambda y, a: F.leaky_relu(y, a),
         "elu": lambda y, a: F.elu(y, a), "swish": lambda y, a: y * torch.sigmoid(a * y),
         "sigmoid": lambda y, a: torch.sigmoid(y), "clipped_relu": lambda y, a: F.hardtanh(y, 0.0, a)}
DEFAULT_ALPHA = {"leaky_relu": 0.01, "elu": 1.0, "swish": 1.0, "clipped_relu": 6.0}


def _inputs(dims):
    g = torch.Generator().manual_seed(dims)
    shape = (2, 3) + (7,) * dims
    x = torch.randn(shape, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn((4, 3) + (3,) * dims, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, generator=g, requires_grad=True)
    return x, w, b


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("mode", list(TORCH))
def test_values_and_gradients_match_torch(dims, mode):
    x, w, b = _inputs(dims)
    conv = getattr(F, f"conv{dims}d")
    alpha = DEFAULT_ALPHA.get(mode)
    expected = TORCH[mode](conv(x, w, b, stride=2, padding=1), alpha)
    got = dt.conv_bias_activation(x, w, b, stride=2, padding=1, mode=mode)
    torch.testing.assert_close(got, expected)
    dy = torch.randn_like(expected)
    torch.testing.assert_close(torch.autograd.grad(got, (x, w, b), dy), torch.autograd.grad(expected, (x, w, b), dy))


def test_unbatched_compiled_and_exported_calls():
    x, w, b = _inputs(2)
    expected = F.relu(F.conv2d(x[0], w, b, padding=1))
    torch.testing.assert_close(dt.conv_bias_activation(x[0], w, b, padding=1), expected)
    compiled = torch.compile(lambda x: dt.conv_bias_activation(x, w, b, padding=1), fullgraph=True)
    torch.testing.assert_close(compiled(x.detach()), F.relu(F.conv2d(x, w, b, padding=1)).detach())

    class Model(torch.nn.Module):
        def forward(self, x):
            return dt.conv_bias_activation(x, w.detach(), b.detach(), padding=1, mode="elu", alpha=0.5)
    program = torch.export.export(Model(), (x.detach(),))
    text = program.graph_module.code
    assert "torch.ops.dnnbind.conv_bias_activation.default(" in text and "'elu'" in text and "{" not in text


@pytest.mark.parametrize("mode", list(TORCH))
def test_second_derivatives_equal_torchs(mode):
    """The chain's rule: conv's backward of the activation's backward, each differentiable by its own
    rule; a penalty whose cotangent depends on x, against torch's conv then activation."""
    x0, w0, b0 = (t.detach() for t in _inputs(2))
    conv_then = TORCH[mode]
    results = []
    for f in (lambda x, w, b: dt.conv_bias_activation(x, w, b, padding=1, mode=mode),
              lambda x, w, b: conv_then(F.conv2d(x, w, b, padding=1), DEFAULT_ALPHA.get(mode))):
        x, w, b = (t.clone().requires_grad_() for t in (x0, w0, b0))
        (dx,) = torch.autograd.grad(f(x, w, b).pow(3).sum(), x, create_graph=True)
        results.append(torch.autograd.grad(dx.pow(2).sum(), (x, w, b)))
    for a, c in zip(*results):
        torch.testing.assert_close(a, c)


def test_gradgradcheck_passes_and_torch_func_refuses_naming_the_op():
    x, w, b = (t[..., :4, :4] if t.dim() == 4 and t.shape[0] == 2 else t for t in _inputs(2))
    x = x.detach()[:1].requires_grad_()
    assert torch.autograd.gradgradcheck(lambda x, w, b: dt.conv_bias_activation(x, w, b, padding=1, mode="swish"),
                                        (x, w, b))
    inner = torch.func.grad(lambda x: dt.conv_bias_activation(x, w.detach(), b.detach(), mode="tanh").pow(3).sum())
    with pytest.raises(RuntimeError, match="dnnbind.conv_bias_activation: a second derivative under torch.func"):
        torch.func.grad(lambda x: inner(x).pow(2).sum())(x.detach())
