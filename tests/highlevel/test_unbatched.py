"""Unbatched inputs of the public ops (dnnbind.highlevel.unbatched): one sample without its batch axis, as
torch.nn.functional and torch.nn.LSTM/GRU take it. Results and every gradient against torch on the same
unbatched input (float64), and against the batched op on the sample with a batch axis of 1; the rank rules
and their errors."""
from __future__ import annotations

import re

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel.ops import residual_static

from .gradcheck import check_gradients

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _t(a: np.ndarray):
    return torch.tensor(a, requires_grad=True)


def _grads(outputs, inputs, cotangents):
    """torch's gradients of sum(output * cotangent) for the given inputs (None where one has none)."""
    pairs = [(o, torch.tensor(c)) for o, c in zip(outputs, cotangents) if c is not None]
    grads = torch.autograd.grad([o for o, _ in pairs], inputs, [c for _, c in pairs], allow_unused=True)
    return [None if g is None else g.numpy() for g in grads]


def _close(ours, theirs, what=""):
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    np.testing.assert_allclose(ours, theirs, rtol=1e-11, atol=1e-12, err_msg=what)


def _same(ours, batched, what=""):
    """An unbatched result or gradient equals the batched op's on the sample with a batch axis of 1."""
    assert ours.shape == batched.shape, (what, ours.shape, batched.shape)
    np.testing.assert_array_equal(ours, batched, err_msg=what)


# ---------------------------------------------------------------------------------------------- convolution

