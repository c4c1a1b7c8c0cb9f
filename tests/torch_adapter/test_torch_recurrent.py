"""RNN, LSTM and GRU are torch.nn's: state_dicts, batch_first, bidirectional, dropout between layers,
unbatched input, PackedSequence in and out; LSTM proj_size."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import dnnbind.torch as dt
from layer_checks import assert_same_grads

F64 = {"dtype": torch.float64}

RNN_CASES = [
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"batch_first": True, "bias": False}),
    ("GRU", {"num_layers": 2}),
    ("GRU", {"bidirectional": True, "batch_first": True}),
    ("RNN", {"nonlinearity": "relu"}),
    ("RNN", {"num_layers": 2, "bidirectional": True}),
]
RNN_IDS = ["lstm-2layer-bidir", "lstm-batch-first-nobias", "gru-2layer", "gru-bidir-batch-first", "rnn-relu",
           "rnn-tanh-2layer-bidir"]


def _pair(name: str, kwargs: dict, input_size: int = 3, hidden: int = 4) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    theirs = getattr(nn, name)(input_size, hidden, **kwargs, **F64)
    ours = getattr(dt, name)(input_size, hidden, **kwargs, **F64)
    assert repr(ours) == repr(theirs)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def _state(name: str, layers: int, batch: int | None, hidden: int = 4) -> torch.Tensor | tuple:
    shape = (layers, hidden) if batch is None else (layers, batch, hidden)
    h0 = torch.randn(shape, **F64)
    return (h0, torch.randn_like(h0)) if name == "LSTM" else h0


def _loss(out: torch.Tensor, state) -> torch.Tensor:
    return out.square().sum() + sum(s.sum() for s in (state if isinstance(state, tuple) else (state,)))


@pytest.mark.parametrize("name, kwargs", RNN_CASES, ids=RNN_IDS)
def test_recurrent_layers_equal_torch(name, kwargs):
    ours, theirs = _pair(name, kwargs)
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    x = torch.randn((2, 5, 3) if kwargs.get("batch_first") else (5, 2, 3), **F64)
    hx = _state(name, layers, 2)
    (y, state), (y_ref, state_ref) = ours(x, hx), theirs(x, hx)
    torch.testing.assert_close((y, state), (y_ref, state_ref))
    _loss(y, state).backward()
    _loss(y_ref, state_ref).backward()
    assert_same_grads(ours, theirs, 1e-9)
    theirs.load_state_dict(ours.state_dict())


@pytest.mark.parametrize("name, kwargs", RNN_CASES, ids=RNN_IDS)
@pytest.mark.parametrize("enforce_sorted", [True, False], ids=["sorted", "unsorted"])
def test_packed_sequences_in_and_out_equal_torch(name, kwargs, enforce_sorted):
    ours, theirs = _pair(name, kwargs)
    lengths = [5, 4, 2] if enforce_sorted else [2, 5, 4]
    x = torch.randn(5, 3, 3, **F64)
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    hx = _state(name, layers, 3)
    results = []
    for layer in (ours, theirs):
        x_leaf = x.clone().requires_grad_()
        packed = pack_padded_sequence(x_leaf, lengths, enforce_sorted=enforce_sorted)
        out, state = layer(packed, hx)
        assert type(out) is type(packed)
        assert torch.equal(out.batch_sizes, packed.batch_sizes)
        for a, b in ((out.sorted_indices, packed.sorted_indices), (out.unsorted_indices, packed.unsorted_indices)):
            assert (a is None and b is None) or torch.equal(a, b)
        padded, out_lengths = pad_packed_sequence(out)
        _loss(padded, state).backward()
        results.append((out.data, padded, state, out_lengths, x_leaf.grad))
    torch.testing.assert_close(results[0], results[1])
    assert_same_grads(ours, theirs, 1e-9)


def test_packed_sequence_without_initial_state():
    ours, theirs = _pair("LSTM", {"bidirectional": True})
    packed = pack_padded_sequence(torch.randn(4, 3, 3, **F64), [1, 4, 3], enforce_sorted=False)
    (out, (h, c)), (out_ref, (h_ref, c_ref)) = ours(packed), theirs(packed)
    torch.testing.assert_close((out.data, h, c), (out_ref.data, h_ref, c_ref))


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "given-state"])
def test_unbatched_input_equals_torch(name, with_state):
    ours, theirs = _pair(name, {"num_layers": 2})
    x = torch.randn(6, 3, **F64)
    args = (x, _state(name, 2, None)) if with_state else (x,)
    torch.testing.assert_close(ours(*args), theirs(*args))


def test_unbatched_input_with_batched_state_is_refused():
    """(as torch's RuntimeError too)"""
    for state in (torch.randn(1, 1, 4), (torch.randn(1, 4), torch.randn(1, 1, 4))):
        layer = dt.GRU(3, 4) if isinstance(state, torch.Tensor) else dt.LSTM(3, 4)
        with pytest.raises(RuntimeError):
            getattr(nn, type(layer).__name__)(3, 4)(torch.randn(6, 3), state)
        with pytest.raises(RuntimeError, match="for unbatched 2-D input, [hc]_0 should also be 2-D") as error:
            layer(torch.randn(6, 3), state)
        assert isinstance(error.value, ValueError)


def test_dropout_between_layers_only_in_training():
    torch.manual_seed(0)
    ours, theirs = _pair("GRU", {"num_layers": 3, "dropout": 0.5})
    ours.train()
    x = torch.randn(5, 2, 3, **F64)
    y, h = ours(x)
    y.sum().backward()
    assert h.shape == (3, 2, 4) and all(p.grad is not None for p in ours.parameters())
    y_again, _ = ours(x)
    assert not torch.equal(y, y_again)                    # a fresh mask per call
    ours.eval()
    theirs.eval()
    torch.testing.assert_close(ours(x), theirs(x))


def test_packed_sequences_with_dropout_between_layers_keep_padding_out():
    torch.manual_seed(0)
    ours, theirs = _pair("LSTM", {"num_layers": 2, "dropout": 0.5, "bidirectional": True})
    ours.train()
    packed = pack_padded_sequence(torch.randn(5, 2, 3, **F64), [5, 3])
    out, _ = ours(packed)
    padded, _ = pad_packed_sequence(out)
    assert torch.all(padded[3:, 1] == 0) and out.data.shape == (8, 8)


PROJ_CASES = [
    {"proj_size": 2},
    {"proj_size": 3, "num_layers": 2, "bidirectional": True},
    {"proj_size": 1, "batch_first": True, "bias": False, "num_layers": 3},
    {"proj_size": 2, "bidirectional": True, "batch_first": True, "bias": False},
]
PROJ_IDS = ["one-layer", "2layer-bidir", "3layer-batch-first-nobias", "bidir-batch-first-nobias"]


def _proj_state(kwargs: dict, batch: int | None, hidden: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    lead = (layers,) if batch is None else (layers, batch)
    return torch.randn(lead + (kwargs["proj_size"],), **F64), torch.randn(lead + (hidden,), **F64)


@pytest.mark.parametrize("kwargs", PROJ_CASES, ids=PROJ_IDS)
@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "given-state"])
def test_lstm_projection_equals_torch(kwargs, with_state):
    """proj_size: outputs, h_n (proj_size wide), c_n (hidden_size wide), input, state and parameter
    gradients (weight_hr included); state_dict loads both ways."""
    ours, theirs = _pair("LSTM", kwargs)
    assert any(n.startswith("weight_hr_l0") for n, _ in ours.named_parameters())
    x = torch.randn((2, 5, 3) if kwargs.get("batch_first") else (5, 2, 3), **F64)
    hx = _proj_state(kwargs, 2) if with_state else None
    results = []
    for layer in (ours, theirs):
        x_leaf = x.clone().requires_grad_()
        state = None if hx is None else tuple(s.clone().requires_grad_() for s in hx)
        y, (h, c) = layer(x_leaf, state)
        _loss(y, (h, c)).backward()
        grads = [x_leaf.grad] + ([] if state is None else [s.grad for s in state])
        results.append((y, h, c, grads))
    torch.testing.assert_close(results[0], results[1], rtol=1e-10, atol=1e-10)
    assert results[0][1].shape[-1] == kwargs["proj_size"] and results[0][2].shape[-1] == 4
    assert_same_grads(ours, theirs, 1e-9)
    theirs.load_state_dict(ours.state_dict())


