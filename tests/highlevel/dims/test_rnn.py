"""RNNDims and the weight parsing (dnnbind.highlevel.dims.rnn)."""
from __future__ import annotations

import numpy as np
import pytest

from dnnbind.highlevel.dims.rnn import RNNDims, rnn_weight_entries


def _shapes(mode_gates, hidden, inp, layers, dirs, bias=True):
    out = []
    for i in range(layers * dirs):
        layer_in = inp if i < dirs else hidden * dirs
        g = mode_gates * hidden
        out.append(((g, layer_in), (g, hidden), (g,) if bias else None, (g,) if bias else None))
    return out


def test_rnn_dims_shapes():
    d = RNNDims((7, 3, 5), _shapes(4, 6, 5, 2, 2), mode="lstm", hidden_size=6, num_layers=2, bidirectional=True,
                lengths=np.array([7, 1, 4]))
    assert d.gates == 4 and d.num_directions == 2 and d.has_bias
    assert d.y_shape == (7, 3, 12) and d.h_shape == (4, 3, 6)
    assert d.layer_input_size(0) == 5 and d.layer_input_size(1) == 12
    assert d.lengths == (7, 1, 4) and all(type(v) is int for v in d.lengths)
    hash(d.key())
    d = RNNDims((7, 3, 5), _shapes(3, 6, 5, 1, 1, bias=False), mode="gru", hidden_size=6)
    assert d.gates == 3 and not d.has_bias and d.lengths is None


@pytest.mark.parametrize("kwargs, error, pattern", [
    (dict(mode="lstm2"), ValueError, r"mode='lstm2' must be one of rnn_relu, rnn_tanh, lstm, gru"),
    (dict(hidden_size=0), ValueError, r"hidden_size=0 must be positive"),
    (dict(num_layers=0), ValueError, r"num_layers=0 must be positive"),
    (dict(bidirectional=1), TypeError, r"bidirectional=1 must be a bool"),
    (dict(num_layers=2), ValueError, r"weights has 1 entries but num_layers=2 and bidirectional=False need 2"),
    (dict(hidden_size=5), ValueError, r"weights\[0\]\[0\] \(w_ih\) has shape \(24, 5\) but must have shape \(20, 5\)"),
    (dict(x=(7, 3, 4)), ValueError, r"weights\[0\]\[0\] \(w_ih\) has shape \(24, 5\) but must have shape \(24, 4\)"),
    (dict(x=(7, 3)), ValueError, r"x has shape \(7, 3\) \(2 dimensions\) but must have 3 to 3 dimensions \(seq, batch, input\)"),
    (dict(h0_shape=(1, 3, 5)), ValueError, r"h0 has shape \(1, 3, 5\) but must have shape \(1, 3, 6\)"),
    (dict(c0_shape=(2, 3, 6)), ValueError, r"c0 has shape \(2, 3, 6\) but must have shape \(1, 3, 6\)"),
    (dict(lengths=[7, 7]), ValueError, r"lengths has 2 entries but x has a batch of 3"),
    (dict(lengths=[7, 0, 3]), ValueError, r"lengths\[1\]=0 must be between 1 and the sequence length 7"),
    (dict(lengths=[8, 1, 3]), ValueError, r"lengths\[0\]=8 must be between 1"),
    (dict(lengths=[1.5, 1, 3]), TypeError, r"lengths\[0\]=1.5 must be an int"),
    (dict(lengths=3), TypeError, r"lengths must be a sequence of ints"),
])
def test_rnn_dims_errors(kwargs, error, pattern):
    kwargs = dict(kwargs)
    x = kwargs.pop("x", (7, 3, 5))
    args = dict(mode="lstm", hidden_size=6)
    args.update(kwargs)
    with pytest.raises(error, match=pattern):
        RNNDims(x, _shapes(4, 6, 5, 1, 1), **args)


def test_rnn_dims_c0_only_for_lstm():
    with pytest.raises(ValueError, match=r"c0 is only used by mode='lstm', not mode='gru'"):
        RNNDims((7, 3, 5), _shapes(3, 6, 5, 1, 1), mode="gru", hidden_size=6, c0_shape=(1, 3, 6))


def test_rnn_dims_bias_all_or_none():
    shapes = _shapes(4, 6, 5, 2, 1)
    shapes[1] = shapes[1][:2] + (None, None)
    with pytest.raises(ValueError, match=r"weights\[1\]: every entry must have biases, or none"):
        RNNDims((7, 3, 5), shapes, mode="lstm", hidden_size=6, num_layers=2)


