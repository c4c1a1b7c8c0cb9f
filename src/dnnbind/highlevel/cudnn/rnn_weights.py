"""Where PyTorch's RNN weights live in cuDNN's weight space, and moving them in and out.

cuDNN keeps all weights and biases of a network in one flat buffer, the *weight space*, and says where
each piece is through cudnnGetRNNWeightParams(pseudoLayer, linLayerID) -> (matrix address and shape,
bias address and shape). PyTorch keeps, per layer and direction (cuDNN's pseudo-layer
``layer * num_directions + direction``), four arrays (w_ih, w_hh, b_ih, b_hh) whose rows stack the gates,
and with an LSTM projection (``proj_size``) a fifth, w_hr (proj_size, hidden), which is cuDNN's
recurrent projection: linLayerID 8 of an LSTM whose projSize is below hiddenSize (a matrix, no bias).
The recurrent matrices (linLayerIDs 4-7) then have proj_size columns, and layers above the first
take num_directions * proj_size inputs.

Gate order. cuDNN's linear layers (the API reference of cudnnGetRNNWeightParams, formerly
cudnnGetRNNLinLayerMatrixParams; the 9.28 header only says "Linear layer ID within the RNN cell"):

* RNN_RELU / RNN_TANH: 0 multiplies the layer input, 1 the recurrent state;
* LSTM: 0-3 multiply the input, 4-7 the recurrent state; 0 and 4 the input gate, 1 and 5 the forget
  gate, 2 and 6 the new memory (cell candidate) gate, 3 and 7 the output gate — PyTorch's i, f, g, o;
* GRU: 0-2 the input, 3-5 the recurrent state; 0 and 3 the reset gate, 1 and 4 the update gate, 2
  and 5 the new memory gate — PyTorch's r, z, n. With CUDNN_RNN_DOUBLE_BIAS the recurrent bias of the
  new memory gate (linLayerID 5) sits inside the reset product, h' = tanh(W x + b_W + r * (R h + b_R)),
  which is PyTorch's n = tanh(W_in x + b_in + r * (W_hn h + b_hn)); a single bias could not express it.

Each linear layer owns one matrix (hidden rows, input or hidden columns, row-major) and, unless the
network has no biases, one bias vector: b_ih gate g is the bias of linear layer g, b_hh gate g that of
linear layer gates + g. :data:`CUDNN_GATES` and :func:`linear_id` encode this; tests evaluate cuDNN's
documented cell equations by linLayerID on a packed space and compare them with torch.nn's cells.

A :class:`WeightLayout` is built from cuDNN's answers (:mod:`rnn_plan` asks them on the GPU) and never
from offsets computed here; :func:`canonical_params` is an independent *prediction* of cuDNN's layout
(pseudo-layers one after the other, each its matrices then its biases in linLayerID order), used by the
host-side tests and compared with cuDNN's real answers by the GPU tests. Nothing here touches a GPU:
:func:`pack` and :func:`unpack` work on numpy and CuPy arrays alike.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from dnnbind.highlevel.dims.rnn import RNNDims, TORCH_GATES

SLOTS = ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")
#: the slots that hold matrices (the rest are biases)
MATRIX_SLOTS = (0, 1, 4)

#: gate order of PyTorch's stacked rows, per mode
#: the gate of cuDNN's linear layers 0, 1, ... (input side; the recurrent side repeats the order)
CUDNN_GATES = {"rnn_relu": ("h",), "rnn_tanh": ("h",), "lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n")}


class LayoutError(RuntimeError):
    """cuDNN described its weight space in a way this module does not understand."""


def linear_layers(dims: RNNDims) -> int:
    """How many linear layers cuDNN has per pseudo-layer: 2 per gate, and the LSTM projection."""
    return 2 * dims.gates + (1 if dims.proj_size else 0)


def linear_id(mode: str, slot: int, gate: int) -> int:
    """cuDNN's linLayerID for PyTorch's array ``SLOTS[slot]``, rows of gate number ``gate`` (the LSTM
    projection w_hr, slot 4, is one linear layer after the gates' eight: 8)."""
    gates = CUDNN_GATES[mode]
    if slot == 4:
        return 2 * len(gates)
    recurrent = slot in (1, 3)
    return (len(gates) if recurrent else 0) + gates.index(TORCH_GATES[mode][gate])


@dataclass(frozen=True)
class LinearParams:
    """Where one linear layer's matrix and bias are: element offsets from the start of the weight space
    and shapes; None when absent (no bias)."""

    matrix_offset: int | None
    matrix_shape: tuple[int, int] | None
    bias_offset: int | None
    bias_size: int | None


#: (pseudo_layer, linLayerID) -> LinearParams
Params = Mapping[tuple[int, int], LinearParams]


def canonical_params(dims: RNNDims) -> tuple[dict[tuple[int, int], LinearParams], int]:
    """The predicted layout (see the module docstring) and its size in elements. With an LSTM projection
    the projection matrix (proj_size, hidden) is predicted right after the gates' matrices, before the
    biases (a guess only the GPU tests check: the packing itself follows cuDNN's answers)."""
    h, count = dims.hidden_size, 2 * dims.gates
    params: dict[tuple[int, int], LinearParams] = {}
    offset = 0
    for p in range(dims.num_layers * dims.num_directions):
        cols = [dims.layer_input_size(p // dims.num_directions)] * dims.gates + [dims.out_size] * dims.gates
        matrices = []
        for lin in range(count):
            matrices.append(offset)
            offset += h * cols[lin]
        if dims.proj_size:
            params[(p, count)] = LinearParams(offset, (dims.proj_size, h), None, None)
            offset += dims.proj_size * h
        biases: list[int | None] = [None] * count
        if dims.has_bias:
            for lin in range(count):
                biases[lin] = offset
                offset += h
        for lin in range(count):
            params[(p, lin)] = LinearParams(matrices[lin], (h, cols[lin]), biases[lin],
                                            h if dims.has_bias else None)
    return params, offset


@dataclass(frozen=True)
class Region:
    """Rows [row_start, row_stop) of PyTorch's array weights[entry][slot], stored row-major from element
    ``offset`` of the weight space."""

    entry: int
    slot: int
    row_start: int
    row_stop: int
    offset: int
    cols: int           # 1 for a bias

    @property
    def size(self) -> int:
        return (self.row_stop - self.row_start) * self.cols

    @property
    def matrix(self) -> bool:
        return self.slot in MATRIX_SLOTS


@dataclass(frozen=True)
class WeightLayout:
    """Every piece of PyTorch's weights in a weight space of ``size`` elements.

    ``whole`` is True when each PyTorch array is one region (its gates follow each other in the space),
    so that every array is a view of the space.
    """

    size: int
    entries: int
    regions: tuple[Region, ...]
    has_bias: bool
    has_proj: bool = False

    @classmethod
    def from_params(cls, dims: RNNDims, params: Params, size: int) -> "WeightLayout":
        """The layout of the weight space that ``params`` (cuDNN's answers) describe, checked against dims."""
        h, gates = dims.hidden_size, dims.gates
        regions: list[Region] = []
        for entry in range(dims.num_layers * dims.num_directions):
            layer_in = dims.layer_input_size(entry // dims.num_directions)
            if dims.proj_size:
                offset = _offset(params, dims, entry, 4, 0, (dims.proj_size, h))
                regions.append(Region(entry, 4, 0, dims.proj_size, offset, h))
            for slot in range(4 if dims.has_bias else 2):
                cols = (layer_in, dims.out_size, 1, 1)[slot]
                offsets = [_offset(params, dims, entry, slot, g, (h, cols)) for g in range(gates)]
                if all(o == offsets[0] + g * h * cols for g, o in enumerate(offsets)):
                    regions.append(Region(entry, slot, 0, gates * h, offsets[0], cols))
                else:
                    regions.extend(Region(entry, slot, g * h, (g + 1) * h, o, cols) for g, o in enumerate(offsets))
        _check_disjoint(regions, size)
        return cls(size, dims.num_layers * dims.num_directions, tuple(regions), dims.has_bias,
                   bool(dims.proj_size))

    @property
    def slots(self) -> int:
        """PyTorch arrays per entry: 4, or 5 with the projection (absent biases count: they are None)."""
        return 5 if self.has_proj else 4

    @property
    def whole(self) -> bool:
        return len(self.regions) == self.entries * ((4 if self.has_bias else 2) + (1 if self.has_proj else 0))

    @property
    def dense(self) -> bool:
        """Whether the regions cover the whole space (no gaps that would be left uninitialised)."""
        return sum(r.size for r in self.regions) == self.size


def _offset(params: Params, dims: RNNDims, entry: int, slot: int, gate: int, shape: tuple[int, int]) -> int:
    """The element offset cuDNN gives for gate ``gate`` of PyTorch's array ``SLOTS[slot]``, its shape checked."""
    lin = linear_id(dims.mode, slot, gate)
    info = params.get((entry, lin))
    where = f"pseudo-layer {entry}, linLayerID {lin} (" + (
        "w_hr, the projection" if slot == 4 else f"{SLOTS[slot]} gate {TORCH_GATES[dims.mode][gate]}") + ")"
    if info is None:
        raise LayoutError(f"cuDNN gave no parameters for {where}")
    matrix = slot in MATRIX_SLOTS
    offset = info.matrix_offset if matrix else info.bias_offset
    got: Any = info.matrix_shape if matrix else info.bias_size
    want: Any = shape if matrix else shape[0]
    what = "matrix" if matrix else "bias"
    if offset is None:
        raise LayoutError(f"cuDNN reports no {what} for {where}")
    if got != want:
        raise LayoutError(f"cuDNN reports shape {got} for the {what} of {where}, expected {want}")
    return offset


def _check_disjoint(regions: Sequence[Region], size: int) -> None:
    spans = sorted((r.offset, r.offset + r.size, r) for r in regions)
    for start, stop, r in spans:
        if start < 0 or stop > size:
            raise LayoutError(f"{SLOTS[r.slot]} of entry {r.entry} lies outside the weight space "
                              f"([{start}, {stop}) of {size} elements)")
    for (_, stop, a), (start, _, b) in zip(spans, spans[1:]):
        if start < stop:
            raise LayoutError(f"{SLOTS[a.slot]} of entry {a.entry} and {SLOTS[b.slot]} of entry {b.entry} overlap "
                              f"in the weight space")


def region_view(space: Any, region: Region) -> Any:
    """The part of the flat ``space`` that holds ``region``, shaped like those rows of PyTorch's array."""
    flat = space[region.offset:region.offset + region.size]
    rows = region.row_stop - region.row_start
    return flat.reshape((rows, region.cols) if region.matrix else (rows,))


def pack(layout: WeightLayout, weights: Sequence[Sequence[Any]], space: Any) -> None:
    """Copy PyTorch-layout ``weights`` into the flat ``space`` (its dtype, layout.size elements)."""
    for r in layout.regions:
        region_view(space, r)[...] = weights[r.entry][r.slot][r.row_start:r.row_stop]


def unpack(layout: WeightLayout, space: Any, xp: Any) -> list[tuple[Any, ...]]:
    """PyTorch-layout arrays read from ``space``: views of it when layout.whole, else new arrays
    (``xp``: numpy or cupy). Biases are None when the network has none; w_hr is each entry's 5th array
    with a projection."""
    parts: dict[tuple[int, int], list[tuple[int, Any]]] = {}
    for r in layout.regions:
        parts.setdefault((r.entry, r.slot), []).append((r.row_start, region_view(space, r)))
    out = []
    for entry in range(layout.entries):
        arrays: list[Any] = []
        for slot in range(layout.slots):
            pieces = [view for _, view in sorted(parts.get((entry, slot), []), key=lambda p: p[0])]
            arrays.append(None if not pieces else pieces[0] if len(pieces) == 1 else xp.concatenate(pieces))
        out.append(tuple(arrays))
    return out
