"""dnnbind.torch's ops give torch.nn.functional's results and gradients; tensors cross without copies."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dnnbind.torch as dt
from dnnbind.highlevel import plans
from dnnbind.highlevel.specs import OP_NAMES
from dnnbind.torch.convert import to_array, to_tensor


def _pair(randn, shape, dtype):
    a = randn(*shape, dtype=dtype)
    return a, a.detach().clone().requires_grad_()


def _compare(ours, theirs, inputs_ours, inputs_theirs, tol):
    """Same forward values, and the same gradients for a random cotangent."""
    torch.testing.assert_close(ours, theirs, rtol=tol, atol=tol)
    v = torch.randn(theirs.shape, generator=torch.Generator().manual_seed(5), dtype=theirs.dtype)
    ours.backward(v)
    theirs.backward(v)
    for a, b in zip(inputs_ours, inputs_theirs):
        torch.testing.assert_close(a.grad, b.grad, rtol=tol, atol=tol)


# name -> (input shapes, dnnbind call, torch call)
CASES = {
    "conv2d": ([(2, 4, 7, 6), (6, 2, 3, 2), (6,)],
               lambda x, w, b: dt.conv(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2),
               lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    "conv1d": ([(2, 3, 9), (4, 3, 3)], lambda x, w: dt.conv(x, w, padding=2),
               lambda x, w: F.conv1d(x, w, padding=2)),
    "conv3d": ([(1, 2, 4, 5, 4), (3, 2, 2, 3, 2), (3,)], lambda x, w, b: dt.conv(x, w, b, stride=2, padding=1),
               lambda x, w, b: F.conv3d(x, w, b, stride=2, padding=1)),
    "conv_transpose2d": ([(2, 4, 4, 5), (4, 3, 3, 3), (6,)],
                         lambda x, w, b: dt.conv_transpose(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
                         lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1,
                                                            groups=2)),
    "maxpool2d": ([(2, 3, 7, 7)], lambda x: dt.maxpool(x, 3, stride=2, padding=1),
                  lambda x: F.max_pool2d(x, 3, stride=2, padding=1)),
    "maxpool1d": ([(2, 3, 8)], lambda x: dt.maxpool(x, 2), lambda x: F.max_pool1d(x, 2)),
    "meanpool3d": ([(1, 2, 4, 4, 6)], lambda x: dt.meanpool(x, 2, padding=1, count_include_pad=False),
                   lambda x: F.avg_pool3d(x, 2, padding=1, count_include_pad=False)),
    "meanpool2d": ([(2, 3, 6, 6)], lambda x: dt.meanpool(x, 3, stride=1, padding=1),
                   lambda x: F.avg_pool2d(x, 3, stride=1, padding=1)),
    "meanpool2d_divisor": ([(2, 3, 8, 9)], lambda x: dt.meanpool(x, 3, stride=2, padding=1, ceil_mode=True,
                                                                 divisor_override=-4),
                           lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, divisor_override=-4)),
    "meanpool3d_divisor": ([(1, 2, 4, 5, 6)], lambda x: dt.meanpool(x, 2, padding=1, count_include_pad=False,
                                                                    divisor_override=3),
                           lambda x: F.avg_pool3d(x, 2, padding=1, count_include_pad=False, divisor_override=3)),
    "softmax": ([(3, 5, 4)], lambda x: dt.softmax(x, axis=2), lambda x: F.softmax(x, dim=2)),
    "logsoftmax": ([(3, 5)], lambda x: dt.logsoftmax(x), lambda x: F.log_softmax(x, dim=1)),
    "relu": ([(4, 6)], lambda x: dt.activation(x, "relu"), F.relu),
    "sigmoid": ([(4, 6)], lambda x: dt.activation(x, "sigmoid"), torch.sigmoid),
    "tanh": ([(4, 6)], lambda x: dt.activation(x, "tanh"), torch.tanh),
    "elu": ([(4, 6)], lambda x: dt.activation(x, "elu", alpha=0.7), lambda x: F.elu(x, 0.7)),
    "leaky_relu": ([(4, 6)], lambda x: dt.activation(x, "leaky_relu", alpha=0.2), lambda x: F.leaky_relu(x, 0.2)),
    "clipped_relu": ([(4, 6)], lambda x: dt.activation(x, "clipped_relu"), F.relu6),
    "swish": ([(4, 6)], lambda x: dt.activation(x, "swish"), F.silu),
    "batchnorm": ([(4, 3, 2, 3), (3,), (3,)], lambda x, g, b: dt.batchnorm(x, g, b, eps=1e-3),
                  lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True, eps=1e-3)),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", list(CASES))
def test_equals_torch_functional(name, dtype, randn):
    shapes, ours_fn, theirs_fn = CASES[name]
    pairs = [_pair(randn, s, dtype) for s in shapes]
    ours_in, theirs_in = [p[0] for p in pairs], [p[1] for p in pairs]
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    _compare(ours_fn(*ours_in), theirs_fn(*theirs_in), ours_in, theirs_in, tol)


def test_batchnorm_running_statistics_match_torch(randn):
    x = randn(5, 3, 4, dtype=torch.float32, grad=False)
    g, b = torch.ones(3), torch.zeros(3)
    ours = [torch.zeros(3), torch.ones(3)]
    theirs = [torch.zeros(3), torch.ones(3)]
    for _ in range(3):
        dt.batchnorm(x, g, b, running_mean=ours[0], running_var=ours[1], momentum=0.3)
        F.batch_norm(x, theirs[0], theirs[1], g, b, training=True, momentum=0.3)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(dt.batchnorm(x, g, b, running_mean=ours[0], running_var=ours[1], training=False),
                               F.batch_norm(x, theirs[0], theirs[1], g, b, training=False))


def test_batchnorm_updates_non_contiguous_running_stats_like_torch(randn):
    x = randn(4, 3, dtype=torch.float32, grad=False)
    ours, theirs = torch.zeros(3, 2)[:, 0], torch.zeros(3)
    var, their_var = torch.ones(3), torch.ones(3)
    dt.batchnorm(x, torch.ones(3), torch.zeros(3), running_mean=ours, running_var=var)
    torch.nn.functional.batch_norm(x, theirs, their_var, training=True)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(var, their_var)


def test_dropout_masks_scales_and_follows_torch_seed(randn):
    x = randn(200, 10, dtype=torch.float32)
    y = dt.dropout(x, 0.25, seed=3)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / 0.75)
    assert 0.6 < kept.float().mean() < 0.9
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, kept.float() / 0.75)
    torch.testing.assert_close(dt.dropout(x, 0.25, seed=3), y)
    torch.manual_seed(11)
    first = dt.dropout(x, 0.5)
    torch.manual_seed(11)
    assert torch.equal(dt.dropout(x, 0.5), first)
    assert not torch.equal(dt.dropout(x, 0.5), first)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
def test_dropout_draws_random_numbers_only_where_its_mask_is_random(p):
    """p = 0 and p = 1 need no mask, as in torch: the layer and the function run under vmap's
    randomness="error", which refuses any random draw, and give torch's results there; p = 0.5 is
    refused as torch's layer is."""
    from torch.func import vmap

    from dnnbind.torch import nn as dnnbind_nn
    x = torch.randn(3, 4)
    for run in (torch.nn.Dropout(p), dnnbind_nn.Dropout(p), lambda x: dt.dropout(x, p)):
        batched = vmap(run, randomness="error")
        if p == 0.5:
            with pytest.raises(RuntimeError, match="randomness"):
                batched(x)
        else:
            torch.testing.assert_close(batched(x), x * (1 - p))


