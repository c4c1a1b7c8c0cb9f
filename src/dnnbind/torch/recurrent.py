"""RNN, LSTM and GRU modules with torch.nn.RNN/LSTM/GRU's parameters, running dnnbind's rnn op.

Parameters are named ``weight_ih_l{k}{suffix}``, ``weight_hh_l{k}{suffix}``, ``bias_ih_l{k}{suffix}``,
``bias_hh_l{k}{suffix}`` (suffix ``_reverse`` for the second direction) with torch's shapes and gate
order, so a state_dict moves between a torch.nn.LSTM and a dnnbind LSTM unchanged.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from dnnbind.torch import functional as F

Tensor = torch.Tensor
_GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}


class _Recurrent(nn.Module):
    """What RNN, LSTM and GRU share: parameters per layer and direction, and the forward pass.

    Inputs are (seq, batch, input), (batch, seq, input) with ``batch_first``, or unbatched
    (seq, input). ``dropout`` applies between layers in training mode.
    """

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int, bias: bool,
                 batch_first: bool, dropout: float, bidirectional: bool, device: Any, dtype: Any) -> None:
        super().__init__()
        self.mode = mode
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout, self.bidirectional = bias, batch_first, dropout, bidirectional
        self.num_directions = 2 if bidirectional else 1
        factory = {"device": device, "dtype": dtype}
        gates = _GATES[mode] * hidden_size
        self._weight_names: list[tuple[str, ...]] = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else hidden_size * self.num_directions
            for direction in range(self.num_directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes: dict[str, tuple[int, ...]] = {f"weight_ih{suffix}": (gates, layer_input),
                                                      f"weight_hh{suffix}": (gates, hidden_size)}
                if bias:
                    shapes.update({f"bias_ih{suffix}": (gates,), f"bias_hh{suffix}": (gates,)})
                for name, shape in shapes.items():
                    setattr(self, name, nn.Parameter(torch.empty(shape, **factory)))
                self._weight_names.append(tuple(shapes))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """torch's initialisation: every parameter uniform in +-1/sqrt(hidden_size)."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def weights(self) -> list[tuple[Tensor, Tensor, Tensor | None, Tensor | None]]:
        """(w_ih, w_hh, b_ih, b_hh) per layer and direction, the rnn op's ``weights`` argument."""
        out = []
        for names in self._weight_names:
            w = [getattr(self, n) for n in names]
            out.append((w[0], w[1], w[2], w[3]) if self.bias else (w[0], w[1], None, None))
        return out

    def forward(self, x: Tensor, hx: Any = None) -> tuple[Tensor, Any]:
        if isinstance(x, nn.utils.rnn.PackedSequence):
            raise TypeError("PackedSequence is not supported: pad the batch and pass its lengths to "
                            "dnnbind.torch.rnn(..., lengths=...)")
        unbatched = x.dim() == 2
        if unbatched:
            x = x.unsqueeze(1)
        elif self.batch_first:
            x = x.transpose(0, 1)
        h0, c0 = (hx if self.mode == "lstm" and hx is not None else (hx, None))
        if unbatched and h0 is not None:
            h0, c0 = h0.unsqueeze(1), None if c0 is None else c0.unsqueeze(1)
        y, hy, cy = self._run(x, h0, c0)
        if unbatched:
            y, hy, cy = y.squeeze(1), hy.squeeze(1), None if cy is None else cy.squeeze(1)
        elif self.batch_first:
            y = y.transpose(0, 1)
        return y, ((hy, cy) if self.mode == "lstm" else hy)

    def _run(self, x: Tensor, h0: Tensor | None, c0: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        """All layers in one op call, or layer by layer with dropout in between."""
        options: dict[str, Any] = {"mode": self.mode, "hidden_size": self.hidden_size,
                                   "bidirectional": self.bidirectional}
        weights = self.weights()
        if not (self.training and self.dropout > 0 and self.num_layers > 1):
            return F.rnn(x, weights, num_layers=self.num_layers, h0=h0, c0=c0, **options)
        d = self.num_directions
        hs: list[Tensor] = []
        cs: list[Tensor] = []
        for layer in range(self.num_layers):
            part = slice(layer * d, (layer + 1) * d)
            x, hy, cy = F.rnn(x, weights[part], h0=None if h0 is None else h0[part],
                              c0=None if c0 is None else c0[part], **options)
            hs.append(hy)
            if cy is not None:
                cs.append(cy)
            if layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        return x, torch.cat(hs), torch.cat(cs) if cs else None

    def extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, mode={self.mode!r}, "
                f"bias={self.bias}, batch_first={self.batch_first}, dropout={self.dropout}, "
                f"bidirectional={self.bidirectional}")


class RNN(_Recurrent):
    """Like torch.nn.RNN: forward(x, h0) -> (y, h_n); ``nonlinearity`` "tanh" or "relu"."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 *, device: Any = None, dtype: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity={nonlinearity!r} must be 'tanh' or 'relu'")
        super().__init__(f"rnn_{nonlinearity}", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, device, dtype)


class LSTM(_Recurrent):
    """Like torch.nn.LSTM (no proj_size): forward(x, (h0, c0)) -> (y, (h_n, c_n)); gates i, f, g, o."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, *,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__("lstm", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device, dtype)


class GRU(_Recurrent):
    """Like torch.nn.GRU: forward(x, h0) -> (y, h_n); gates r, z, n."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, *,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__("gru", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device, dtype)
