"""RNN geometry: :class:`RNNDims` and the parsing of PyTorch-layout weights."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.dims.checks import check_array_shape, check_dtype, check_int, check_shape
from dnnbind.highlevel.dims.problem import Problem, Shape

RNN_MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
#: rnn mode -> gate order of PyTorch's weights (the public layout; "h" is a plain RNN's single gate)
TORCH_GATES = {"rnn_relu": ("h",), "rnn_tanh": ("h",), "lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n")}
_GATES = {mode: len(gates) for mode, gates in TORCH_GATES.items()}


def rnn_weight_entries(weights: Any) -> tuple[tuple[Any, Any, Any, Any], ...]:
    """Check that ``weights`` is a sequence of (w_ih, w_hh, b_ih, b_hh) or, for an LSTM with a projection,
    (w_ih, w_hh, b_ih, b_hh, w_hr) (torch's parameter order), and return it as tuples.

    Both biases may be None (a network without biases, torch's ``bias=False``); w_hr may not. Every
    entry has the same length.
    """
    if not isinstance(weights, (list, tuple)):
        raise TypeError(f"weights must be a list of (w_ih, w_hh, b_ih, b_hh) tuples, not {type(weights).__name__}")
    entries: list[tuple[Any, ...]] = []
    for i, entry in enumerate(weights):
        if hasattr(entry, "shape") or not isinstance(entry, (list, tuple)) or len(entry) not in (4, 5):
            got = (f"an array of shape {tuple(entry.shape)}" if hasattr(entry, "shape")      # (a framework's spec too)
                   else f"{type(entry).__name__} of length {len(entry)}" if isinstance(entry, (list, tuple))
                   else type(entry).__name__)
            raise TypeError(f"weights[{i}] must be a (w_ih, w_hh, b_ih, b_hh) tuple (with w_hr as a 5th array "
                            f"for an LSTM with proj_size), got {got}")
        for j, label in enumerate(("w_ih", "w_hh")):
            if entry[j] is None:
                raise TypeError(f"weights[{i}][{j}] ({label}) must be an array, not None")
        if (entry[2] is None) != (entry[3] is None):
            none = 2 if entry[2] is None else 3
            raise TypeError(f"weights[{i}][{none}] ({_BIASES[none]}) is None but weights[{i}][{5 - none}] "
                            f"({_BIASES[5 - none]}) is not: the two biases are both arrays or both None")
        if len(entry) == 5 and entry[4] is None:
            raise TypeError(f"weights[{i}]: w_hr (the 5th entry) must be an array, not None; leave it out "
                            f"without a projection")
        if entries and len(entry) != len(entries[0]):
            raise ValueError(f"weights[{i}] has {len(entry)} arrays but weights[0] has {len(entries[0])}: every "
                             f"entry has w_hr (proj_size > 0) or none does")
        entries.append(tuple(entry))
    return tuple(entries)


_BIASES = {2: "b_ih", 3: "b_hh"}


@dataclass(frozen=True, init=False, eq=False)
class RNNDims(Problem):
    """Geometry of a multi-layer, optionally bidirectional RNN in PyTorch's weight layout.

    Weights are indexed ``layer * num_directions + direction``; each entry is (w_ih, w_hh, b_ih, b_hh)
    with w_ih (gates*hidden, layer_input), w_hh (gates*hidden, out), biases (gates*hidden,), and for an
    LSTM with ``proj_size`` > 0 a 5th array w_hr (proj_size, hidden) (torch's projection: h_t =
    W_hr (o_t * tanh(c_t))). ``out`` (:attr:`out_size`) is proj_size if set, else hidden_size: the
    size of h and of each direction's output; the cell c keeps hidden_size. ``lengths`` (optional, one
    per sequence, any order) describes padded variable-length batches.
    """

    _KIND = "rnn"

    mode: str
    seq_len: int
    batch: int
    input_size: int
    hidden_size: int
    num_layers: int
    num_directions: int
    has_bias: bool
    lengths: tuple[int, ...] | None
    dtype: str
    proj_size: int

    def __init__(self, x_shape: Sequence[int], weight_shapes: Sequence[Sequence[Sequence[int] | None]], *,
                 mode: str = "lstm", hidden_size: int, num_layers: int = 1, bidirectional: bool = False,
                 h0_shape: Sequence[int] | None = None, c0_shape: Sequence[int] | None = None,
                 lengths: Any = None, dtype: Any = "float32", proj_size: int = 0) -> None:
        if mode not in RNN_MODES:
            raise ValueError(f"mode={mode!r} must be one of {', '.join(RNN_MODES)}")
        x_shape = check_array_shape("x", x_shape, (3,), "(seq, batch, input)", (1,), "the batch")
        hidden = check_int("hidden_size", hidden_size)
        if hidden < 1:
            raise ValueError(f"hidden_size={hidden} must be positive")
        layers = check_int("num_layers", num_layers)
        if layers < 1:
            raise ValueError(f"num_layers={layers} must be positive")
        if not isinstance(bidirectional, (bool, np.bool_)):
            raise TypeError(f"bidirectional={bidirectional!r} must be a bool")
        dirs = 2 if bidirectional else 1
        seq, batch, inp = x_shape
        proj = check_int("proj_size", proj_size)
        if proj < 0:
            raise ValueError(f"proj_size={proj} must be 0 (no projection) or positive")
        if proj and mode != "lstm":
            raise ValueError(f"proj_size={proj} is only supported for mode='lstm', not mode={mode!r}")
        if proj >= hidden:
            raise ValueError(f"proj_size={proj} must be smaller than hidden_size={hidden}")
        out = proj or hidden
        n_arrays = 5 if proj else 4
        if len(weight_shapes) != layers * dirs:
            raise ValueError(f"weights has {len(weight_shapes)} entries but num_layers={layers} and "
                             f"bidirectional={bool(bidirectional)} need {layers * dirs} "
                             f"(one per layer and direction)")
        gh = _GATES[mode] * hidden
        has_bias = weight_shapes[0][2] is not None
        for i, shapes in enumerate(weight_shapes):
            if len(shapes) != n_arrays:
                raise ValueError(f"weights[{i}] has {len(shapes)} arrays but proj_size={proj} takes {n_arrays}: "
                                 + ("(w_ih, w_hh, b_ih, b_hh, w_hr)" if proj else
                                    "(w_ih, w_hh, b_ih, b_hh); w_hr only with proj_size > 0"))
            layer_in = inp if i < dirs else out * dirs
            expected = ((gh, layer_in), (gh, out), (gh,), (gh,), (proj, hidden))
            if (shapes[2] is not None) != has_bias:
                raise ValueError(f"weights[{i}]: every entry must have biases, or none (weights[0] "
                                 f"{'has' if has_bias else 'has none'})")
            for j, (label, shape, want) in enumerate(zip(("w_ih", "w_hh", "b_ih", "b_hh", "w_hr"), shapes, expected)):
                if shape is not None:
                    check_shape(f"weights[{i}][{j}] ({label})", shape, want,
                                f"mode={mode!r}, hidden_size={hidden}" + (f", proj_size={proj}" if proj else "")
                                + f", layer {i // dirs} input size {layer_in}")
        h_shape = (layers * dirs, batch, out)
        if h0_shape is not None:
            check_shape("h0", h0_shape, h_shape, "(num_layers * num_directions, batch, "
                        + ("proj_size)" if proj else "hidden_size)"))
        if c0_shape is not None:
            if mode != "lstm":
                raise ValueError(f"c0 is only used by mode='lstm', not mode={mode!r}")
            check_shape("c0", c0_shape, (layers * dirs, batch, hidden),
                        "(num_layers * num_directions, batch, hidden_size)")
        if lengths is not None:
            try:
                values = [v for v in lengths]
            except TypeError:
                raise TypeError(f"lengths must be a sequence of ints, not {type(lengths).__name__}") from None
            if len(values) != batch:
                raise ValueError(f"lengths has {len(values)} entries but x has a batch of {batch}")
            lengths = tuple(check_int(f"lengths[{i}]", v) for i, v in enumerate(values))
            for i, v in enumerate(lengths):
                if not 1 <= v <= seq:
                    raise ValueError(f"lengths[{i}]={v} must be between 1 and the sequence length {seq}")
        for name, value in (("mode", mode), ("seq_len", seq), ("batch", batch), ("input_size", inp),
                            ("hidden_size", hidden), ("num_layers", layers), ("num_directions", dirs),
                            ("has_bias", has_bias), ("lengths", lengths), ("dtype", check_dtype("x", dtype)),
                            ("proj_size", proj)):
            object.__setattr__(self, name, value)

    @property
    def gates(self) -> int:
        """Gates per cell: 4 for LSTM (i, f, g, o), 3 for GRU (r, z, n), 1 for plain RNNs."""
        return _GATES[self.mode]

    @property
    def out_size(self) -> int:
        """Size of h and of each direction's output: proj_size with a projection, else hidden_size."""
        return self.proj_size or self.hidden_size

    @property
    def y_shape(self) -> Shape:
        return (self.seq_len, self.batch, self.out_size * self.num_directions)

    @property
    def h_shape(self) -> Shape:
        return (self.num_layers * self.num_directions, self.batch, self.out_size)

    @property
    def c_shape(self) -> Shape:
        """The LSTM cell state's shape (hidden_size wide, also with a projection)."""
        return (self.num_layers * self.num_directions, self.batch, self.hidden_size)

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.out_size * self.num_directions

