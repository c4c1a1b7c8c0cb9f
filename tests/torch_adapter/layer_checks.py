"""What the drop-in layer tests share: a dnnbind layer checked against torch.nn's layer built with the
same arguments (state_dict both ways, outputs, input and parameter gradients), and one model definition
that both namespaces build."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


# layer name -> (constructor arguments, input shape) for one forward each
SAMPLES = {
    "Conv1d": ((2, 3, 3), (2, 2, 7)), "Conv2d": ((2, 3, 3), (2, 2, 5, 5)), "Conv3d": ((2, 3, 2), (1, 2, 3, 3, 3)),
    "ConvTranspose1d": ((2, 3, 3), (2, 2, 4)), "ConvTranspose2d": ((2, 3, 3), (2, 2, 4, 4)),
    "ConvTranspose3d": ((2, 3, 2), (1, 2, 2, 2, 2)),
    "MaxPool1d": ((2,), (2, 2, 6)), "MaxPool2d": ((2,), (2, 2, 4, 4)), "MaxPool3d": ((2,), (1, 2, 2, 2, 4)),
    "AvgPool1d": ((2,), (2, 2, 6)), "AvgPool2d": ((2,), (2, 2, 4, 4)), "AvgPool3d": ((2,), (1, 2, 2, 2, 4)),
    "BatchNorm1d": ((2,), (4, 2)), "BatchNorm2d": ((2,), (2, 2, 3, 3)), "BatchNorm3d": ((2,), (2, 2, 2, 2, 2)),
    "LayerNorm": (((3, 4),), (2, 3, 4)),
    "Dropout": ((0.5,), (3, 4)), "Softmax": ((1,), (3, 4)), "LogSoftmax": ((1,), (3, 4)),
    "ReLU": ((), (3, 4)), "Sigmoid": ((), (3, 4)), "Tanh": ((), (3, 4)), "ELU": ((), (3, 4)),
    "LeakyReLU": ((), (3, 4)), "ReLU6": ((), (3, 4)), "Hardtanh": ((0.0, 2.0), (3, 4)), "SiLU": ((), (3, 4)),
    "RNN": ((4, 3), (5, 2, 4)), "LSTM": ((4, 3), (5, 2, 4)), "GRU": ((4, 3), (5, 2, 4)),
}


def assert_same_grads(ours: nn.Module, theirs: nn.Module, tol: float) -> None:
    ours_params, theirs_params = dict(ours.named_parameters()), dict(theirs.named_parameters())
    assert list(ours_params) == list(theirs_params)
    for name, p in ours_params.items():
        torch.testing.assert_close(p.grad, theirs_params[name].grad, rtol=tol, atol=tol, msg=name)


def assert_layer_matches(ours: nn.Module, theirs: nn.Module, x: torch.Tensor, tol: float = 1e-9) -> None:
    """ours, loaded with theirs' state_dict, gives theirs' output and gradients on x (and the state_dict
    loads back into theirs)."""
    assert repr(ours) == repr(theirs)
    ours.load_state_dict(theirs.state_dict())
    x_ours = x.detach().clone().requires_grad_()
    x_theirs = x.detach().clone().requires_grad_()
    y, y_ref = ours(x_ours), theirs(x_theirs)
    torch.testing.assert_close(y, y_ref, rtol=tol, atol=tol)
    weights = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    (y * weights).sum().backward()
    (y_ref * weights).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_theirs.grad, rtol=tol, atol=tol)
    assert_same_grads(ours, theirs, tol)
    theirs.load_state_dict(ours.state_dict())


class Net(nn.Module):
    """One model definition for both namespaces: conv, batch norm, activations, pooling with ceil_mode
    and divisor_override, dropout, and a bidirectional LSTM over packed sequences."""

    def __init__(self, nn, p: float) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 6, 3, padding="same"), nn.BatchNorm2d(6), nn.ReLU(),
            nn.MaxPool2d(3, 2, ceil_mode=True),                              # 12 -> 6, one extra window
            nn.Conv2d(6, 5, 3, padding=1, bias=False), nn.BatchNorm2d(5, momentum=None), nn.ELU(0.7),
            nn.AvgPool2d(2, divisor_override=3), nn.Dropout(p), nn.LeakyReLU(0.1))  # 6 -> 3
        self.lstm = nn.LSTM(5, 4, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Sequential(nn.Linear(8, 3), nn.SiLU(), nn.LogSoftmax(dim=1))

    def forward(self, images: torch.Tensor, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        seq = self.features(images).flatten(2).transpose(1, 2)              # (N, 9, 5)
        packed = pack_padded_sequence(seq, lengths, batch_first=True, enforce_sorted=False)
        out, (h, _) = self.lstm(packed)
        padded, _ = pad_packed_sequence(out, batch_first=True)
        return self.head(torch.cat([h[-2], h[-1]], dim=1)), padded
