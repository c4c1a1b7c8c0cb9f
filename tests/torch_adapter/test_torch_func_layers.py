"""Each drop-in layer family under torch.func and double backward, against torch's own layer with the same
weights (float64): gradgradcheck through the layer's parameters, a gradient penalty, torch.func.grad of
functional_call, vmap over an axis of the input (0 and 1, nested, and over unbatched samples),
vmap(grad) per-sample gradients, a Hessian by jacrev(jacrev), and forward mode refused naming the op.
The same checks ran over many more settings while this file was written; these are one per kind."""
from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch import nn as torch_nn
from torch.autograd import gradgradcheck
from torch.func import functional_call, grad, jacrev, jvp, vmap

import dnnbind.torch as dt
from dnnbind.torch import nn as dnn

DT = torch.float64

#: name -> (layer class, arguments, input shape); one setting each that the other files do not take
LAYERS = {
    "conv1d-same-dilated": ("Conv1d", (2, 4, 3), {"padding": "same", "dilation": 2}, (2, 2, 8)),
    "conv2d-reflect-nobias": ("Conv2d", (2, 2, (3, 2)), {"padding": 1, "padding_mode": "reflect",
                                                           "bias": False}, (2, 2, 3, 3)),
    "conv3d-grouped-strided": ("Conv3d", (2, 4, 2), {"groups": 2, "stride": 2, "padding": 1}, (1, 2, 3, 4, 3)),
    "convtranspose1d-grouped-dilated": ("ConvTranspose1d", (4, 2, 3), {"groups": 2, "dilation": 2,
                                                                       "bias": False}, (2, 4, 5)),
    "convtranspose3d-output-padding": ("ConvTranspose3d", (2, 2, 2), {"stride": 2, "output_padding": 1},
                                       (1, 2, 2, 3, 2)),
    "maxpool1d-ceil-dilated": ("MaxPool1d", (3,), {"stride": 2, "padding": 1, "dilation": 2, "ceil_mode": True},
                               (2, 3, 10)),
    "maxpool3d-padded": ("MaxPool3d", (2,), {"stride": 1, "padding": 1}, (1, 2, 3, 4, 3)),
    "avgpool1d-ceil-excluding-pad": ("AvgPool1d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True,
                                                         "count_include_pad": False}, (2, 3, 10)),
    "avgpool3d-divisor": ("AvgPool3d", (2,), {"stride": 2, "padding": 1, "divisor_override": 3}, (1, 2, 3, 4, 5)),
    "batchnorm1d-eval": ("BatchNorm1d", (3,), {}, (4, 3, 5)),
    "batchnorm2d-untracked": ("BatchNorm2d", (3,), {"track_running_stats": False}, (2, 3, 2, 2)),
    "layernorm-2d-shape": ("LayerNorm", ((3, 4),), {}, (2, 3, 4)),
    "layernorm-no-affine": ("LayerNorm", (4,), {"elementwise_affine": False}, (2, 3, 4)),
    "softmax-dim0": ("Softmax", (0,), {}, (3, 4, 2)),
    "logsoftmax-dim-2": ("LogSoftmax", (-2,), {}, (3, 4, 2)),
    "elu": ("ELU", (0.6,), {}, (3, 4)),
    "leakyrelu": ("LeakyReLU", (0.3,), {}, (3, 4)),
    "hardtanh": ("Hardtanh", (0.0, 2.0), {}, (3, 4)),
}


def _pair(name: str):
    cls, args, kwargs, shape = LAYERS[name]
    torch.manual_seed(0)
    theirs = getattr(torch_nn, cls)(*args, **kwargs).to(DT)
    ours = getattr(dnn, cls)(*args, **kwargs).to(DT)
    ours.load_state_dict(theirs.state_dict())
    if name.endswith("-eval"):
        ours.eval(), theirs.eval()
    scale = 3.0 if cls == "Hardtanh" else 1.0          # both sides of the clip
    return ours, theirs, torch.randn(*shape, dtype=DT, generator=torch.Generator().manual_seed(1)) * scale


def _params(model):
    return {k: v.detach() for k, v in model.named_parameters()}


@pytest.mark.parametrize("name", list(LAYERS))
def test_gradgradcheck_through_the_layer_and_its_parameters(name):
    ours, _, x = _pair(name)
    names = list(_params(ours))

    def f(x, *parameters):
        return functional_call(ours, dict(zip(names, parameters)), (x,))
    x = x[:1] if x.dim() > 3 else x                     # small: the checks are numerical
    assert gradgradcheck(f, (x.requires_grad_(), *[p.clone().requires_grad_() for p in _params(ours).values()]))


@pytest.mark.parametrize("name", list(LAYERS))
def test_a_gradient_penalty_and_torch_func_equal_torchs(name):
    ours, theirs, x = _pair(name)

    def penalty(m):
        xx = x.clone().requires_grad_()
        (gx,) = torch.autograd.grad(m(xx).pow(3).sum(), xx, create_graph=True)
        return torch.autograd.grad(gx.pow(2).sum(), [xx, *m.parameters()], allow_unused=True, materialize_grads=True)
    torch.testing.assert_close(penalty(ours), penalty(theirs))

    def loss(m):
        return lambda p, x: functional_call(m, p, (x,)).pow(3).sum()
    torch.testing.assert_close(grad(loss(ours), argnums=(0, 1))(_params(ours), x),
                               grad(loss(theirs), argnums=(0, 1))(_params(theirs), x))
    torch.testing.assert_close(vmap(grad(loss(ours)), in_dims=(None, 0))(_params(ours), x.unsqueeze(1)),
                               vmap(grad(loss(theirs)), in_dims=(None, 0))(_params(theirs), x.unsqueeze(1)))
    small = x[:1] if x.dim() > 3 else x
    torch.testing.assert_close(jacrev(jacrev(lambda x: ours(x).pow(3).sum()))(small),
                               jacrev(jacrev(lambda x: theirs(x).pow(3).sum()))(small))


