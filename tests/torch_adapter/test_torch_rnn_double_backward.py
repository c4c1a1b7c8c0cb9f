"""Double backward through dnnbind's rnn op (its spec's second-order rule: the backward differentiated
through the recurrence written in torch operations): gradgradcheck in float64 through dnnbind.torch's
LSTM, GRU and RNN, and second derivatives equal to torch's own (CPU) layers with the same weights,
eagerly and under torch.func; refused on a GPU backend, as torch refuses for its cuDNN RNN."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.autograd import gradgradcheck
from torch.func import functional_call, grad
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import dnnbind.torch as dt
from dnnbind.highlevel import reference
from dnnbind.highlevel.specs import SPECS, recurrence, second_order
from dnnbind.torch import typed

DT = torch.float64
T, B, I, H = 3, 2, 2, 2                 # steps, batch, input and hidden features: tiny, the checks are numerical

CASES = {
    "lstm-2layer-bidir-h0c0": ("LSTM", {"num_layers": 2, "bidirectional": True}, "state"),
    "lstm-proj-2layer": ("LSTM", {"proj_size": 1, "num_layers": 2}, "state"),
    "lstm-proj-bidir-packed": ("LSTM", {"proj_size": 1, "bidirectional": True}, "packed"),
    "lstm-nobias-unbatched": ("LSTM", {"bias": False}, "unbatched"),
    "gru-2layer-packed": ("GRU", {"num_layers": 2}, "packed"),
    "gru-bidir-h0": ("GRU", {"bidirectional": True}, "state"),
    "rnn-tanh-2layer-bidir": ("RNN", {"num_layers": 2, "bidirectional": True}, "state"),
    "rnn-relu-packed-h0": ("RNN", {"nonlinearity": "relu"}, "packed-state"),
    "rnn-relu-unbatched-h0": ("RNN", {"nonlinearity": "relu"}, "unbatched-state"),
}
#: whole Jacobians where that is quick, else gradgradcheck's fast mode (random projections of them; all pass
#: in whole in 20 s)
WHOLE = {"lstm-nobias-unbatched", "rnn-relu-packed-h0", "rnn-relu-unbatched-h0"}
LENGTHS = torch.tensor([2, 3])          # packed: the second sequence runs longer (any order)


def _pair(name: str, kwargs: dict) -> tuple[nn.Module, nn.Module]:
    """(dnnbind's layer, torch's) with the same weights."""
    torch.manual_seed(0)
    theirs = getattr(nn, name)(I, H, **kwargs, dtype=DT)
    ours = getattr(dt, name)(I, H, **kwargs, dtype=DT)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def _inputs(name: str, kwargs: dict, how: str) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """(x, the initial states given: () or (h0,) or (h0, c0)), seeded."""
    torch.manual_seed(1)
    unbatched = how.startswith("unbatched")
    x = torch.randn((T, I) if unbatched else (T, B, I), dtype=DT)
    if "state" not in how:
        return x, ()
    count = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    batch = () if unbatched else (B,)
    h0 = torch.randn(count, *batch, kwargs.get("proj_size") or H, dtype=DT)
    return x, (h0, torch.randn(count, *batch, H, dtype=DT)) if name == "LSTM" else (h0,)


def _run(layer: nn.Module, name: str, how: str, x: torch.Tensor, states: tuple) -> tuple[torch.Tensor, ...]:
    """The layer's outputs (y padded with zeros for a packed input, then hy, and cy for an LSTM)."""
    hx = None if not states else states if name == "LSTM" else states[0]
    if how.startswith("packed"):
        y, state = layer(pack_padded_sequence(x, LENGTHS, enforce_sorted=False), hx)
        y = pad_packed_sequence(y, total_length=T)[0]
    else:
        y, state = layer(x, hx)
    return (y, *state) if name == "LSTM" else (y, state)


def _function(layer: nn.Module, name: str, how: str, count: int):
    """f(x, *states, *parameters) -> the layer's outputs, for gradgradcheck."""
    names = [n for n, _ in layer.named_parameters()]

    def f(x, *tensors):
        states, parameters = tensors[:count], tensors[count:]
        return _run(_Bound(layer, dict(zip(names, parameters))), name, how, x, states)
    return f


