"""Multi-layer, optionally bidirectional RNN / LSTM / GRU with PyTorch's weights and semantics, in float64.

One cell step at a time, batch-major, written as PyTorch documents the cells (gate order i, f, g, o for the
LSTM, r, z, n for the GRU; h_t = W_hr (o_t * tanh(c_t)) with a projection). Variable lengths follow
PyTorch's packed sequences: sequence b takes the steps t < lengths[b] only; elsewhere its state stays as it
was (so the reverse direction starts from h0 at its last step) and its output is 0. Padding is masked by
selection, never by multiplication, and x's padding is zeroed first, so nothing there reaches a gradient.

The forward saves its inputs (x, h0, c0 for an LSTM, every weight array), as float64 copies; the backward
runs the forward again, keeping each step's values, and walks back through the steps.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.dims import RNNDims
from dnnbind.highlevel.reference._arrays import F64, as64, cast, cotangent
from dnnbind.highlevel.reference.pointwise import sigmoid
from dnnbind.highlevel.residual import ArraySpec, only_needed

_NAMES = ("w_ih", "w_hh", "b_ih", "b_hh", "w_hr")


def _sigmoid_grad(s: np.ndarray) -> np.ndarray:
    return s * (1 - s)


def _step(mode: str, p: dict, x: np.ndarray, h: np.ndarray, c: Any) -> tuple[np.ndarray, Any, tuple]:
    """One step of one cell: (h_new, c_new, what its backward needs)."""
    gi = x @ p["w_ih"].T + (p["b_ih"] if "b_ih" in p else 0.0)
    gh = h @ p["w_hh"].T + (p["b_hh"] if "b_hh" in p else 0.0)
    if mode == "lstm":
        zi, zf, zg, zo = np.split(gi + gh, 4, axis=1)
        i, f, g, o = sigmoid(zi), sigmoid(zf), np.tanh(zg), sigmoid(zo)
        c_new = f * c + i * g
        tc = np.tanh(c_new)
        r = o * tc
        return (r @ p["w_hr"].T if "w_hr" in p else r), c_new, (i, f, g, o, tc, r)
    if mode == "gru":
        ir, iz, in_ = np.split(gi, 3, axis=1)
        hr, hz, hn = np.split(gh, 3, axis=1)
        r, z = sigmoid(ir + hr), sigmoid(iz + hz)
        n = np.tanh(in_ + r * hn)
        return (1 - z) * n + z * h, None, (r, z, n, hn)
    a = gi + gh
    h_new = np.tanh(a) if mode == "rnn_tanh" else np.maximum(a, 0)
    return h_new, None, (h_new,)


def _step_back(mode: str, p: dict, grads: dict, x: np.ndarray, h: np.ndarray, c: Any, tape: tuple,
               dh: np.ndarray, dc: Any) -> tuple[np.ndarray, np.ndarray, Any]:
    """The gradients of one step: (dx, dh_prev, dc_prev); the weights' gradients are added to ``grads``."""
    dh_direct, dc_prev = 0.0, None
    if mode == "lstm":
        i, f, g, o, tc, r = tape
        if "w_hr" in p:
            grads["w_hr"] += dh.T @ r
            dh = dh @ p["w_hr"]
        dct = dc + dh * o * (1 - tc * tc)
        dc_prev = dct * f
        d_gi = d_gh = np.concatenate([dct * g * _sigmoid_grad(i), dct * c * _sigmoid_grad(f),
                                      dct * i * (1 - g * g), dh * tc * _sigmoid_grad(o)], axis=1)
    elif mode == "gru":
        r, z, n, hn = tape
        dn = dh * (1 - z) * (1 - n * n)
        dr = dn * hn * _sigmoid_grad(r)
        dz = dh * (h - n) * _sigmoid_grad(z)
        dh_direct = dh * z
        d_gi = np.concatenate([dr, dz, dn], axis=1)
        d_gh = np.concatenate([dr, dz, dn * r], axis=1)
    else:
        (h_new,) = tape
        d_gi = d_gh = dh * ((1 - h_new * h_new) if mode == "rnn_tanh" else ~(h_new <= 0))   # NaN passes, as in torch
    grads["w_ih"] += d_gi.T @ x
    grads["w_hh"] += d_gh.T @ h
    if "b_ih" in p:
        grads["b_ih"] += d_gi.sum(axis=0)
        grads["b_hh"] += d_gh.sum(axis=0)
    return d_gi @ p["w_ih"], dh_direct + d_gh @ p["w_hh"], dc_prev


