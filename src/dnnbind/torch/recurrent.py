"""RNN, LSTM and GRU: torch.nn's classes (arguments, parameters ``weight_ih_l{k}{_reverse}`` ...,
initialisation, repr, state_dict) whose forward runs dnnbind's rnn op.

Inputs as torch takes them: (seq, batch, input), (batch, seq, input) with ``batch_first``, unbatched
(seq, input), or a ``PackedSequence``, which becomes a padded batch and the op's ``lengths`` and comes
back packed like the input. ``dropout`` applies between layers in training mode (the layers then run one
op call each). LSTM ``proj_size`` > 0 passes ``weight_hr_l{k}{_reverse}`` to the op as each entry's 5th
array (the op's projection; not on the MIOpen backend).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from dnnbind.torch import functional as F
from dnnbind.torch.errors import TorchValueError, torch_argument_names

Tensor = torch.Tensor
_MODES = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}
_LABELS = ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")


def _op_slots(count: int) -> tuple[int, ...]:
    """Where each of a layer's torch parameters (``_all_weights`` order: weight_ih, weight_hh, then
    bias_ih, bias_hh with biases, then weight_hr with a projection) goes in the op's weight entry
    (w_ih, w_hh, b_ih, b_hh, w_hr)."""
    return {2: (0, 1), 3: (0, 1, 4), 4: (0, 1, 2, 3), 5: (0, 1, 2, 3, 4)}[count]


class _Recurrent:
    """forward shared by RNN, LSTM and GRU."""

    def weights(self) -> list[tuple[Tensor | None, ...]]:
        """(w_ih, w_hh, b_ih, b_hh) per layer and direction, with weight_hr as a 5th tensor for an LSTM
        with ``proj_size`` (biases None without): the rnn op's ``weights`` argument."""
        layer: Any = self
        out = []
        for names in layer._all_weights:
            entry: list[Tensor | None] = [None] * (5 if layer.proj_size else 4)
            for slot, name in zip(_op_slots(len(names)), names):
                entry[slot] = getattr(layer, name)
            out.append(tuple(entry))
        return out

    def _error_names(self) -> dict[str, str]:
        layer: Any = self
        names = {"x": "input", "h0": "h_0", "c0": "c_0"}
        for i, params in enumerate(layer._all_weights):
            for j, param in zip(_op_slots(len(params)), params):
                names[f"weights[{i}][{j}]"] = names[f"weights[{i}][{j}] ({_LABELS[j]})"] = param
        return names

    def forward(self, input: Tensor | PackedSequence, hx: Any = None) -> tuple[Any, Any]:
        layer: Any = self
        lstm = layer.mode == "LSTM"
        packed = input if isinstance(input, PackedSequence) else None
        if lstm and hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2
                                            and all(isinstance(t, Tensor) for t in hx)):
            got = (f"{len(hx)} of them" if isinstance(hx, (tuple, list)) and len(hx) != 2
                   else f"({', '.join(type(t).__name__ for t in hx)})" if isinstance(hx, (tuple, list))
                   else f"a {type(hx).__name__}")
            raise RuntimeError(f"LSTM: hx must be the two hidden states (h_0, c_0) as tensors, got {got}")
        h0, c0 = (hx if lstm and hx is not None else (hx, None))
        if packed is not None:
            layer.check_forward_args(packed.data, hx if hx is not None else _zeros_like_state(layer, packed),
                                     packed.batch_sizes)
            x, lengths = pad_packed_sequence(packed)            # (seq, batch, input), the caller's batch order
            unbatched = False
        else:
            if not isinstance(input, Tensor) or input.dim() not in (2, 3):
                shape = tuple(input.shape) if isinstance(input, Tensor) else type(input).__name__
                raise ValueError(f"{type(self).__name__}: expected input to be 2D or 3D, got {shape}")
            unbatched, lengths = input.dim() == 2, None
            x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if layer.batch_first else input)
            if x.shape[0] == 0:                 # torch's error (the op's would be a ValueError)
                raise RuntimeError(f"{type(self).__name__}: expected sequence length to be larger than 0, got "
                                   f"input of shape {tuple(input.shape)}")
            if unbatched and h0 is not None:
                for name, state in (("h_0", h0), ("c_0", c0)):
                    if state is not None and state.dim() != 2:
                        raise TorchValueError(f"{type(self).__name__}: for unbatched 2-D input, {name} should also "
                                         f"be 2-D but got {state.dim()}-D")
                h0, c0 = h0.unsqueeze(1), None if c0 is None else c0.unsqueeze(1)
            if h0 is not None:
                layer.check_forward_args(x.transpose(0, 1) if layer.batch_first else x,
                                         (h0, c0) if lstm else h0, None)
            else:
                layer.check_input(x, None)
        with torch_argument_names(self._error_names):
            y, hy, cy = self._run(x, h0, c0, lengths)
        if packed is not None and lengths is not None:
            out: Any = _repack(y, lengths, packed)
        elif unbatched:
            out, hy, cy = y.squeeze(1), hy.squeeze(1), None if cy is None else cy.squeeze(1)
        else:
            out = y.transpose(0, 1) if layer.batch_first else y
        return out, ((hy, cy) if lstm else hy)

    def _run(self, x: Tensor, h0: Tensor | None, c0: Tensor | None,
             lengths: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        """All layers in one op call, or layer by layer with dropout in between."""
        layer: Any = self
        options: dict[str, Any] = {"mode": _MODES[layer.mode], "hidden_size": layer.hidden_size,
                                   "bidirectional": layer.bidirectional, "lengths": lengths,
                                   "proj_size": layer.proj_size}
        weights = self.weights()
        if not (layer.training and layer.dropout > 0 and layer.num_layers > 1):
            return F.rnn(x, weights, num_layers=layer.num_layers, h0=h0, c0=c0, **options)
        d = 2 if layer.bidirectional else 1
        hs: list[Tensor] = []
        cs: list[Tensor] = []
        for k in range(layer.num_layers):
            part = slice(k * d, (k + 1) * d)
            x, hy, cy = F.rnn(x, weights[part], h0=None if h0 is None else h0[part],
                              c0=None if c0 is None else c0[part], **options)
            hs.append(hy)
            if cy is not None:
                cs.append(cy)
            if k < layer.num_layers - 1:
                x = F.dropout(x, layer.dropout)
        return x, torch.cat(hs), torch.cat(cs) if cs else None


def _zeros_like_state(layer: Any, packed: PackedSequence) -> Any:
    """The zero state torch checks a packed input against (only its shape matters)."""
    h = packed.data.new_zeros(layer.get_expected_hidden_size(packed.data, packed.batch_sizes))
    if layer.mode != "LSTM":
        return h
    return h, packed.data.new_zeros(layer.get_expected_cell_size(packed.data, packed.batch_sizes))


def _repack(y: Tensor, lengths: Tensor, like: PackedSequence) -> PackedSequence:
    """The padded output y (seq, batch, features) packed with ``like``'s batch sizes and order."""
    if like.sorted_indices is not None:
        y, lengths = y.index_select(1, like.sorted_indices), lengths[like.sorted_indices.cpu()]
    data = pack_padded_sequence(y, lengths, enforce_sorted=True).data
    return PackedSequence(data, like.batch_sizes, like.sorted_indices, like.unsorted_indices)


# The classes derive from nn.RNNBase, not from nn.RNN/LSTM/GRU: torch.compile refuses to trace any
# instance of those three (torch._dynamo.config.allow_rnn), and tracing is the point of dnnbind's
# custom ops. Everything else (arguments, parameters, repr, state_dict, flatten_parameters) is
# RNNBase's, as it is for torch's own classes.


class RNN(_Recurrent, nn.RNNBase):
    """torch.nn.RNN computed by dnnbind: forward(input, h_0) -> (output, h_n)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:                  # (given by keyword too, it reaches RNNBase, which refuses it)
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__("RNN_TANH" if self.nonlinearity == "tanh" else "RNN_RELU", *args, **kwargs)


class LSTM(_Recurrent, nn.RNNBase):
    """torch.nn.LSTM computed by dnnbind, ``proj_size`` included: forward(input, (h_0, c_0)) -> (output, (h_n, c_n))."""

    get_expected_cell_size = nn.LSTM.get_expected_cell_size
    check_forward_args = nn.LSTM.check_forward_args       # type: ignore[assignment]
    permute_hidden = nn.LSTM.permute_hidden               # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(_Recurrent, nn.RNNBase):
    """torch.nn.GRU computed by dnnbind: forward(input, h_0) -> (output, h_n)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)
