"""rnn on the cpu backend: hand-worked cells, finite differences, torch.nn.LSTM/GRU/RNN."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dnnbind

from ..gradcheck import check_gradients

GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}

#: every test twice: on the C kernels (the LSTM time loop) and on the numpy loops
pytestmark = pytest.mark.usefixtures("kernels")


def make_weights(rng, mode, inp, hidden, layers=1, dirs=1, bias=True):
    g = GATES[mode] * hidden
    weights = []
    for i in range(layers * dirs):
        layer_in = inp if i < dirs else hidden * dirs
        entry = [rng.standard_normal((g, layer_in)) * 0.6, rng.standard_normal((g, hidden)) * 0.6]
        entry += [rng.standard_normal(g) * 0.3, rng.standard_normal(g) * 0.3] if bias else [None, None]
        weights.append(tuple(entry))
    return weights


def sigmoid(v):
    return 1 / (1 + math.exp(-v))


# ---------------------------------------------------------------------------------------------- by hand


def test_tanh_rnn_by_hand():
    x = np.array([0.5, -1.0]).reshape(2, 1, 1)
    w = [(np.array([[2.0]]), np.array([[0.5]]), np.array([0.1]), np.array([-0.2]))]
    (y, hy, cy), _ = dnnbind.rnn(x, w, mode="rnn_tanh", hidden_size=1, h0=np.array([[[0.3]]]))
    h1 = math.tanh(2 * 0.5 + 0.1 + 0.5 * 0.3 - 0.2)
    h2 = math.tanh(2 * -1.0 + 0.1 + 0.5 * h1 - 0.2)
    np.testing.assert_allclose(y.ravel(), [h1, h2], rtol=1e-15)
    np.testing.assert_allclose(hy.ravel(), [h2], rtol=1e-15)
    assert cy is None


def test_lstm_cell_by_hand():
    # one hidden unit: gates i, f, g, o each see w_ih = (1, 2, 3, 4) * x and w_hh = (0.5, -0.5, 0.25, 1) * h
    x, h0, c0 = 0.7, -0.4, 0.9
    w_ih = np.array([[1.0], [2.0], [3.0], [4.0]])
    w_hh = np.array([[0.5], [-0.5], [0.25], [1.0]])
    b_ih, b_hh = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.0, -0.1, 0.0, 0.1])
    pre = [w_ih[k, 0] * x + w_hh[k, 0] * h0 + b_ih[k] + b_hh[k] for k in range(4)]
    i, f, g, o = sigmoid(pre[0]), sigmoid(pre[1]), math.tanh(pre[2]), sigmoid(pre[3])
    c = f * c0 + i * g
    h = o * math.tanh(c)
    (y, hy, cy), _ = dnnbind.rnn(np.full((1, 1, 1), x), [(w_ih, w_hh, b_ih, b_hh)], mode="lstm", hidden_size=1,
                                 h0=np.full((1, 1, 1), h0), c0=np.full((1, 1, 1), c0))
    np.testing.assert_allclose([y.item(), hy.item(), cy.item()], [h, h, c], rtol=1e-14)


def test_gru_cell_by_hand():
    x, h0 = -0.3, 0.8
    w_ih, w_hh = np.array([[1.0], [-2.0], [0.5]]), np.array([[0.3], [0.7], [-1.5]])
    b_ih, b_hh = np.array([0.1, 0.0, -0.2]), np.array([0.05, 0.3, 0.4])
    r = sigmoid(w_ih[0, 0] * x + b_ih[0] + w_hh[0, 0] * h0 + b_hh[0])
    z = sigmoid(w_ih[1, 0] * x + b_ih[1] + w_hh[1, 0] * h0 + b_hh[1])
    n = math.tanh(w_ih[2, 0] * x + b_ih[2] + r * (w_hh[2, 0] * h0 + b_hh[2]))   # r multiplies b_hn too
    h = (1 - z) * n + z * h0
    (y, hy, cy), _ = dnnbind.rnn(np.full((1, 1, 1), x), [(w_ih, w_hh, b_ih, b_hh)], mode="gru", hidden_size=1,
                                 h0=np.full((1, 1, 1), h0))
    np.testing.assert_allclose([y.item(), hy.item()], [h, h], rtol=1e-14)
    assert cy is None


def test_lengths_by_hand():
    """Packed semantics: y is zero past the end, hy is the state at the last valid step."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 2, 3))
    w = make_weights(rng, "rnn_tanh", 3, 2, dirs=2)
    (y, hy, _), _ = dnnbind.rnn(x, w, mode="rnn_tanh", hidden_size=2, bidirectional=True, lengths=[2, 4])
    (y_short, hy_short, _), _ = dnnbind.rnn(x[:2, :1], w, mode="rnn_tanh", hidden_size=2, bidirectional=True)
    np.testing.assert_allclose(y[:2, :1], y_short, rtol=1e-14)
    np.testing.assert_array_equal(y[2:, 0], 0)
    np.testing.assert_allclose(hy[:, :1], hy_short, rtol=1e-14)
    (y_full, hy_full, _), _ = dnnbind.rnn(x[:, 1:], w, mode="rnn_tanh", hidden_size=2, bidirectional=True)
    np.testing.assert_allclose(y[:, 1:], y_full, rtol=1e-14)
    np.testing.assert_allclose(hy[:, 1:], hy_full, rtol=1e-14)