@pytest.mark.parametrize("name", list(LAYERS))
def test_vmap_over_either_axis_nested_and_over_samples_equals_torchs(name):
    ours, theirs, x = _pair(name)
    xs = torch.stack([x * (i + 1) for i in range(3)])
    for axis in (0, 1):
        torch.testing.assert_close(vmap(ours, in_dims=axis)(xs.movedim(0, axis)),
                                   vmap(theirs, in_dims=axis)(xs.movedim(0, axis)))
    nested = torch.stack([xs, -xs])
    torch.testing.assert_close(vmap(vmap(ours))(nested), vmap(vmap(theirs))(nested))
    if not name.startswith(("batchnorm", "softmax", "logsoftmax")):    # their dim/statistics need the batch
        torch.testing.assert_close(vmap(ours)(x), vmap(theirs)(x))      # each sample unbatched


@pytest.mark.parametrize("name", ["conv1d-same-dilated", "maxpool3d-padded", "batchnorm1d-eval",
                                  "layernorm-no-affine", "softmax-dim0", "elu"])
def test_forward_mode_is_refused_naming_the_op(name):
    ours, _, x = _pair(name)
    with pytest.raises(RuntimeError, match=r"dnnbind\.\w+: forward-mode AD"):
        jvp(ours, (x,), (torch.ones_like(x),))
    with pytest.raises(RuntimeError, match=r"dnnbind\.\w+: forward-mode AD"):
        torch.func.hessian(lambda x: ours(x).sum())(x)      # forward over reverse
    # torch.func.linearize traces forward mode through make_fx (the registered ops, which the dispatcher
    # would give zero tangents), torch.autograd.forward_ad runs the eager Function
    with pytest.raises(RuntimeError, match=r"dnnbind\.\w+: forward-mode AD"):
        torch.func.linearize(ours, x)
    with pytest.raises(RuntimeError, match=r"dnnbind\.\w+: forward-mode AD"), fwAD.dual_level():
        ours(fwAD.make_dual(x, torch.ones_like(x)))


def test_forward_mode_through_a_fused_run_is_refused_naming_an_op():
    model = dnn.Sequential(dnn.Conv1d(2, 3, 1), dnn.ReLU()).double()
    x = torch.randn(2, 2, 4, dtype=DT)
    model(x), model(x)                       # (the second call runs fused)
    with pytest.raises(RuntimeError, match=r"dnnbind\.\w+: forward-mode AD"), fwAD.dual_level():
        model(fwAD.make_dual(x, torch.ones_like(x)))


@pytest.mark.parametrize("name", list(LAYERS))
def test_batched_gradients_are_refused_naming_the_op(name):
    """torch.autograd's own vmap over cotangents (is_grads_batched, jacobian and hessian with
    vectorize=True) is refused naming the op; torch.func.jacrev gives torch's Jacobian."""
    ours, theirs, x = _pair(name)
    x = x.requires_grad_()
    first = (lambda out: out[0] if isinstance(out, tuple) else out)
    y = first(ours(x))
    with pytest.raises(RuntimeError, match=r"dnnbind\.\w+: batched gradients .*torch.func.jacrev"):
        torch.autograd.grad(y, x, torch.eye(y.numel(), dtype=DT).view(-1, *y.shape), is_grads_batched=True)
    with pytest.raises(RuntimeError, match=r"dnnbind\.\w+: batched gradients"):
        torch.autograd.functional.jacobian(lambda x: first(ours(x)), x, vectorize=True)
    with pytest.raises(RuntimeError, match=r"dnnbind\.\w+: batched gradients"):   # (through the backward ops)
        torch.autograd.functional.hessian(lambda x: first(ours(x)).sin().sum(), x.detach(), vectorize=True)
    torch.testing.assert_close(jacrev(lambda x: first(ours(x)))(x.detach()),
                               jacrev(lambda x: first(theirs(x)))(x.detach()))


@pytest.mark.parametrize("op", ["layer_norm", "batchnorm"])
def test_mixed_second_derivatives_by_jacrev_of_jacrev_are_right(op):
    """d(dL/dweight)/dx by jacrev(jacrev(...)): torch 2.13's own layer_norm and batch_norm give a wrong
    block there (their batched backward), so the oracle is torch's jacrev(grad(...)), which finite
    differences confirm."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(2)
    x, w, b = torch.randn(2, 3, 2, dtype=DT, generator=g), torch.randn(3, dtype=DT, generator=g), torch.randn(3, dtype=DT,
                                                                                                               generator=g)
    if op == "layer_norm":
        x, ours, theirs = x.transpose(1, 2), lambda x, w: dt.layer_norm(x, 3, w, b), lambda x, w: F.layer_norm(x, (3,), w, b)
    else:
        ours = lambda x, w: dt.batchnorm(x, w, b)                                       # noqa: E731
        theirs = lambda x, w: F.batch_norm(x, None, None, w, b, training=True)          # noqa: E731

    def loss(f):
        return lambda x, w: (f(x, w) * torch.arange(x.numel(), dtype=DT).view(x.shape)).sum()
    found = jacrev(jacrev(loss(ours), argnums=1), argnums=0)(x, w)
    torch.testing.assert_close(found, jacrev(grad(loss(theirs), argnums=1), argnums=0)(x, w))
    torch.testing.assert_close(found, jacrev(grad(loss(ours), argnums=1), argnums=0)(x, w))
