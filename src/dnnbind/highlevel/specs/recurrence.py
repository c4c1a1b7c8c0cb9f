"""The rnn op's forward written in a framework's differentiable operations (a second-order rule's ``ops``),
so that its gradients, and their gradients, come from the framework's autograd (see the rnn rule in
:mod:`.second_order`).

The semantics are the op's (the reference backend's, :mod:`dnnbind.highlevel.reference.rnn`): PyTorch's
cells (gates i, f, g, o for the LSTM with h_t = W_hr (o_t * tanh(c_t)) under a projection; r, z, n for
the GRU), layers fed by the previous layer's output, the reverse direction walking back in time, and
``lengths`` as packed sequences: sequence b takes the steps t < lengths[b] only, its state stays as it
was elsewhere and its output is 0. Padding is masked by selection and x's padding is zeroed first, so
nothing there reaches a gradient (no 0 * NaN).
"""
from __future__ import annotations

from typing import Any, Sequence


def _gate(a: Any, k: int, size: int) -> Any:
    """The k-th gate's part (``size`` features) of a stacked gate array."""
    return a[..., k * size:(k + 1) * size]


def _cell(ops: Any, mode: str, size: int, gi: Any, gh: Any, h: Any, c: Any, w_hr: Any) -> tuple[Any, Any]:
    """One step of one cell from its input's and its state's gate pre-activations: (h_new, c_new)."""
    if mode == "lstm":
        z = gi + gh
        i, f = ops.sigmoid(_gate(z, 0, size)), ops.sigmoid(_gate(z, 1, size))
        g, o = ops.tanh(_gate(z, 2, size)), ops.sigmoid(_gate(z, 3, size))
        c_new = f * c + i * g
        r = o * ops.tanh(c_new)
        return (r if w_hr is None else ops.matmul(r, w_hr.T)), c_new
    if mode == "gru":
        r = ops.sigmoid(_gate(gi, 0, size) + _gate(gh, 0, size))
        z = ops.sigmoid(_gate(gi, 1, size) + _gate(gh, 1, size))
        n = ops.tanh(_gate(gi, 2, size) + r * _gate(gh, 2, size))
        return (1 - z) * n + z * h, None
    a = gi + gh
    return (ops.tanh(a) if mode == "rnn_tanh" else ops.relu(a)), None


def _affine(ops: Any, a: Any, w: Any, b: Any) -> Any:
    return ops.matmul(a, w.T) if b is None else ops.matmul(a, w.T) + b


def _direction(ops: Any, mode: str, size: int, entry: Sequence[Any], xs: Any, h: Any, c: Any,
               running: list[Any] | None, reverse: bool) -> tuple[Any, Any, Any]:
    """One layer in one direction over xs (T, B, input): (outputs (T, B, out), last h, last c)."""
    w_ih, w_hh, b_ih, b_hh = entry[:4]
    w_hr = entry[4] if len(entry) > 4 else None
    gis = _affine(ops, xs, w_ih, b_ih)            # every step's input part at once
    steps = range(xs.shape[0] - 1, -1, -1) if reverse else range(xs.shape[0])
    outs: list[Any] = [None] * xs.shape[0]
    for t in steps:
        h_new, c_new = _cell(ops, mode, size, gis[t], _affine(ops, h, w_hh, b_hh), h, c, w_hr)
        if running is None:
            outs[t], h, c = h_new, h_new, c_new
        else:
            run = running[t]
            outs[t] = ops.where(run, h_new, 0.0)
            h = ops.where(run, h_new, h)
            c = None if c is None else ops.where(run, c_new, c)
    return ops.stack(outs), h, c


def forward(ops: Any, arrays: dict[str, Any]) -> dict[str, Any]:
    """The op's results by name (y, hy, and cy for an LSTM) for its arrays (x batched: (seq, batch,
    input); weights a list of (w_ih, w_hh, b_ih, b_hh[, w_hr]), biases None where not given; h0, c0 None
    for zeros), with the call's arguments (``ops.arguments``)."""
    arguments = ops.arguments
    mode, size, layers = arguments["mode"], arguments["hidden_size"], arguments["num_layers"]
    directions = 2 if arguments["bidirectional"] else 1
    x, weights, lengths = arrays["x"], arrays["weights"], arguments["lengths"]
    steps, batch = x.shape[0], x.shape[1]
    out = arguments["proj_size"] or size
    h0 = arrays["h0"] if arrays["h0"] is not None else ops.zeros((layers * directions, batch, out), x)
    c0 = None
    if mode == "lstm":
        c0 = arrays["c0"] if arrays["c0"] is not None else ops.zeros((layers * directions, batch, size), x)
    running = None
    layer_in = x
    if lengths is not None:
        running = [ops.constant([[t < n] for n in lengths], x) for t in range(steps)]     # (B, 1) per step
        layer_in = ops.stack([ops.where(running[t], x[t], 0.0) for t in range(steps)])
    hy, cy = [], []
    for layer in range(layers):
        outs = []
        for d in range(directions):
            k = layer * directions + d
            o, h, c = _direction(ops, mode, size, weights[k], layer_in, h0[k], None if c0 is None else c0[k],
                                 running, d == 1)
            outs.append(o)
            hy.append(h)
            cy.append(c)
        layer_in = outs[0] if directions == 1 else ops.concat(outs, 2)
    found = {"y": layer_in, "hy": ops.stack(hy)}
    if mode == "lstm":
        found["cy"] = ops.stack(cy)
    return found