@pytest.mark.parametrize("mode", list(GATES))
@pytest.mark.parametrize("bidirectional", [False, True])
def test_padding_is_exactly_zero_whatever_the_data(mode, bidirectional):
    """A NaN at a sequence's last valid step, or anywhere in x's padding, never reaches the padded outputs,
    their gradients, or another sequence's results."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3, 2))
    x[1, 0] = np.nan                # sequence 0's last valid step
    x[3:, 1] = np.nan               # sequence 1's padding
    w = make_weights(rng, mode, 2, 3, dirs=2 if bidirectional else 1)
    (y, hy, _), pullback = dnnbind.rnn(x, w, mode=mode, hidden_size=3, bidirectional=bidirectional,
                                       lengths=[2, 3, 5])
    assert (y[2:, 0] == 0).all() and (y[3:, 1] == 0).all()
    assert np.isfinite(y[:, 1:]).all() and np.isfinite(hy[:, 1:]).all()
    dx = pullback(np.ones(y.shape))[0]
    assert (dx[2:, 0] == 0).all() and (dx[3:, 1] == 0).all() and np.isfinite(dx[:, 1:]).all()


# ---------------------------------------------------------------------------------------------- finite differences


def _flatten_grads(mode, has_h0, has_c0):
    def select(grads):
        dx, dh0, dc0, dweights = grads
        out = [dx] + ([dh0] if has_h0 else []) + ([dc0] if has_c0 else [])
        return out + [g for entry in dweights for g in entry if g is not None]
    return select


@pytest.mark.parametrize("mode", list(GATES))
@pytest.mark.parametrize("layers, bidirectional, lengths, bias", [
    (1, False, None, True),
    (2, True, [3, 1], True),
    (2, False, [2, 3], False),
])
def test_gradients(rng, mode, layers, bidirectional, lengths, bias):
    T, B, I, H = 3, 2, 2, 3
    dirs = 2 if bidirectional else 1
    x = rng.standard_normal((T, B, I))
    h0 = rng.standard_normal((layers * dirs, B, H)) * 0.5
    c0 = rng.standard_normal((layers * dirs, B, H)) * 0.5 if mode == "lstm" else None
    weights = make_weights(rng, mode, I, H, layers, dirs, bias)
    inputs = [x, h0] + ([c0] if c0 is not None else []) + [a for e in weights for a in e if a is not None]
    check_gradients(lambda: dnnbind.rnn(x, weights, mode=mode, hidden_size=H, num_layers=layers,
                                        bidirectional=bidirectional, h0=h0, c0=c0, lengths=lengths),
                    inputs, _flatten_grads(mode, True, c0 is not None), max_points=12)


def test_pullback_defaults_and_structure(rng):
    x = rng.standard_normal((3, 2, 2))
    weights = make_weights(rng, "gru", 2, 3, layers=2, dirs=2)
    (y, hy, cy), pullback = dnnbind.rnn(x, weights, mode="gru", hidden_size=3, num_layers=2, bidirectional=True)
    dx, dh0, dc0, dweights = pullback(np.ones_like(y))
    assert dx.shape == x.shape and dh0.shape == hy.shape and dc0 is None and cy is None
    assert [tuple(g.shape for g in e) for e in dweights] == [tuple(a.shape for a in e) for e in weights]
    # dhy = None means zero
    with_zero = pullback(np.ones_like(y), np.zeros_like(hy))
    np.testing.assert_array_equal(dx, with_zero[0])
    with pytest.raises(ValueError, match=r"dcy is only used by mode='lstm', not mode='gru'"):
        pullback(np.ones_like(y), None, np.zeros_like(hy))
    with pytest.raises(ValueError, match=r"dhy has shape \(4, 2\) but must have shape \(4, 2, 3\)"):
        pullback(np.ones_like(y), np.zeros((4, 2)))


def test_lstm_dc0_without_c0(rng):
    x = rng.standard_normal((2, 1, 2))
    weights = make_weights(rng, "lstm", 2, 2)
    (y, hy, cy), pullback = dnnbind.rnn(x, weights, hidden_size=2)
    dx, dh0, dc0, _ = pullback(np.zeros_like(y), None, np.ones_like(cy))
    assert dh0.shape == dc0.shape == (1, 1, 2) and np.any(dc0 != 0)


def test_dtypes(rng):
    x = rng.standard_normal((4, 3, 5))
    weights = make_weights(rng, "lstm", 5, 6)
    (ref, ref_hy, ref_cy), ref_pb = dnnbind.rnn(x, weights, hidden_size=6)
    dy = rng.standard_normal(ref.shape)
    ref_grads = ref_pb(dy)
    for dtype, tol in ((np.float32, 1e-5), (np.float16, 1e-2)):
        cast = [tuple(a.astype(dtype) for a in e) for e in weights]
        (y, hy, cy), pullback = dnnbind.rnn(x.astype(dtype), cast, hidden_size=6)
        assert y.dtype == hy.dtype == cy.dtype == dtype
        np.testing.assert_allclose(y, ref, rtol=tol, atol=tol)
        dx, dh0, dc0, dweights = pullback(dy.astype(dtype))
        assert dx.dtype == dh0.dtype == dc0.dtype == dweights[0][0].dtype == dtype
        np.testing.assert_allclose(dx, ref_grads[0], rtol=5 * tol, atol=5 * tol)
        np.testing.assert_allclose(dweights[0][1], ref_grads[3][0][1], rtol=5 * tol, atol=20 * tol)


def test_errors(rng):
    x = rng.standard_normal((3, 2, 4))
    weights = make_weights(rng, "lstm", 4, 5)
    with pytest.raises(ValueError, match=r"weights\[0\]\[0\] \(w_ih\) has shape \(20, 4\) but must have shape \(12, 4\) "
                                         r"\(mode='lstm', hidden_size=3, layer 0 input size 4\)"):
        dnnbind.rnn(x, weights, mode="lstm", hidden_size=3)
    with pytest.raises(TypeError, match=r"h0 has dtype float32 but x has dtype float64"):
        dnnbind.rnn(x, weights, hidden_size=5, h0=np.zeros((1, 2, 5), np.float32))
    with pytest.raises(TypeError, match=r"weights\[0\]\[2\] has dtype float32"):
        dnnbind.rnn(x, [weights[0][:2] + (weights[0][2].astype(np.float32), weights[0][3])], hidden_size=5)
    with pytest.raises(ValueError, match=r"c0 is only used by mode='lstm', not mode='gru'"):
        dnnbind.rnn(x, make_weights(rng, "gru", 4, 5), mode="gru", hidden_size=5, c0=np.zeros((1, 2, 5)))
    with pytest.raises(ValueError, match=r"lengths\[1\]=4 must be between 1 and the sequence length 3"):
        dnnbind.rnn(x, weights, hidden_size=5, lengths=[1, 4])
    with pytest.raises(TypeError, match=r"hidden_size=5.0 must be an int"):
        dnnbind.rnn(x, weights, hidden_size=5.0)
    (y, _, _), pullback = dnnbind.rnn(x, weights, hidden_size=5)
    with pytest.raises(ValueError, match=r"dy has shape \(3, 2, 4\) but must have shape \(3, 2, 5\)"):
        pullback(x)


# ---------------------------------------------------------------------------------------------- against PyTorch


def _torch_module(torch, mode, inp, hidden, layers, bidirectional, bias):
    kwargs = dict(num_layers=layers, bidirectional=bidirectional, bias=bias)
    if mode == "lstm":
        return torch.nn.LSTM(inp, hidden, **kwargs).double()
    if mode == "gru":
        return torch.nn.GRU(inp, hidden, **kwargs).double()
    return torch.nn.RNN(inp, hidden, nonlinearity=mode[4:], **kwargs).double()


def _torch_weights(module, layers, dirs, bias):
    names = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if bias else ())
    out = []
    for layer in range(layers):
        for d in range(dirs):
            params = [getattr(module, f"{n}_l{layer}{'_reverse' if d else ''}") for n in names]
            out.append(params + ([None, None] if not bias else []))
    return out


def _draw_sequences(draw) -> tuple[int, int, list[int] | None]:
    """(batch, seq, lengths): 1 to 3 sequences of 1 to 4 steps, with per-sequence lengths or without."""
    batch = draw(st.integers(1, 3))
    seq = draw(st.integers(1, 4))
    use_lengths = draw(st.booleans())
    return batch, seq, [draw(st.integers(1, seq)) for _ in range(batch)] if use_lengths else None


def _torch_outputs(torch, module, xt, state_t, lengths, steps):
    """(y, hy, cy) of a torch.nn recurrent module; lengths go through pack_padded_sequence (cy None
    unless the module is an LSTM)."""
    inp = xt if lengths is None else torch.nn.utils.rnn.pack_padded_sequence(xt, torch.tensor(lengths),
                                                                            enforce_sorted=False)
    if isinstance(module, torch.nn.LSTM):
        out, (hyt, cyt) = module(inp, tuple(state_t) if state_t else None)
    else:
        out, hyt = module(inp, state_t[0] if state_t else None)
        cyt = None
    yt = out if lengths is None else torch.nn.utils.rnn.pad_packed_sequence(out, total_length=steps)[0]
    return yt, hyt, cyt


def _projection_weights(tparams, bias):
    """torch.nn.LSTM(proj_size)'s parameters per entry as dnnbind's (w_ih, w_hh, b_ih, b_hh, w_hr)."""
    weights = [[p.detach().numpy().copy() for p in e] for e in tparams]
    return [tuple(e) if bias else (e[0], e[1], None, None, e[2]) for e in weights]


@st.composite
def rnn_case(draw):
    batch, seq, lengths = _draw_sequences(draw)
    return dict(mode=draw(st.sampled_from(list(GATES))), seq=seq, batch=batch, inp=draw(st.integers(1, 3)),
                hidden=draw(st.integers(1, 4)), layers=draw(st.integers(1, 2)), bidirectional=draw(st.booleans()),
                bias=draw(st.booleans()), lengths=lengths, h0=draw(st.booleans()))


@settings(max_examples=40, deadline=None)
@given(rnn_case())
def test_matches_torch(case):
    """Forward and every gradient against torch.nn; lengths go through pack_padded_sequence."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    torch.manual_seed(3)
    mode, T, B, H, L = case["mode"], case["seq"], case["batch"], case["hidden"], case["layers"]
    dirs = 2 if case["bidirectional"] else 1
    module = _torch_module(torch, mode, case["inp"], H, L, case["bidirectional"], case["bias"])
    tparams = _torch_weights(module, L, dirs, case["bias"])
    weights = [tuple(None if p is None else p.detach().numpy().copy() for p in entry) for entry in tparams]
    x = rng.standard_normal((T, B, case["inp"]))
    h0 = rng.standard_normal((L * dirs, B, H)) if case["h0"] else None
    c0 = rng.standard_normal((L * dirs, B, H)) if case["h0"] and mode == "lstm" else None
    lengths = case["lengths"]

    (y, hy, cy), pullback = dnnbind.rnn(x, weights, mode=mode, hidden_size=H, num_layers=L,
                                        bidirectional=case["bidirectional"], h0=h0, c0=c0, lengths=lengths)

    xt = torch.tensor(x, requires_grad=True)
    state_t = [torch.tensor(a, requires_grad=True) for a in (h0, c0) if a is not None]
    yt, hyt, cyt = _torch_outputs(torch, module, xt, state_t, lengths, T)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(hy, hyt.detach().numpy(), rtol=1e-11, atol=1e-12)
    if mode == "lstm":
        np.testing.assert_allclose(cy, cyt.detach().numpy(), rtol=1e-11, atol=1e-12)

    dy, dhy = rng.standard_normal(y.shape), rng.standard_normal(hy.shape)
    dcy = rng.standard_normal(hy.shape) if mode == "lstm" else None
    dx, dh0, dc0, dweights = pullback(dy, dhy, dcy)
    outs = [yt, hyt] + ([cyt] if mode == "lstm" else [])
    cots = [torch.tensor(dy), torch.tensor(dhy)] + ([torch.tensor(dcy)] if mode == "lstm" else [])
    flat_params = [p for entry in tparams for p in entry if p is not None]
    grads = torch.autograd.grad(outs, [xt] + state_t + flat_params, cots, allow_unused=True)
    ours = [dx] + ([dh0] if h0 is not None else []) + ([dc0] if c0 is not None else [])
    ours += [g for entry in dweights for g in entry if g is not None]
    assert len(ours) == len(grads)
    for a, b in zip(ours, grads):
        expected = np.zeros(a.shape) if b is None else b.numpy()
        np.testing.assert_allclose(a, expected, rtol=1e-10, atol=1e-11)