@pytest.mark.parametrize("kwargs", PROJ_CASES, ids=PROJ_IDS)
@pytest.mark.parametrize("enforce_sorted", [True, False], ids=["sorted", "unsorted"])
def test_lstm_projection_packed_sequences_equal_torch(kwargs, enforce_sorted):
    ours, theirs = _pair("LSTM", kwargs)
    lengths = [5, 4, 2] if enforce_sorted else [2, 5, 4]
    x = torch.randn((3, 5, 3) if kwargs.get("batch_first") else (5, 3, 3), **F64)
    hx = _proj_state(kwargs, 3)
    results = []
    for layer in (ours, theirs):
        x_leaf = x.clone().requires_grad_()
        packed = pack_padded_sequence(x_leaf, lengths, batch_first=kwargs.get("batch_first", False),
                                      enforce_sorted=enforce_sorted)
        out, state = layer(packed, hx)
        padded, out_lengths = pad_packed_sequence(out, batch_first=kwargs.get("batch_first", False))
        _loss(padded, state).backward()
        results.append((out.data, padded, state, out_lengths, x_leaf.grad))
    torch.testing.assert_close(results[0], results[1])
    assert_same_grads(ours, theirs, 1e-9)
    # and without an initial state (the zero state torch checks a packed input against has two shapes)
    packed = pack_padded_sequence(x, lengths, batch_first=kwargs.get("batch_first", False), enforce_sorted=False)
    (out, (h, c)), (out_ref, (h_ref, c_ref)) = ours(packed), theirs(packed)
    torch.testing.assert_close((out.data, h, c), (out_ref.data, h_ref, c_ref))


