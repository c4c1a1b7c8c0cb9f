"""Double backward: convolution, transposed convolution and pooling backwards are differentiable, built from
the same ops (the specs' second-order rules), in eager mode, through the typed ops and under torch.func;
float64 against torch's own layers and gradgradcheck. The rnn op's: test_torch_rnn_double_backward.py."""
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


POINTWISE = {
    "softmax": (lambda x: dt.softmax(x, axis=1), lambda x: torch.softmax(x, 1)),
    "logsoftmax": (lambda x: dt.logsoftmax(x, axis=-1), lambda x: torch.log_softmax(x, -1)),
    "relu": (lambda x: dt.activation(x, "relu"), F.relu),
    "sigmoid": (lambda x: dt.activation(x, "sigmoid"), torch.sigmoid),
    "tanh": (lambda x: dt.activation(x, "tanh"), torch.tanh),
    "elu": (lambda x: dt.activation(x, "elu", alpha=0.7), lambda x: F.elu(x, 0.7)),
    "leaky_relu": (lambda x: dt.activation(x, "leaky_relu", alpha=0.2), lambda x: F.leaky_relu(x, 0.2)),
    "relu6": (lambda x: dt.activation(x, "clipped_relu"), F.relu6),
    "silu": (lambda x: dt.activation(x, "swish"), F.silu),
    "batchnorm-training": (lambda x: dt.batchnorm(x, GAMMA, BETA),
                           lambda x: F.batch_norm(x, None, None, GAMMA, BETA, training=True)),
    "batchnorm-inference": (lambda x: dt.batchnorm(x, GAMMA, BETA, running_mean=MEAN, running_var=VAR, training=False),
                            lambda x: F.batch_norm(x, MEAN, VAR, GAMMA, BETA, training=False)),
    "dropout": (lambda x: dt.dropout(x, 0.3, seed=5), None),
}
torch.manual_seed(7)
GAMMA, BETA = _r(4), _r(4)
MEAN, VAR = torch.randn(4, dtype=DT), torch.rand(4, dtype=DT) + 0.5


@pytest.mark.parametrize("name", list(POINTWISE))
def test_gradgradcheck_passes_for_the_closed_form_rules(name):
    """softmax's, the activations' and batch norm's backwards differentiated by their formulas (batch
    norm's with respect to x, gamma and beta), dropout's as a linear map with its mask."""
    ours, _ = POINTWISE[name]
    x = _r(3, 4, 5)
    if name.startswith("batchnorm"):
        assert gradgradcheck(lambda x, g, b: dt.batchnorm(x, g, b, training=name.endswith("training"),
                                                          running_mean=MEAN, running_var=VAR), (x, GAMMA, BETA))
    else:
        assert gradgradcheck(ours, (x,))


@pytest.mark.parametrize("name", [n for n in POINTWISE if POINTWISE[n][1] is not None])
def test_closed_form_gradient_penalties_equal_torchs(name):
    ours, theirs = POINTWISE[name]
    x0 = torch.randn(3, 4, 5, dtype=DT)
    results = []
    for f in (ours, theirs):
        x = x0.clone().requires_grad_()
        y = f(x)
        (gx,) = torch.autograd.grad((y * torch.linspace(-1, 1, y.numel(), dtype=DT).view_as(y)).sum(), x,
                                    create_graph=True)
        # (piecewise-linear ones: zero, which torch gives as unused)
        results.append(torch.autograd.grad((gx ** 3).sum(), x, allow_unused=True, materialize_grads=True))
    torch.testing.assert_close(results[0], results[1])


def test_a_hessian_of_softmax_and_batch_norm_by_torch_func_equals_torchs():
    x = torch.randn(3, 4, dtype=DT)

    def loss(softmax, norm):
        return lambda x: softmax(norm(x)).pow(2).sum()
    ours = jacrev(grad(loss(lambda x: dt.softmax(x, axis=1), lambda x: dt.batchnorm(x, GAMMA[:4], BETA[:4]))))(x)
    theirs = jacrev(grad(loss(lambda x: torch.softmax(x, 1),
                              lambda x: F.batch_norm(x, None, None, GAMMA[:4], BETA[:4], training=True))))(x)
    torch.testing.assert_close(ours, theirs)


def _cubed_penalty(f, args):
    """The gradients of |d(sum y^3)/dx|^2: the first backward's cotangent (3 y^2) depends on x, so a rule
    must count the path through the cotangent once (autograd sends its part back along y's history)."""
    tensors = [a.detach().clone().requires_grad_() for a in args]
    (gx,) = torch.autograd.grad(f(*tensors).pow(3).sum(), tensors[0], create_graph=True)
    return torch.autograd.grad((gx ** 2).sum(), tensors, allow_unused=True, materialize_grads=True)


@pytest.mark.parametrize("name", [*CASES, *(n for n, (_, theirs) in POINTWISE.items() if theirs is not None)])
def test_a_penalty_whose_cotangent_depends_on_x_equals_torchs(name):
    if name in CASES:
        ours, theirs, inputs = CASES[name]
        torch.manual_seed(2)
        args = inputs()
    else:
        ours, theirs = POINTWISE[name]
        torch.manual_seed(2)
        args = (_r(3, 4, 5),)
    for a, b in zip(_cubed_penalty(ours, args), _cubed_penalty(theirs, args)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ["softmax", "silu", "batchnorm-training"])