# ---------------------------------------------------------------------------------------------- residual form


def _residual_call(rng, mode, layers, bidirectional, bias, lengths, dtype, batch=3, with_h0=True):
    """The cpu backend's arguments (x, weights, h0, c0, dims) for one call."""
    from dnnbind.highlevel.dims import RNNDims
    T, I, H = 4, 3, 2
    dirs = 2 if bidirectional else 1
    x = rng.standard_normal((T, batch, I)).astype(dtype)
    weights = [[None if a is None else a.astype(dtype) for a in e]
               for e in make_weights(rng, mode, I, H, layers, dirs, bias)]
    h0 = rng.standard_normal((layers * dirs, batch, H)).astype(dtype) if with_h0 else None
    c0 = rng.standard_normal((layers * dirs, batch, H)).astype(dtype) if with_h0 and mode == "lstm" else None
    dims = RNNDims(x.shape, [[None if a is None else a.shape for a in e] for e in weights], mode=mode,
                   hidden_size=H, num_layers=layers, bidirectional=bidirectional,
                   h0_shape=None if h0 is None else h0.shape, c0_shape=None if c0 is None else c0.shape,
                   lengths=lengths, dtype=dtype)
    return x, weights, h0, c0, dims


def _spec(a):
    from dnnbind.highlevel.residual import ArraySpec
    return None if a is None else ArraySpec(a.shape, a.dtype)


