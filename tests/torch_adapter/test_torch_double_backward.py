"""Double backward: convolution, transposed convolution and pooling backwards are differentiable, built from
the same ops (the specs' second-order rules), in eager mode, through the typed ops and under torch.func;
float64 against torch's own layers and gradgradcheck. Ops without a rule refuse a second derivative with
an error naming the op."""
from __future__ import annotations

import pytest
import torch
from torch.autograd import gradgradcheck
from torch.func import grad, jacrev

import dnnbind.torch as dt

DT = torch.float64
F = torch.nn.functional


def _r(*shape):
    return torch.randn(*shape, dtype=DT, requires_grad=True)


CASES = {
    "conv2d": (lambda x, w, b: dt.conv(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2)),
               lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2)),
               lambda: (_r(2, 3, 7, 7), _r(4, 3, 3, 3), _r(4))),
    "conv1d-groups": (lambda x, w, b: dt.conv(x, w, b, groups=2, padding=2),
                      lambda x, w, b: F.conv1d(x, w, b, groups=2, padding=2),
                      lambda: (_r(2, 4, 9), _r(6, 2, 3), _r(6))),
    "conv3d": (lambda x, w, b: dt.conv(x, w, b, stride=2),
               lambda x, w, b: F.conv3d(x, w, b, stride=2),
               lambda: (_r(1, 2, 5, 5, 5), _r(3, 2, 2, 2, 2), _r(3))),
    "conv_transpose2d": (lambda x, w, b: dt.conv_transpose(x, w, b, stride=2, padding=1, output_padding=1),
                         lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
                         lambda: (_r(2, 3, 4, 4), _r(3, 2, 3, 3), _r(2))),
    "maxpool2d": (lambda x: dt.maxpool(x, 3, stride=2, padding=1, dilation=(1, 2)),
                  lambda x: F.max_pool2d(x, 3, stride=2, padding=1, dilation=(1, 2)),
                  lambda: (_r(2, 3, 8, 9),)),
    "meanpool2d": (lambda x: dt.meanpool(x, 3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
                   lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
                   lambda: (_r(2, 3, 8, 9),)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_gradgradcheck_passes(name):
    ours, _, inputs = CASES[name]
    torch.manual_seed(0)
    assert gradgradcheck(ours, inputs())


@pytest.mark.parametrize("name", list(CASES))
def test_a_gradient_penalty_equals_torchs(name):
    """WGAN-GP's penalty: the squared norm of the input gradient, differentiated again."""
    ours, theirs, inputs = CASES[name]
    torch.manual_seed(1)
    args = inputs()
    results = []
    for f in (ours, theirs):
        tensors = [a.detach().clone().requires_grad_() for a in args]
        y = f(*tensors)
        (gx,) = torch.autograd.grad((y * torch.linspace(-1, 1, y.numel(), dtype=DT).view_as(y)).sum(),
                                    tensors[0], create_graph=True)
        penalty = (gx ** 2).sum()
        results.append(torch.autograd.grad(penalty, tensors, allow_unused=True, materialize_grads=True))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)


def test_a_hessian_by_torch_func_equals_torchs():
    w = torch.randn(2, 3, 3, 3, dtype=DT)
    x = torch.randn(1, 3, 5, 5, dtype=DT)

    def loss(conv, pool):
        return lambda w: pool(conv(x, w, padding=1), 2).pow(3).sum()
    ours = jacrev(grad(loss(dt.conv, dt.maxpool)))(w)
    theirs = jacrev(grad(loss(lambda x, w, padding: F.conv2d(x, w, padding=padding), F.max_pool2d)))(w)
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("op", ["softmax", "batchnorm", "activation"])
def test_ops_without_a_second_order_rule_refuse_naming_themselves(op):
    x = _r(4, 3)
    calls = {"softmax": lambda x: dt.softmax(x),
             "batchnorm": lambda x: dt.batchnorm(x, torch.ones(3, dtype=DT), torch.zeros(3, dtype=DT)),
             "activation": lambda x: dt.activation(x, "tanh")}
    y = calls[op](x)
    (g,) = torch.autograd.grad(y.pow(3).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=rf"dnnbind[.:]{op}"):
        g.sum().backward()