class _Bound:
    """A layer called with other parameters (torch.func.functional_call)."""

    def __init__(self, layer: nn.Module, parameters: dict) -> None:
        self.layer, self.parameters = layer, parameters

    def __call__(self, *args):
        return functional_call(self.layer, self.parameters, args)


def _weights(outputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """A loss of the outputs whose cotangents depend on them (so the cotangents' paths count too)."""
    return sum((o.pow(3) * torch.linspace(-1, 1, o.numel(), dtype=DT).view_as(o)).sum() for o in outputs)


@pytest.mark.parametrize("case", list(CASES))
def test_gradgradcheck_passes(case):
    name, kwargs, how = CASES[case]
    ours, _ = _pair(name, kwargs)
    x, states = _inputs(name, kwargs, how)
    tensors = [t.requires_grad_() for t in (x, *states, *[p.detach().clone() for p in ours.parameters()])]
    f = _function(ours, name, how, len(states))
    assert gradgradcheck(f, tensors, fast_mode=case not in WHOLE)


def _penalty(layer: nn.Module, name: str, how: str, x: torch.Tensor, states: tuple) -> tuple:
    """The gradients, with respect to x, the states and the weights, of the squared norm of the loss's
    gradient with respect to x and the weights (WGAN-GP's penalty, MAML's inner step)."""
    x = x.clone().requires_grad_()
    states = tuple(s.clone().requires_grad_() for s in states)
    parameters = list(layer.parameters())
    firsts = torch.autograd.grad(_weights(_run(layer, name, how, x, states)), [x, *parameters], create_graph=True)
    penalty = sum((g ** 2).sum() for g in firsts)
    return torch.autograd.grad(penalty, [x, *states, *parameters], allow_unused=True, materialize_grads=True)


@pytest.mark.parametrize("case", list(CASES))
def test_a_gradient_penalty_equals_torchs(case):
    name, kwargs, how = CASES[case]
    ours, theirs = _pair(name, kwargs)
    x, states = _inputs(name, kwargs, how)
    torch.testing.assert_close(_penalty(ours, name, how, x, states), _penalty(theirs, name, how, x, states))


def _x_penalty_by_torch_func(call, parameters: dict, x: torch.Tensor) -> dict:
    """torch.func.grad of a function of torch.func.grad: the gradient, with respect to the weights, of the
    squared norm of the loss's gradient with respect to x."""
    def loss(p, x):
        return _weights(call(p, x))

    def penalty(p):
        return (grad(loss, argnums=1)(p, x) ** 2).sum()
    return grad(penalty)(parameters)


def _x_penalty_eagerly(layer: nn.Module, name: str, how: str, x: torch.Tensor, states: tuple) -> dict:
    x = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(_weights(_run(layer, name, how, x, states)), x, create_graph=True)
    named = dict(layer.named_parameters())
    return dict(zip(named, torch.autograd.grad((gx ** 2).sum(), list(named.values()))))


@pytest.mark.parametrize("case", ["lstm-2layer-bidir-h0c0", "lstm-proj-2layer", "gru-bidir-h0",
                                  "rnn-relu-unbatched-h0"])
def test_grad_of_grad_by_torch_func_equals_torchs(case):
    name, kwargs, how = CASES[case]
    x, states = _inputs(name, kwargs, how)
    found = []
    for layer in _pair(name, kwargs):
        parameters = {n: p.detach() for n, p in layer.named_parameters()}
        found.append(_x_penalty_by_torch_func(lambda p, x: _run(_Bound(layer, p), name, how, x, states),
                                              parameters, x))
    torch.testing.assert_close(found[0], found[1])


@pytest.mark.parametrize("case", ["lstm-proj-bidir-packed", "gru-2layer-packed", "rnn-relu-packed-h0"])
def test_packed_sequences_by_torch_func_equal_torchs(case):
    """Under torch.func through dnnbind.torch.functional.rnn's ``lengths`` (torch's PackedSequence
    utilities do not run under torch.func), against torch's layer on a PackedSequence, eagerly."""
    name, kwargs, how = CASES[case]
    ours, theirs = _pair(name, kwargs)
    x, states = _inputs(name, kwargs, how)
    mode = {"LSTM": "lstm", "GRU": "gru"}.get(name) or f"rnn_{ours.nonlinearity}"

    def call(p, x):
        entries = [[p[n] for n in names] for names in ours._all_weights]      # (with biases: the op's order)
        y, hy, cy = dt.functional.rnn(x, entries, mode=mode, hidden_size=H, num_layers=ours.num_layers,
                                      bidirectional=ours.bidirectional, proj_size=ours.proj_size, lengths=LENGTHS,
                                      h0=states[0] if states else None, c0=states[1] if len(states) > 1 else None)
        return (y, hy) if cy is None else (y, hy, cy)
    parameters = {n: p.detach() for n, p in ours.named_parameters()}
    torch.testing.assert_close(_x_penalty_by_torch_func(call, parameters, x),
                               _x_penalty_eagerly(theirs, name, how, x, states))


def test_dropout_between_layers_is_differentiated_twice():
    """Training-mode dropout between layers (one rnn op per layer, dropout's linear rule between): the
    masks drawn from torch's generator, the same in every call under one seed."""
    ours, _ = _pair("LSTM", {"num_layers": 2, "dropout": 0.5})
    x, _ = _inputs("LSTM", {}, "")
    parameters = [p.detach().clone().requires_grad_() for p in ours.parameters()]
    f = _function(ours, "LSTM", "", 0)

    def seeded(*tensors):
        torch.manual_seed(5)
        return f(*tensors)
    assert gradgradcheck(seeded, [x.requires_grad_(), *parameters], fast_mode=True)


def _ops(x: torch.Tensor, weights: list, h0=None, c0=None, **arguments) -> typed._Ops:
    """The ``ops`` a second-order rule gets for an rnn call on these tensors (as the backward's node builds it)."""
    inputs = typed.typed_arguments("rnn", x, [weights, h0, c0], SPECS["rnn"].arguments_function(**arguments))
    return typed._Ops("rnn", typed._statics(inputs), typed._flat_tensors("rnn", inputs))


ORACLE_CASES = {
    "lstm-proj-2layer-bidir-packed-h0c0": dict(mode="lstm", proj_size=1, num_layers=2, bidirectional=True,
                                               lengths=(2, 3, 1), states=True),
    "lstm-nobias": dict(mode="lstm", bias=False),
    "gru-bidir-packed-h0": dict(mode="gru", bidirectional=True, lengths=(3, 1, 2), states=True),
    "rnn-relu-2layer": dict(mode="rnn_relu", num_layers=2),
    "rnn-tanh-packed": dict(mode="rnn_tanh", lengths=(1, 3, 2)),
}


@pytest.mark.parametrize("case", list(ORACLE_CASES))
def test_the_recurrence_and_its_gradients_equal_the_reference_backends(case):
    """What the rule differentiates, the rnn forward in torch operations and its vjp (the op's first
    derivatives), against the oracle (the reference backend's forward and backward, on numpy)."""
    config = dict(ORACLE_CASES[case])
    bias, states = config.pop("bias", True), config.pop("states", False)
    mode, proj = config["mode"], config.get("proj_size", 0)
    directions = 2 if config.get("bidirectional") else 1
    gates, out, batch = {"lstm": 4, "gru": 3}.get(mode, 1) * H, proj or H, 3
    torch.manual_seed(4)
    weights = []
    for layer in range(config.get("num_layers", 1)):
        for _ in range(directions):
            entry = [torch.randn(gates, I if layer == 0 else directions * out, dtype=DT),
                     torch.randn(gates, out, dtype=DT)]
            entry += [torch.randn(gates, dtype=DT), torch.randn(gates, dtype=DT)] if bias else [None, None]
            weights.append(entry + ([torch.randn(proj, H, dtype=DT)] if proj else []))
    x = torch.randn(T, batch, I, dtype=DT)
    count = len(weights)
    h0 = torch.randn(count, batch, out, dtype=DT) if states else None
    c0 = torch.randn(count, batch, H, dtype=DT) if states and mode == "lstm" else None
    ops = _ops(x, weights, h0, c0, hidden_size=H, **config)
    found = recurrence.forward(ops, ops.arrays)
    cotangents = [torch.randn_like(found[n]) for n in ("y", "hy", "cy") if n in found]
    gradients = second_order._rnn(ops, ops.arrays, cotangents)

    def numpy(a):
        return None if a is None else a.numpy()
    arrays = (x.numpy(), [[numpy(a) for a in e] for e in weights], numpy(h0), numpy(c0))
    (y, hy, cy), pullback = reference.rnn(*arrays, *SPECS["rnn"].check(*arrays, hidden_size=H, **config))
    expected = dict(zip(("y", "hy", "cy"), (y, hy, cy)))
    for name, value in found.items():
        torch.testing.assert_close(value, torch.from_numpy(expected[name]))
    dx, dh0, dc0, dweights = pullback(*[c.numpy() for c in cotangents])
    torch.testing.assert_close(gradients["x"], torch.from_numpy(dx))
    for got, want in ((gradients["h0"], dh0), (gradients["c0"], dc0)):
        if got is not None:
            torch.testing.assert_close(got, torch.from_numpy(want))
    for got, want in zip(gradients["weights"], dweights):
        assert [a is None for a in got] == [a is None for a in want]
        for a, b in zip(got, want):
            if a is not None:
                torch.testing.assert_close(a, torch.from_numpy(b))


def test_a_gpu_backend_refuses_as_torchs_cudnn_rnn_does():
    """The rule, called as the backward's autograd node calls it, on arrays of a CUDA device (fake
    tensors: no device here): a RuntimeError naming dnnbind.rnn and the backend."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.randn(T, B, I, dtype=DT, device="cuda")
        weights = [[torch.randn(4 * H, I, dtype=DT, device="cuda"), torch.randn(4 * H, H, dtype=DT, device="cuda"),
                    None, None]]
        ops = _ops(x, weights, mode="lstm", hidden_size=H)
        dy = torch.ones(T, B, H, dtype=DT, device="cuda")
        with pytest.raises(RuntimeError, match=r"dnnbind\.rnn: double backward is not supported on the cudnn "
                                               r"backend.*cuDNN RNN"):
            SPECS["rnn"].second_order(ops, ops.arrays, [dy, None, None], {"dx": torch.ones_like(x)})


def test_per_sample_gradient_penalties_by_vmap_equal_torchs():
    """vmap of torch.func.grad of grad (a per-sample penalty, as DP-SGD takes per-sample gradients),
    against torch's layer one sample at a time (torch's GRU does not run under vmap)."""
    def penalty(layer):
        def of(p, sample):
            return _x_penalty_by_torch_func(lambda p, x: _run(_Bound(layer, p), "GRU", "", x, ()), p, sample)
        return of
    ours, theirs = _pair("GRU", {})
    x, _ = _inputs("GRU", {}, "")
    parameters = {n: p.detach() for n, p in ours.named_parameters()}
    found = torch.func.vmap(penalty(ours), in_dims=(None, 1))(parameters, x)
    one_by_one = [penalty(theirs)(parameters, x[:, b]) for b in range(B)]
    torch.testing.assert_close(found, {n: torch.stack([o[n] for o in one_by_one]) for n in parameters})


def test_third_derivatives_check_numerically():
    """The rule's second derivatives are differentiable again: gradgradcheck of a first derivative whose
    cotangent depends on x."""
    ours, _ = _pair("LSTM", {"proj_size": 1})
    x, states = _inputs("LSTM", {"proj_size": 1}, "state")

    def first(x):
        return torch.autograd.grad(_weights(_run(ours, "LSTM", "", x, states)), x, create_graph=True)[0]
    assert gradgradcheck(first, (x.requires_grad_(),), fast_mode=True)