def _flat(tree):
    if isinstance(tree, (list, tuple)):
        return [a for item in tree for a in _flat(item)]
    return [tree]


RESIDUAL_CASES = {   # layers, bidirectional, bias, lengths, dtype, batch, h0
    "one_layer": (1, False, True, None, np.float64, 3, True),
    "bidirectional_two_layers": (2, True, True, None, np.float64, 3, True),
    "no_bias_lengths": (2, False, False, [2, 4, 1], np.float32, 3, False),
    "bidirectional_no_bias_lengths": (1, True, False, [3, 1, 4], np.float64, 3, True),
    "float16_bidirectional_lengths": (2, True, True, [4, 2, 3], np.float16, 3, True),
    "empty_batch": (2, True, True, None, np.float32, 0, False),
}


@pytest.mark.parametrize("mode", list(GATES))
@pytest.mark.parametrize("case", list(RESIDUAL_CASES))
def test_residuals_are_what_the_forward_saves(mode, case):
    """rnn_residuals computes, without running anything, the shapes and dtypes rnn_forward saves: a flat
    tuple of numpy arrays of the forward's own (no input or result shares memory with them)."""
    from dnnbind.highlevel import cpu
    from dnnbind.highlevel.residual import ArraySpec
    layers, bidirectional, bias, lengths, dtype, batch, with_h0 = RESIDUAL_CASES[case]
    x, weights, h0, c0, dims = _residual_call(np.random.default_rng(4), mode, layers, bidirectional, bias, lengths,
                                              dtype, batch, with_h0)
    specs = cpu.rnn_residuals(_spec(x), [[_spec(a) for a in e] for e in weights], _spec(h0), _spec(c0), dims)
    (y, hy, cy), saved = cpu.rnn_forward(x, weights, h0, c0, dims)
    assert type(saved) is tuple and all(type(a) is np.ndarray for a in saved)
    assert [(s.shape, s.dtype) for s in specs] == [(a.shape, a.dtype) for a in saved]
    assert all(type(s) is ArraySpec and isinstance(s.dtype, np.dtype) for s in specs)
    # half precision is computed, and saved, in float32; the results come back in the input's dtype
    assert {s.dtype for s in specs} == {np.dtype(np.float32 if dtype == np.float16 else dtype)}
    assert y.dtype == hy.dtype == dtype and (cy is None) == (mode != "lstm")
    if batch:
        per_cell = 2 + {"lstm": 4, "gru": 3}.get(mode, 1)
        assert len(saved) == layers * (1 + (2 if bidirectional else 1) * per_cell)
    outside = [a for a in [x, h0, c0, y, hy, cy] + _flat(weights) if a is not None]
    assert not any(np.shares_memory(a, b) for a in saved for b in outside)


