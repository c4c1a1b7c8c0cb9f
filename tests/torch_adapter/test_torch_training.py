"""Small models built from dnnbind layers train with a torch optimizer: the loss goes down."""
from __future__ import annotations

import torch
from torch import nn

import dnnbind.torch as dt


class SmallCNN(nn.Module):
    """conv -> batchnorm -> relu -> maxpool -> dropout -> linear -> log-softmax, mostly dnnbind layers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = dt.Conv2d(1, 6, 3, padding=1)
        self.bn = dt.BatchNorm2d(6)
        self.pool = dt.MaxPool2d(2)
        self.drop = dt.Dropout(0.1)
        self.fc = nn.Linear(6 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.pool(dt.activation(self.bn(self.conv(x)), "relu")))
        return dt.logsoftmax(self.fc(h.flatten(1)))


def _bars(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """8x8 noise images with a bright horizontal bar (class 0), vertical bar (1) or none (2)."""
    labels = torch.randint(0, 3, (n,), generator=generator)
    x = 0.3 * torch.randn(n, 1, 8, 8, generator=generator)
    where = torch.randint(0, 8, (n,), generator=generator)
    for i in range(n):
        if labels[i] == 0:
            x[i, 0, where[i], :] += 1.0
        elif labels[i] == 1:
            x[i, 0, :, where[i]] += 1.0
    return x, labels


def _train(model: nn.Module, batches, steps: int) -> list[float]:
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for step in range(steps):
        x, labels = batches(step)
        loss = nn.functional.nll_loss(model(x), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_small_cnn_learns():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = [_bars(32, g) for _ in range(8)]
    losses = _train(SmallCNN(), lambda step: data[step % len(data)], 60)
    assert sum(losses[-8:]) / 8 < 0.4 * sum(losses[:8]) / 8, losses


class SmallLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = dt.LSTM(1, 12, batch_first=True)
        self.fc = nn.Linear(12, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(x)
        return dt.logsoftmax(self.fc(h[-1]))


def test_small_lstm_learns_the_sign_of_a_sum():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(32, 8, 1, generator=g)
        return x, (x.sum(dim=(1, 2)) > 0).long()
    losses = _train(SmallLSTM(), batch, 80)
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10, losses