def _running(dims: RNNDims) -> np.ndarray:
    """(T, B, 1): whether sequence b still runs at time t."""
    lengths = dims.lengths if dims.lengths is not None else (dims.seq_len,) * dims.batch
    return (np.arange(dims.seq_len)[:, None] < np.asarray(lengths)[None, :])[:, :, None]


def _times(dims: RNNDims, direction: int) -> range:
    return range(dims.seq_len) if direction == 0 else range(dims.seq_len - 1, -1, -1)


def _selected(run: np.ndarray, a: Any) -> Any:
    return None if a is None else np.where(run, a, 0.0)


def _direction(dims: RNNDims, p: dict, xs: np.ndarray, h: np.ndarray, c: Any, direction: int) -> tuple:
    """One layer in one direction: (outputs (T, B, out), last h, last c, each step's (h, c, tape))."""
    running = _running(dims)
    out = np.zeros((dims.seq_len, dims.batch, dims.out_size))
    steps = {}
    for t in _times(dims, direction):
        h_new, c_new, tape = _step(dims.mode, p, xs[t], h, c)
        # what the backward reads, zero for the sequences this step does not run (exactly zero gradients there)
        steps[t] = (_selected(running[t], h), _selected(running[t], c), tuple(_selected(running[t], a) for a in tape))
        out[t] = np.where(running[t], h_new, 0.0)
        h = np.where(running[t], h_new, h)
        c = None if c is None else np.where(running[t], c_new, c)
    return out, h, c, steps


def _direction_back(dims: RNNDims, p: dict, xs: np.ndarray, steps: dict, dys: np.ndarray, dh: np.ndarray,
                    dc: Any, direction: int) -> tuple:
    """The gradients of :func:`_direction`: (dxs, dh0, dc0, the weights' gradients by name)."""
    running = _running(dims)
    grads = {name: np.zeros_like(a) for name, a in p.items()}
    dxs = np.zeros_like(xs)
    for t in reversed(_times(dims, direction)):
        h, c, tape = steps[t]
        run = running[t]
        dx, dh_prev, dc_prev = _step_back(dims.mode, p, grads, xs[t], h, c, tape, np.where(run, dh + dys[t], 0.0),
                                          None if dc is None else np.where(run, dc, 0.0))
        dxs[t] = dx
        dh = np.where(run, dh_prev, dh)
        dc = None if dc is None else np.where(run, dc_prev, dc)
    return dxs, dh, dc, grads


def _unpack(saved: Sequence[np.ndarray], dims: RNNDims) -> tuple[np.ndarray, np.ndarray, Any, list[dict]]:
    """(x, h0, c0, each entry's weights by name) from the residuals."""
    lstm = dims.mode == "lstm"
    names = _NAMES[:2] + (_NAMES[2:4] if dims.has_bias else ()) + (_NAMES[4:] if dims.proj_size else ())
    entries = dims.num_layers * dims.num_directions
    expected = 2 + lstm + entries * len(names)
    if len(saved) != expected:
        raise ValueError(f"rnn residuals: {len(saved)} arrays, but mode={dims.mode!r} with num_layers="
                         f"{dims.num_layers} and num_directions={dims.num_directions} saves {expected}")
    at = 2 + lstm
    params = [dict(zip(names, saved[at + i * len(names):at + (i + 1) * len(names)])) for i in range(entries)]
    return saved[0], saved[1], saved[2] if lstm else None, params


def _network(saved: Sequence[np.ndarray], dims: RNNDims) -> tuple:
    """Run every layer: ((y, hy, cy), each layer's input, each entry's steps)."""
    x, h0, c0, params = _unpack(saved, dims)
    hy, cy = np.empty(dims.h_shape), None if c0 is None else np.empty(dims.c_shape)
    inputs, steps, layer_in = [], [], x
    for layer in range(dims.num_layers):
        inputs.append(layer_in)
        outs = []
        for d in range(dims.num_directions):
            idx = layer * dims.num_directions + d
            out, hy[idx], c_last, recorded = _direction(dims, params[idx], layer_in, h0[idx],
                                                        None if c0 is None else c0[idx], d)
            if cy is not None:
                cy[idx] = c_last
            outs.append(out)
            steps.append(recorded)
        layer_in = np.concatenate(outs, axis=2)
    return (layer_in, hy, cy), inputs, params, steps