@pytest.mark.parametrize("mode", list(GATES))
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_backward_twice_gives_the_same_and_leaves_the_residuals_alone(mode, dtype):
    from dnnbind.highlevel import cpu
    rng = np.random.default_rng(6)
    x, weights, h0, c0, dims = _residual_call(rng, mode, 2, True, True, [4, 1, 3], dtype)
    (y, hy, cy), saved = cpu.rnn_forward(x, weights, h0, c0, dims)
    before = [a.copy() for a in saved]
    dy, dhy = rng.standard_normal(y.shape).astype(dtype), rng.standard_normal(hy.shape).astype(dtype)
    dcy = None if cy is None else rng.standard_normal(cy.shape).astype(dtype)
    first = _flat(cpu.rnn_backward(saved, (dy, dhy, dcy), dims))
    second = _flat(cpu.rnn_backward(saved, (dy, dhy, dcy), dims))
    assert [None if g is None else g.dtype for g in first] == [None if g is None else dtype for g in first]
    assert all((a is None and b is None) or np.array_equal(a, b) for a, b in zip(first, second))
    assert all(np.array_equal(a, b) for a, b in zip(saved, before))
    # dhy and dcy left out or None are zeros
    only_dy = _flat(cpu.rnn_backward(saved, (dy,), dims))
    zeros = _flat(cpu.rnn_backward(saved, (dy, np.zeros_like(hy), None if cy is None else np.zeros_like(cy)),
                                         dims))
    assert all((a is None and b is None) or np.array_equal(a, b) for a, b in zip(only_dy, zeros))
    assert all(np.array_equal(a, b) for a, b in zip(saved, before))


