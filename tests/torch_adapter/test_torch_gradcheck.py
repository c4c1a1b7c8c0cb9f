"""torch.autograd.gradcheck (float64, finite differences) through every op of dnnbind.torch."""
from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck

import dnnbind.torch as dt


def _lstm_weights(randn, input_size, hidden, entries, bias=True):
    return [(randn(4 * hidden, input_size if i < 2 else 2 * hidden), randn(4 * hidden, hidden),
             randn(4 * hidden) if bias else None, randn(4 * hidden) if bias else None) for i in range(entries)]


def _cases(randn):
    """name -> (function of tensors, its tensors)."""
    x4 = randn(2, 3, 5, 5)
    x3 = randn(2, 4, 7)
    lstm = _lstm_weights(randn, 2, 2, 4)                       # 2 layers, bidirectional
    gru = [(randn(6, 3), randn(6, 2), None, None)]              # no biases
    lstm_proj = [(randn(12, 2 if i < 2 else 4), randn(12, 2), randn(12), randn(12), randn(2, 3))
                 for i in range(4)]                            # hidden 3, proj 2, 2 layers, bidirectional
    return {
        "conv": (lambda x, w, b: dt.conv(x, w, b, padding=1, stride=(1, 2)), (x4, randn(4, 3, 3, 3), randn(4))),
        "conv_grouped_1d": (lambda x, w: dt.conv(x, w, groups=2, dilation=2, padding=((1, 2),)),
                            (x3, randn(2, 2, 2))),
        "conv_flip_3d": (lambda x, w: dt.conv(x, w, flip=True), (randn(1, 2, 3, 3, 3), randn(2, 2, 2, 2, 2))),
        "conv_transpose": (lambda x, w, b: dt.conv_transpose(x, w, b, stride=2, padding=1, output_padding=1),
                           (x4, randn(3, 2, 3, 3), randn(2))),
        "maxpool": (lambda x: dt.maxpool(x, 2, stride=1, padding=1), (x4,)),
        "meanpool": (lambda x: dt.meanpool(x, 3, stride=2, padding=1, count_include_pad=False), (x4,)),
        "meanpool_divisor": (lambda x: dt.meanpool(x, 3, stride=2, padding=1, ceil_mode=True, divisor_override=-2),
                             (x4,)),
        "softmax": (lambda x: dt.softmax(x, axis=-1), (x4,)),
        "logsoftmax": (lambda x: dt.logsoftmax(x), (x3,)),
        "activation_swish": (lambda x: dt.activation(x, "swish", alpha=1.5), (x3,)),
        "activation_elu": (lambda x: dt.activation(x, "elu"), (x3,)),
        "batchnorm_train": (lambda x, g, b: dt.batchnorm(x, g, b, running_mean=torch.zeros(3),
                                                           running_var=torch.ones(3)), (x4, randn(3), randn(3))),
        "batchnorm_eval": (lambda x, g, b: dt.batchnorm(x, g, b, running_mean=torch.full((3,), 0.5),
                                                          running_var=torch.full((3,), 2.0), training=False),
                           (x4, randn(3), randn(3))),
        "dropout": (lambda x: dt.dropout(x, 0.4, seed=7), (x4,)),
        "rnn_lstm": (lambda x, h0, c0, *w: dt.rnn(x, [w[i:i + 4] for i in range(0, 16, 4)], hidden_size=2,
                                                  num_layers=2, bidirectional=True, h0=h0, c0=c0),
                     (randn(3, 2, 2), randn(4, 2, 2), randn(4, 2, 2), *[t for e in lstm for t in e])),
        "rnn_gru_lengths": (lambda x, w_ih, w_hh: dt.rnn(x, [(w_ih, w_hh, None, None)], mode="gru", hidden_size=2,
                                                         lengths=[3, 1])[:2],
                            (randn(3, 2, 3), *gru[0][:2])),
        "rnn_lstm_proj_lengths": (lambda x, h0, c0, *w: dt.rnn(x, [w[i:i + 5] for i in range(0, 20, 5)],
                                                               hidden_size=3, num_layers=2, bidirectional=True,
                                                               h0=h0, c0=c0, lengths=[3, 1], proj_size=2),
                                  (randn(3, 2, 2), randn(4, 2, 2), randn(4, 2, 3),
                                   *[t for e in lstm_proj for t in e])),
    }


CASES = list(_cases(lambda *s: torch.zeros(s)))


@pytest.mark.parametrize("name", CASES)
def test_gradcheck(name, randn):
    fn, inputs = _cases(randn)[name]
    assert gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_gradients_only_for_inputs_that_need_them(randn):
    x, w = randn(1, 2, 4, 4, grad=False), randn(3, 2, 3, 3)
    dt.conv(x, w).sum().backward()
    assert x.grad is None and w.grad is not None and w.grad.shape == w.shape


def test_missing_state_gets_no_gradient_and_unused_outputs_are_fine(randn):
    """h0 None (the op still computes dh0), and only hy used: the pullback gets dy zeros, dcy None."""
    x = randn(4, 2, 3)
    w = [(randn(8, 3), randn(8, 2), randn(8), randn(8))]
    _, hy, cy = dt.rnn(x, w, hidden_size=2)
    hy.sum().backward()
    assert x.grad is not None and torch.count_nonzero(x.grad) > 0
    assert all(t.grad is not None for t in w[0])


def test_double_backward_is_right_not_zero(randn):
    """A second derivative comes out right (tanh's, as torch's), never zero: the backward is differentiated
    by the op's second-order rule (see test_torch_double_backward.py; an op without one refuses)."""
    x, v = randn(2, 3), randn(2, 3)
    (g,) = torch.autograd.grad(dt.activation(x, "tanh"), x, grad_outputs=v, create_graph=True)
    (second,) = torch.autograd.grad(g.sum(), x)
    xt = x.detach().clone().requires_grad_()
    (gt,) = torch.autograd.grad(torch.tanh(xt), xt, grad_outputs=v, create_graph=True)
    (expected,) = torch.autograd.grad(gt.sum(), xt)
    assert expected.abs().sum() > 0
    torch.testing.assert_close(second, expected)