def rnn_forward(x: np.ndarray, weights: Sequence[Sequence[np.ndarray | None]], h0: np.ndarray | None,
                c0: np.ndarray | None, dims: RNNDims) -> tuple[tuple, tuple[np.ndarray, ...]]:
    """((y, hy, cy), residuals); cy is None unless LSTM."""
    lstm = dims.mode == "lstm"
    x64 = np.where(_running(dims), as64(x), 0.0)          # x's padding never matters
    saved = [x64, np.zeros(dims.h_shape) if h0 is None else as64(h0)]
    if lstm:
        saved.append(np.zeros(dims.c_shape) if c0 is None else as64(c0))
    saved += [as64(a) for entry in weights for a in entry if a is not None]
    (y, hy, cy), *_ = _network(saved, dims)
    return (cast(y, x.dtype), cast(hy, x.dtype), cast(cy, x.dtype)), tuple(saved)


def rnn_backward(saved: tuple, cotangents: tuple, dims: RNNDims, *,
                 needs: tuple[bool, ...] | None = None) -> tuple[Any, Any, Any, list]:
    """(dx, dh0, dc0, dweights) from the cotangents (dy, dhy, dcy); dhy and dcy may be None or left out
    (zeros). dc0 is None unless LSTM; dweights[i] = (dw_ih, dw_hh, db_ih, db_hh) (biases None without
    them), with dw_hr as a 5th array with a projection. All are computed; those ``needs`` marks False
    come back as None."""
    if not 1 <= len(cotangents) <= 3:
        raise TypeError(f"rnn takes the cotangents (dy, dhy, dcy), got {len(cotangents)}")
    dy, dhy, dcy = tuple(cotangents) + (None,) * (3 - len(cotangents))
    lstm, dtype = dims.mode == "lstm", dy.dtype
    if dcy is not None and not lstm:
        raise ValueError(f"dcy is only used by mode='lstm', not mode={dims.mode!r}")
    _, inputs, params, steps = _network(saved, dims)
    d_out = cotangent("dy", dy, dims.y_shape, F64)
    dhy = np.zeros(dims.h_shape) if dhy is None else cotangent("dhy", dhy, dims.h_shape, F64)
    dcy = np.zeros(dims.c_shape) if dcy is None and lstm else dcy
    dcy = None if dcy is None else cotangent("dcy", dcy, dims.c_shape, F64)
    dh0, dc0 = np.empty(dims.h_shape), None if dcy is None else np.empty(dims.c_shape)
    dweights: list[Any] = [None] * len(params)
    P = dims.out_size
    for layer in range(dims.num_layers - 1, -1, -1):
        d_in = np.zeros_like(inputs[layer])
        for d in range(dims.num_directions):
            idx = layer * dims.num_directions + d
            dxs, dh0[idx], dc, grads = _direction_back(dims, params[idx], inputs[layer], steps[idx],
                                                       d_out[:, :, d * P:(d + 1) * P], dhy[idx],
                                                       None if dcy is None else dcy[idx], d)
            d_in += dxs
            if dc0 is not None:
                dc0[idx] = dc
            names = _NAMES[:4] + (_NAMES[4:] if dims.proj_size else ())
            dweights[idx] = tuple(cast(grads.get(name), dtype) for name in names)
        d_out = d_in
    return only_needed((cast(d_out, dtype), cast(dh0, dtype), cast(dc0, dtype), dweights), needs)


def rnn_residuals(x: ArraySpec, weights: Sequence[Sequence[ArraySpec | None]], h0: ArraySpec | None,
                  c0: ArraySpec | None, dims: RNNDims) -> tuple[ArraySpec, ...]:
    """x, h0, c0 (LSTM only) and every weight array, in float64."""
    shapes = [tuple(x.shape), dims.h_shape] + ([dims.c_shape] if dims.mode == "lstm" else [])
    shapes += [tuple(a.shape) for entry in weights for a in entry if a is not None]
    return tuple(ArraySpec(s, F64) for s in shapes)