def test_backward_refuses_residuals_of_another_call(rng):
    from dnnbind.highlevel import cpu
    x, weights, h0, c0, dims = _residual_call(rng, "gru", 2, False, True, None, np.float64)
    (y, _, _), saved = cpu.rnn_forward(x, weights, h0, c0, dims)
    with pytest.raises(ValueError, match=r"rnn residuals: 9 arrays, but mode='gru' with num_layers=2 and "
                                         r"num_directions=1 saves 12"):
        cpu.rnn_backward(saved[:-3], (np.ones_like(y),), dims)


# ---------------------------------------------------------------------------------------------- LSTM projection


def make_proj_weights(rng, inp, hidden, proj, layers=1, dirs=1, bias=True):
    """(w_ih, w_hh, b_ih, b_hh, w_hr) per layer and direction, torch.nn.LSTM(proj_size=proj)'s shapes."""
    g = 4 * hidden
    weights = []
    for i in range(layers * dirs):
        layer_in = inp if i < dirs else proj * dirs
        entry = [rng.standard_normal((g, layer_in)) * 0.6, rng.standard_normal((g, proj)) * 0.6]
        entry += [rng.standard_normal(g) * 0.3, rng.standard_normal(g) * 0.3] if bias else [None, None]
        entry.append(rng.standard_normal((proj, hidden)) * 0.6)
        weights.append(tuple(entry))
    return weights


PROJ_CASES = {   # seq, batch, input, hidden, proj, layers, bidirectional, bias, lengths, h0
    "one_layer": (4, 3, 3, 5, 2, 1, False, True, None, True),
    "bidirectional_two_layers": (5, 2, 3, 6, 4, 2, True, True, None, True),
    "no_bias_lengths": (5, 3, 2, 4, 3, 2, False, False, [5, 2, 4], False),
    "three_layers_bidirectional_lengths": (4, 3, 2, 4, 1, 3, True, True, [1, 4, 3], True),
    "proj_1_batch_1": (3, 1, 1, 2, 1, 1, False, True, None, True),
}