def test_rnn_lengths_equal_torch_packed_sequences(randn):
    lstm = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, dtype=torch.float64)
    x = randn(5, 3, 3)
    lengths = [2, 5, 3]
    weights = [tuple(getattr(lstm, f"{k}_l{layer}{sfx}") for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
               for layer in range(2) for sfx in ("", "_reverse")]
    y, hy, cy = dt.rnn(x, weights, hidden_size=4, num_layers=2, bidirectional=True, lengths=torch.tensor(lengths))
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, (h_ref, c_ref) = lstm(packed)
    y_ref, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=5)
    torch.testing.assert_close((y, hy, cy), (y_ref, h_ref, c_ref))
    grads = torch.autograd.grad((y.sum(), hy.sum()), [x, *weights[0]])
    grads_ref = torch.autograd.grad((y_ref.sum(), h_ref.sum()), [x, *weights[0]])
    torch.testing.assert_close(grads, grads_ref)


def test_cpu_tensors_cross_without_copies():
    t = torch.arange(12.0).reshape(3, 4)
    a = to_array(t)
    assert isinstance(a, np.ndarray) and np.shares_memory(a, t.numpy())
    back = to_tensor(a)
    assert back.data_ptr() == t.data_ptr()
    a[0, 0] = 42.0
    assert t[0, 0] == 42.0