def test_rnn_weight_entries():
    a = np.zeros((4, 2))
    assert rnn_weight_entries([[a, a, None, None]]) == ((a, a, None, None),)
    with pytest.raises(TypeError, match=r"weights must be a list of \(w_ih, w_hh, b_ih, b_hh\) tuples, not ndarray"):
        rnn_weight_entries(a)
    with pytest.raises(TypeError, match=r"weights\[0\] must be a \(w_ih, w_hh, b_ih, b_hh\) tuple \(with w_hr as "
                                        r"a 5th array for an LSTM with proj_size\), got tuple of length 3"):
        rnn_weight_entries([(a, a, a)])
    from dnnbind.highlevel.residual import ArraySpec       # (one entry where a list of them belongs)
    for one in (a, ArraySpec((4, 2), np.dtype("float32"))):
        with pytest.raises(TypeError, match=r"weights\[0\] must be a .* tuple .*, got an array of shape \(4, 2\)"):
            rnn_weight_entries((one, one, None, None))
    assert rnn_weight_entries([[a, a, None, None, a]]) == ((a, a, None, None, a),)
    with pytest.raises(TypeError, match=r"weights\[0\]: w_hr \(the 5th entry\) must be an array, not None"):
        rnn_weight_entries([(a, a, None, None, None)])
    with pytest.raises(ValueError, match=r"weights\[1\] has 4 arrays but weights\[0\] has 5"):
        rnn_weight_entries([(a, a, None, None, a), (a, a, None, None)])
    with pytest.raises(TypeError, match=r"weights\[0\]\[0\] \(w_ih\) must be an array, not None"):
        rnn_weight_entries([(None, a, a, a)])
    with pytest.raises(TypeError, match=r"weights\[0\]\[3\] \(b_hh\) is None but weights\[0\]\[2\] \(b_ih\) is not"):
        rnn_weight_entries([(a, a, a, None)])


def _proj_shapes(hidden, proj, inp, layers, dirs, bias=True):
    g = 4 * hidden
    out = []
    for i in range(layers * dirs):
        layer_in = inp if i < dirs else proj * dirs
        out.append(((g, layer_in), (g, proj)) + (((g,), (g,)) if bias else (None, None)) + ((proj, hidden),))
    return out


def test_rnn_dims_projection():
    d = RNNDims((7, 3, 5), _proj_shapes(6, 4, 5, 2, 2), mode="lstm", hidden_size=6, num_layers=2,
                bidirectional=True, proj_size=4, h0_shape=(4, 3, 4), c0_shape=(4, 3, 6))
    assert (d.proj_size, d.out_size) == (4, 4)
    assert d.y_shape == (7, 3, 8) and d.h_shape == (4, 3, 4) and d.c_shape == (4, 3, 6)
    assert d.layer_input_size(1) == 8
    assert d.key() != RNNDims((7, 3, 5), _shapes(4, 6, 5, 2, 2), mode="lstm", hidden_size=6, num_layers=2,
                              bidirectional=True).key()
    plain = RNNDims((7, 3, 5), _shapes(4, 6, 5, 1, 1), mode="lstm", hidden_size=6)
    assert (plain.proj_size, plain.out_size, plain.c_shape) == (0, 6, plain.h_shape)
    RNNDims((7, 3, 5), _proj_shapes(6, 2, 5, 1, 1, bias=False), mode="lstm", hidden_size=6, proj_size=2)


@pytest.mark.parametrize("kwargs, shapes, error, match", [
    (dict(proj_size=6), _proj_shapes(6, 6, 5, 1, 1), ValueError, r"proj_size=6 must be smaller than hidden_size=6"),
    (dict(proj_size=-1), _shapes(4, 6, 5, 1, 1), ValueError, r"proj_size=-1 must be 0 \(no projection\) or positive"),
    (dict(proj_size=2.5), _shapes(4, 6, 5, 1, 1), TypeError, r"proj_size"),
    (dict(proj_size=2, mode="gru"), _shapes(3, 6, 5, 1, 1), ValueError,
     r"proj_size=2 is only supported for mode='lstm', not mode='gru'"),
    (dict(proj_size=2), _shapes(4, 6, 5, 1, 1), ValueError,
     r"weights\[0\] has 4 arrays but proj_size=2 takes 5: \(w_ih, w_hh, b_ih, b_hh, w_hr\)"),
    (dict(), _proj_shapes(6, 2, 5, 1, 1), ValueError, r"weights\[0\] has 5 arrays but proj_size=0 takes 4"),
    (dict(proj_size=3), _proj_shapes(6, 2, 5, 1, 1), ValueError, r"weights\[0\]\[1\] \(w_hh\)"),
    (dict(proj_size=2), [s[:4] + ((2, 5),) for s in _proj_shapes(6, 2, 5, 1, 1)], ValueError,
     r"weights\[0\]\[4\] \(w_hr\)"),
    (dict(proj_size=2, num_layers=2), [s if i == 0 else ((24, 6),) + s[1:] for i, s in
                                       enumerate(_proj_shapes(6, 2, 5, 2, 1))], ValueError,
     r"weights\[1\]\[0\] \(w_ih\).*layer 1 input size 2"),
    (dict(proj_size=2, h0_shape=(1, 3, 6)), _proj_shapes(6, 2, 5, 1, 1), ValueError, r"h0.*proj_size\)"),
    (dict(proj_size=2, c0_shape=(1, 3, 2)), _proj_shapes(6, 2, 5, 1, 1), ValueError, r"c0.*hidden_size\)"),
])
def test_rnn_dims_projection_errors(kwargs, shapes, error, match):
    kwargs = dict(dict(mode="lstm", hidden_size=6), **kwargs)
    with pytest.raises(error, match=match):
        RNNDims((7, 3, 5), shapes, **kwargs)
