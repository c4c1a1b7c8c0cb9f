"""``from dnnbind.torch import nn`` is torch.nn with dnnbind's layers: one model definition, two
namespaces, equal reprs, state_dicts that load both ways, equal outputs and gradients, and a graph in
which dnnbind's ops, not torch's, compute the provided layers."""
from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn as torch_nn

import dnnbind.torch as dt
from dnnbind.torch import nn as dnnbind_nn
from layer_checks import SAMPLES, Net

#: backward nodes of dnnbind's ops: eager calls (dnnbind_convBackward ...) and the custom ops' autograd
DNNBIND_NODES = ("dnnbind_", "GeneratedBackwardFor_dnnbind_")


def test_the_namespace_is_torch_nn_with_dnnbinds_layers():
    assert sorted(SAMPLES) == sorted(dnnbind_nn.PROVIDED)
    for name in dnnbind_nn.PROVIDED:
        ours, theirs = getattr(dnnbind_nn, name), getattr(torch_nn, name)
        # the recurrent layers share torch's base class only: torch.compile refuses nn.RNN/LSTM/GRU instances
        base = torch_nn.RNNBase if name in ("RNN", "LSTM", "GRU") else theirs
        assert ours is not theirs and issubclass(ours, base), name
    for name in ("Module", "Linear", "Parameter", "functional", "init", "utils", "Flatten", "ModuleList"):
        assert getattr(dnnbind_nn, name) is getattr(torch_nn, name)
    assert dnnbind_nn.CONTAINERS == ("Sequential",) and issubclass(dnnbind_nn.Sequential, torch_nn.Sequential)
    assert dnnbind_nn.Sequential is not torch_nn.Sequential and "Sequential" in dnnbind_nn.__all__
    namespace: dict = {}
    exec("from dnnbind.torch.nn import *", namespace)
    assert namespace["Conv2d"] is dnnbind_nn.Conv2d and namespace["Linear"] is torch_nn.Linear
    with pytest.raises(AttributeError, match="neither has torch.nn"):
        dnnbind_nn.NoSuchLayer  # noqa: B018


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_signatures_are_torchs(name):
    def described(cls: type) -> list[tuple[str, object, object]]:
        return [(p.name, p.default, p.kind) for p in inspect.signature(cls).parameters.values()]
    assert described(getattr(dnnbind_nn, name)) == described(getattr(torch_nn, name))


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_layer_is_computed_by_dnnbind(name):
    args, shape = SAMPLES[name]
    layer = getattr(dnnbind_nn, name)(*args)
    out = layer(torch.randn(shape, requires_grad=True))
    out = out[0] if isinstance(out, tuple) else out
    assert type(out.grad_fn).__name__.startswith(DNNBIND_NODES), out.grad_fn


@pytest.mark.parametrize("make", [
    lambda nn: nn.Conv2d(3, 8, (3, 5), stride=(2, 1), padding=(1, 2), dilation=1, groups=1,
                         bias=False),
    lambda nn: nn.Conv1d(4, 4, 3, padding="same", groups=2),
    lambda nn: nn.Conv3d(2, 4, 3, padding="valid"),
    lambda nn: nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1),
    lambda nn: nn.MaxPool2d(3, 2, 1, ceil_mode=True),
    lambda nn: nn.MaxPool1d(2),
    lambda nn: nn.AvgPool2d(3, padding=1, count_include_pad=False, divisor_override=2),
    lambda nn: nn.AvgPool1d(4, ceil_mode=True),
    lambda nn: nn.BatchNorm2d(8, momentum=None, affine=False),
    lambda nn: nn.BatchNorm1d(5, eps=1e-3, track_running_stats=False),
    lambda nn: nn.Dropout(0.25, inplace=True),
    lambda nn: nn.Softmax(dim=-1),
    lambda nn: nn.LogSoftmax(1),
    lambda nn: nn.ELU(0.5),
    lambda nn: nn.LeakyReLU(0.1, inplace=True),
    lambda nn: nn.Hardtanh(0.0, 3.0),
    lambda nn: nn.LSTM(10, 20, num_layers=2, batch_first=True, dropout=0.1, bidirectional=True),
    lambda nn: nn.GRU(3, 4, bias=False),
    lambda nn: nn.RNN(3, 4, nonlinearity="relu"),
])
def test_reprs_are_torchs(make):
    assert repr(make(dnnbind_nn)) == repr(make(torch_nn))


