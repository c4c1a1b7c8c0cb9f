"""PyTorch-layout RNN test data shared by the mapping and library tests: dims, weights whose every element
says where it came from, and a stand-in weight layout."""
from __future__ import annotations

import numpy as np

from dnnbind.highlevel.dims import RNNDims
from dnnbind.highlevel.miopen import rnn_layout


def rnn_dims(mode="lstm", layers=2, bidirectional=True, bias=True, inp=3, hidden=2, batch=2):
    g = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}[mode] * hidden
    dirs = 2 if bidirectional else 1
    shapes = [((g, inp if i < dirs else hidden * dirs), (g, hidden)) + (((g,), (g,)) if bias else (None, None))
              for i in range(layers * dirs)]
    return RNNDims((4, batch, inp), shapes, mode=mode, hidden_size=hidden, num_layers=layers,
                   bidirectional=bidirectional)


def labelled_weights(dims):
    """PyTorch-layout weights whose every element encodes (entry, tensor, gate, position in the gate)."""
    out = []
    for entry, shapes in enumerate(rnn_layout.torch_shapes(dims)):
        tensors = []
        for j, shape in enumerate(shapes):
            if shape is None:
                tensors.append(None)
                continue
            a = np.empty(shape)
            h = dims.hidden_size
            for gate in range(dims.gates):
                block = a[gate * h:(gate + 1) * h]
                block[...] = np.arange(block.size).reshape(block.shape)
                block += 1e6 * entry + 1e5 * j + 1e4 * gate
            tensors.append(a)
        out.append(tensors)
    return out


def packed_layout(dims, order):
    """Slots laid out back to back in a given order of slot_ids (a stand-in for MIOpen's offsets)."""
    slots, at = [], 0
    for layer, param, bias in order:
        _, _, shape = rnn_layout.source(dims, rnn_layout.Slot(layer, param, bias, 0, ()))
        slots.append(rnn_layout.Slot(layer, param, bias, at, shape))
        at += int(np.prod(shape))
    return slots
