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


def test_gradient_of_a_gradient_is_refused_naming_the_op():
    x, w, b = _inputs(2)
    y = dt.conv_bias_activation(x, w, b, padding=1, mode="swish")
    (dx,) = torch.autograd.grad(y.sum(), (x,), create_graph=True)
    with pytest.raises(RuntimeError, match="conv_bias_activation"):
        dx.sum().backward()