def _with_special_values(shape: tuple[int, ...]) -> torch.Tensor:
    x = torch.randn(shape, dtype=torch.float64).flatten()
    x[0], x[1], x[x.numel() // 2], x[-1] = float("inf"), 1e300, float("nan"), float("-inf")
    return x.reshape(shape)


RECURRENT = {"RNN", "LSTM", "GRU"}
SPECIAL_CASES = [(name, how) for name in sorted(set(SAMPLES) - {"Dropout"}) for how in ("eager", "sequential", "compiled")
                 if not (how == "sequential" and name in RECURRENT)]      # (a recurrent layer's result is a tuple)


@pytest.mark.parametrize("name, how", SPECIAL_CASES, ids=[f"{n}-{h}" for n, h in SPECIAL_CASES])
def test_inf_and_nan_inputs_give_torchs_results_without_numpy_warnings(name, how):
    """inf, NaN and huge values in the input: the forward's inf and NaN where torch's layer has them, and
    a backward, with no warning (numpy warns for inf * 0 unless told not to; torch never does). Eager,
    in a fused Sequential run (its second call) and compiled."""
    import warnings
    args, shape = SAMPLES[name]
    theirs = getattr(torch_nn, name)(*args).double()
    ours = getattr(dnnbind_nn, name)(*args).double()
    ours.load_state_dict(theirs.state_dict())
    model = ours
    if how == "compiled":
        torch._dynamo.reset()                    # (a fresh cache: every case compiles a new layer)
        model = torch.compile(ours, backend="aot_eager", fullgraph=True)
    if how == "sequential":
        model = dnnbind_nn.Sequential(ours, dnnbind_nn.ReLU())
        theirs = torch_nn.Sequential(theirs, torch_nn.ReLU())
    x = _with_special_values(shape)
    expected = theirs(x)
    expected = expected[0] if isinstance(expected, tuple) else expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):                       # a Sequential's second call runs fused
            xg = x.clone().requires_grad_()
            y = model(xg)
            y = y[0] if isinstance(y, tuple) else y
            y.sum().backward()
    assert torch.equal(y.isnan(), expected.isnan()) and torch.equal(y.isinf(), expected.isinf())
    finite = expected.isfinite()
    torch.testing.assert_close(y[finite], expected[finite].detach())
    assert xg.grad is not None and xg.grad.shape == x.shape


def _torch_ops_in_graph(output: torch.Tensor) -> set[str]:
    """Names of torch's own backward nodes for the layers dnnbind provides, anywhere in output's graph."""
    seen, stack, found = set(), [output.grad_fn], set()
    layer_words = ("Convolution", "Pool", "BatchNorm", "Rnn", "Lstm", "Softmax", "Elu", "Relu", "Leaky", "Silu")
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = type(node).__name__
        if not name.startswith(DNNBIND_NODES) and any(w.lower() in name.lower() for w in layer_words):
            found.add(name)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_the_same_model_from_both_namespaces_gives_the_same_outputs_and_gradients(training):
    torch.manual_seed(0)
    theirs = Net(torch_nn, p=0.0 if training else 0.5).double()
    ours = Net(dnnbind_nn, p=0.0 if training else 0.5).double()
    assert repr(ours) == repr(theirs)
    ours.load_state_dict(theirs.state_dict())
    ours.train(training)
    theirs.train(training)
    if not training:                        # give the running statistics something to hold
        with torch.no_grad():
            for bn in (m for m in theirs.modules() if isinstance(m, torch_nn.BatchNorm2d)):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 2.0)
        ours.load_state_dict(theirs.state_dict())
    images = torch.randn(4, 3, 12, 12, dtype=torch.float64)
    lengths = [9, 4, 7, 2]
    grads = []
    outputs = []
    for model in (ours, theirs):
        x = images.clone().requires_grad_()
        logp, padded = model(x, lengths)
        (logp.square().sum() + padded.sin().sum()).backward()
        outputs.append((logp, padded))
        grads.append([x.grad] + [p.grad for p in model.parameters()])
    assert _torch_ops_in_graph(outputs[0][0]) == set()
    assert _torch_ops_in_graph(outputs[1][0])                    # the check would see torch's ops
    torch.testing.assert_close(outputs[0], outputs[1])
    torch.testing.assert_close(grads[0], grads[1])
    torch.testing.assert_close(ours.state_dict(), theirs.state_dict())   # running statistics and counts too
    theirs.load_state_dict(ours.state_dict())


