"""Random rnn problems for the cuDNN backend's GPU tests, checked against the
reference backend (numpy only: usable on the GPU machine, which has no hypothesis)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import dnnbind
from dnnbind.highlevel import reference
from dnnbind.highlevel.cudnn import rnn
from dnnbind.highlevel.dims.rnn import RNNDims

GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}


def make_weights(rng, mode, inp, hidden, layers, dirs, bias, dtype, proj=0):
    """PyTorch-layout weights, (w_ih, w_hh, b_ih, b_hh) per layer and direction, as numpy arrays; with
    ``proj`` (LSTM) w_hr (proj, hidden) as a 5th array and recurrent matrices of proj columns."""
    g = GATES[mode] * hidden
    out_size = proj or hidden
    out = []
    for i in range(layers * dirs):
        layer_in = inp if i < dirs else dirs * out_size
        entry = [rng.standard_normal((g, layer_in)) * 0.5, rng.standard_normal((g, out_size)) * 0.5]
        entry += [rng.standard_normal(g) * 0.3, rng.standard_normal(g) * 0.3] if bias else [None, None]
        if proj:
            entry.append(rng.standard_normal((proj, hidden)) * 0.5)
        out.append(tuple(None if a is None else a.astype(dtype) for a in entry))
    return out


class Problem:
    """One random rnn problem: numpy arrays, their RNNDims, and ``to_device`` to move arrays to the backend."""

    def __init__(self, rng, to_device: Callable[[np.ndarray], Any], mode="lstm", layers=1, dirs=1, bias=True,
                 lengths=None, states=True, dtype="float64", seq=4, batch=3, inp=3, hidden=2, proj=0):
        self.to_device = to_device
        self.mode, self.dtype = mode, np.dtype(dtype)
        self.lengths = lengths
        self.x = rng.standard_normal((seq, batch, inp)).astype(dtype)
        self.weights = make_weights(rng, mode, inp, hidden, layers, dirs, bias, dtype, proj)
        shape = (layers * dirs, batch, proj or hidden)
        c_shape = (layers * dirs, batch, hidden)
        self.h0 = rng.standard_normal(shape).astype(dtype) if states else None
        self.c0 = rng.standard_normal(c_shape).astype(dtype) if states and mode == "lstm" else None
        self.dims = RNNDims(self.x.shape, [tuple(None if a is None else a.shape for a in e) for e in self.weights],
                            mode=mode, hidden_size=hidden, num_layers=layers, bidirectional=dirs == 2,
                            h0_shape=None if self.h0 is None else shape,
                            c0_shape=None if self.c0 is None else c_shape, lengths=lengths, dtype=dtype,
                            proj_size=proj)
        self.dy = rng.standard_normal(self.dims.y_shape).astype(dtype)
        self.dhy = rng.standard_normal(shape).astype(dtype)
        self.dcy = rng.standard_normal(c_shape).astype(dtype) if mode == "lstm" else None

    def device(self, a):
        return None if a is None else self.to_device(a)

    def device_weights(self):
        return [[self.device(a) for a in e] for e in self.weights]

    def options(self):
        """The public op's keyword arguments for this problem."""
        options = {"mode": self.mode, "hidden_size": self.dims.hidden_size, "num_layers": self.dims.num_layers,
                   "bidirectional": self.dims.num_directions == 2, "lengths": self.lengths}
        return options | ({"proj_size": self.dims.proj_size} if self.dims.proj_size else {})

    def reference(self):
        return reference.rnn(self.x, [list(e) for e in self.weights], self.h0, self.c0, self.dims)

    def run(self, weights=None, public=False, **kwargs):
        """The backend's rnn (``public``: dnnbind.rnn) on device copies of the arrays (``weights`` in place of
        the problem's)."""
        weights = self.device_weights() if weights is None else weights
        if public:
            return dnnbind.rnn(self.device(self.x), weights, h0=self.device(self.h0), c0=self.device(self.c0),
                               **self.options())
        return rnn(self.device(self.x), weights, self.device(self.h0), self.device(self.c0), self.dims, **kwargs)

    def cotangents(self):
        return self.device(self.dy), self.device(self.dhy), self.device(self.dcy)


def tolerance(dtype) -> float:
    return {"float64": 1e-10, "float32": 2e-5, "float16": 2e-2}[np.dtype(dtype).name]


def assert_close(ours, want, what, to_host, array_type, tol):
    """``ours`` (a backend array, or None) equals the reference array ``want``: type, dtype, shape, no NaN."""
    if want is None:
        assert ours is None, what
        return
    assert isinstance(ours, array_type), f"{what}: {type(ours)}"
    assert ours.dtype == want.dtype and tuple(ours.shape) == want.shape, what
    host = np.asarray(to_host(ours), np.float64)
    assert not np.isnan(host).any(), f"{what} has unwritten (NaN) elements"
    np.testing.assert_allclose(host, np.asarray(want, np.float64), rtol=tol, atol=tol, err_msg=what)


def compare(problem: Problem, to_host, array_type, tol=None, **kwargs):
    """Forward and pullback (with every cotangent) against the reference; returns (gradients, pullback)."""
    tol = tolerance(problem.dtype) if tol is None else tol
    (y, hy, cy), pullback = problem.run(**kwargs)
    (ry, rhy, rcy), rpull = problem.reference()
    for name, ours, want in (("y", y, ry), ("hy", hy, rhy), ("cy", cy, rcy)):
        assert_close(ours, want, name, to_host, array_type, tol)
    grads = pullback(*problem.cotangents())
    want = rpull(problem.dy, problem.dhy, problem.dcy)
    for name, ours, theirs in zip(("dx", "dh0", "dc0"), grads[:3], want[:3]):
        assert_close(ours, theirs, name, to_host, array_type, tol)
    assert len(grads[3]) == len(want[3])
    for i, (ours_e, want_e) in enumerate(zip(grads[3], want[3])):
        for j, (ours, theirs) in enumerate(zip(ours_e, want_e)):
            assert_close(ours, theirs, f"dweights[{i}][{j}]", to_host, array_type, tol)
    return grads, pullback