def test_non_contiguous_tensors_are_handed_over_contiguous():
    t = torch.arange(12.0).reshape(3, 4).t()
    a = to_array(t)
    assert a.flags.c_contiguous
    np.testing.assert_array_equal(a, t.numpy())


def test_results_torch_cannot_share_are_copied():
    a = np.arange(6.0)[::-1]
    read_only = np.arange(4.0)
    read_only.flags.writeable = False
    torch.testing.assert_close(to_tensor(a), torch.tensor([5.0, 4, 3, 2, 1, 0], dtype=torch.float64))
    assert to_tensor(read_only).data_ptr() != read_only.ctypes.data


def test_argument_errors_name_the_argument(randn):
    x = randn(2, 3, 4, 4, dtype=torch.float32)
    with pytest.raises(TypeError, match="w has dtype torch.int32; dnnbind supports torch.float16, torch.bfloat16"):
        dt.conv(x, torch.zeros(2, 3, 3, 3, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"w has dtype torch.bfloat16 but x has dtype torch.float32; convert one of them"):
        dt.conv(x, torch.zeros(2, 3, 3, 3, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match=r"w has dtype torch.float64 but x has dtype torch.float32; convert one "
                                        r"of them \(for example w.to\(x.dtype\)\)"):
        dt.conv(x, torch.zeros(2, 3, 3, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="w must be a torch.Tensor, not ndarray"):
        dt.conv(x, np.zeros((2, 3, 3, 3), np.float32))
    with pytest.raises(TypeError, match=r"b is on meta but x is on cpu; move them to one device"):
        dt.conv(x, torch.zeros(2, 3, 3, 3), torch.zeros(2, device="meta"))
    with pytest.raises(ValueError, match=r"x has 3 channels but w.shape\[1\]"):
        dt.conv(x, torch.zeros(2, 5, 3, 3))
    with pytest.raises(TypeError, match="weights\\[0\\]\\[1\\] has dtype torch.int64"):
        dt.rnn(randn(2, 1, 3), [(torch.zeros(8, 3), torch.zeros(8, 2, dtype=torch.long), None, None)],
               hidden_size=2)


@pytest.mark.parametrize("name", list(CASES))
def test_bfloat16_tensors_pass_through_and_match_torch_in_float32(name, randn):
    """bfloat16 in, bfloat16 out (results and gradients), computed with float32 accumulation: within a few
    units of bfloat16's 8-bit mantissa of torch's float32 computation on the same values."""
    shapes, ours_fn, theirs_fn = CASES[name]
    ours_in = [randn(*s, dtype=torch.float32).detach().to(torch.bfloat16).requires_grad_() for s in shapes]
    theirs_in = [a.detach().float().requires_grad_() for a in ours_in]
    ours, theirs = ours_fn(*ours_in), theirs_fn(*theirs_in)
    assert ours.dtype == torch.bfloat16
    torch.testing.assert_close(ours.float(), theirs, rtol=2e-2, atol=2e-2)
    v = torch.randn(theirs.shape, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    ours.backward(v)
    theirs.backward(v.float())
    for a, b in zip(ours_in, theirs_in):
        assert a.grad.dtype == torch.bfloat16
        torch.testing.assert_close(a.grad.float(), b.grad, rtol=3e-2, atol=3e-2)


def test_bfloat16_crosses_without_a_copy():
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    a = to_array(t)
    assert a.dtype.name == "bfloat16" and np.shares_memory(a, t.view(torch.int16).numpy())
    back = to_tensor(a)
    assert back.dtype == torch.bfloat16 and torch.equal(back, t) and back.data_ptr() == t.data_ptr()


def test_0d_and_empty_tensors_follow_the_edge_policy():
    x = torch.tensor(0.5, requires_grad=True)
    y = dt.activation(x, "tanh")
    y.backward()
    assert y.shape == () and torch.allclose(x.grad, 1 - torch.tanh(torch.tensor(0.5)) ** 2)
    x = torch.zeros(0, 3, 5, 5, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    y = dt.conv(x, w, padding=1)
    assert y.shape == F.conv2d(x, w, padding=1).shape
    y.sum().backward()
    assert x.grad.shape == x.shape and not w.grad.any()


def test_cpu_ops_run_numpys_blas_on_one_thread(monkeypatch):
    """dnnbind.torch runs the cpu backend's BLAS ops with OpenBLAS on one thread (torch's OpenMP
    threads spin between torch's ops), seen from inside a CPU op's backend call; the setting is restored.
    Ops that call no BLAS (calls.BLAS_OPS says which do), and convolutions whose products OpenBLAS runs
    on one thread anyway, run without that scope."""
    from dnnbind.highlevel import dispatch
    from dnnbind.highlevel.cpu import _threads
    from dnnbind.highlevel.cpu._blas import openblas
    import dnnbind.highlevel.cpu as cpu
    get = openblas().get_threads
    assert get is not None
    before, seen = get(), []
    real = cpu.activation_forward

    def spy(*args, **kwargs):
        seen.append((get(), _threads.blas_single_threaded()))
        return real(*args, **kwargs)

    monkeypatch.setitem(dispatch._functions, (dispatch.BACKENDS["cpu"], "activation_forward"), spy)
    real_conv = cpu.conv_forward

    def conv_spy(*args, **kwargs):
        seen.append((get(), _threads.blas_single_threaded()))
        return real_conv(*args, **kwargs)

    monkeypatch.setitem(dispatch._functions, (dispatch.BACKENDS["cpu"], "conv_forward"), conv_spy)
    # no signature or plan of an earlier test's call of these shapes: they hold the unspied functions
    monkeypatch.setattr(plans.CACHE, "entries", {})
    y = dt.conv(torch.randn(4, 16, 16, 16, requires_grad=True), torch.randn(16, 16, 3, 3))
    y.sum().backward()
    assert seen == [(1, True)] and get() == before
    seen.clear()
    # a convolution too small for OpenBLAS to thread a product of (calls.BLAS_ONE_THREAD_MACS) runs
    # without the scope, whose two thread settings would cost more than the call
    dt.conv(torch.randn(2, 3, 6, 6, requires_grad=True), torch.randn(4, 3, 3, 3)).sum().backward()
    assert seen == [(before, before == 1)] and get() == before
    seen.clear()
    dt.activation(torch.randn(4, 3, requires_grad=True), "relu").sum().backward()
    assert seen == [(before, before == 1)] and get() == before


UNBATCHED = {   # name -> (input shapes, dnnbind call, torch call): x is one sample, as torch.nn.functional takes it
    "conv1d": ([(3, 9), (4, 3, 3), (4,)], lambda x, w, b: dt.conv(x, w, b, padding=1),
               lambda x, w, b: F.conv1d(x, w, b, padding=1)),
    "conv2d": ([(2, 7, 6), (4, 2, 3, 2)], lambda x, w: dt.conv(x, w, stride=2),
               lambda x, w: F.conv2d(x, w, stride=2)),
    "conv_transpose2d": ([(4, 5, 4), (4, 3, 3, 3)], lambda x, w: dt.conv_transpose(x, w, stride=2, output_padding=1),
                         lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1)),
    "maxpool2d": ([(3, 7, 8)], lambda x: dt.maxpool(x, (3, 2), stride=2, ceil_mode=True),
                  lambda x: F.max_pool2d(x, (3, 2), stride=2, ceil_mode=True)),
    "avgpool3d": ([(2, 4, 5, 6)], lambda x: dt.meanpool(x, (2, 2, 3), padding=1, divisor_override=5),
                  lambda x: F.avg_pool3d(x, (2, 2, 3), padding=1, divisor_override=5)),
}


@pytest.mark.parametrize("name", sorted(UNBATCHED))
def test_unbatched_input_equals_torch(name, randn):
    shapes, ours, theirs = UNBATCHED[name]
    pairs = [_pair(randn, shape, torch.float64) for shape in shapes]
    inputs_ours, inputs_theirs = [p[0].requires_grad_() for p in pairs], [p[1] for p in pairs]
    y = ours(*inputs_ours)
    assert y.shape == theirs(*inputs_theirs).shape and y.dim() == inputs_ours[0].dim()
    _compare(y, theirs(*inputs_theirs), inputs_ours, inputs_theirs, 1e-10)


def test_unbatched_lstm_and_maxpool_indices_equal_torch(randn):
    lstm = torch.nn.LSTM(5, 4, num_layers=2, bidirectional=True).double()
    x, h0, c0 = randn(6, 5, dtype=torch.float64), randn(4, 4, dtype=torch.float64), randn(4, 4, dtype=torch.float64)
    weights = [[getattr(lstm, f"{kind}_l{layer}{suffix}") for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
               for layer in range(2) for suffix in ("", "_reverse")]
    y, hy, cy = dt.rnn(x, weights, hidden_size=4, num_layers=2, bidirectional=True, h0=h0, c0=c0)
    yt, (hyt, cyt) = lstm(x, (h0, c0))
    for a, b in ((y, yt), (hy, hyt), (cy, cyt)):
        torch.testing.assert_close(a, b)
    (y, idx), (yt, idxt) = dt.maxpool(x, (2,), return_indices=True), F.max_pool1d(x, 2, return_indices=True)
    assert y.shape == yt.shape == (6, 2) and torch.equal(idx, idxt)
    with pytest.raises(ValueError, match="x has shape"):
        dt.conv(randn(3, 4, dtype=torch.float64), randn(2, 3, 3, 3, dtype=torch.float64))


def test_the_committed_stub_is_the_specs():
    from pathlib import Path

    from dnnbind.torch import functional, spec_functions
    stub = Path(functional.__file__).with_suffix(".pyi")
    assert stub.read_text() == spec_functions.stub_source(), \
        "regenerate functional.pyi from dnnbind.torch.spec_functions.stub_source()"


@pytest.mark.parametrize("name", OP_NAMES)
def test_each_function_is_made_from_its_spec(name):
    """Name, module and docstring from the spec; its parameters the public op's, arrays annotated as tensors."""
    import inspect

    import dnnbind
    from dnnbind.highlevel.specs import SPECS
    fn = getattr(dt, name)
    assert fn.__name__ == name and fn.__module__ == "dnnbind.torch.functional"
    assert fn.__doc__ == SPECS[name].tensor_doc and fn.__doc__.strip()
    ours, theirs = inspect.signature(fn).parameters, inspect.signature(getattr(dnnbind, name)).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == \
           [(p.name, p.kind, p.default) for p in theirs.values()]
    assert ours["x"].annotation == "Tensor"
    import typing
    assert typing.get_type_hints(fn)["x"] is torch.Tensor       # the annotations resolve (sphinx's autodoc)


def test_ints_given_as_a_torch_size_or_a_tensor_are_taken_as_a_tuple():
    """layer_norm's normalized_shape as torch.nn.LayerNorm's torch.Size: the same result, and one plan for both."""
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    expected = F.layer_norm(x, (3, 4))
    plans.CACHE.clear()
    for shape in (x.shape[1:], (3, 4), torch.Size([3, 4])):
        torch.testing.assert_close(dt.layer_norm(x, shape), expected)
    assert len([k for k in plans.CACHE.entries if k[0] == "layer_norm"]) == 1
    torch.testing.assert_close(dt.layer_norm(x, torch.tensor([3, 4])), expected)


def test_integer_tensors_are_taken_where_ints_are():
    """A 0-d integer tensor for an int argument (torch's own functions and layers take one, by __index__),
    an integer tensor or a torch.Size for per-dimension ints; the same plan as the ints; a float tensor
    is refused naming the argument."""
    x = torch.randn(2, 4, 7, 6, dtype=torch.float64)
    w = torch.randn(6, 2, 3, 3, dtype=torch.float64)
    i = torch.tensor
    plans.CACHE.clear()
    torch.testing.assert_close(dt.conv(x, w, stride=i(2), groups=i(2), dilation=i([1, 2]), padding=i([1, 0])),
                               F.conv2d(x, w, stride=2, groups=2, dilation=(1, 2), padding=(1, 0)))
    torch.testing.assert_close(dt.conv(x, w, stride=2, groups=2, dilation=(1, 2), padding=(1, 0)),
                               F.conv2d(x, w, stride=2, groups=2, dilation=(1, 2), padding=(1, 0)))
    assert len([k for k in plans.CACHE.entries if k[0] == "conv"]) == 1
    torch.testing.assert_close(dt.maxpool(x, i(3), stride=torch.Size([2, 1])), F.max_pool2d(x, 3, (2, 1)))
    torch.testing.assert_close(dt.meanpool(x, i([3, 2]), divisor_override=i(4)), F.avg_pool2d(x, (3, 2),
                                                                                              divisor_override=4))
    torch.testing.assert_close(dt.softmax(x, axis=i(-1)), torch.softmax(x, -1))
    for layer, theirs in ((dt.MaxPool2d(i(2), stride=i(1)), torch.nn.MaxPool2d(2, stride=1)),
                          (dt.AvgPool2d(i(3), divisor_override=i(2)), torch.nn.AvgPool2d(3, divisor_override=2)),
                          (dt.Softmax(i(1)), torch.nn.Softmax(1))):
        torch.testing.assert_close(layer(x), theirs(x))
    with pytest.raises(TypeError, match=r"stride=2\.0 must be an int"):
        dt.conv(x, w, stride=i(2.0), groups=2)
