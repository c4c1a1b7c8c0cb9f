"""Writes docs/torch_export.md: the text of a CNN and an LSTM exported with torch.export on dnnbind.torch's
layers. Run ``python docs/torch_export.py`` after changing the typed ops; tests/torch_adapter/
test_torch_export_docs.py fails while the page differs from what this script writes."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from dnnbind.torch import nn

PAGE = Path(__file__).with_name("torch_export.md")

INTRO = """# Exported programs

`dnnbind.torch`'s layers run as typed `torch.library` custom ops in namespace `dnnbind`, one per op, with the
schema its op spec declares (`python -c "import dnnbind.torch, torch; print(torch.ops.dnnbind.conv.default._schema)"`):

```
{schemas}
```

An exported program names these ops and their typed arguments only: no JSON text, no backend, no dnnbind
version, no residuals. Where a call may be differentiated outside torch.export (a training step under
`torch.compile`), the layer runs `NAME_training` instead, which also returns the backend's residuals (and
takes a text naming what decides their layout, so that torch.compile's disk cache never reuses a graph
traced with another dnnbind), and the backward reads them through `NAME_pullback`; only a differentiable
backward (`create_graph`, `torch.func`) runs the input-based `NAME_backward`, which runs the backend's
forward again for them. A program exported and saved (`torch.export.save`) on one
machine loads (`torch.export.load`, after `import dnnbind.torch`) and runs on any backend dnnbind has there.
The programs below are written by `python docs/torch_export.py`; a test fails when they change.
"""


class CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=(1, 2), stride=2), nn.AvgPool2d(2, ceil_mode=True))
        self.classifier = nn.LogSoftmax(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


class LSTMTagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(16, 32, num_layers=2, bidirectional=True)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.dropout(y)


def _program(model: torch.nn.Module, x: torch.Tensor) -> str:
    code = torch.export.export(model.eval(), (x,)).graph_module.code
    return "\n".join(line.rstrip() for line in code.strip("\n").splitlines())


def render() -> str:
    """The page's text."""
    import dnnbind.torch  # noqa: F401 - registers the ops
    schemas = "\n".join(str(getattr(torch.ops.dnnbind, op).default._schema)
                        for op in ("conv", "maxpool", "batchnorm", "rnn"))
    torch.manual_seed(0)
    parts = [INTRO.format(schemas=schemas)]
    for title, model, x in [("A CNN (conv, batch norm, ReLU, max and average pooling, log-softmax), in eval mode",
                             CNN(), torch.randn(4, 3, 32, 32)),
                            ("A two-layer bidirectional LSTM with dropout, in eval mode",
                             LSTMTagger(), torch.randn(10, 4, 16))]:
        parts.append(f"## {title}\n\n```python\n{_program(model, x)}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    PAGE.write_text(render())
    sys.stdout.write(f"wrote {PAGE}\n")
