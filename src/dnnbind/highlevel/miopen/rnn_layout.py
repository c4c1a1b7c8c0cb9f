"""PyTorch's RNN weights <-> MIOpen's weight space: pure functions, no library calls.

PyTorch keeps, per layer and direction (entry ``layer * directions + direction``), w_ih (G*H, in),
w_hh (G*H, H), b_ih (G*H,), b_hh (G*H,), the G gates stacked in its own order. MIOpen keeps one flat
weight space holding a matrix (H, in) or (H, H) and a bias (H,) per gate, at offsets that
miopenGetRNNLayerParamOffset / miopenGetRNNLayerBiasOffset report (MIOpen's "layer" is PyTorch's
entry). MIOpen's IDs 0..G-1 belong to the input GEMM, G..2G-1 to the hidden-state GEMM, and its gate
order differs from PyTorch's (and cuDNN's)::

    LSTM   PyTorch i, f, g, o    MIOpen i, f, o, g   (g: "new memory")
    GRU    PyTorch r, z, n       MIOpen z, r, n
    RNN    one gate

A :class:`Slot` is one MIOpen matrix or bias with its offset; :func:`gather_index` turns the slots into
one index array such that ``weight_space = concat(PyTorch weights)[index]`` (see :func:`concat`), and
:func:`scatter_index` inverts it for the weight gradient.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.dims.rnn import RNNDims, TORCH_GATES

MIOPEN_GATES = {"rnn_relu": ("h",), "rnn_tanh": ("h",), "lstm": ("i", "f", "o", "g"), "gru": ("z", "r", "n")}

#: public mode -> miopenRNNMode_t name
MIOPEN_MODES = {"rnn_relu": "miopenRNNRELU", "rnn_tanh": "miopenRNNTANH", "lstm": "miopenLSTM", "gru": "miopenGRU"}

def torch_gate(mode: str, miopen_gate: int) -> int:
    """The index in PyTorch's gate order of the gate MIOpen keeps at ``miopen_gate``."""
    return TORCH_GATES[mode].index(MIOPEN_GATES[mode][miopen_gate])


@dataclass(frozen=True)
class Slot:
    """One matrix (``bias`` False) or bias vector of MIOpen's weight space."""

    layer: int                   # MIOpen layer = PyTorch entry (layer * directions + direction)
    param: int                   # paramID / biasID: 0..G-1 input GEMM, G..2G-1 hidden-state GEMM
    bias: bool
    offset: int                  # element offset in the weight space
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))


def slot_ids(dims: RNNDims) -> list[tuple[int, int, bool]]:
    """(layer, ID, bias) of every slot MIOpen has for ``dims``: all matrices, then all biases."""
    ids = [(layer, p, False) for layer in range(dims.num_layers * dims.num_directions) for p in range(2 * dims.gates)]
    if dims.has_bias:
        ids += [(layer, p, True) for layer in range(dims.num_layers * dims.num_directions)
                for p in range(2 * dims.gates)]
    return ids


def torch_shapes(dims: RNNDims) -> list[list[tuple[int, ...] | None]]:
    """Per entry, the shapes of (w_ih, w_hh, b_ih, b_hh) (None for absent biases)."""
    gh, h = dims.gates * dims.hidden_size, dims.hidden_size
    out = []
    for entry in range(dims.num_layers * dims.num_directions):
        layer_in = dims.layer_input_size(entry // dims.num_directions)
        biases: list[tuple[int, ...] | None] = [(gh,), (gh,)] if dims.has_bias else [None, None]
        out.append([(gh, layer_in), (gh, h), *biases])
    return out


def weight_space_size(dims: RNNDims) -> int:
    """Elements of the weight space: all of PyTorch's tensors (the slots must tile it exactly)."""
    return _bases(dims)[1]


def _bases(dims: RNNDims) -> tuple[dict[tuple[int, int], int], int]:
    """Start of each (entry, tensor) in the concatenation of PyTorch's tensors, and its total size."""
    bases, at = {}, 0
    for entry, shapes in enumerate(torch_shapes(dims)):
        for j, shape in enumerate(shapes):
            if shape is not None:
                bases[(entry, j)] = at
                at += int(np.prod(shape))
    return bases, at


def source(dims: RNNDims, slot: Slot) -> tuple[int, int, tuple[int, ...]]:
    """(PyTorch tensor index j, element start inside it, expected slot shape) for ``slot``."""
    g, h = dims.gates, dims.hidden_size
    j = (0 if slot.param < g else 1) + (2 if slot.bias else 0)
    gate = torch_gate(dims.mode, slot.param % g)
    if slot.bias:
        return j, gate * h, (h,)
    cols = dims.layer_input_size(slot.layer // dims.num_directions) if j == 0 else h
    return j, gate * h * cols, (h, cols)


def gather_index(dims: RNNDims, slots: Sequence[Slot]) -> np.ndarray:
    """int64 index with ``weight_space = concat(weights)[index]``.

    Raises ValueError when a slot's shape is not the PyTorch block it should hold, or when the slots
    do not tile the weight space exactly (which would mean a MIOpen layout this code does not know).
    """
    bases, total = _bases(dims)
    index = np.full(total, -1, np.int64)
    for slot in slots:
        j, start, shape = source(dims, slot)
        if tuple(slot.shape) != shape:
            raise ValueError(f"MIOpen's {'bias' if slot.bias else 'matrix'} {slot.param} of layer {slot.layer} has "
                             f"shape {tuple(slot.shape)}, expected {shape} for {dims}")
        if slot.offset < 0 or slot.offset + slot.size > total:
            raise ValueError(f"MIOpen's slot {slot} lies outside a weight space of {total} elements")
        index[slot.offset:slot.offset + slot.size] = bases[(slot.layer, j)] + start + np.arange(slot.size)
    if (index < 0).any() or len(np.unique(index)) != total:
        raise ValueError(f"MIOpen's weight slots do not tile a weight space of {total} elements for {dims}")
    return index


def scatter_index(gather: np.ndarray) -> np.ndarray:
    """The inverse permutation: ``concat(gradients) = weight_space_gradient[scatter]``."""
    inverse = np.empty_like(gather)
    inverse[gather] = np.arange(len(gather))
    return inverse


def concat(xp: Any, weights: Sequence[Sequence[Any]]) -> Any:
    """PyTorch's tensors, entry by entry and in (w_ih, w_hh, b_ih, b_hh) order, flattened into one array."""
    return xp.concatenate([a.reshape(-1) for entry in weights for a in entry if a is not None])


def split(flat: Any, dims: RNNDims) -> list[tuple[Any, Any, Any, Any]]:
    """The inverse of :func:`concat`: a flat array cut into PyTorch-shaped (w_ih, w_hh, b_ih, b_hh) views."""
    bases, _ = _bases(dims)
    out = []
    for entry, shapes in enumerate(torch_shapes(dims)):
        parts: list[Any] = []
        for j, shape in enumerate(shapes):
            if shape is None:
                parts.append(None)
            else:
                start = bases[(entry, j)]
                parts.append(flat[start:start + int(np.prod(shape))].reshape(shape))
        out.append(tuple(parts))
    return out
