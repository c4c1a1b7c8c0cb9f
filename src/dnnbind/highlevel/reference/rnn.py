"""Multi-layer, optionally bidirectional RNN / LSTM / GRU on numpy, with PyTorch's weights and semantics.

Per layer and direction the input projection for all time steps is one matrix product; the loop over
time steps then does one (batch, hidden) x (hidden, gates*hidden) product and a few vectorised
pointwise operations per step. The forward pass records a tape (gate activations, states before each
step); the pullback runs the steps backwards and forms the weight gradients with one product each.

Variable lengths follow PyTorch's packed sequences: a sequence with length L only takes steps t < L;
its state stays frozen elsewhere (so the forward direction's final state is the one at step L - 1 and
the reverse direction starts from h0 at step L - 1), and y is zero at padded positions.

The tape is indexed by step number k (time t = k forwards, T - 1 - k in reverse).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from dnnbind.highlevel.dims import RNNDims
from dnnbind.highlevel.reference._precision import cotangent, half_in_float32


def _sigmoid_(a: np.ndarray) -> np.ndarray:
    """In-place logistic function via tanh: sigmoid(a) = (1 + tanh(a/2)) / 2."""
    a *= 0.5
    np.tanh(a, out=a)
    a += 1
    a *= 0.5
    return a


def _rows(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(T, B, G) x (G, I) as one matrix product over all T * B rows."""
    return np.matmul(a.reshape(-1, a.shape[-1]), w).reshape(a.shape[:2] + (-1,))