CONVS = [  # op, x (C, *spatial), w, b, keyword arguments
    ("conv", (3, 11), (4, 3, 3), True, dict(stride=2, padding=1)),
    ("conv", (4, 9, 8), (6, 2, 3, 2), True, dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    ("conv", (2, 5, 6, 5), (3, 2, 2, 3, 2), False, dict(stride=2, padding=1)),
    ("conv_transpose", (3, 6), (3, 2, 4), True, dict(stride=3, padding=1, output_padding=1)),
    ("conv_transpose", (4, 4, 5), (4, 3, 3, 3), True, dict(stride=2, padding=1, output_padding=1, groups=2)),
    ("conv_transpose", (2, 3, 3, 4), (2, 2, 2, 2, 2), False, dict(stride=2)),
]


@pytest.mark.parametrize("op, x_shape, w_shape, bias, kw", CONVS,
                         ids=[f"{c[0]}{len(c[1]) - 1}d" for c in CONVS])
def test_conv_unbatched_equals_torch_and_the_batch_of_one(rng, op, x_shape, w_shape, bias, kw):
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    out_channels = w_shape[0] if op == "conv" else w_shape[1] * kw.get("groups", 1)
    b = rng.standard_normal(out_channels) if bias else None
    y, pullback = getattr(dnnbind, op)(x, w, b, **kw)
    xt, wt = _t(x), _t(w)
    bt = None if b is None else _t(b)
    yt = getattr(F, f"{op}{len(x_shape) - 1}d")(xt, wt, bt, **kw)
    _close(y, yt.detach().numpy(), "y")
    dy = rng.standard_normal(y.shape)
    grads = pullback(dy)
    assert len(grads) == (3 if bias else 2)
    for g, gt, name in zip(grads, _grads([yt], [t for t in (xt, wt, bt) if t is not None], [dy]), "x w b".split()):
        _close(g, gt, f"d{name}")
    y1, pullback1 = getattr(dnnbind, op)(x[None], w, b, **kw)
    _same(y, y1[0], "y")
    for g, g1 in zip(grads, pullback1(dy[None])):
        _same(g, g1[0] if g.shape == x.shape else g1)


def test_conv_unbatched_finite_differences(rng):
    x, w, b = rng.standard_normal((3, 7, 6)), rng.standard_normal((2, 3, 3, 3)), rng.standard_normal(2)
    check_gradients(lambda: dnnbind.conv(x, w, b, padding=((1, 0), 1), stride=2), [x, w, b])


def test_unbatched_keeps_the_dtype(rng):
    x, w = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal((4, 3, 3)).astype(np.float32)
    y, pullback = dnnbind.conv(x, w)
    dx, dw = pullback(np.ones_like(y))
    assert y.dtype == dx.dtype == dw.dtype == np.float32 and dx.shape == x.shape


def test_unbatched_views_of_other_memory_orders(rng):
    """The batch axis is added by reshape, which views any memory order (a transposed x, a channels-last
    CuPy array) without a copy; results equal those of a C-ordered copy."""
    x, w = rng.standard_normal((9, 3)).T, rng.standard_normal((4, 3, 2))
    assert not x.flags.c_contiguous and np.shares_memory(x.reshape((1,) + x.shape), x)
    y, pullback = dnnbind.conv(x, w)
    y_c, pullback_c = dnnbind.conv(np.ascontiguousarray(x), w)
    np.testing.assert_array_equal(y, y_c)
    dy = rng.standard_normal(y.shape).T.copy().T                            # a cotangent in F order
    for g, g_c in zip(pullback(dy), pullback_c(np.ascontiguousarray(dy))):
        np.testing.assert_allclose(g, g_c, rtol=1e-14, atol=1e-14)


# ---------------------------------------------------------------------------------------------- pooling

MAXPOOLS = [  # x (C, *spatial), window given per spatial dim (that is what makes x unbatched), keywords
    ((3, 13), (3,), dict(stride=2, padding=1, dilation=3, ceil_mode=True)),
    ((2, 9, 8), (3, 2), dict(stride=2, padding=1, ceil_mode=True)),
    ((2, 7, 9), 2, dict(stride=(1, 2), dilation=(2, 1))),           # the rank from stride and dilation
    ((2, 6, 7, 8), 2, dict(padding=(1, 0, 1), dilation=(1, 2, 3))),   # ... from padding and dilation
    ((2, 5, 6, 7), (3, 2, 3), dict(stride=(2, 3, 2), padding=(1, 1, 0), ceil_mode=True)),
]


@pytest.mark.parametrize("x_shape, window, kw", MAXPOOLS, ids=[f"{len(c[0]) - 1}d-{i}" for i, c in enumerate(MAXPOOLS)])
def test_maxpool_unbatched_with_indices_equals_torch_and_the_batch_of_one(x_shape, window, kw):
    rng = np.random.default_rng(1)
    x = np.round(rng.standard_normal(x_shape) * 2)       # ties: the first maximum, as torch
    (y, indices), pullback = dnnbind.maxpool(x, window, return_indices=True, **kw)
    xt = _t(x)
    yt, it = getattr(F, f"max_pool{len(x_shape) - 1}d")(xt, window, return_indices=True, **kw)
    np.testing.assert_array_equal(y, yt.detach().numpy())
    assert indices.dtype == np.int64 and indices.shape == y.shape
    np.testing.assert_array_equal(indices, it.numpy())
    dy = rng.standard_normal(y.shape)
    _close(pullback(dy), _grads([yt], [xt], [dy])[0], "dx")
    (y1, indices1), pullback1 = dnnbind.maxpool(x[None], window, return_indices=True, **kw)
    _same(y, y1[0])
    _same(indices, indices1[0])
    _same(pullback(dy), pullback1(dy[None])[0])
    y_plain, pullback_plain = dnnbind.maxpool(x, window, **kw)
    _same(y_plain, y)
    _same(pullback_plain(dy), pullback(dy))


MEANPOOLS = [
    ((3, 10), (3,), dict(stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ((2, 8, 9), (3, 3), dict(stride=2, padding=1, ceil_mode=True)),
    ((2, 8, 9), (3, 2), dict(stride=2, padding=1, count_include_pad=False, divisor_override=-3)),
    ((2, 5, 6, 7), (3, 2, 3), dict(stride=(2, 3, 2), padding=(1, 1, 0), ceil_mode=True, divisor_override=4)),
]


@pytest.mark.parametrize("x_shape, window, kw", MEANPOOLS, ids=["1d", "2d", "2d-divisor", "3d-divisor"])
def test_meanpool_unbatched_equals_torch_and_the_batch_of_one(rng, x_shape, window, kw):
    x = rng.standard_normal(x_shape)
    y, pullback = dnnbind.meanpool(x, window, **kw)
    xt = _t(x)
    yt = getattr(F, f"avg_pool{len(x_shape) - 1}d")(xt, window, **kw)
    _close(y, yt.detach().numpy(), "y")
    dy = rng.standard_normal(y.shape)
    _close(pullback(dy), _grads([yt], [xt], [dy])[0], "dx")
    y1, pullback1 = dnnbind.meanpool(x[None], window, **kw)
    _same(y, y1[0])
    _same(pullback(dy), pullback1(dy[None])[0])


def test_pooling_with_int_arguments_only_takes_x_as_a_batch(rng):
    """The documented rule: with ints only the spatial rank is x.ndim - 2, so a 3-d x is a batch of 1-d
    signals (N, C, L), never one 2-d sample; one argument given per spatial dimension makes it one."""
    x = rng.standard_normal((4, 6, 8))
    for op in (dnnbind.maxpool, dnnbind.meanpool):
        y, pullback = op(x, 2)
        assert y.shape == (4, 6, 4) and pullback(np.ones(y.shape)).shape == x.shape
        np.testing.assert_array_equal(y, op(x, (2,))[0])                    # (2,): also 1-d, batched
        y2, pullback2 = op(x, (2, 2))
        assert y2.shape == (4, 3, 4) and pullback2(np.ones(y2.shape)).shape == x.shape
        np.testing.assert_array_equal(y2, op(x, 2, stride=(2, 2))[0])        # any argument tells the rank
        np.testing.assert_array_equal(y2, op(x[None], 2)[0][0])


def test_meanpool_unbatched_finite_differences(rng):
    x = rng.standard_normal((2, 7, 6))
    check_gradients(lambda: dnnbind.meanpool(x, (3, 2), stride=2, padding=((1, 0), 1), ceil_mode=True), [x],
                    select=lambda g: [g])


# ---------------------------------------------------------------------------------------------- rnn


def _torch_rnn(mode, inp, hidden, layers, bidirectional, bias=True):
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN}[mode]
    torch.manual_seed(0)
    return cls(inp, hidden, num_layers=layers, bidirectional=bidirectional, bias=bias).double()


def _weights(module, layers, dirs, bias):
    """torch's parameters per layer and direction, as dnnbind takes them (arrays of their own)."""
    out = []
    for layer in range(layers):
        for d in range(dirs):
            suffix = f"_l{layer}" + ("_reverse" if d else "")
            names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if bias else [])
            entry = [getattr(module, n + suffix).detach().numpy().copy() for n in names]
            out.append(tuple(entry + ([None, None] if not bias else [])))
    return out


RNNS = [  # mode, layers, bidirectional, bias, states given
    ("lstm", 1, False, True, False),
    ("lstm", 2, True, True, True),
    ("gru", 2, False, False, True),
    ("gru", 1, True, True, False),
    ("rnn_tanh", 1, False, True, True),
]


@pytest.mark.parametrize("mode, layers, bidirectional, bias, states", RNNS,
                         ids=[f"{m}-{l}layer{'-bi' if b else ''}{'-h0' if s else ''}" for m, l, b, _, s in RNNS])
def test_rnn_unbatched_equals_torch_and_the_batch_of_one(mode, layers, bidirectional, bias, states):
    rng = np.random.default_rng(2)
    seq, inp, hidden, dirs = 5, 3, 4, 2 if bidirectional else 1
    module = _torch_rnn(mode, inp, hidden, layers, bidirectional, bias)
    weights = _weights(module, layers, dirs, bias)
    lstm = mode == "lstm"
    x = rng.standard_normal((seq, inp))
    h0 = rng.standard_normal((layers * dirs, hidden)) if states else None
    c0 = rng.standard_normal((layers * dirs, hidden)) if states and lstm else None
    kw = dict(mode=mode, hidden_size=hidden, num_layers=layers, bidirectional=bidirectional)
    (y, hy, cy), pullback = dnnbind.rnn(x, weights, h0=h0, c0=c0, **kw)
    assert y.shape == (seq, dirs * hidden) and hy.shape == (layers * dirs, hidden)
    assert (cy is None) != lstm

    xt = _t(x)
    h0t = _t(h0) if h0 is not None else torch.zeros(layers * dirs, hidden, dtype=torch.float64, requires_grad=True)
    c0t = (_t(c0) if c0 is not None else torch.zeros_like(h0t, requires_grad=True)) if lstm else None
    yt, state = module(xt, (h0t, c0t) if lstm else h0t)
    hyt, cyt = state if lstm else (state, None)
    _close(y, yt.detach().numpy(), "y")
    _close(hy, hyt.detach().numpy(), "hy")
    if lstm:
        _close(cy, cyt.detach().numpy(), "cy")

    dy, dhy = rng.standard_normal(y.shape), rng.standard_normal(hy.shape)
    dcy = rng.standard_normal(cy.shape) if lstm else None
    dx, dh0, dc0, dweights = pullback(dy, dhy, dcy)
    params = [p for entry in zip(*[iter(module.parameters())] * (4 if bias else 2)) for p in entry]
    inputs = [xt, h0t] + ([c0t] if lstm else []) + params
    expected = _grads([yt, hyt] + ([cyt] if lstm else []), inputs, [dy, dhy] + ([dcy] if lstm else []))
    assert dx.shape == x.shape and dh0.shape == (layers * dirs, hidden)
    _close(dx, expected[0], "dx")
    _close(dh0, expected[1], "dh0")
    if lstm:
        assert dc0.shape == (layers * dirs, hidden)
        _close(dc0, expected[2], "dc0")
    else:
        assert dc0 is None
    ours = [g for entry in dweights for g in entry if g is not None]
    for i, (g, gt) in enumerate(zip(ours, expected[3 if lstm else 2:])):
        _close(g, gt, f"dweights {i}")

    (y1, hy1, cy1), pullback1 = dnnbind.rnn(x[:, None], weights, h0=None if h0 is None else h0[:, None],
                                            c0=None if c0 is None else c0[:, None], **kw)
    _same(y, y1[:, 0])
    _same(hy, hy1[:, 0])
    dx1, dh01, dc01, dweights1 = pullback1(dy[:, None], dhy[:, None], None if dcy is None else dcy[:, None])
    _same(dx, dx1[:, 0])
    _same(dh0, dh01[:, 0])
    if lstm:
        _same(cy, cy1[:, 0])
        _same(dc0, dc01[:, 0])
    for g, g1 in zip(ours, [g for entry in dweights1 for g in entry if g is not None]):
        _same(g, g1)


def test_rnn_unbatched_without_optional_cotangents_and_with_lengths(rng):
    weights = [(rng.standard_normal((9, 2)), rng.standard_normal((9, 3)), None, None)]
    x = rng.standard_normal((4, 2))
    (y, hy, _), pullback = dnnbind.rnn(x, weights, mode="gru", hidden_size=3, lengths=[2])
    np.testing.assert_array_equal(y[2:], 0)                                # packed: zero past the end
    dx, dh0, dc0, _ = pullback(np.ones(y.shape))
    assert dx.shape == x.shape and dh0.shape == (1, 3) and dc0 is None
    np.testing.assert_array_equal(dx[2:], 0)


# ---------------------------------------------------------------------------------------------- contract


def test_the_pullback_takes_and_describes_unbatched_cotangents(rng):
    x, w = rng.standard_normal((3, 8)), rng.standard_normal((4, 3, 3))
    y, pullback = dnnbind.conv(x, w)
    assert repr(pullback) == "<conv pullback: pullback(dy) -> (dx, dw); takes dy (4, 6) float64>"
    with pytest.raises(ValueError, match=r"dy has shape \(1, 4, 6\) but must have shape \(4, 6\)"):
        pullback(y[None])
    dx, dw = pullback(dy=y)                                                 # by name too
    assert dx.shape == x.shape and dw.shape == w.shape
    check_gradients(lambda: dnnbind.maxpool(x, (2,)), [x], select=lambda g: [g])   # twice, nothing changes


def test_a_batched_call_runs_the_backend_without_a_wrapper(rng):
    """The batch-axis wrapper exists for unbatched calls only: a batched call's pullback is the backend's."""
    x, w = rng.standard_normal((2, 3, 8)), rng.standard_normal((4, 3, 3))
    for (_, pullback), unbatched in ((dnnbind.conv(x, w), False), (dnnbind.conv(x[0], w), True),
                                     (dnnbind.maxpool(x, 2), False), (dnnbind.maxpool(x[0], (2,)), True)):
        assert (type(object.__getattribute__(pullback, "_run")).__name__ == "UnbatchedPullback") == unbatched


@pytest.mark.parametrize("call, message", [
    (lambda r: dnnbind.conv(r(5), r(4, 3, 3)),
     r"x has shape \(5,\) \(1 dimension\) but w has 3 dimensions: x must have 3 dimensions \(N, C, 1 spatial\) "
     r"or, unbatched, 2 \(C, 1 spatial\)"),
    (lambda r: dnnbind.conv_transpose(r(2, 3, 4, 5, 6, 7), r(3, 2, 2, 2)),
     r"x has shape \(2, 3, 4, 5, 6, 7\) \(6 dimensions\) but w has 4 dimensions: x must have 4 dimensions"),
    (lambda r: dnnbind.conv(r(3, 5), r(4, 3)),
     r"x has shape \(3, 5\) \(2 dimensions\) but must have 3 to 5 dimensions \(N, C, 1 to 3 spatial dimensions\) "
     r"or, unbatched, 2 to 4 \(C, 1 to 3 spatial dimensions\), one fewer than w"),
    (lambda r: dnnbind.maxpool(r(3, 5), 2),
     r"x has shape \(3, 5\) \(2 dimensions\) but must have 3 to 5 dimensions .* or, unbatched, 2 to 4 \(C, "
     r"\*spatial\) with window, stride, padding or dilation given per spatial dimension"),
    (lambda r: dnnbind.meanpool(r(3, 5), (2, 2)),
     r"x has shape \(3, 5\) \(2 dimensions\) but window=\(2, 2\) gives 2 spatial dimensions: x must have 4 "
     r"dimensions \(N, C, \*spatial\) or, unbatched, 3 \(C, \*spatial\)"),
    (lambda r: dnnbind.maxpool(r(7), 2, stride=(1,)),
     r"x has shape \(7,\) \(1 dimension\) but stride=\(1,\) gives 1 spatial dimension: x must have 3"),
    (lambda r: dnnbind.maxpool(r(3, 8, 8), (2, 2, 2)),         # (batched 1-d nor unbatched 2-d)
     r"^x has shape \(3, 8, 8\) \(3 dimensions\) but window=\(2, 2, 2\) gives 3 spatial dimensions: x must have 5 "
     r"dimensions \(N, C, \*spatial\) or, unbatched, 4 \(C, \*spatial\)$"),
    (lambda r: dnnbind.meanpool(r(2, 3, 8, 8), (2,)),
     r"^x has shape \(2, 3, 8, 8\) \(4 dimensions\) but window=\(2,\) gives 1 spatial dimension: x must have 3 "),
    (lambda r: dnnbind.rnn(r(5), [(r(8, 3), r(8, 2), None, None)], hidden_size=2),
     r"x has shape \(5,\) \(1 dimension\) but must have 3 dimensions \(seq, batch, input\) or, unbatched, 2 "
     r"\(seq, input\)"),
    (lambda r: dnnbind.rnn(r(5, 3), [(r(8, 3), r(8, 2), None, None)], hidden_size=2, h0=r(1, 1, 2)),
     r"h0 has shape \(1, 1, 2\) \(3 dimensions\) but x \(5, 3\) is unbatched \(seq, input\): h0 must be unbatched"),
    (lambda r: dnnbind.rnn(r(5, 3), [(r(8, 3), r(8, 2), None, None)], hidden_size=2, c0=r(1, 1, 2)),
     r"c0 has shape \(1, 1, 2\) \(3 dimensions\) but x \(5, 3\) is unbatched"),
])
def test_bad_ranks_name_x_and_the_ranks_accepted(rng, call, message):
    with pytest.raises(ValueError, match=message):
        call(lambda *shape: rng.standard_normal(shape))


@pytest.mark.parametrize("call, message", [
    (lambda r: dnnbind.conv(r(2, 7), r(4, 3, 3)),
     r"x has 2 channels but w.shape\[1\] \* groups = 3 \* 1 = 3 \(x \(2, 7\) is unbatched: it is checked as a "
     r"batch of one\)"),
    (lambda r: dnnbind.maxpool(r(2, 3, 3), (4, 4)),
     r"output would be empty: x's spatial size \(3, 3\).*\(x \(2, 3, 3\) is unbatched"),
    (lambda r: dnnbind.rnn(r(5, 3), [(r(8, 3), r(8, 2), None, None)], hidden_size=2, h0=r(1, 3)),
     r"h0 has shape \(1, 1, 3\) but must have shape \(1, 1, 2\).*\(x \(5, 3\) is unbatched"),
    (lambda r: dnnbind.meanpool(r(2, 4, 4), (2, 2), divisor_override=0),
     r"divisor_override=0 must be a non-zero int"),
])
def test_errors_of_unbatched_calls_say_they_checked_a_batch_of_one(rng, call, message):
    with pytest.raises(ValueError, match=message):
        call(lambda *shape: rng.standard_normal(shape))


def test_the_residual_form_stays_batched():
    """Frameworks add the batch axis themselves (dnnbind.torch's layers do): the residual form's checks
    take batched x only, with the messages they always had."""
    with pytest.raises(ValueError, match=re.escape("x has shape (3, 8) (2 dimensions) but must have 3 to 5")):
        residual_static("conv", np.ones((3, 8)), np.ones((4, 3, 3)), None)
    with pytest.raises(ValueError, match=re.escape("x has shape (3, 8) (2 dimensions) but must have 3 to 5")):
        residual_static("maxpool", np.ones((3, 8)), window=(2,))
