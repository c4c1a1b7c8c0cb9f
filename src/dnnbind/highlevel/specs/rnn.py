"""Multi-layer RNNs (RNNDims) with PyTorch's weight layout."""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.dims.checks import check_same_dtype
from dnnbind.highlevel.dims.rnn import RNNDims, rnn_weight_entries
from dnnbind.highlevel.specs import second_order
from dnnbind.highlevel.specs.base import ArrayArg, Autocast, EmptyCall, OpSpec, Output, Param, Unbatching
from dnnbind.highlevel.unbatched import rnn_is_unbatched


def _check(x: Any, weights: Any, h0: Any = None, c0: Any = None, *, mode: str = "lstm", hidden_size: int,
           num_layers: int = 1, bidirectional: bool = False, lengths: Any = None, proj_size: int = 0) -> tuple:
    entries = rnn_weight_entries(weights)
    check_same_dtype("x", x.dtype, h0=h0, c0=c0,
                     **{f"weights[{i}][{j}]": a for i, entry in enumerate(entries) for j, a in enumerate(entry)})
    return (RNNDims(x.shape, [tuple(None if a is None else a.shape for a in entry) for entry in entries],
                    mode=mode, hidden_size=hidden_size, num_layers=num_layers, bidirectional=bidirectional,
                    h0_shape=None if h0 is None else h0.shape, c0_shape=None if c0 is None else c0.shape,
                    lengths=lengths, dtype=x.dtype, proj_size=proj_size),)


def _empty(args: tuple) -> EmptyCall:
    x, weights, dims = args[0], args[1], args[4]
    lstm = dims.mode == "lstm"

    def gradients(zeros: Any) -> tuple[Any, Any, Any, list[tuple[Any, ...]]]:
        # zeros is called in the gradients' order (dx, dh0, dc0, then dweights): the residual form's
        # empty call saves the zeros in that order and _regroup reads them back in it
        dx, dh0, dc0 = zeros(x.shape), zeros(dims.h_shape), zeros(dims.c_shape) if lstm else None
        dweights = [tuple(None if a is None else zeros(a.shape) for a in entry) for entry in weights]
        return dx, dh0, dc0, dweights

    return EmptyCall([dims.y_shape, dims.h_shape, dims.c_shape if lstm else None], gradients)


def _regroup(zeros: list[Any], static: tuple) -> Any:
    dims = static[0]
    lstm = dims.mode == "lstm"
    rest = iter(zeros[3:] if lstm else zeros[2:])
    # per entry (w_ih, w_hh, b_ih, b_hh[, w_hr]): a zero array each, None for the biases it has not
    given = (True, True, dims.has_bias, dims.has_bias) + (True,) * bool(dims.proj_size)
    dweights = [tuple(next(rest) if has else None for has in given)
                for _ in range(dims.num_layers * dims.num_directions)]
    return zeros[0], zeros[1], zeros[2] if lstm else None, dweights


def _lists(weights: Any) -> list[list[Any]]:
    """The checked weights as the backends take them: a list of lists."""
    return [list(entry) for entry in rnn_weight_entries(weights)]


RNN = OpSpec(
    name="rnn",
    doc="""Multi-layer RNN over x (seq, batch, input), with PyTorch's weight layout and semantics.

    mode: rnn_relu, rnn_tanh, lstm (gates i, f, g, o) or gru (gates r, z, n; n = tanh(W_in x + b_in +
    r * (W_hn h + b_hn))). ``weights[layer * num_directions + direction] = (w_ih, w_hh, b_ih, b_hh)``
    exactly as torch.nn.LSTM/GRU/RNN hold them (biases may both be None). ``lengths`` (one per
    sequence, any order) gives packed-sequence semantics: y is zero past each sequence's end and hy/cy
    are taken at its last valid step (the reverse direction starts there). ``proj_size`` > 0 (LSTM
    only, below hidden_size) adds torch's projection h_t = W_hr (o_t * tanh(c_t)): each entry is then
    (w_ih, w_hh, b_ih, b_hh, w_hr), w_hr (proj_size, hidden), and h, y have proj_size features per
    direction where they had hidden_size (c keeps hidden_size); the MIOpen backend has no projection.

    Unbatched, as torch.nn.LSTM/GRU/RNN take it: x (seq, input) is one sequence, h0 and c0 (when given)
    are then (num_layers * num_directions, hidden), and y, hy, cy, their cotangents and dx, dh0, dc0 have
    no batch axis either.

    Returns ((y, hy, cy), pullback): y (seq, batch, num_directions * hidden), hy and cy
    (num_layers * num_directions, batch, hidden), cy None unless LSTM. pullback(dy, dhy=None, dcy=None)
    -> (dx, dh0, dc0, dweights): dh0 always an array (the gradient for the zero state when h0 was
    None), dc0 None unless LSTM, dweights shaped like weights.
    """,
    params=(Param("x"), Param("weights", annotation="Sequence[Sequence[Any]]"), Param("mode", "lstm", True, "str"),
            Param("hidden_size", keyword_only=True, annotation="int"), Param("num_layers", 1, True, "int"),
            Param("bidirectional", False, True, "bool"), Param("h0", None, True), Param("c0", None, True),
            Param("lengths", None, True, kind="ints?"), Param("proj_size", 0, True, "int")),
    arrays=(ArrayArg("x", gradient="dx", batched=True), ArrayArg("weights", gradient="dweights", nested=True),
            ArrayArg("h0", optional=True, gradient="dh0", batched=True),
            ArrayArg("c0", optional=True, gradient="dc0", batched=True)),
    static=("dims",),
    outputs=(Output("y", "dy"), Output("hy", "dhy", optional=True),
             Output("cy", "dcy", optional=True, why_none="dcy is only used by mode='lstm', not mode={mode!r}")),
    gradient_order=("dx", "dh0", "dc0", "dweights"), check=_check, empty=_empty, regroup=_regroup, parse=_lists,
    skippable=True,
    # as cuDNN's RNN saves them for torch (its CPU LSTM too; its CPU GRU and RNN read no bias nor y)
    backward_reads=("x", "weights", "h0", "c0", "y"),
    unbatched=Unbatching(lambda arrays, arguments: rnn_is_unbatched(arrays["x"].shape, arrays["h0"], arrays["c0"]),
                         axis=1),
    features=("rnn_relu", "rnn_tanh", "lstm", "gru", "bidirectional", "lengths", "proj_size", "no bias"),
    second_order=second_order.rnn,
    # torch's CPU GRU is no autocast op: it runs in the input's dtype (its LSTM and RNN run in autocast's)
    autocast=Autocast(exempt=lambda arguments, device: arguments["mode"] == "gru" and device == "cpu"),
    tensor_doc="""Multi-layer RNN over x (seq, batch, input), or one sequence x (seq, input) with h0/c0 (layers *
    directions, size), with torch.nn.LSTM/GRU/RNN's weights and semantics.

    ``weights[layer * num_directions + direction] = (w_ih, w_hh, b_ih, b_hh)``, with w_hr
    (torch's ``weight_hr_l{k}``) as a 5th tensor for an LSTM with ``proj_size`` > 0; ``lengths`` gives
    packed-sequence semantics. Returns (y, hy, cy), cy None unless ``mode="lstm"``. Under torch.autocast
    in its dtype, as :func:`conv`.
    """,
)