@pytest.mark.parametrize("kwargs", PROJ_CASES, ids=PROJ_IDS)
def test_lstm_projection_over_an_empty_batch_equals_torch(kwargs):
    """Batch 0: empty results and zero gradients for every parameter (weight_hr included)."""
    ours, theirs = _pair("LSTM", kwargs)
    x = torch.randn((0, 5, 3) if kwargs.get("batch_first") else (5, 0, 3), **F64)
    results = []
    for layer in (ours, theirs):
        x_leaf = x.clone().requires_grad_()
        y, (h, c) = layer(x_leaf)
        _loss(y, (h, c)).backward()
        results.append((y, h, c, x_leaf.grad))
    torch.testing.assert_close(results[0], results[1])
    assert_same_grads(ours, theirs, 0)


@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "given-state"])
def test_lstm_projection_unbatched_input_equals_torch(with_state):
    kwargs = {"proj_size": 2, "num_layers": 2, "bidirectional": True}
    ours, theirs = _pair("LSTM", kwargs)
    x = torch.randn(6, 3, **F64)
    args = (x, _proj_state(kwargs, None)) if with_state else (x,)
    torch.testing.assert_close(ours(*args), theirs(*args))


def test_lstm_projection_dropout_between_layers():
    torch.manual_seed(0)
    ours, theirs = _pair("LSTM", {"proj_size": 2, "num_layers": 3, "dropout": 0.5, "bidirectional": True})
    ours.train()
    x = torch.randn(5, 2, 3, **F64)
    hx = _proj_state({"proj_size": 2, "num_layers": 3, "bidirectional": True}, 2)
    y, (h, c) = ours(x, hx)
    (y.sum() + h.sum() + c.sum()).backward()
    assert y.shape == (5, 2, 4) and h.shape == (6, 2, 2) and c.shape == (6, 2, 4)
    assert all(p.grad is not None for p in ours.parameters())
    y_again, _ = ours(x, hx)
    assert not torch.equal(y, y_again)                    # a fresh mask per call
    ours.eval()
    theirs.eval()
    torch.testing.assert_close(ours(x, hx), theirs(x, hx))


def test_lstm_projection_errors_speak_torch():
    lstm = dt.LSTM(3, 4, proj_size=2, **F64)
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 2, 2\), got \[1, 2, 4\]"):
        lstm(torch.randn(5, 2, 3, **F64), (torch.zeros(1, 2, 4, **F64), torch.zeros(1, 2, 4, **F64)))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[1\] size \(1, 2, 4\), got \[1, 2, 2\]"):
        lstm(torch.randn(5, 2, 3, **F64), (torch.zeros(1, 2, 2, **F64), torch.zeros(1, 2, 2, **F64)))
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        dt.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        dt.GRU(3, 4, proj_size=2)
    with torch.no_grad():
        lstm.weight_hr_l0 = nn.Parameter(torch.zeros(2, 3, **F64))    # a wrong shape torch's own checks miss
    with pytest.raises(ValueError, match=r"weight_hr_l0 has shape \(2, 3\) but must have shape \(2, 4\)"):
        lstm(torch.randn(5, 2, 3, **F64))


def test_positional_arguments_mean_what_they_mean_in_torch():
    for name, args in (("LSTM", (3, 4, 2, False, True, 0.0, True)), ("GRU", (3, 4, 1, False, True)),
                       ("RNN", (3, 4, 2, "relu", False, True))):
        ours, theirs = getattr(dt, name)(*args), getattr(nn, name)(*args)
        assert repr(ours) == repr(theirs)
        assert [(n, p.shape) for n, p in ours.named_parameters()] == \
            [(n, p.shape) for n, p in theirs.named_parameters()]