@pytest.mark.parametrize("case", list(PROJ_CASES))
def test_projection_matches_torch(case):
    """torch.nn.LSTM(proj_size=...): outputs and every gradient in float64; lengths through packing."""
    torch = pytest.importorskip("torch")
    T, B, I, H, P, L, bidirectional, bias, lengths, with_h0 = PROJ_CASES[case]
    rng = np.random.default_rng(11)
    torch.manual_seed(11)
    dirs = 2 if bidirectional else 1
    module = torch.nn.LSTM(I, H, L, bias=bias, bidirectional=bidirectional, proj_size=P).double()
    tparams = [[getattr(module, n) for n in names] for names in module._all_weights]
    weights = _projection_weights(tparams, bias)
    x = rng.standard_normal((T, B, I))
    h0 = rng.standard_normal((L * dirs, B, P)) if with_h0 else None
    c0 = rng.standard_normal((L * dirs, B, H)) if with_h0 else None
    (y, hy, cy), pullback = dnnbind.rnn(x, weights, mode="lstm", hidden_size=H, num_layers=L,
                                        bidirectional=bidirectional, h0=h0, c0=c0, lengths=lengths, proj_size=P)
    assert y.shape == (T, B, dirs * P) and hy.shape == (L * dirs, B, P) and cy.shape == (L * dirs, B, H)

    xt = torch.tensor(x, requires_grad=True)
    state_t = [torch.tensor(a, requires_grad=True) for a in (h0, c0) if a is not None]
    yt, hyt, cyt = _torch_outputs(torch, module, xt, state_t, lengths, T)
    for ours, theirs in ((y, yt), (hy, hyt), (cy, cyt)):
        np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-11, atol=1e-12)

    dy, dhy, dcy = rng.standard_normal(y.shape), rng.standard_normal(hy.shape), rng.standard_normal(cy.shape)
    dx, dh0, dc0, dweights = pullback(dy, dhy, dcy)
    assert dh0.shape == hy.shape and dc0.shape == cy.shape and all(len(e) == 5 for e in dweights)
    flat_params = [p for entry in tparams for p in entry]
    grads = torch.autograd.grad([yt, hyt, cyt], [xt] + state_t + flat_params,
                                [torch.tensor(dy), torch.tensor(dhy), torch.tensor(dcy)], allow_unused=True)
    ours = [dx] + ([dh0, dc0] if with_h0 else []) + [g for entry in dweights for g in entry if g is not None]
    assert len(ours) == len(grads)
    for a, b in zip(ours, grads):
        np.testing.assert_allclose(a, np.zeros(a.shape) if b is None else b.numpy(), rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("layers, bidirectional, lengths, bias", [
    (1, False, None, True),
    (2, True, [3, 1], True),
    (2, False, [2, 3], False),
])
def test_projection_gradients(rng, layers, bidirectional, lengths, bias):
    """Finite differences, every input and weight (w_hr included)."""
    T, B, I, H, P = 3, 2, 2, 3, 2
    dirs = 2 if bidirectional else 1
    x = rng.standard_normal((T, B, I))
    h0 = rng.standard_normal((layers * dirs, B, P)) * 0.5
    c0 = rng.standard_normal((layers * dirs, B, H)) * 0.5
    weights = make_proj_weights(rng, I, H, P, layers, dirs, bias)
    inputs = [x, h0, c0] + [a for e in weights for a in e if a is not None]
    check_gradients(lambda: dnnbind.rnn(x, weights, mode="lstm", hidden_size=H, num_layers=layers,
                                        bidirectional=bidirectional, h0=h0, c0=c0, lengths=lengths, proj_size=P),
                    inputs, _flatten_grads("lstm", True, True), max_points=12)


@pytest.mark.parametrize("bidirectional, lengths, dtype", [(False, None, np.float64), (True, [4, 1, 3], np.float32),
                                                           (True, [2, 4, 3], np.float16)])
def test_projection_residuals_are_what_the_forward_saves(bidirectional, lengths, dtype):
    from dnnbind.highlevel import cpu
    from dnnbind.highlevel.dims import RNNDims
    from dnnbind.highlevel.residual import ArraySpec
    rng = np.random.default_rng(5)
    dirs = 2 if bidirectional else 1
    x = rng.standard_normal((4, 3, 3)).astype(dtype)
    weights = [[None if a is None else a.astype(dtype) for a in e] for e in make_proj_weights(rng, 3, 4, 2, 2, dirs)]
    h0 = rng.standard_normal((2 * dirs, 3, 2)).astype(dtype)
    c0 = rng.standard_normal((2 * dirs, 3, 4)).astype(dtype)
    dims = RNNDims(x.shape, [[a.shape for a in e] for e in weights], mode="lstm", hidden_size=4, num_layers=2,
                   bidirectional=bidirectional, h0_shape=h0.shape, c0_shape=c0.shape, lengths=lengths, dtype=dtype,
                   proj_size=2)
    specs = cpu.rnn_residuals(_spec(x), [[_spec(a) for a in e] for e in weights], _spec(h0), _spec(c0), dims)
    (y, hy, cy), saved = cpu.rnn_forward(x, weights, h0, c0, dims)
    assert [(s.shape, s.dtype) for s in specs] == [(a.shape, a.dtype) for a in saved]
    assert len(saved) == 2 * (1 + dirs * (3 + 4))
    assert y.shape == (4, 3, 2 * dirs) and hy.shape == (2 * dirs, 3, 2) and cy.shape == (2 * dirs, 3, 4)
    outside = [a for a in [x, h0, c0, y, hy, cy] + _flat(weights) if a is not None]
    assert not any(np.shares_memory(a, b) for a in saved for b in outside)
    before = [a.copy() for a in saved]
    grads = cpu.rnn_backward(saved, (np.ones_like(y), np.ones_like(hy), np.ones_like(cy)), dims)
    assert [g.shape for e in grads[3] for g in e] == [a.shape for e in weights for a in e]
    assert grads[1].shape == hy.shape and grads[2].shape == cy.shape
    assert all(np.array_equal(a, b) for a, b in zip(saved, before))


def test_projection_errors(rng):
    x = rng.standard_normal((3, 2, 2))
    weights = make_proj_weights(rng, 2, 3, 2)
    with pytest.raises(ValueError, match=r"weights\[0\] has 5 arrays but proj_size=0 takes 4"):
        dnnbind.rnn(x, weights, mode="lstm", hidden_size=3)
    with pytest.raises(ValueError, match=r"proj_size=3 must be smaller than hidden_size=3"):
        dnnbind.rnn(x, weights, mode="lstm", hidden_size=3, proj_size=3)
    with pytest.raises(ValueError, match=r"only supported for mode='lstm', not mode='gru'"):
        dnnbind.rnn(x, weights, mode="gru", hidden_size=3, proj_size=2)
    with pytest.raises(ValueError, match=r"c0"):
        dnnbind.rnn(x, weights, mode="lstm", hidden_size=3, proj_size=2, c0=np.zeros((1, 2, 2)))


@pytest.mark.parametrize("bidirectional", [False, True])
def test_projection_padding_is_exactly_zero_whatever_the_data(bidirectional):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3, 2))
    x[1, 0] = np.nan                # sequence 0's last valid step
    x[3:, 1] = np.nan               # sequence 1's padding
    w = make_proj_weights(rng, 2, 3, 2, dirs=2 if bidirectional else 1)
    (y, hy, cy), pullback = dnnbind.rnn(x, w, mode="lstm", hidden_size=3, bidirectional=bidirectional,
                                        lengths=[2, 3, 5], proj_size=2)
    assert (y[2:, 0] == 0).all() and (y[3:, 1] == 0).all()
    assert np.isfinite(y[:, 1:]).all() and np.isfinite(hy[:, 1:]).all() and np.isfinite(cy[:, 1:]).all()
    dx = pullback(np.ones(y.shape))[0]
    assert (dx[2:, 0] == 0).all() and (dx[3:, 1] == 0).all() and np.isfinite(dx[:, 1:]).all()