def test_third_derivatives_of_the_closed_form_rules_check_numerically(name):
    """The rules' second derivatives are differentiable again (torch.func.vjp keeps them so): gradgradcheck
    of the first derivative of a loss whose cotangent depends on x."""
    ours, _ = POINTWISE[name]
    torch.manual_seed(3)
    x = _r(2, 4, 3)
    assert gradgradcheck(lambda x: torch.autograd.grad(ours(x).pow(3).sum(), x, create_graph=True)[0], (x,))


def test_a_third_derivative_through_a_chained_op_is_refused():
    x, w = _r(1, 2, 4, 4), _r(3, 2, 3, 3)
    (g1,) = torch.autograd.grad(dt.conv_bias_activation(x, w, mode="tanh").pow(3).sum(), x, create_graph=True)
    (g2,) = torch.autograd.grad(g1.pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="third derivative through a chained op"):
        torch.autograd.grad(g2.sum(), x)


@pytest.mark.parametrize("name", [*CASES, *POINTWISE])
def test_an_empty_batch_is_differentiated_twice_as_torchs(name):
    """N = 0: the second derivatives are empty (the rules written in differentiable operations got no
    cotangent there, an empty one being taken for none, and raised from torch.func.vjp)."""
    if name in CASES:
        ours, theirs, inputs = CASES[name]
        args = [a.detach()[:0] if i == 0 else a.detach() for i, a in enumerate(inputs())]
    else:
        ours, theirs = POINTWISE[name]
        args = [torch.zeros(0, 4, 5, dtype=DT)]
    results = []
    for f in (ours, theirs) if theirs is not None else (ours,):
        tensors = [a.clone().requires_grad_() for a in args]
        (gx,) = torch.autograd.grad(f(*tensors).pow(3).sum(), tensors[0], create_graph=True)
        results.append(torch.autograd.grad((gx ** 2).sum(), tensors, allow_unused=True, materialize_grads=True))
    assert [g.shape for g in results[0]] == [a.shape for a in args]
    for a, b in zip(results[0], results[-1]):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("make", [lambda nn: nn.Tanh(), lambda nn: nn.BatchNorm1d(3), lambda nn: nn.LayerNorm(4),
                                  lambda nn: nn.Softmax(1), lambda nn: nn.LSTM(4, 2), lambda nn: nn.Conv1d(3, 2, 2)],
                         ids=["tanh", "batchnorm", "layer_norm", "softmax", "lstm", "conv"])
def test_a_double_backward_under_saved_tensor_hooks_equals_torchs(make):
    """save_on_cpu (saved-tensor hooks) around the forward and the create_graph backward too: the second-order
    rules differentiate without torch.func.vjp there, which refuses saved-tensor hooks."""
    from dnnbind.torch import nn as dnn
    results = []
    for nn in (torch.nn, dnn):
        torch.manual_seed(0)
        layer = make(nn).double()
        x = torch.randn(2, 3, 4, dtype=DT, generator=torch.Generator().manual_seed(1), requires_grad=True)
        with torch.autograd.graph.save_on_cpu():
            y = layer(x)
            y = y[0] if isinstance(y, tuple) else y
            (gx,) = torch.autograd.grad(y.pow(3).sum(), x, create_graph=True)
            gx.pow(2).sum().backward()
        results.append(x.grad)
    torch.testing.assert_close(results[1], results[0])


def test_elus_second_derivative_at_zero_is_torchs():
    """At x = 0 (and -0) ELU's derivative is alpha and its second derivative 0, as torch's."""
    z = torch.tensor([-0.0, 0.0, 0.5, -1.0, -1e-300], dtype=DT)
    for alpha in (1.0, 0.4):
        second = [grad(lambda z: grad(lambda z: m(z).sum())(z).sum())(z)
                  for m in (torch.nn.ELU(alpha), dt.ELU(alpha))]
        torch.testing.assert_close(second[1], second[0])


@pytest.mark.parametrize("make", [lambda nn: nn.MaxPool2d(2), lambda nn: nn.AvgPool1d(3, 2, padding=1),
                                  lambda nn: nn.Sequential(nn.MaxPool2d(2), nn.ReLU(), nn.AvgPool2d(2)),
                                  lambda nn: nn.Conv2d(2, 2, 3), lambda nn: nn.Dropout(0.5)],
                         ids=["maxpool", "avgpool", "fused_pools", "conv", "dropout"])
def test_a_second_derivative_that_is_zero_is_a_zero_tensor(make):
    """The second derivative of a pooling by its input is zero everywhere: torch's layers give zeros (their
    backward is connected to x) for autograd.grad, with and without allow_unused, and for a penalty's
    backward into x.grad; so do dnnbind's, for every op whose rule says zero (torch's conv and dropout
    refuse x there as unused: no gradient at all)."""
    from dnnbind.torch import nn as dnn
    torch.manual_seed(0)
    ours = make(dnn).double()
    shape = (2, 2, 4, 4) if "Pool1d" not in type(ours).__name__ else (2, 2, 7)
    for allow in (False, True):
        x = torch.randn(shape, dtype=DT, requires_grad=True)
        y = ours(x)
        g, = torch.autograd.grad((y * torch.linspace(-1, 1, y.numel(), dtype=DT).view_as(y)).sum(), x,
                                 create_graph=True)
        second, = torch.autograd.grad(g.pow(2).sum(), x, allow_unused=allow, retain_graph=True)
        assert second is not None and second.shape == x.shape and not second.any()
        g.pow(2).sum().backward()
        assert x.grad is not None and not x.grad.any()