def _merge(m: np.ndarray | None, new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """The state after a step: ``new`` where the sequence is still running, ``old`` (frozen) elsewhere."""
    return new if m is None else np.where(m, new, old)


class _Direction:
    """One layer in one direction: weights, the forward loop, and its tape."""

    gates = 1

    def __init__(self, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray | None,
                 b_hh: np.ndarray | None, hidden: int) -> None:
        self.hidden = hidden
        self.w_ih, self.w_hh, self.b_ih, self.b_hh = w_ih, w_hh, b_ih, b_hh

    # input side, shared by all modes: x (T, B, I) -> (T, B, G*H)
    def project(self, x: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        xp = np.matmul(x.reshape(-1, x.shape[-1]), self.w_ih_t).reshape(x.shape[:2] + (-1,))
        if bias is not None:
            xp += bias
        return xp


class _Plain(_Direction):
    """Elman RNN: h' = act(W_ih x + b_ih + W_hh h + b_hh), act in relu, tanh."""

    def __init__(self, w_ih, w_hh, b_ih, b_hh, hidden, relu: bool) -> None:
        super().__init__(w_ih, w_hh, b_ih, b_hh, hidden)
        self.relu = relu
        self.w_ih_t = np.ascontiguousarray(w_ih.T)
        self.w_hh_t = np.ascontiguousarray(w_hh.T)
        self.bias = None if b_ih is None else b_ih + b_hh

    def forward(self, x, h0, c0, steps, masks, out):
        xp = self.project(x, self.bias)
        T = len(steps)
        hs = np.empty((T + 1,) + h0.shape, h0.dtype)
        hs[0] = h0
        for k, t in enumerate(steps):
            pre = np.matmul(hs[k], self.w_hh_t)
            pre += xp[t]
            if self.relu:
                np.maximum(pre, 0, out=pre)
            else:
                np.tanh(pre, out=pre)
            hs[k + 1] = _merge(masks[k], pre, hs[k])
            out[t] = pre if masks[k] is None else pre * masks[k]
        self.hs = hs
        return hs[T], None

    def backward(self, dyk, dh, dc, masks):
        hs = self.hs
        T = len(masks)
        dpre = np.empty((T,) + dh.shape, dh.dtype)
        for k in range(T - 1, -1, -1):
            m = masks[k]
            dh_t = dh + dyk[k]
            d = dpre[k]
            # hs[k + 1] is the new state where m holds; elsewhere the gradient passes through
            if self.relu:
                np.multiply(dh_t, hs[k + 1] > 0, out=d)
            else:
                np.multiply(dh_t, 1 - hs[k + 1] * hs[k + 1], out=d)
            if m is not None:
                d *= m
            dh = np.matmul(d, self.w_hh)
            if m is not None:
                dh += dh_t * ~m
        flat = dpre.reshape(-1, dpre.shape[-1])
        dw_hh = flat.T @ hs[:-1].reshape(-1, hs.shape[-1])
        db = flat.sum(axis=0) if self.b_ih is not None else None
        return dpre, dh, None, dw_hh, db, db

    def finish(self, dgates_ih, x_steps):
        flat = dgates_ih.reshape(-1, dgates_ih.shape[-1])
        return flat.T @ x_steps.reshape(-1, x_steps.shape[-1]), _rows(dgates_ih, self.w_ih)


class _LSTM(_Direction):
    """LSTM with PyTorch's gate order i, f, g, o; internally reordered to i, f, o, g so that the three
    sigmoid gates are contiguous."""

    gates = 4

    def __init__(self, w_ih, w_hh, b_ih, b_hh, hidden) -> None:
        super().__init__(w_ih, w_hh, b_ih, b_hh, hidden)
        H = hidden
        self.perm = np.r_[0:2 * H, 3 * H:4 * H, 2 * H:3 * H]
        self.w_ih_p = w_ih[self.perm]
        self.w_ih_t = np.ascontiguousarray(self.w_ih_p.T)
        self.w_hh_p = np.ascontiguousarray(w_hh[self.perm])
        self.w_hh_t = np.ascontiguousarray(self.w_hh_p.T)
        self.bias = None if b_ih is None else (b_ih + b_hh)[self.perm]

    def forward(self, x, h0, c0, steps, masks, out):
        H = self.hidden
        xp = self.project(x, self.bias)
        T = len(steps)
        shape = (T,) + xp.shape[1:]
        acts = np.empty(shape, xp.dtype)              # activated gates i, f, o, g per step
        hs = np.empty((T + 1,) + h0.shape, h0.dtype)  # hs[k]: h before step k
        cs = np.empty((T + 1,) + h0.shape, h0.dtype)
        tcs = np.empty((T,) + h0.shape, h0.dtype)     # tanh of the new cell
        hs[0], cs[0] = h0, c0
        for k, t in enumerate(steps):
            a = acts[k]
            np.matmul(hs[k], self.w_hh_t, out=a)
            a += xp[t]
            _sigmoid_(a[:, :3 * H])
            np.tanh(a[:, 3 * H:], out=a[:, 3 * H:])
            i, f, o, g = a[:, :H], a[:, H:2 * H], a[:, 2 * H:3 * H], a[:, 3 * H:]
            c = f * cs[k]
            c += i * g
            tc = tcs[k]
            np.tanh(c, out=tc)
            h = o * tc
            m = masks[k]
            if m is None:
                cs[k + 1], hs[k + 1] = c, h
                out[t] = h
            else:
                np.copyto(cs[k + 1], np.where(m, c, cs[k]))
                np.copyto(hs[k + 1], np.where(m, h, hs[k]))
                out[t] = h * m
        self.acts, self.hs, self.cs, self.tcs = acts, hs, cs, tcs
        return hs[T], cs[T]

    def backward(self, dyk, dh, dc, masks):
        H = self.hidden
        acts, cs, tcs = self.acts, self.cs, self.tcs
        T = len(masks)
        dgates = np.empty(acts.shape, acts.dtype)
        for k in range(T - 1, -1, -1):
            m = masks[k]
            a = acts[k]
            i, f, o, g = a[:, :H], a[:, H:2 * H], a[:, 2 * H:3 * H], a[:, 3 * H:]
            tc = tcs[k]
            dh_t = dh + dyk[k]
            dh_new = dh_t if m is None else dh_t * m
            dc_new = dh_new * o
            dc_new *= 1 - tc * tc
            dc_new += dc if m is None else dc * m
            d = dgates[k]
            np.multiply(dc_new, g, out=d[:, :H])
            np.multiply(dc_new, cs[k], out=d[:, H:2 * H])
            np.multiply(dh_new, tc, out=d[:, 2 * H:3 * H])
            np.multiply(dc_new, i, out=d[:, 3 * H:])
            s = a[:, :3 * H]
            d[:, :3 * H] *= s * (1 - s)
            d[:, 3 * H:] *= 1 - g * g
            dc_prev = dc_new * f
            dh = np.matmul(d, self.w_hh_p)
            if m is not None:
                dc_prev += dc * ~m
                dh += dh_t * ~m
            dc = dc_prev
        flat = dgates.reshape(-1, dgates.shape[-1])
        dw_hh = self._unperm(flat.T @ self.hs[:-1].reshape(-1, H))
        db = self._unperm(flat.sum(axis=0)) if self.b_ih is not None else None
        return dgates, dh, dc, dw_hh, db, db

    def finish(self, dgates_ih, x_steps):
        flat = dgates_ih.reshape(-1, dgates_ih.shape[-1])
        dw_ih = self._unperm(flat.T @ x_steps.reshape(-1, x_steps.shape[-1]))
        return dw_ih, _rows(dgates_ih, self.w_ih_p)

    def _unperm(self, a: np.ndarray) -> np.ndarray:
        out = np.empty_like(a)
        out[self.perm] = a
        return out


class _GRU(_Direction):
    """GRU with PyTorch's gate order r, z, n and n = tanh(W_in x + b_in + r * (W_hn h + b_hn))."""

    gates = 3

    def __init__(self, w_ih, w_hh, b_ih, b_hh, hidden) -> None:
        super().__init__(w_ih, w_hh, b_ih, b_hh, hidden)
        self.w_ih_t = np.ascontiguousarray(w_ih.T)
        self.w_hh_t = np.ascontiguousarray(w_hh.T)

    def forward(self, x, h0, c0, steps, masks, out):
        H = self.hidden
        xp = self.project(x, self.b_ih)
        T = len(steps)
        hh = np.empty((T,) + xp.shape[1:], xp.dtype)   # W_hh h + b_hh per step (its n part is kept)
        rzn = np.empty((T,) + xp.shape[1:], xp.dtype)  # activated r, z, n
        hs = np.empty((T + 1,) + h0.shape, h0.dtype)
        hs[0] = h0
        for k, t in enumerate(steps):
            q = hh[k]
            np.matmul(hs[k], self.w_hh_t, out=q)
            if self.b_hh is not None:
                q += self.b_hh
            a = rzn[k]
            np.add(xp[t][:, :2 * H], q[:, :2 * H], out=a[:, :2 * H])
            _sigmoid_(a[:, :2 * H])
            r, z, n = a[:, :H], a[:, H:2 * H], a[:, 2 * H:]
            np.multiply(r, q[:, 2 * H:], out=n)
            n += xp[t][:, 2 * H:]
            np.tanh(n, out=n)
            h = hs[k] - n
            h *= z
            h += n
            m = masks[k]
            np.copyto(hs[k + 1], _merge(m, h, hs[k]))
            out[t] = h if m is None else h * m
        self.hh, self.rzn, self.hs = hh, rzn, hs
        return hs[T], None

    def backward(self, dyk, dh, dc, masks):
        H = self.hidden
        hs, rzn, hh = self.hs, self.rzn, self.hh
        T = len(masks)
        dx_gates = np.empty(rzn.shape, rzn.dtype)   # gradients of W_ih x + b_ih
        dh_gates = np.empty(rzn.shape, rzn.dtype)   # gradients of W_hh h + b_hh
        for k in range(T - 1, -1, -1):
            m = masks[k]
            a = rzn[k]
            r, z, n = a[:, :H], a[:, H:2 * H], a[:, 2 * H:]
            dh_t = dh + dyk[k]
            dh_new = dh_t if m is None else dh_t * m
            dxg, dhg = dx_gates[k], dh_gates[k]
            dn = dh_new * (1 - z)
            dn *= 1 - n * n
            dxg[:, 2 * H:] = dn
            np.multiply(dn, r, out=dhg[:, 2 * H:])
            np.multiply(dn, hh[k][:, 2 * H:], out=dxg[:, :H])          # d r
            np.subtract(hs[k], n, out=dxg[:, H:2 * H])
            dxg[:, H:2 * H] *= dh_new                                  # d z
            rz = a[:, :2 * H]
            dxg[:, :2 * H] *= rz * (1 - rz)
            dhg[:, :2 * H] = dxg[:, :2 * H]
            dh = np.matmul(dhg, self.w_hh)
            dh += dh_new * z
            if m is not None:
                dh += dh_t * ~m
        flat = dh_gates.reshape(-1, dh_gates.shape[-1])
        dw_hh = flat.T @ hs[:-1].reshape(-1, H)
        has_bias = self.b_ih is not None
        db_hh = flat.sum(axis=0) if has_bias else None
        db_ih = dx_gates.reshape(-1, dx_gates.shape[-1]).sum(axis=0) if has_bias else None
        return dx_gates, dh, None, dw_hh, db_ih, db_hh

    def finish(self, dgates_ih, x_steps):
        flat = dgates_ih.reshape(-1, dgates_ih.shape[-1])
        return flat.T @ x_steps.reshape(-1, x_steps.shape[-1]), _rows(dgates_ih, self.w_ih)


def _make(dims: RNNDims, entry: Sequence[np.ndarray | None]) -> _Direction:
    if dims.mode == "lstm":
        return _LSTM(*entry, dims.hidden_size)
    if dims.mode == "gru":
        return _GRU(*entry, dims.hidden_size)
    return _Plain(*entry, dims.hidden_size, relu=dims.mode == "rnn_relu")


@half_in_float32
def rnn(x: np.ndarray, weights: Sequence[Sequence[np.ndarray | None]], h0: np.ndarray | None,
        c0: np.ndarray | None, dims: RNNDims) -> tuple[tuple, Callable]:
    """Run the network; returns ((y, hy, cy), pullback) with cy None unless LSTM."""
    T, H, D = dims.seq_len, dims.hidden_size, dims.num_directions
    dtype = x.dtype
    lstm = dims.mode == "lstm"
    h0 = np.zeros(dims.h_shape, dtype) if h0 is None else h0
    c0 = (np.zeros(dims.h_shape, dtype) if c0 is None else c0) if lstm else None
    if dims.lengths is None:
        running = None
    else:
        running = (np.arange(T)[:, None] < np.asarray(dims.lengths)[None, :])[:, :, None]
    orders = [list(range(T)), list(range(T - 1, -1, -1))]
    step_masks = [[None] * T if running is None else [running[t] for t in order] for order in orders]

    cells: list[_Direction] = []
    inputs: list[np.ndarray] = []
    hy = np.empty(dims.h_shape, dtype)
    cy = np.empty(dims.h_shape, dtype) if lstm else None
    layer_in = x
    for layer in range(dims.num_layers):
        out = np.empty((T, dims.batch, D * H), dtype)
        for d in range(D):
            idx = layer * D + d
            cell = _make(dims, weights[idx])
            h, c = cell.forward(layer_in, h0[idx], None if c0 is None else c0[idx], orders[d],
                                step_masks[d], out[:, :, d * H:(d + 1) * H])
            hy[idx] = h
            if lstm:
                cy[idx] = c
            cells.append(cell)
        inputs.append(layer_in)
        layer_in = out
    y = layer_in

    def pullback(dy: np.ndarray, dhy: np.ndarray | None = None,
                 dcy: np.ndarray | None = None) -> tuple[Any, Any, Any, list]:
        dy = cotangent("dy", dy, dims.y_shape, dtype)
        dhy = np.zeros(dims.h_shape, dtype) if dhy is None else cotangent("dhy", dhy, dims.h_shape, dtype)
        if lstm:
            dcy = np.zeros(dims.h_shape, dtype) if dcy is None else cotangent("dcy", dcy, dims.h_shape, dtype)
        elif dcy is not None:
            raise ValueError(f"dcy is only used by mode='lstm', not mode={dims.mode!r}")
        if running is not None:
            dy = dy * running  # y is constant zero at padded positions
        dh0 = np.empty(dims.h_shape, dtype)
        dc0 = np.empty(dims.h_shape, dtype) if lstm else None
        dweights: list[tuple] = [()] * len(cells)
        d_out = dy
        for layer in range(dims.num_layers - 1, -1, -1):
            d_in = None
            for d in range(D):
                idx = layer * D + d
                cell = cells[idx]
                order = orders[d]
                dyk = d_out[:, :, d * H:(d + 1) * H]
                if d == 1:
                    dyk = dyk[::-1]
                dgates, dh, dc, dw_hh, db_ih, db_hh = cell.backward(
                    dyk, dhy[idx], None if dcy is None else dcy[idx], step_masks[d])
                x_steps = inputs[layer] if d == 0 else inputs[layer][::-1]
                dw_ih, dx_steps = cell.finish(dgates, x_steps)
                dx_part = dx_steps if d == 0 else dx_steps[::-1]
                d_in = dx_part if d_in is None else d_in + dx_part
                dh0[idx] = dh
                if lstm:
                    dc0[idx] = dc
                dweights[idx] = (dw_ih, dw_hh, db_ih, db_hh)
                del order
            d_out = d_in
        return np.ascontiguousarray(d_out), dh0, dc0, dweights

    return (y, hy, cy), pullback