@st.composite
def proj_case(draw):
    batch, seq, lengths = _draw_sequences(draw)
    hidden = draw(st.integers(2, 4))
    return dict(seq=seq, batch=batch, inp=draw(st.integers(1, 3)), hidden=hidden,
                proj=draw(st.integers(1, hidden - 1)), layers=draw(st.integers(1, 3)),
                bidirectional=draw(st.booleans()), bias=draw(st.booleans()), lengths=lengths, h0=draw(st.booleans()))


@settings(max_examples=30, deadline=None)
@given(proj_case())
def test_projection_matches_torch_on_random_configurations(case):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    torch.manual_seed(7)
    T, B, H, P, L = case["seq"], case["batch"], case["hidden"], case["proj"], case["layers"]
    bidirectional, bias, lengths = case["bidirectional"], case["bias"], case["lengths"]
    dirs = 2 if bidirectional else 1
    module = torch.nn.LSTM(case["inp"], H, L, bias=bias, bidirectional=bidirectional, proj_size=P).double()
    tparams = [[getattr(module, n) for n in names] for names in module._all_weights]
    weights = _projection_weights(tparams, bias)
    x = rng.standard_normal((T, B, case["inp"]))
    state = (rng.standard_normal((L * dirs, B, P)), rng.standard_normal((L * dirs, B, H))) if case["h0"] else None
    (y, hy, cy), pullback = dnnbind.rnn(x, weights, hidden_size=H, num_layers=L, bidirectional=bidirectional,
                                        h0=None if state is None else state[0], c0=None if state is None else state[1],
                                        lengths=lengths, proj_size=P)
    xt = torch.tensor(x, requires_grad=True)
    state_t = [] if state is None else [torch.tensor(a, requires_grad=True) for a in state]
    yt, hyt, cyt = _torch_outputs(torch, module, xt, state_t, lengths, T)
    for ours, theirs in ((y, yt), (hy, hyt), (cy, cyt)):
        np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-11, atol=1e-12)
    cots = [rng.standard_normal(a.shape) for a in (y, hy, cy)]
    dx, dh0, dc0, dweights = pullback(*cots)
    grads = torch.autograd.grad([yt, hyt, cyt], [xt] + state_t + [p for e in tparams for p in e],
                                [torch.tensor(c) for c in cots], allow_unused=True)
    ours = [dx] + ([dh0, dc0] if state else []) + [g for e in dweights for g in e if g is not None]
    assert len(ours) == len(grads)
    for a, b in zip(ours, grads):
        np.testing.assert_allclose(a, np.zeros(a.shape) if b is None else b.numpy(), rtol=1e-10, atol=1e-11)


def test_relu_rnn_gradient_passes_through_nan_like_torch():
    """torch's ReLU backward zeroes the gradient only where the output is <= 0: a NaN step passes it on."""
    torch = pytest.importorskip("torch")
    x = np.array([[[0.5], [np.nan]]])
    w_ih, w_hh = np.array([[0.1], [-1.4]]), np.array([[0.8, 0.5], [0.1, 0.2]])
    b_ih, b_hh = np.array([0.8, 0.7]), np.array([0.3, 0.7])
    (y, _, _), pullback = dnnbind.rnn(x, [(w_ih, w_hh, b_ih, b_hh)], hidden_size=2, mode="rnn_relu")
    dx, _, _, dw = pullback(np.ones_like(y))
    m = torch.nn.RNN(1, 2, nonlinearity="relu", dtype=torch.float64)
    with torch.no_grad():
        for p, v in zip((m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0), (w_ih, w_hh, b_ih, b_hh)):
            p.copy_(torch.tensor(v))
    xt = torch.tensor(x, requires_grad=True)
    m(xt)[0].backward(torch.ones(y.shape, dtype=torch.float64))
    np.testing.assert_array_equal(dx, xt.grad.numpy())
    np.testing.assert_array_equal(dw[0][2], m.bias_ih_l0.grad.numpy())
