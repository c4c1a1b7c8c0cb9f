"""Multi-layer, optionally bidirectional RNN / LSTM / GRU on numpy, with PyTorch's weights and semantics.

Inside the time loop states and gates are kept feature-major, (features, batch): the recurrent product
is then W_hh (G*H, H) @ h (H, batch), which BLAS runs markedly faster than the batch-major
(batch, H) @ (H, G*H) for the usual small batches, and every gate is a contiguous block of rows. The
input projection of all time steps is one batched product before the loop; the weight gradients are
one product each after the backward loop.

Sigmoid gates use sigmoid(z) = (1 + tanh(z/2)) / 2. Their weight rows are pre-scaled by 1/2 for the
forward pass (exact in binary floating point), so one tanh covers all gates of a step. The backward pass
uses the unscaled weights.

Variable lengths follow PyTorch's packed sequences: a sequence with length L only takes steps t < L;
its state stays frozen elsewhere (so the forward direction's final state is the one at step L - 1 and
the reverse direction starts from h0 at step L - 1), and y is zero at padded positions. Padding is
masked by selection, never by multiplication: padded outputs and their gradients are exactly 0 whatever
the data (a NaN at a sequence's last step, or in x's padding, stays where it is).

Tapes are indexed by step number k (time t = k forwards, T - 1 - k in reverse).

Residual form (:mod:`dnnbind.highlevel.residual`): ``rnn_forward`` saves a flat tuple of arrays, all
the forward's own, layer by layer: the layer's input (layer 0: a copy of x, its padding zeroed; then the
previous layer's output), then per direction w_ih, w_hh (copies; the backward never reads the biases),
w_hr (a copy; only with ``dims.proj_size``) and the cell's tapes, feature-major in step order: plain RNN hs; LSTM the activated gates, hs, cs and
tanh of the cells (with a projection, hs holds the projected states and the unprojected
o * tanh(c) is recomputed by the backward from the gates and tanh of the cells); GRU hh, the activated gates and hs (``TAPES`` and ``tape_shapes`` of each cell).
``rnn_backward`` rebuilds the cells from them (:meth:`_Direction.restore`) and recomputes the
packed-sequence masks from ``dims.lengths``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence, Self

import numpy as np

from dnnbind.highlevel.dims import RNNDims
from dnnbind.highlevel.grad_mode import own
from dnnbind.highlevel.cpu import native
from dnnbind.highlevel.cpu._precision import cotangent, half_backward, half_forward, half_residuals
from dnnbind.highlevel.cpu._threads import blas_single_threaded, workers
from dnnbind.highlevel.cpu.conv_paths import GEMM_THREAD_MIN_MACS, NATIVE_THREAD_MIN_MACS, product
from dnnbind.highlevel.residual import ArraySpec, only_needed

Shape = tuple[int, ...]


def _half_rows(a: np.ndarray | None, rows: slice) -> np.ndarray | None:
    """Copy of ``a`` with ``rows`` (the sigmoid gates) multiplied by 1/2."""
    if a is None:
        return None
    out = np.array(a)
    out[rows] *= 0.5
    return out


class _Direction:
    """One layer in one direction: its weights, and (in subclasses) the forward loop that records a
    tape and the backward loop that reads it. ``forward(x, h0, c0, steps, masks)`` returns the states
    hs (T + 1, H, B) and the last cell; ``backward(dy, dhy, dcy, masks)`` returns the pre-activation
    gradients of the input and recurrent products and dh0, dc0.

    ``TAPES`` names the arrays the forward loop records and the backward loop reads (``tape_shapes``
    gives their shapes); a cell for the backward pass is rebuilt from its weights and those arrays by
    :meth:`restore`."""

    TAPES: tuple[str, ...] = ("hs",)
    hs: np.ndarray          # the states the forward pass recorded, (T + 1, H, B) (LSTM projection: P rows)
    w_hr: np.ndarray | None = None      # LSTM projection (P, H)
    dw_hr: np.ndarray | None = None     # its gradient, set by the backward loop

    def __init__(self, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray | None,
                 b_hh: np.ndarray | None, hidden: int) -> None:
        self.hidden = hidden
        self.w_ih, self.w_hh, self.b_ih, self.b_hh = w_ih, w_hh, b_ih, b_hh
        self.has_bias = b_ih is not None

    @classmethod
    def tape_shapes(cls, steps: int, hidden: int, batch: int, out: int | None = None) -> tuple[Shape, ...]:
        """The shapes of the arrays named by ``TAPES`` for ``steps`` steps (``out``: the state's size,
        the projection's with one, else ``hidden``)."""
        return ((steps + 1, hidden, batch),)

    def tapes(self) -> tuple[np.ndarray, ...]:
        """What the forward loop recorded, in ``TAPES`` order."""
        return tuple(getattr(self, name) for name in self.TAPES)

    @classmethod
    def restore(cls, dims: RNNDims, w_ih: np.ndarray, w_hh: np.ndarray, tapes: Sequence[np.ndarray],
                w_hr: np.ndarray | None = None) -> Self:
        """A cell for the backward pass only: the unscaled weights and the tapes its forward pass
        recorded (``TAPES`` order). Nothing is computed; the biases are not needed (b_ih, b_hh None)."""
        cell = cls.__new__(cls)
        _Direction.__init__(cell, w_ih, w_hh, None, None, dims.hidden_size)
        cell.has_bias = dims.has_bias
        cell.w_hr = w_hr
        for name, tape in zip(cls.TAPES, tapes, strict=True):
            setattr(cell, name, tape)
        return cell

    def forward(self, x: np.ndarray, h0: np.ndarray, c0: np.ndarray | None, steps: Any,
                masks: Sequence[np.ndarray | None]) -> tuple[np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def backward(self, dyk: np.ndarray, dh: np.ndarray, dc: np.ndarray | None,
                 masks: Sequence[np.ndarray | None]) -> tuple[Any, Any, np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def project(self, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        """W x_t (+ bias) for every step: (T, B, I) -> (G*H, T, B), one product over all T*B columns
        (a single large GEMM runs far faster than T thin ones); step t is the (G*H, B) view [:, t]."""
        steps, batch = x.shape[0], x.shape[1]
        xp = _split_product(w, np.ascontiguousarray(x).reshape(steps * batch, -1).T)
        if bias is not None:
            xp += bias[:, None]
        return xp.reshape(w.shape[0], steps, batch)

    def param_grads(self, d_pre_x: np.ndarray, d_pre_h: np.ndarray, x_steps: np.ndarray, weights: bool = True,
                    dx: bool = True) -> tuple:
        """(dW_ih, dW_hh, db_ih, db_hh, dx) from the pre-activation gradients (T, G*H, B) of the input
        and recurrent products (the same array except for GRU; d_pre_x may come as the (G*H, T*B) matrix
        below already), with x (T, B, I) in step order; the weights' gradients None unless ``weights``,
        dx None unless ``dx``.

        Each becomes one (G*H, T*B) matrix, columns ordered like x's rows, so that every weight gradient
        is a single product; where both are one array (LSTM, RNN), both weight gradients and the bias
        gradient are one product by x, the previous states and a column of ones side by side, which packs
        that matrix once (measured, (512, 480) by 64 and by 128 columns: 423 us as two products, 362 as
        one) and reads it once more than the weights' products alone (inside an LSTM's training step
        the bias gradient's own pass over it, a product by ones, took 70 us a layer). Elsewhere (GRU)
        the bias gradients are products by a vector of ones (13 us against numpy's sum's 52 there).
        """
        if not (weights or dx):
            return None, None, None, None, None
        # (T, G*H, B) step by step, or already the (G*H, T*B) matrix (native.lstm_backward's)
        gx = d_pre_x if d_pre_x.ndim == 2 else native.swap_axes(d_pre_x, 0).reshape(d_pre_x.shape[1], -1)
        dw_ih = dw_hh = db_ih = db_hh = None
        if weights:
            dw_ih, dw_hh, db_ih, db_hh = self._weight_grads(gx, d_pre_h, d_pre_h is d_pre_x, x_steps)
        x_grad = _split_product(gx.T, self.w_ih).reshape(x_steps.shape) if dx else None
        return dw_ih, dw_hh, db_ih, db_hh, x_grad

    def _weight_grads(self, gx: np.ndarray, d_pre_h: np.ndarray, shared: bool, x_steps: np.ndarray) -> tuple:
        """(dW_ih, dW_hh, db_ih, db_hh) of :meth:`param_grads` from gx, d_pre_x as one matrix, and
        d_pre_h (the same array where ``shared``)."""
        inputs, hidden = x_steps.shape[-1], self.hs.shape[1]
        db_ih = db_hh = None
        if shared:
            # [x | h_prev | 1]: both weight gradients and the bias gradient in one product
            beside = np.empty(x_steps.shape[:2] + (inputs + hidden + self.has_bias,), gx.dtype)
            beside[..., :inputs] = x_steps
            beside[..., inputs:inputs + hidden] = self.hs[:-1].transpose(0, 2, 1)
            if self.has_bias:
                beside[..., -1] = 1
            both = _split_product(gx, beside.reshape(gx.shape[1], -1))
            dw_ih, dw_hh = np.ascontiguousarray(both[:, :inputs]), np.ascontiguousarray(both[:, inputs:inputs + hidden])
            if self.has_bias:
                db_ih, db_hh = both[:, -1].copy(), both[:, -1].copy()
            return dw_ih, dw_hh, db_ih, db_hh
        gh_mat = native.swap_axes(d_pre_h, 0).reshape(gx.shape[0], -1)
        h_prev = native.swap_axes(self.hs[:-1], 0).reshape(hidden, -1)
        dw_ih = _split_product(gx, x_steps.reshape(-1, inputs))
        dw_hh = _split_product(gh_mat, h_prev.T)
        if self.has_bias:
            ones = np.ones(gx.shape[1], gx.dtype)
            db_ih, db_hh = gx @ ones, gh_mat @ ones
        return dw_ih, dw_hh, db_ih, db_hh


def _split_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b, its rows split over the kernels' team where numpy's BLAS is held to one thread and the cores
    are to spare (:func:`native.cores_to_spare`): inside :func:`native.every_core` around the LSTM's C
    time loop, and under dnnbind.torch, whose team is torch's (a weight gradient's product would otherwise
    run on one core; measured, a (50, 32, 128 -> 256) layer's backward 22.9-23.9 ms so, 17.8-18.5 split;
    under dnnbind.torch, a (512, 480) by (480, 128) float32 product 455 us so, 261 split), else np.matmul."""
    out = np.empty((a.shape[0], b.shape[1]), np.result_type(a, b))
    # the C team's split pays from the kernels' threshold on, Python threads' from the BLAS paths'
    least = NATIVE_THREAD_MIN_MACS if native.split_product_available(out.dtype) else GEMM_THREAD_MIN_MACS
    threaded = (a.shape[0] * a.shape[1] * b.shape[1] >= least and a.shape[0] >= 2 * workers()
                and blas_single_threaded() and native.cores_to_spare())
    product(a, b, out, threaded=threaded, by_rows=True)
    return out


def _padded_zero(m: np.ndarray | None, grads: np.ndarray) -> None:
    """Set the columns of padded sequences (not m) to exactly 0, in place, whatever they hold."""
    if m is not None:
        np.copyto(grads, 0, where=~m)


def _passed(m: np.ndarray | None, new: np.ndarray, carried: np.ndarray) -> np.ndarray:
    """The state gradient before a step: ``new`` where the sequence runs (m), else ``carried`` through."""
    return new if m is None else np.where(m, new, carried)


def _frozen(m: np.ndarray | None, new: np.ndarray, old: np.ndarray, out: np.ndarray) -> None:
    """out <- new where the sequence is still running (m), else the frozen old state."""
    if m is None:
        if out is not new:
            np.copyto(out, new)
    else:
        np.copyto(out, np.where(m, new, old))


class _Plain(_Direction):
    """Elman RNN: h' = act(W_ih x + b_ih + W_hh h + b_hh), act in relu, tanh."""

    def __init__(self, w_ih, w_hh, b_ih, b_hh, hidden, relu: bool) -> None:
        super().__init__(w_ih, w_hh, b_ih, b_hh, hidden)
        self.relu = relu

    @classmethod
    def restore(cls, dims: RNNDims, w_ih: np.ndarray, w_hh: np.ndarray, tapes: Sequence[np.ndarray],
                w_hr: np.ndarray | None = None) -> Self:
        cell = super().restore(dims, w_ih, w_hh, tapes, w_hr)
        cell.relu = dims.mode == "rnn_relu"
        return cell

    def forward(self, x, h0, c0, steps, masks):
        xp = self.project(x, self.w_ih, None if not self.has_bias else self.b_ih + self.b_hh)
        T = len(steps)
        hs = np.empty((T + 1,) + h0.shape, h0.dtype)
        hs[0] = h0
        pre = np.empty_like(h0)
        for k, t in enumerate(steps):
            np.matmul(self.w_hh, hs[k], out=pre)
            pre += xp[:, t]
            if self.relu:
                np.maximum(pre, 0, out=pre)
            else:
                np.tanh(pre, out=pre)
            _frozen(masks[k], pre, hs[k], hs[k + 1])
        self.hs = hs
        return hs, None

    def backward(self, dyk, dh, dc, masks):
        hs = self.hs[1:]
        # derivative of the activation for every step at once, outside the loop
        slope = (~(hs <= 0)).astype(hs.dtype) if self.relu else 1 - hs * hs     # NaN passes, as in torch
        w_hh_t = self.w_hh.T
        for k in range(len(masks) - 1, -1, -1):
            m = masks[k]
            dh_t = dh + dyk[k]
            d = slope[k]
            d *= dh_t
            _padded_zero(m, d)
            dh = _passed(m, np.matmul(w_hh_t, d), dh_t)
        return slope, slope, dh, None


class _LSTM(_Direction):
    """LSTM with PyTorch's gate order i, f, g, o (sigmoid gates: rows [0, 2H) and [3H, 4H)), and with
    ``w_hr`` (P, H) torch's projection h = W_hr (o * tanh(c))."""

    TAPES = ("acts", "hs", "cs", "tcs")
    acts: np.ndarray        # activated gates i, f, g, o per step, (T, 4H, B)
    cs: np.ndarray          # cells, (T + 1, H, B)
    tcs: np.ndarray         # tanh of the new cell per step, (T, H, B)

    @classmethod
    def tape_shapes(cls, steps: int, hidden: int, batch: int, out: int | None = None) -> tuple[Shape, ...]:
        return (steps, 4 * hidden, batch), (steps + 1, out or hidden, batch), (steps + 1, hidden, batch), (
            steps, hidden, batch)

    def __init__(self, w_ih, w_hh, b_ih, b_hh, hidden, w_hr=None) -> None:
        super().__init__(w_ih, w_hh, b_ih, b_hh, hidden)
        self.w_hr = w_hr

    def _native(self, masks: Sequence[np.ndarray | None]) -> bool:
        """Whether the C time loop runs this cell (:func:`_time_loop_runs`)."""
        return _time_loop_runs(self.w_hh.dtype, self.w_hr is not None, any(m is not None for m in masks))

    def start(self, steps: int, batch: int, h0: np.ndarray, c0: np.ndarray) -> np.ndarray | None:
        """The tapes of a forward loop of ``steps`` steps, allocated (the initial state and cell in place);
        the summed biases (None: none)."""
        H = self.hidden
        self.acts = np.empty((steps, 4 * H, batch), h0.dtype)    # activated gates i, f, g, o per step
        self.hs = np.empty((steps + 1,) + h0.shape, h0.dtype)    # hs[k]: state before step k
        self.cs = np.empty((steps + 1,) + c0.shape, c0.dtype)
        self.tcs = np.empty((steps,) + c0.shape, c0.dtype)       # tanh of the new cell
        self.hs[0], self.cs[0] = h0, c0
        return None if self.b_ih is None or self.b_hh is None else self.b_ih + self.b_hh

    def forward(self, x, h0, c0, steps, masks):
        H = self.hidden
        T = len(steps)
        bias = self.start(T, x.shape[1], h0, c0)
        acts, hs, cs, tcs = self.tapes()
        if self._native(masks):
            # the input products join the recurrent ones in the C loop: x feature-major per time step
            native.lstm_forward(native.swap_axes(x, 1), self.w_ih, bias, self.w_hh, steps, acts, hs, cs, tcs)
            return hs, cs[T]
        half = np.ones(4 * H, x.dtype)                    # the sigmoid gates' rows, pre-scaled by 1/2
        half[:2 * H] = half[3 * H:] = 0.5
        xp = self.project(x, self.w_ih * half[:, None], None if bias is None else bias * half)
        w_hh_half = self.w_hh * half[:, None]
        ig = np.empty_like(c0)
        w_hr = self.w_hr
        raw = None if w_hr is None else np.empty_like(c0)  # o * tanh(c) before the projection
        for k, t in enumerate(steps):
            a = acts[k]
            np.matmul(w_hh_half, hs[k], out=a)
            a += xp[:, t]
            np.tanh(a, out=a)
            for s in (a[:2 * H], a[3 * H:]):   # (1 + tanh(z/2)) / 2
                s *= 0.5
                s += 0.5
            i, f, g, o = a[:H], a[H:2 * H], a[2 * H:3 * H], a[3 * H:]
            m = masks[k]
            c = cs[k + 1]
            np.multiply(f, cs[k], out=c)
            np.multiply(i, g, out=ig)
            c += ig
            tc = tcs[k]
            np.tanh(c, out=tc)
            h = hs[k + 1]
            if raw is None:
                np.multiply(o, tc, out=h)
            else:
                np.multiply(o, tc, out=raw)
                np.matmul(w_hr, raw, out=h)
            if m is not None:
                _frozen(m, c, cs[k], c)
                _frozen(m, h, hs[k], h)
        return hs, cs[T]

    def backward(self, dyk, dh, dc, masks):
        H = self.hidden
        acts, cs, tcs = self.acts, self.cs, self.tcs
        if self._native(masks):
            dh, dc = np.array(dh, order="C"), np.array(dc, order="C")     # updated in place: our own
            gates = native.lstm_backward(acts, cs, tcs, self.w_hh, dyk, dh, dc)    # (4H, T*B)
            return gates, gates, dh, dc
        # derivatives that depend on the forward pass only, for every step at once:
        # sigmoid' = s (1 - s) on every row first, then tanh' = 1 - g^2 over the g rows
        slope = np.subtract(1, acts)
        slope *= acts
        g_slope = slope[:, 2 * H:3 * H]
        np.multiply(acts[:, 2 * H:3 * H], acts[:, 2 * H:3 * H], out=g_slope)
        np.subtract(1, g_slope, out=g_slope)
        o_dtanh = acts[:, 3 * H:] * (1 - tcs * tcs)          # d h / d c = o * (1 - tanh(c)^2)
        w_hh_t = self.w_hh.T
        w_hr = self.w_hr
        dgates = slope                                       # filled in place, step by step
        dc_new = np.empty_like(dc)
        # with a projection: the gradients of the projected states per step (padding 0), for dW_hr
        dhp = None if w_hr is None else np.empty((len(masks),) + dh.shape, dh.dtype)
        for k in range(len(masks) - 1, -1, -1):
            m = masks[k]
            a = acts[k]
            i, f, g = a[:H], a[H:2 * H], a[2 * H:3 * H]
            dh_t = dh + dyk[k]
            dh_new = dh_t
            if dhp is not None:
                np.copyto(dhp[k], dh_t)
                _padded_zero(m, dhp[k])
                dh_new = w_hr.T @ dh_t                       # the gradient of o * tanh(c)
            np.multiply(dh_new, o_dtanh[k], out=dc_new)
            dc_new += dc
            d = dgates[k]
            d[:H] *= dc_new
            d[:H] *= g
            d[H:2 * H] *= dc_new
            d[H:2 * H] *= cs[k]
            d[2 * H:3 * H] *= dc_new
            d[2 * H:3 * H] *= i
            d[3 * H:] *= dh_new
            d[3 * H:] *= tcs[k]
            _padded_zero(m, d)
            dc_prev = _passed(m, dc_new * f, dc)
            dh = _passed(m, np.matmul(w_hh_t, d), dh_t)
            dc = dc_prev
        if dhp is not None:
            # dW_hr = sum over steps of dh_k (o * tanh(c))_k^T, one contraction over steps and batch
            # (padded columns of dhp are 0; o * tanh(c) there is finite: x's padding is zeroed)
            self.dw_hr = np.tensordot(dhp, acts[:, 3 * H:] * tcs, axes=([0, 2], [0, 2]))
        return dgates, dgates, dh, dc


class _GRU(_Direction):
    """GRU with PyTorch's gate order r, z, n and n = tanh(W_in x + b_in + r * (W_hn h + b_hn))."""

    TAPES = ("hh", "acts", "hs")
    hh: np.ndarray          # W_hh h + b_hh per step (r and z rows halved), (T, 3H, B)
    acts: np.ndarray        # activated r, z, n per step, (T, 3H, B)

    @classmethod
    def tape_shapes(cls, steps: int, hidden: int, batch: int, out: int | None = None) -> tuple[Shape, ...]:
        return (steps, 3 * hidden, batch), (steps, 3 * hidden, batch), (steps + 1, hidden, batch)

    def __init__(self, w_ih, w_hh, b_ih, b_hh, hidden) -> None:
        super().__init__(w_ih, w_hh, b_ih, b_hh, hidden)
        sig = slice(0, 2 * hidden)
        self.w_ih_half = _half_rows(w_ih, sig)
        self.w_hh_half = _half_rows(w_hh, sig)
        self.b_ih_half = _half_rows(b_ih, sig)
        b_hh_half = _half_rows(b_hh, sig)
        self.b_hh_half = None if b_hh_half is None else b_hh_half[:, None]

    def forward(self, x, h0, c0, steps, masks):
        H = self.hidden
        xp = self.project(x, self.w_ih_half, self.b_ih_half)
        T = len(steps)
        hh = np.empty((T, xp.shape[0], xp.shape[2]), xp.dtype)    # (W_hh h + b_hh) per step, r and z rows halved
        acts = np.empty((T, xp.shape[0], xp.shape[2]), xp.dtype)  # activated r, z, n
        hs = np.empty((T + 1,) + h0.shape, h0.dtype)
        hs[0] = h0
        for k, t in enumerate(steps):
            q = hh[k]
            np.matmul(self.w_hh_half, hs[k], out=q)
            if self.b_hh_half is not None:
                q += self.b_hh_half
            a = acts[k]
            rz = a[:2 * H]
            np.add(xp[:2 * H, t], q[:2 * H], out=rz)
            np.tanh(rz, out=rz)
            rz *= 0.5
            rz += 0.5
            r, z, n = a[:H], a[H:2 * H], a[2 * H:]
            np.multiply(r, q[2 * H:], out=n)
            n += xp[2 * H:, t]
            np.tanh(n, out=n)
            h = hs[k + 1]
            np.subtract(hs[k], n, out=h)
            h *= z
            h += n
            if masks[k] is not None:
                _frozen(masks[k], h, hs[k], h)
        self.hh, self.acts, self.hs = hh, acts, hs
        return hs, None

    def backward(self, dyk, dh, dc, masks):
        H = self.hidden
        hs, acts, hh = self.hs, self.acts, self.hh
        r_all, z_all, n_all = acts[:, :H], acts[:, H:2 * H], acts[:, 2 * H:]
        # what depends on the forward pass only, for every step at once
        dx_gates = np.empty_like(acts)              # gradients of W_ih x + b_ih; starts as the slopes
        rz = acts[:, :2 * H]
        dx_gates[:, :2 * H] = rz * (1 - rz)
        dn_dh = (1 - z_all) * (1 - n_all * n_all)   # d n_pre / d h_new
        h_minus_n = hs[:-1] - n_all                 # d h_new / d z
        dh_gates = np.empty_like(acts)              # gradients of W_hh h + b_hh
        w_hh_t = self.w_hh.T
        for k in range(len(masks) - 1, -1, -1):
            m = masks[k]
            dh_t = dh + dyk[k]
            dh_new = dh_t
            dxg, dhg = dx_gates[k], dh_gates[k]
            dn = dxg[2 * H:]
            np.multiply(dh_new, dn_dh[k], out=dn)
            np.multiply(dn, r_all[k], out=dhg[2 * H:])
            dxg[:H] *= dn
            dxg[:H] *= hh[k][2 * H:]                 # d r (W_hn h + b_hn is what r scales)
            dxg[H:2 * H] *= dh_new
            dxg[H:2 * H] *= h_minus_n[k]             # d z
            _padded_zero(m, dxg)
            _padded_zero(m, dhg)
            dhg[:2 * H] = dxg[:2 * H]
            dh = np.matmul(w_hh_t, dhg)
            dh += dh_new * z_all[k]
            dh = _passed(m, dh, dh_t)
        return dx_gates, dh_gates, dh, None


def _cell_class(dims: RNNDims) -> type[_Direction]:
    return _LSTM if dims.mode == "lstm" else _GRU if dims.mode == "gru" else _Plain


def _make(dims: RNNDims, entry: Sequence[Any]) -> _Direction:
    w_ih, w_hh, b_ih, b_hh = entry[:4]
    if dims.mode == "lstm":
        return _LSTM(w_ih, w_hh, b_ih, b_hh, dims.hidden_size, entry[4] if len(entry) > 4 else None)
    if dims.mode == "gru":
        return _GRU(w_ih, w_hh, b_ih, b_hh, dims.hidden_size)
    return _Plain(w_ih, w_hh, b_ih, b_hh, dims.hidden_size, relu=dims.mode == "rnn_relu")


def _feature_major(a: np.ndarray) -> np.ndarray:
    """(batch, H) -> contiguous (H, batch)."""
    return np.ascontiguousarray(a.T)


def _running(dims: RNNDims) -> np.ndarray | None:
    """(T, B): whether sequence b still runs at time t; None without lengths."""
    if dims.lengths is None:
        return None
    return np.arange(dims.seq_len)[:, None] < np.asarray(dims.lengths)[None, :]


def _orders(steps: int) -> list[np.ndarray]:
    """The times of the steps, forwards and in reverse."""
    return [np.arange(steps), np.arange(steps - 1, -1, -1)]


def _step_masks(running: np.ndarray | None, orders: list[np.ndarray]) -> list[list[np.ndarray | None]]:
    """Per direction and step, the (1, B) mask of the running sequences (None: all run)."""
    return [[None] * len(order) if running is None else [running[t][None, :] for t in order] for order in orders]


def _time_loop_runs(dtype: np.dtype, projected: bool, lengths: bool) -> bool:
    """Whether an LSTM cell of ``dtype`` runs the C time loop (native.py): no projection, sequences of
    one length (no ``lengths``), the kernels built."""
    return not projected and not lengths and native.available(dtype)


def _on_every_core(op: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``op`` (rnn_forward or rnn_backward, dims last) inside :func:`native.every_core` where its
    LSTM cells take the C time loop (:meth:`_LSTM._native`), whose recurrent products are its own: the
    loop runs on the team without OpenBLAS's polling workers beside it (the input and weight products
    are np.matmul on one BLAS thread there)."""
    @functools.wraps(op)
    def run(first: Any, *rest: Any, **options: Any) -> Any:
        dims: RNNDims = rest[-1]
        x = first[0] if isinstance(first, (tuple, list)) else first   # rnn_backward's residuals start with x
        if dims.mode != "lstm" or not _time_loop_runs(x.dtype, bool(dims.proj_size), dims.lengths is not None):
            return op(first, *rest, **options)
        with native.every_core():
            return op(first, *rest, **options)
    return run


@half_forward
@_on_every_core
def rnn_forward(x: np.ndarray, weights: Sequence[Sequence[np.ndarray | None]], h0: np.ndarray | None,
                c0: np.ndarray | None, dims: RNNDims) -> tuple[tuple, tuple[np.ndarray, ...]]:
    """Run the network; returns ((y, hy, cy), residuals) with cy None unless LSTM (residuals: see the
    module doc and :func:`rnn_residuals`)."""
    T, P, D, B = dims.seq_len, dims.out_size, dims.num_directions, dims.batch
    dtype = x.dtype
    lstm = dims.mode == "lstm"
    h0 = np.zeros(dims.h_shape, dtype) if h0 is None else h0
    c0 = (np.zeros(dims.c_shape, dtype) if c0 is None else c0) if lstm else None
    running = _running(dims)
    # padded steps of x never matter: zero them so that no NaN there reaches a weight gradient
    x = own(x) if running is None else np.where(running[:, :, None], x, 0).astype(dtype, copy=False)
    orders = _orders(T)
    step_masks = _step_masks(running, orders)

    saved: list[np.ndarray] = []
    hy = np.empty(dims.h_shape, dtype)
    cy = np.empty(dims.c_shape, dtype) if lstm else None
    cells = [_cell(dims, weights[idx]) for idx in range(dims.num_layers * D)]
    stacked = _stacked(dims, running, dtype)
    if stacked:             # every layer's loop in one wavefront: their steps side by side
        assert c0 is not None
        layers: list[tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                           np.ndarray]] = []
        for idx, (cell, _) in enumerate(cells):
            assert isinstance(cell, _LSTM)
            bias = cell.start(T, B, _feature_major(h0[idx]), _feature_major(c0[idx]))
            layers.append((cell.w_ih, bias, cell.w_hh, cell.acts, cell.hs, cell.cs, cell.tcs))
        native.lstm_forward_stack(native.swap_axes(x, 1), layers)
    layer_in = x
    for layer in range(dims.num_layers):
        saved.append(layer_in)
        out = np.empty((T, B, D * P), dtype)
        for d in range(D):
            idx = layer * D + d
            cell, w_hr = cells[idx]
            w_ih, w_hh = cell.w_ih, cell.w_hh
            if stacked:
                assert isinstance(cell, _LSTM)
                hs, c_last = cell.hs, cell.cs[T]
            else:
                hs, c_last = cell.forward(layer_in, _feature_major(h0[idx]),
                                          None if c0 is None else _feature_major(c0[idx]), orders[d], step_masks[d])
            # hs[k + 1] is the state after step k, i.e. the output at time orders[d][k]
            states = hs[1:] if d == 0 else hs[:0:-1]
            view = out[:, :, d * P:(d + 1) * P]
            native.swap_axes(states, 1, out=view)
            if running is not None:
                np.copyto(view, 0, where=~running[:, :, None])
            hy[idx] = hs[T].T
            if cy is not None and c_last is not None:
                cy[idx] = c_last.T
            saved += (w_ih, w_hh, *w_hr, *cell.tapes())
        layer_in = out
    return (layer_in, hy, cy), tuple(saved)


def _cell(dims: RNNDims, entry: Sequence[Any]) -> tuple[_Direction, list[np.ndarray]]:
    """(a layer and direction's cell, [its projection] or []) with the backward's own copies of the
    weights (the caller may change them after the forward), or the weights themselves where lent."""
    w_ih, w_hh, b_ih, b_hh = entry[:4]
    assert w_ih is not None and w_hh is not None, "the op checks the weights"
    w_hr = [own(entry[4])] if dims.proj_size else []
    return _make(dims, (own(w_ih), own(w_hh), b_ih, b_hh, *w_hr)), w_hr


def _stacked(dims: RNNDims, running: np.ndarray | None, dtype: np.dtype) -> bool:
    """Whether the forward runs every layer's C time loop in one wavefront (native.lstm_forward_stack):
    a unidirectional LSTM of several layers whose cells each take the C loop."""
    return (dims.mode == "lstm" and dims.num_directions == 1 and dims.num_layers > 1
            and _time_loop_runs(dtype, bool(dims.proj_size), running is not None))


def _restore(saved: Sequence[np.ndarray], dims: RNNDims) -> tuple[list[np.ndarray], list[_Direction]]:
    """(each layer's input, each layer and direction's cell) from rnn_forward's residuals."""
    cls = _cell_class(dims)
    n_weights = 3 if dims.proj_size else 2
    per_cell = n_weights + len(cls.TAPES)
    expected = dims.num_layers * (1 + dims.num_directions * per_cell)
    if len(saved) != expected:
        raise ValueError(f"rnn residuals: {len(saved)} arrays, but mode={dims.mode!r} with num_layers="
                         f"{dims.num_layers} and num_directions={dims.num_directions} saves {expected}")
    inputs: list[np.ndarray] = []
    cells: list[_Direction] = []
    at = 0
    for _ in range(dims.num_layers):
        inputs.append(saved[at])
        at += 1
        for _ in range(dims.num_directions):
            cells.append(cls.restore(dims, saved[at], saved[at + 1], saved[at + n_weights:at + per_cell],
                                     saved[at + 2] if dims.proj_size else None))
            at += per_cell
    return inputs, cells


@half_backward
@_on_every_core
def rnn_backward(saved: tuple, cotangents: tuple, dims: RNNDims, *,
                 needs: tuple[bool, ...] | None = None) -> tuple[Any, Any, Any, list]:
    """(dx, dh0, dc0, dweights) from cotangents (dy, dhy, dcy); dhy and dcy may be None or left out
    (zeros). dc0 is None unless LSTM; dweights[i] = (dw_ih, dw_hh, db_ih, db_hh), biases None without,
    and dw_hr as a 5th array with a projection. ``needs`` (dx, dh0, dc0, dweights): the first layer's
    input product is skipped without dx, every weight product without dweights; what it marks False
    comes back as None."""
    if not 1 <= len(cotangents) <= 3:
        raise TypeError(f"rnn takes the cotangents (dy, dhy, dcy), got {len(cotangents)}")
    dy, dhy, dcy = tuple(cotangents) + (None,) * (3 - len(cotangents))
    P, D = dims.out_size, dims.num_directions
    lstm = dims.mode == "lstm"
    inputs, cells = _restore(saved, dims)
    dtype = inputs[0].dtype
    dy = cotangent("dy", dy, dims.y_shape, dtype)
    dhy = np.zeros(dims.h_shape, dtype) if dhy is None else cotangent("dhy", dhy, dims.h_shape, dtype)
    if lstm:
        dcy = np.zeros(dims.c_shape, dtype) if dcy is None else cotangent("dcy", dcy, dims.c_shape, dtype)
    elif dcy is not None:
        raise ValueError(f"dcy is only used by mode='lstm', not mode={dims.mode!r}")
    running = _running(dims)
    step_masks = _step_masks(running, _orders(dims.seq_len))
    if running is not None:
        dy = np.where(running[:, :, None], dy, 0)  # y is constant zero at padded positions
    dh0 = np.empty(dims.h_shape, dtype)
    dc0 = np.empty(dims.c_shape, dtype) if lstm else None
    dweights: list[tuple] = [()] * len(cells)
    need_dx, need_weights = (True, True) if needs is None else (needs[0], needs[3])
    d_out: Any = dy
    for layer in range(dims.num_layers - 1, -1, -1):
        d_in = None
        for d in range(D):
            idx = layer * D + d
            cell = cells[idx]
            # output gradients per step, feature-major: (T, H, B) in step order
            dyk = d_out[:, :, d * P:(d + 1) * P]
            dyk = native.swap_axes(dyk if d == 0 else dyk[::-1], 1)
            d_pre_x, d_pre_h, dh, dc = cell.backward(
                dyk, _feature_major(dhy[idx]), None if dcy is None else _feature_major(dcy[idx]),
                step_masks[d])
            x_steps = inputs[layer] if d == 0 else inputs[layer][::-1]
            dw_ih, dw_hh, db_ih, db_hh, dx_steps = cell.param_grads(d_pre_x, d_pre_h, x_steps, need_weights,
                                                                    layer > 0 or need_dx)
            if dx_steps is not None:
                dx_part = dx_steps if d == 0 else dx_steps[::-1]
                d_in = dx_part if d_in is None else d_in + dx_part
            dh0[idx] = dh.T
            if dc0 is not None and dc is not None:
                dc0[idx] = dc.T
            if need_weights:
                dweights[idx] = (dw_ih, dw_hh, db_ih, db_hh) + ((cell.dw_hr,) if dims.proj_size else ())
        d_out = d_in
    dx = None if d_out is None else np.ascontiguousarray(d_out)
    return only_needed((dx, dh0, dc0, dweights), needs)


@half_residuals
def rnn_residuals(x: ArraySpec, weights: Sequence[Sequence[ArraySpec | None]], h0: ArraySpec | None,
                  c0: ArraySpec | None, dims: RNNDims) -> tuple[ArraySpec, ...]:
    """What :func:`rnn_forward` saves, layer by layer: the layer's input ((T, B, I), then (T, B, D * H)),
    then per direction w_ih, w_hh, w_hr (with a projection) and the cell's tapes (``tape_shapes``), all
    in x's dtype. The first layer's input is x itself without lengths (with them, x with its padded steps
    zeroed), the weights are the weights given."""
    T, H, P, D, B = dims.seq_len, dims.hidden_size, dims.out_size, dims.num_directions, dims.batch
    dtype = np.dtype(x.dtype)
    tapes = tuple(ArraySpec(shape, dtype) for shape in _cell_class(dims).tape_shapes(T, H, B, P))
    specs: list[ArraySpec] = []
    for layer in range(dims.num_layers):
        if layer == 0:
            specs.append(ArraySpec(tuple(x.shape), dtype, ("x",) if dims.lengths is None else None))
        else:
            specs.append(ArraySpec((T, B, D * P), dtype))
        for d in range(D):
            entry, at = weights[layer * D + d], layer * D + d
            w_ih, w_hh = entry[:2]
            assert w_ih is not None and w_hh is not None, "the op checks the weights"
            specs += (ArraySpec(tuple(w_ih.shape), np.dtype(w_ih.dtype), ("weights", at, 0)),
                      ArraySpec(tuple(w_hh.shape), np.dtype(w_hh.dtype), ("weights", at, 1)))
            if dims.proj_size:
                w_hr = entry[4]
                assert w_hr is not None, "the op checks the weights"
                specs.append(ArraySpec(tuple(w_hr.shape), np.dtype(w_hr.dtype), ("weights", at, 4)))
            specs += tapes
    return tuple(specs)
