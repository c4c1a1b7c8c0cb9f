"""The nn.Module wrappers swap in for torch's layers: same state_dict, same outputs and gradients."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import dnnbind.torch as dt


def _same_grads(ours: nn.Module, theirs: nn.Module, tol: float = 1e-5) -> None:
    for (name, p), (name_ref, p_ref) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert name == name_ref
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=tol, atol=tol, msg=name)


@pytest.mark.parametrize("ours_cls, theirs_cls, x_shape, kwargs", [
    (dt.Conv1d, nn.Conv1d, (2, 4, 9), {"kernel_size": 3, "padding": 1, "groups": 2}),
    (dt.Conv2d, nn.Conv2d, (2, 4, 6, 7), {"kernel_size": (3, 2), "stride": 2, "dilation": (1, 2)}),
    (dt.Conv3d, nn.Conv3d, (1, 4, 4, 5, 4), {"kernel_size": 2, "bias": False}),
    (dt.Conv, nn.Conv2d, (2, 4, 5, 5), {"kernel_size": (3, 3), "padding": 1}),
], ids=["1d", "2d", "3d", "ndim-from-kernel"])
def test_conv_loads_torch_state_dict(ours_cls, theirs_cls, x_shape, kwargs):
    torch.manual_seed(0)
    theirs = theirs_cls(4, 6, **kwargs)
    ours = ours_cls(4, 6, **kwargs)
    assert ours.weight.shape == theirs.weight.shape
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(x_shape)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
    ours(x).square().sum().backward()
    theirs(x).square().sum().backward()
    _same_grads(ours, theirs, 1e-4)
    theirs.load_state_dict(ours.state_dict())        # and back


def test_conv_initialisation_has_torchs_scale():
    torch.manual_seed(0)
    ours = dt.Conv2d(8, 16, 3)
    torch.manual_seed(0)
    theirs = nn.Conv2d(8, 16, 3)
    torch.testing.assert_close(ours.weight, theirs.weight)
    torch.testing.assert_close(ours.bias, theirs.bias)


@pytest.mark.parametrize("ours, theirs", [
    (dt.Pool(3, 2, 1), nn.MaxPool2d(3, 2, 1)),
    (dt.Pool(2, mode="mean"), nn.AvgPool2d(2)),
    (dt.Pool((2, 2, 2), mode="mean", padding=1, count_include_pad=False),
     nn.AvgPool3d(2, padding=1, count_include_pad=False)),
], ids=["max2d", "mean2d", "mean3d"])
def test_pool_equals_torch(ours, theirs):
    x = torch.randn(2, 3, 6, 6, 6)[..., 0] if isinstance(theirs, (nn.MaxPool2d, nn.AvgPool2d)) \
        else torch.randn(2, 3, 4, 5, 4)
    torch.testing.assert_close(ours(x), theirs(x))


@pytest.mark.parametrize("kwargs", [{}, {"momentum": None}, {"affine": False}, {"track_running_stats": False}],
                         ids=["default", "cumulative", "no-affine", "no-running-stats"])
def test_batchnorm_trains_and_evaluates_like_torch(kwargs):
    torch.manual_seed(0)
    ours, theirs = dt.BatchNorm(3, **kwargs), nn.BatchNorm2d(3, **kwargs)
    if ours.weight is not None:
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 1.5)
            theirs.bias.uniform_(-0.5, 0.5)
    ours.load_state_dict(theirs.state_dict())
    for step in range(3):
        x = (torch.randn(4, 3, 5, 5) * (step + 1) + step).requires_grad_()
        x_ref = x.detach().clone().requires_grad_()
        y, y_ref = ours(x), theirs(x_ref)
        torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
        (y * y.detach().square()).sum().backward()
        (y_ref * y_ref.detach().square()).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours.state_dict(), theirs.state_dict(), rtol=1e-5, atol=1e-5)
    if ours.weight is not None:
        _same_grads(ours, theirs, 1e-4)
    ours.eval()
    theirs.eval()
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.state_dict(), theirs.state_dict(), rtol=1e-5, atol=1e-5)


def test_batchnorm_eval_keeps_running_stats_and_counts_train_batches():
    bn = dt.BatchNorm(2)
    bn(torch.randn(4, 2) + 3)
    assert int(bn.num_batches_tracked) == 1 and torch.all(bn.running_mean > 0.1)
    before = bn.running_mean.clone()
    bn.eval()
    bn(torch.randn(4, 2) - 5)
    assert torch.equal(bn.running_mean, before) and int(bn.num_batches_tracked) == 1


def test_dropout_module_is_identity_in_eval():
    d = dt.Dropout(0.5)
    x = torch.randn(100)
    assert (d(x) == 0).any()
    d.eval()
    assert d(x) is x


RNN_CASES = [
    (dt.LSTM, nn.LSTM, {"num_layers": 2, "bidirectional": True}),
    (dt.LSTM, nn.LSTM, {"batch_first": True, "bias": False}),
    (dt.GRU, nn.GRU, {"num_layers": 2}),
    (dt.GRU, nn.GRU, {"bidirectional": True, "batch_first": True}),
    (dt.RNN, nn.RNN, {"nonlinearity": "relu"}),
    (dt.RNN, nn.RNN, {"num_layers": 2, "bidirectional": True}),
]


@pytest.mark.parametrize("ours_cls, theirs_cls, kwargs", RNN_CASES,
                         ids=["lstm-2layer-bidir", "lstm-batch-first-nobias", "gru-2layer", "gru-bidir-batch-first",
                              "rnn-relu", "rnn-tanh-2layer-bidir"])
def test_recurrent_modules_load_torch_state_dict(ours_cls, theirs_cls, kwargs):
    torch.manual_seed(0)
    theirs = theirs_cls(3, 4, dtype=torch.float64, **kwargs)
    ours = ours_cls(3, 4, dtype=torch.float64, **kwargs)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict(theirs.state_dict())
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    x = torch.randn((2, 5, 3) if kwargs.get("batch_first") else (5, 2, 3), dtype=torch.float64)
    h0 = torch.randn(layers, 2, 4, dtype=torch.float64)
    hx = (h0, torch.randn_like(h0)) if theirs_cls is nn.LSTM else h0
    (y, state), (y_ref, state_ref) = ours(x, hx), theirs(x, hx)
    torch.testing.assert_close((y, state), (y_ref, state_ref))
    for out, h in ((y, state), (y_ref, state_ref)):
        (out.square().sum() + sum(s.sum() for s in (h if isinstance(h, tuple) else (h,)))).backward()
    _same_grads(ours, theirs, 1e-9)


def test_lstm_unbatched_input_and_default_state():
    torch.manual_seed(0)
    theirs, ours = nn.LSTM(3, 2), dt.LSTM(3, 2)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(6, 3)
    torch.testing.assert_close(ours(x), theirs(x))


def test_rnn_dropout_between_layers_only_in_training():
    torch.manual_seed(0)
    ours = dt.GRU(3, 4, num_layers=3, dropout=0.5)
    theirs = nn.GRU(3, 4, num_layers=3, dropout=0.5)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(5, 2, 3)
    y, h = ours(x)
    y.sum().backward()
    assert h.shape == (3, 2, 4) and all(p.grad is not None for p in ours.parameters())
    ours.eval()
    theirs.eval()
    torch.testing.assert_close(ours(x), theirs(x))


def test_packed_sequences_are_refused_with_the_alternative():
    packed = nn.utils.rnn.pack_padded_sequence(torch.randn(4, 2, 3), [4, 2])
    with pytest.raises(TypeError, match="lengths="):
        dt.LSTM(3, 2)(packed)


@pytest.mark.parametrize("ours_cls, theirs_cls, args", [
    (dt.LSTM, nn.LSTM, (3, 4, 2, False, True, 0.0, True)),
    (dt.GRU, nn.GRU, (3, 4, 1, False, True)),
    (dt.RNN, nn.RNN, (3, 4, 2, "relu", False, True)),
    (dt.Conv2d, nn.Conv2d, (4, 6, 3, 2, 1, 1, 2, False)),
    (dt.BatchNorm, nn.BatchNorm1d, (5, 1e-3, 0.2, False, False)),
], ids=["lstm", "gru", "rnn", "conv2d", "batchnorm"])
def test_positional_arguments_mean_what_they_mean_in_torch(ours_cls, theirs_cls, args):
    ours, theirs = ours_cls(*args), theirs_cls(*args)
    assert [(n, p.shape) for n, p in ours.named_parameters()] == [(n, p.shape) for n, p in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    for attribute in ("batch_first", "bidirectional", "stride", "padding", "groups", "eps", "momentum"):
        if hasattr(theirs, attribute):
            expected = getattr(theirs, attribute)
            actual = getattr(ours, attribute)
            assert actual == expected or (actual,) * len(expected) == expected, attribute