def test_torch_state_dict_loads_into_the_dnnbind_model_and_back():
    torch.manual_seed(0)
    theirs, ours = Net(torch_nn, 0.1), Net(dnnbind_nn, 0.1)
    ours.load_state_dict(theirs.state_dict())
    torch.manual_seed(1)
    fresh_torch = Net(torch_nn, 0.1)
    fresh_torch.load_state_dict(ours.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(fresh_torch.state_dict().values(), theirs.state_dict().values()))


def test_errors_speak_of_tensors_not_arrays():
    layer = dnnbind_nn.Conv1d(2, 2, 3).double()
    with pytest.raises(TypeError) as info:
        layer(torch.randn(1, 2, 5))
    assert "astype" not in str(info.value) and ".to(" in str(info.value) and "torch.float32" in str(info.value)


@pytest.mark.parametrize("name", [name for name in sorted(SAMPLES) if name.startswith(
    ("Conv", "MaxPool", "AvgPool", "BatchNorm", "RNN", "LSTM", "GRU"))])
def test_an_input_of_a_rank_no_layer_takes_is_refused_with_torchs_error_class(name):
    """Where torch's layer raises a RuntimeError (or a ValueError: its RNNs) for an input of a rank it
    does not take (two dims more than its sample), dnnbind's raises an error of that class too."""
    args, shape = SAMPLES[name]
    x = torch.randn(1, 1, *shape)
    with pytest.raises((RuntimeError, ValueError)) as theirs:
        getattr(torch_nn, name)(*args)(x)
    with pytest.raises(type(theirs.value)) as ours:
        getattr(dnnbind_nn, name)(*args)(x)
    assert "input" in str(ours.value)


def _autocast_cnn(nn_module):
    torch.manual_seed(1)
    return nn_module.Sequential(nn_module.Conv2d(3, 4, 3), nn_module.BatchNorm2d(4), nn_module.ReLU(),
                                nn_module.MaxPool2d(2), nn_module.ConvTranspose2d(4, 2, 2, stride=2))


def _torch_under_autocast(layer, *inputs):
    """torch's own layer's result under CPU autocast (bfloat16); a skip where this CPU cannot run it:
    torch's LSTM takes oneDNN's bfloat16 LSTM there, which CPUs without bfloat16 instructions lack
    ("could not create a primitive descriptor"), so there is no dtype of torch's to compare with."""
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return layer(*inputs)
    except RuntimeError as e:
        if "could not create a primitive descriptor" not in str(e):
            raise
        pytest.skip(f"torch's own {type(layer).__name__} does not run under CPU autocast on this CPU: {e}")


@pytest.mark.parametrize("compiled", [False, True])
def test_autocast_runs_convolutions_and_recurrences_in_its_dtype_like_torch(compiled):
    """Under torch.autocast, torch runs its convolutions, transposed convolutions and recurrent layers in the
    autocast dtype (batch norm then takes that input with float32 parameters); so do dnnbind's layers, and the
    float32 parameters get float32 gradients equal to torch's."""
    ours, theirs = _autocast_cnn(dnnbind_nn), _autocast_cnn(torch_nn)
    run = torch.compile(ours, fullgraph=True) if compiled else ours
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        for _ in range(2):
            run(x)                 # planned (eager: as one node) without autocast: autocast must not reuse that
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, y_ref = run(x), theirs(x)
    assert y.dtype == y_ref.dtype == torch.bfloat16
    torch.testing.assert_close(y, y_ref)
    y.float().square().sum().backward(), y_ref.float().square().sum().backward()
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert p.grad.dtype == torch.float32
        # (a bfloat16 backward's rounding scales with the gradient's largest entries, its sums of products:
        # the absolute tolerance does too; ours and torch's differ by accumulation order, on some CPUs by
        # a few bfloat16 steps of such an entry)
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=2e-2 * max(1.0, q.grad.abs().max().item()))
    with torch.autocast("cpu", enabled=False):
        assert ours[0](x).dtype == torch.float32
    torch.manual_seed(2)
    lstm, lstm_ref = dnnbind_nn.LSTM(3, 5, 2), torch_nn.LSTM(3, 5, 2)
    lstm_ref.load_state_dict(lstm.state_dict())
    xs = torch.randn(6, 2, 3)
    out_ref, (h_ref, c_ref) = _torch_under_autocast(lstm_ref, xs)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, (h, c) = lstm(xs)
    assert out.dtype == h.dtype == out_ref.dtype == torch.bfloat16
    torch.testing.assert_close(out, out_ref, rtol=2e-2, atol=1e-2)


