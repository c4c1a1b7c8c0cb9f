"""A training step (forward, backward, Adam) of small models built from dnnbind.torch layers and from
torch's own layers, with the same sizes and the same initial weights."""
from __future__ import annotations

from typing import Any, Callable

GOAL = 1.5


def cnn_models(torch: Any) -> tuple[Any, Any, Any]:
    """(dnnbind model, torch model, batch): conv-bn-relu-pool twice, then a linear classifier, 32x32 RGB."""
    import dnnbind.torch as dt
    nn = torch.nn

    class Ours(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = dt.Conv2d(3, 16, 3, padding=1), dt.BatchNorm2d(16)
            self.c2, self.b2 = dt.Conv2d(16, 32, 3, padding=1), dt.BatchNorm2d(32)
            self.pool = dt.MaxPool2d(2)
            self.fc = nn.Linear(32 * 8 * 8, 10)

        def forward(self, x):
            h = self.pool(dt.activation(self.b1(self.c1(x)), "relu"))
            h = self.pool(dt.activation(self.b2(self.c2(h)), "relu"))
            return self.fc(h.flatten(1))

    theirs = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                           nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                           nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
    ours = Ours()
    with torch.no_grad():
        for a, b in ((ours.c1, theirs[0]), (ours.c2, theirs[4]), (ours.fc, theirs[9])):
            a.weight.copy_(b.weight)
            a.bias.copy_(b.bias)
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g))
    return ours, theirs, batch


def lstm_models(torch: Any) -> tuple[Any, Any, Any]:
    """(dnnbind model, torch model, batch): a 2-layer LSTM (64 -> 128) over 30 steps of 16 sequences and
    a linear head on the last step."""
    import dnnbind.torch as dt
    nn = torch.nn

    class Model(nn.Module):
        def __init__(self, lstm: Any) -> None:
            super().__init__()
            self.lstm, self.head = lstm, nn.Linear(128, 10)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.head(y[-1])

    theirs = Model(nn.LSTM(64, 128, num_layers=2))
    ours = Model(dt.LSTM(64, 128, num_layers=2))
    ours.load_state_dict(theirs.state_dict())
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(30, 16, 64, generator=g), torch.randint(0, 10, (16,), generator=g))
    return ours, theirs, batch


def step(torch: Any, model: Any, batch: tuple) -> Callable[[], None]:
    """One training step of ``model`` on ``batch`` with its own Adam optimizer."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, labels = batch

    def run() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return run