def test_recurrent_errors_speak_torch():
    lstm = dt.LSTM(3, 4)
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 3, got 5"):
        lstm(torch.randn(2, 2, 5))
    with pytest.raises(ValueError, match=r"input dtype \(torch.float64\) does not match weight dtype"):
        lstm(torch.randn(2, 2, 3, **F64))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 2, 4\), got \[1, 3, 4\]"):
        lstm(torch.randn(2, 2, 3), (torch.zeros(1, 3, 4), torch.zeros(1, 3, 4)))
    with pytest.raises(ValueError, match="LSTM: expected input to be 2D or 3D"):
        lstm(torch.randn(3))
    with pytest.raises(RuntimeError, match=r"LSTM: hx must be the two hidden states \(h_0, c_0\) as tensors, got a Tensor"):
        lstm(torch.randn(2, 2, 3), torch.zeros(1, 2, 4))
    with pytest.raises(RuntimeError, match=r"LSTM: hx must be the two hidden states \(h_0, c_0\) as tensors, got 3 of"):
        lstm(torch.randn(2, 2, 3), (torch.zeros(1, 2, 4),) * 3)
    for state in ((None, torch.zeros(1, 2, 4)), (torch.zeros(1, 2, 4), None), (None, None)):
        with pytest.raises(AttributeError):                 # (torch's error, by accident)
            nn.LSTM(3, 4)(torch.randn(2, 2, 3), state)
        with pytest.raises(RuntimeError, match=r"hidden states \(h_0, c_0\) as tensors, got \(\w+, \w+\)"):
            lstm(torch.randn(2, 2, 3), state)
    with pytest.raises(TypeError):                          # the nonlinearity given twice, as torch refuses it
        dt.RNN(3, 4, 2, "relu", nonlinearity="tanh")
    for layer in (lstm, dt.GRU(3, 4, batch_first=True)):
        shape = (2, 0, 3) if layer.batch_first else (0, 2, 3)
        with pytest.raises(RuntimeError):
            getattr(nn, type(layer).__name__)(3, 4, batch_first=layer.batch_first)(torch.randn(shape))
        with pytest.raises(RuntimeError, match=r"expected sequence length to be larger than 0"):
            layer(torch.randn(shape))


def test_op_errors_name_torchs_parameters():
    lstm = dt.LSTM(3, 4, num_layers=2)
    with torch.no_grad():
        lstm.weight_hh_l1 = nn.Parameter(torch.zeros(16, 5))    # a wrong shape torch's own checks miss
    with pytest.raises(ValueError, match=r"weight_hh_l1 has shape \(16, 5\) but must have shape \(16, 4\)"):
        lstm(torch.randn(2, 1, 3))
    gru = dt.GRU(3, 4)
    gru.bias_hh_l0 = None                                       # (torch's own layer: a TypeError too)
    with pytest.raises(TypeError, match=r"^bias_hh_l0 is None but bias_ih_l0 is not"):
        gru(torch.randn(2, 1, 3))


@pytest.mark.parametrize("wants", ["x", "h0", "weights", "x h0"])
@pytest.mark.parametrize("name, kwargs", RNN_CASES[:3], ids=RNN_IDS[:3])
def test_gradients_of_only_some_inputs_equal_torchs(name, kwargs, wants):
    """The backward computes only the gradients autograd wants (rnn's ``needs``: without x's, the first
    layer's input product is skipped; without the weights', every weight product): those equal torch's,
    eager and compiled, the others stay None."""
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    x0 = torch.randn((2, 5, 3) if kwargs.get("batch_first") else (5, 2, 3), **F64)
    h0 = _state(name, layers, 2)
    grads = []
    for compiled in (False, True):
        ours, theirs = _pair(name, kwargs)
        torch._dynamo.reset()               # (one compile per case: more than the recompile limit per module)
        for model in (ours, theirs):
            model.requires_grad_("weights" in wants)
        runs = []
        for model in (torch.compile(ours, fullgraph=True) if compiled else ours, theirs):
            x = x0.clone().requires_grad_("x" in wants)
            hx = tuple(s.clone().requires_grad_("h0" in wants) for s in (h0 if isinstance(h0, tuple) else (h0,)))
            y, state = model(x, hx if name == "LSTM" else hx[0])
            _loss(y, state).backward()
            runs.append([x.grad, *[s.grad for s in hx], *[p.grad for p in model.parameters()]])
        for a, b in zip(*runs, strict=True):
            assert (a is None) == (b is None)
            if b is not None:
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
        grads.append(runs[0])
    assert sum(g is not None for g in grads[0]) == sum(g is not None for g in grads[1]) > 0