def _outputs(result):
    """A layer's tensors, flattened (an RNN's output and its states)."""
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for r in result for t in _outputs(r)] if isinstance(result, (tuple, list)) else []


@pytest.mark.parametrize("input_dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_layer_returns_torchs_dtypes_under_autocast(name, input_dtype):
    """Under torch.autocast (CPU, bfloat16) every layer returns its results in the dtypes torch's own
    layer returns them in (lower precision for convolutions, float32 where torch keeps it), for a float32
    input and for a bfloat16 one (the output of an earlier autocast layer)."""
    arguments, shape = SAMPLES[name]
    torch.manual_seed(0)
    theirs = getattr(torch_nn, name)(*arguments)
    ours = getattr(dnnbind_nn, name)(*arguments)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(shape).to(input_dtype)
    expected = _outputs(_torch_under_autocast(theirs, x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        found = _outputs(ours(x))
    assert [t.dtype for t in found] == [t.dtype for t in expected]
    assert [t.shape for t in found] == [t.shape for t in expected]


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("unbatched", [False, True], ids=["batched", "unbatched"])
def test_pooling_functions_return_torchs_dtypes_under_autocast(rank, unbatched):
    """The pooling functions under torch.autocast (CPU, bfloat16) as torch's max_pool{1,2,3}d and
    avg_pool{1,2,3}d: 3-d pooling in float32 (torch's CPU autocast policy, the op's spec's rule), the
    others in x's dtype; the spatial rank told by x's rank or, unbatched, by a per-dimension window."""
    import torch.nn.functional as F
    shape = (2,) * (not unbatched) + (3,) + (4,) * rank
    window = (2,) * rank if unbatched else 2
    x = torch.randn(shape, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        theirs = [getattr(F, f"max_pool{rank}d")(x, window), getattr(F, f"avg_pool{rank}d")(x, window)]
        ours = [dt.maxpool(x, window), dt.meanpool(x, window)]
    assert [t.dtype for t in ours] == [t.dtype for t in theirs]
    assert [t.shape for t in ours] == [t.shape for t in theirs]
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="x has shape"):
        dt.maxpool(torch.randn(2, 2), 2)           # (refused by the op's checks, as without autocast)


def test_numbers_given_as_0d_tensors_are_taken_as_torchs_layers_take_them():
    """An int or float setting given as a 0-d tensor (alone or in a list: torch's ConvTranspose turns
    tensors in output_size into tensors in output_padding) runs as the number, as torch's layers do."""
    t = torch.tensor
    x = torch.randn(2, 4, 7, 7)
    cases = [(lambda nn: nn.ConvTranspose2d(4, 4, 3, stride=2), {"output_size": [t(16), t(16)]}),
             (lambda nn: nn.MaxPool2d((t(2), t(2))), {}), (lambda nn: nn.BatchNorm2d(4, momentum=t(0.3)), {}),
             (lambda nn: nn.ELU(alpha=t(0.5)), {}), (lambda nn: nn.LeakyReLU(t(0.2)), {}),
             (lambda nn: nn.Dropout(t(0.0)), {})]
    for make, kwargs in cases:
        outs = []
        for nn in (torch_nn, dnnbind_nn):
            torch.manual_seed(0)
            outs.append(make(nn)(x, **kwargs))
        torch.testing.assert_close(outs[1], outs[0])
    w = torch.randn(4, 4, 3, 3)
    torch.testing.assert_close(dt.conv_transpose(x, w, stride=[t(2), t(2)]),
                               torch.nn.functional.conv_transpose2d(x, w, stride=2))
