"""Models built from dnnbind layers, their data and one SGD training loop, shared by the
DistributedDataParallel test and its worker processes (tests/torch_adapter/ddp_worker.py)."""
from __future__ import annotations

import torch
from torch import nn

import dnnbind.torch as dt

STEPS = 3
BATCH = 8


class CNN(nn.Module):
    """conv -> relu -> maxpool -> linear (batch norm is left out: its batch statistics differ per rank)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = dt.Conv2d(1, 4, 3, padding=1)
        self.pool = dt.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(dt.activation(self.conv(x), "relu")).flatten(1))


class Recurrent(nn.Module):
    """LSTM over (seq, batch, features) -> linear on the last step."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = dt.LSTM(5, 6)
        self.fc = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.fc(y[-1])


MODELS = {"cnn": CNN, "lstm": Recurrent}


def data(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The full batch (inputs, labels); rank r of w trains on samples r::w of it."""
    generator = torch.Generator().manual_seed(7)
    x = torch.randn((BATCH, 1, 8, 8) if name == "cnn" else (4, BATCH, 5), generator=generator)
    return x, torch.randint(0, 3, (BATCH,), generator=generator)


def build(name: str) -> nn.Module:
    torch.manual_seed(0)
    return MODELS[name]()


def train(name: str, model: nn.Module, rank: int = 0, world: int = 1) -> list[list[torch.Tensor]]:
    """STEPS of SGD on this rank's share of the batch; the parameters after every step."""
    x, labels = data(name)
    batch_axis = 0 if name == "cnn" else 1
    x = x.narrow(batch_axis, 0, BATCH)[(slice(None),) * batch_axis + (slice(rank, None, world),)]
    labels = labels[rank::world]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(STEPS):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), labels).backward()
        opt.step()
        history.append([p.detach().clone() for p in model.parameters()])
    return history
