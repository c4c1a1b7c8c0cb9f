"""dnnbind's ops as torch.library custom ops: opcheck for every op, torch.compile with fullgraph equal to
eager for a CNN and an LSTM, torch.export of the CNN."""
from __future__ import annotations

import pytest
import torch
import torch._inductor.config  # noqa: F401 - patched below

import dnnbind
import dnnbind.torch as dt
from dnnbind.torch import nn as dnn
from dnnbind.highlevel.specs import SPECS
from dnnbind.torch import typed
from dnnbind.torch.typed import typed_arguments

torch.manual_seed(0)


def _r(*shape, grad=True, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, requires_grad=grad)


def _lstm_weights(inp, hidden, layers=1, dirs=1, bias=True, gates=4, proj=0):
    """Per layer and direction (w_ih, w_hh, b_ih, b_hh), and w_hr (proj, hidden) with proj > 0."""
    weights = []
    out = proj or hidden
    for layer in range(layers):
        for _ in range(dirs):
            layer_in = inp if layer == 0 else out * dirs
            entry = [_r(gates * hidden, layer_in), _r(gates * hidden, out)]
            entry += [_r(gates * hidden), _r(gates * hidden)] if bias else [None, None]
            weights.append(entry + ([_r(proj, hidden)] if proj else []))
    return weights


def _case(op, x, *arrays, **kwargs):
    """The typed op's inputs: the spec's arrays, then (after them here: dropout's seed) its tensor arguments."""
    n = len(SPECS[op].arrays) - 1
    kwargs.update(zip(SPECS[op].tensor_arguments, arrays[n:]))
    args = typed_arguments(op, x, list(arrays[:n]), SPECS[op].arguments_function(**kwargs))
    return pytest.param(op, tuple(args), id=f"{op}-{len(OPCHECK_CASES)}")


OPCHECK_CASES: list = []
for _args in [
    ("conv", _r(2, 4, 7, 7), _r(6, 2, 3, 3), _r(6), dict(stride=2, padding=1, groups=2)),
    ("conv", _r(2, 3, 9), _r(5, 3, 1), None, dict()),
    ("conv", _r(1, 4, 6, 6), _r(4, 1, 3, 3), None, dict(groups=4, padding=((0, 1), (1, 0)), flip=True)),
    ("conv_transpose", _r(2, 4, 5, 5), _r(4, 3, 3, 3), _r(3), dict(stride=2, padding=1, output_padding=1)),
]:
    OPCHECK_CASES.append(_case(_args[0], *_args[1:-1], **_args[-1]))
OPCHECK_CASES += [
    _case("maxpool", _r(2, 3, 7, 7), window=3, stride=2, padding=1),
    _case("meanpool", _r(2, 3, 6, 6, 6), window=2, padding=1, count_include_pad=False),
    _case("maxpool", _r(2, 3, 8, 9), window=3, stride=2, padding=1, dilation=(2, 1), ceil_mode=True),
    _case("maxpool", _r(2, 3, 7), window=2, stride=1, padding=1, dilation=2, return_indices=True),
    _case("meanpool", _r(2, 3, 8, 9), window=3, stride=2, padding=1, count_include_pad=True, ceil_mode=True),
    _case("meanpool", _r(2, 3, 8, 9), window=3, stride=2, padding=((1, 0), 1), count_include_pad=False,
          ceil_mode=True, divisor_override=-3),
    _case("meanpool", _r(2, 3, 7), window=2, padding=1, divisor_override=5),
    _case("softmax", _r(3, 4, 5), axis=-1),
    _case("logsoftmax", _r(3, 4), axis=1),
    _case("activation", _r(3, 4), mode="elu", alpha=0.5),
    _case("activation", _r(3, 4), mode="relu", alpha=None),
    _case("batchnorm", _r(4, 3, 5), _r(3), _r(3), torch.zeros(3, dtype=torch.float64),
          torch.ones(3, dtype=torch.float64), training=True, momentum=0.1, eps=1e-5),
    _case("batchnorm", _r(4, 3), _r(3), _r(3), torch.zeros(3, dtype=torch.float64),
          torch.ones(3, dtype=torch.float64), training=False, momentum=0.1, eps=1e-5),
    _case("batchnorm", _r(4, 3, 2, 2), _r(3), _r(3), None, None, training=True, momentum=0.1, eps=1e-5),
    _case("layer_norm", _r(4, 3, 5), _r(3, 5), _r(3, 5), normalized_shape=[3, 5], eps=1e-5),
    _case("layer_norm", _r(4, 6), None, _r(6), normalized_shape=[6], eps=0.0),
    _case("layer_norm", _r(2, 3, 4), None, None, normalized_shape=[2, 3, 4], eps=1e-3),
    _case("dropout", _r(4, 5), torch.tensor(7), p=0.3),
]
# channels-last and other strides, which the results and gradients follow as torch's (dnnbind.torch.layout)
LAYOUT_CASES = [
    _case("conv", _r(2, 4, 6, 6).to(memory_format=torch.channels_last), _r(6, 2, 3, 3), _r(6), groups=2),
    _case("conv", _r(2, 4, 6, 6), _r(6, 4, 3, 3).to(memory_format=torch.channels_last), None, padding=1),
    _case("conv_transpose", _r(2, 4, 3, 3, 3).to(memory_format=torch.channels_last_3d), _r(4, 3, 2, 2, 2), _r(3),
          stride=2),
    _case("maxpool", _r(2, 3, 6, 6).to(memory_format=torch.channels_last), window=2, return_indices=True),
    _case("meanpool", _r(2, 3, 6, 6).to(memory_format=torch.channels_last), window=3, stride=2, padding=1),
    _case("batchnorm", _r(4, 3, 2, 2).to(memory_format=torch.channels_last), _r(3), _r(3),
          torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), training=True, momentum=0.1,
          eps=1e-5),
    _case("activation", _r(3, 4, 5).transpose(0, 2), mode="swish", alpha=None),
]
OPCHECK_CASES += LAYOUT_CASES
OPCHECK_CASES += [
    _case("rnn", _r(5, 3, 4), _lstm_weights(4, 6, layers=2, dirs=2), None, None, mode="lstm", hidden_size=6,
          num_layers=2, bidirectional=True, lengths=None),
    _case("rnn", _r(5, 3, 4), _lstm_weights(4, 6, bias=False, gates=3), _r(1, 3, 6), None, mode="gru",
          hidden_size=6, num_layers=1, bidirectional=False, lengths=[5, 2, 3]),
    _case("rnn", _r(4, 2, 3), _lstm_weights(3, 5), _r(1, 2, 5), _r(1, 2, 5), mode="lstm", hidden_size=5,
          num_layers=1, bidirectional=False, lengths=None),
    _case("rnn", _r(4, 3, 3), _lstm_weights(3, 5, layers=2, dirs=2, bias=False, proj=2), _r(4, 3, 2),
          _r(4, 3, 5), mode="lstm", hidden_size=5, num_layers=2, bidirectional=True, lengths=[4, 1, 3],
          proj_size=2),
]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed"])
def test_opcheck_passes_for_the_kept_copy(layout):
    """dnnbind::copy (typed.kept_copy, what a compiled in-place layer gives its op): a copy with the
    input's strides, differentiable, under vmap too."""
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64, requires_grad=True)
    x = {"contiguous": x, "channels_last": x.to(memory_format=torch.channels_last), "transposed": x.transpose(1, 3)}[layout]
    torch.library.opcheck(torch.ops.dnnbind.copy, (x,))
    copied = typed.kept_copy(x)
    assert copied.stride() == x.clone().stride() and copied.data_ptr() != x.data_ptr()
    torch.testing.assert_close(torch.func.vmap(typed.kept_copy, in_dims=1)(x), x.transpose(0, 1))


@pytest.mark.parametrize("op,args", OPCHECK_CASES)
def test_opcheck_passes_for_every_op(op, args):
    """Schema, autograd registration, fake kernel against the real one, and AOT dispatch."""
    torch.library.opcheck(getattr(torch.ops.dnnbind, op), args)


@pytest.mark.parametrize("op,args", OPCHECK_CASES[:1] + OPCHECK_CASES[-4:]
                         + [c for c in LAYOUT_CASES if c.values[0] != "batchnorm"])   # (no running statistics)
def test_opcheck_passes_for_the_backward_ops(op, args):
    """The backward op takes the forward's inputs and the results' cotangents (None: not given) and a
    flag per tensor input; it returns one gradient per tensor input."""
    args = [[t.detach() if isinstance(t, torch.Tensor) else t for t in a] if isinstance(a, list) else
            a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    outputs = getattr(torch.ops.dnnbind, op)(*args)
    outputs = [outputs] if isinstance(outputs, torch.Tensor) else outputs
    cotangents = [torch.randn_like(outputs[0])] + [None] * (len(SPECS[op].outputs) - 1)
    tensors = [t for a in args for t in (a if isinstance(a, list) else [a]) if isinstance(t, torch.Tensor)]
    grads = getattr(torch.ops.dnnbind, f"{op}_backward")(cotangents, *args, [True] * len(tensors))
    assert [g.shape for g in grads] == [t.shape for t in tensors]
    torch.library.opcheck(getattr(torch.ops.dnnbind, f"{op}_backward"), (cotangents, *args, [True] * len(tensors)))


@pytest.mark.parametrize("op,args", OPCHECK_CASES)
def test_opcheck_passes_for_the_training_and_pullback_ops(op, args):
    """The training op returns the forward's results and the backend's residuals; the pullback on those
    residuals gives the gradients the input-based backward op gives."""
    from dnnbind.torch import typed
    args = [[t.detach() if isinstance(t, torch.Tensor) else t for t in a] if isinstance(a, list) else
            a.detach() if isinstance(a, torch.Tensor) else a for a in args]
    saves = typed.saves_tag("cpu")
    torch.library.opcheck(getattr(torch.ops.dnnbind, f"{op}_training"), (*args, saves))
    results, residuals = getattr(torch.ops.dnnbind, f"{op}_training")(*args, saves)
    expected = getattr(torch.ops.dnnbind, op)(*args)
    expected = [expected] if isinstance(expected, torch.Tensor) else expected
    for a, b in zip(results, expected):
        if op != "dropout" or a.dtype != torch.bool:
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    cotangents = [torch.randn_like(results[0])] + [None] * (len(SPECS[op].outputs) - 1)
    tensors = [t for a in args for t in (a if isinstance(a, list) else [a]) if isinstance(t, torch.Tensor)]
    needs = [True] * len(tensors)
    grads = getattr(torch.ops.dnnbind, f"{op}_pullback")(residuals, list(results), cotangents, *args, needs)
    torch.testing.assert_close(grads, getattr(torch.ops.dnnbind, f"{op}_backward")(cotangents, *args, needs))
    torch.library.opcheck(getattr(torch.ops.dnnbind, f"{op}_pullback"),
                          (residuals, list(results), cotangents, *args, needs))


class SmallCNN(torch.nn.Module):
    def __init__(self, nn) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.avg = nn.AvgPool2d(2)
        self.drop = nn.Dropout(0.25)
        self.head = nn.Conv2d(8, 4, 1)
        self.out = nn.LogSoftmax(dim=1)

    def forward(self, x):
        x = self.pool(self.act(self.bn(self.conv1(x))))
        x = self.drop(self.avg(self.act(self.conv2(x))))
        return self.out(self.head(x).flatten(2).mean(2))


class SmallLSTM(torch.nn.Module):
    def __init__(self, nn) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 8, num_layers=2, bidirectional=True, batch_first=True)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return self.head(y[:, -1]) + h.sum(0).sum(1, keepdim=True)


class SmallProjLSTM(torch.nn.Module):
    def __init__(self, nn) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True, proj_size=3)
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return self.head(y[:, -1]) + h.sum(0).sum(1, keepdim=True) + c.sum(0).sum(1, keepdim=True)


class SequentialCNN(torch.nn.Module):
    """A CNN whose dnnbind layers sit in (dnnbind's) nn.Sequential, which eager calls run as one node."""

    def __init__(self, nn) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(4, 4, 3, padding=1), nn.Tanh())
        self.head = torch.nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class ReflectCNN(torch.nn.Module):
    """A conv with padding_mode="reflect" (torch pads, dnnbind convolves) before a fused run."""

    def __init__(self, nn) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=2, padding_mode="reflect"), nn.BatchNorm2d(4),
                                      nn.ReLU())
        self.head = torch.nn.Linear(4 * 8 * 8, 3)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class SmallTransformerBlock(torch.nn.Module):
    """Linear layers around LayerNorms, with and without their affine parameters."""

    def __init__(self, nn) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(4, 8)
        self.norm1 = nn.LayerNorm(8)
        self.act = nn.ReLU()
        self.norm2 = nn.LayerNorm((3, 8), bias=False)
        self.norm3 = nn.LayerNorm(8, elementwise_affine=False)
        self.out = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.norm3(self.norm2(self.act(self.norm1(self.inp(x))))))


def _step(model, x):
    model.zero_grad()
    out = model(x)
    out.square().sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("make,shape", [(SmallCNN, (4, 3, 12, 12)), (SequentialCNN, (2, 3, 12, 12)),
                                        (ReflectCNN, (2, 3, 6, 6)), (SmallLSTM, (3, 6, 4)),
                                        (SmallProjLSTM, (3, 5, 4)), (SmallTransformerBlock, (2, 3, 4))],
                         ids=["cnn", "sequential-cnn", "reflect-cnn", "lstm", "lstm-proj", "layer-norm"])
def test_compile_with_fullgraph_equals_eager(make, shape):
    torch.manual_seed(1)
    eager = make(dnn).double()
    compiled_model = make(dnn).double()
    compiled_model.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_model, fullgraph=True)
    x = torch.randn(shape, dtype=torch.float64)
    for _ in range(2):                     # the second step also checks the running statistics' updates
        torch.manual_seed(5)
        out_e, grads_e = _step(eager, x)
        torch.manual_seed(5)
        with torch._inductor.config.patch(fallback_random=True):    # dropout's seed: eager's draw
            out_c, grads_c = _step(compiled, x)
        torch.testing.assert_close(out_c, out_e)
        for a, b in zip(grads_c, grads_e):
            torch.testing.assert_close(a, b)
    for (name, a), b in zip(eager.state_dict().items(), compiled_model.state_dict().values()):
        torch.testing.assert_close(b, a, msg=name)


def test_export_captures_layer_norm_as_a_dnnbind_op():
    model = SmallTransformerBlock(dnn).eval()
    x = torch.randn(2, 3, 4)
    exported = torch.export.export(model, (x,))
    targets = [str(node.target) for node in exported.graph.nodes if node.op == "call_function"]
    assert targets.count("dnnbind.layer_norm.default") == 3
    torch.testing.assert_close(exported.module()(x), model(x))


def test_export_captures_the_cnn_with_dnnbind_ops():
    model = SmallCNN(dnn).eval()
    x = torch.randn(2, 3, 12, 12)
    exported = torch.export.export(model, (x,))
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert {"dnnbind.conv.default", "dnnbind.batchnorm.default", "dnnbind.activation.default",
            "dnnbind.maxpool.default", "dnnbind.meanpool.default", "dnnbind.logsoftmax.default"} <= targets
    torch.testing.assert_close(exported.module()(x), model(x))
    other = torch.randn(2, 3, 12, 12)
    torch.testing.assert_close(exported.module()(other), model(other))


META_MODELS = {
    "conv": (lambda nn: nn.Conv2d(3, 4, 3, padding=1, padding_mode="circular"), (2, 3, 8, 8)),
    "conv-transpose": (lambda nn: nn.ConvTranspose3d(3, 2, 3, stride=2, output_padding=1), (3, 4, 4, 4)),
    "sequential": (lambda nn: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                                            nn.AvgPool2d(2, ceil_mode=True), nn.Dropout(0.3)), (2, 3, 9, 9)),
    "softmax": (lambda nn: nn.Sequential(nn.Softmax(1), nn.LogSoftmax(-1), nn.ELU()), (2, 3, 5)),
    "lstm-proj": (lambda nn: nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2), (4, 2, 3)),
    "gru-unbatched": (lambda nn: nn.GRU(3, 5), (4, 3)),
    "layer-norm": (lambda nn: nn.Sequential(nn.LayerNorm((3, 5)), nn.LayerNorm(5, bias=False)), (2, 3, 5)),
}


@pytest.mark.parametrize("name", list(META_MODELS))
def test_meta_tensors_give_torchs_shapes(name):
    """A model on the meta device (shapes only, as for deferred initialisation) runs the ops' fake
    kernels: torch's result and gradient shapes, no computation."""
    make, shape = META_MODELS[name]
    found = []
    for nn in (torch.nn, dnn):
        model = make(nn).to("meta")
        x = torch.empty(shape, device="meta", requires_grad=True)
        out = model(x)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()
        assert out.is_meta and x.grad.is_meta
        found.append((out.shape, x.grad.shape, [p.grad.shape for p in model.parameters()]))
    assert found[0] == found[1]


class _FirstOutput(torch.nn.Module):
    def __init__(self, layer) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x)[0]


DYNAMIC_EXPORTS = {
    "sequential-cnn": (lambda: dnn.Sequential(dnn.Conv2d(3, 4, 3, padding=1), dnn.BatchNorm2d(4), dnn.ReLU(),
                                              dnn.MaxPool2d(2), dnn.Conv2d(4, 4, 3, stride=2),
                                              dnn.AvgPool2d(2, ceil_mode=True)), (2, 3, 16, 16), 0),
    "conv-transpose": (lambda: dnn.ConvTranspose2d(3, 2, 3, stride=2, output_padding=1), (2, 3, 5, 5), 0),
    "lstm-proj-bidir": (lambda: _FirstOutput(dnn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2)),
                        (4, 2, 3), 1),
    "gru-batch-first": (lambda: _FirstOutput(dnn.GRU(3, 5, batch_first=True)), (2, 4, 3), 0),
    "layer-norm": (lambda: dnn.Sequential(dnn.LayerNorm((4, 5)), dnn.LayerNorm(5, elementwise_affine=False)),
                   (2, 4, 5), 0),
}


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no-grad"])
@pytest.mark.parametrize("name", list(DYNAMIC_EXPORTS))
def test_export_with_a_dynamic_batch(name, grad):
    """torch.export with a dynamic batch: the fake kernels keep the batch symbolic, and the sizes reach
    the backward's params only when a backward runs (with grad enabled, exporting records autograd's
    context); the exported program equals the model at other batch sizes."""
    make, shape, axis = DYNAMIC_EXPORTS[name]
    torch.manual_seed(0)
    model = make().eval()
    with torch.set_grad_enabled(grad):
        exported = torch.export.export(model, (torch.randn(shape),),
                                       dynamic_shapes=({axis: torch.export.Dim("batch", min=2, max=64)},))
    with torch.no_grad():
        for batch in (3, 9):
            x = torch.randn(shape[:axis] + (batch,) + shape[axis + 1:])
            torch.testing.assert_close(exported.module()(x), model(x))


def test_a_recompiled_layer_with_another_float_setting_runs():
    """Dynamo traces a float setting that changed between compilations as a symbolic value: it reaches the
    op as a float argument, not as part of the op's params text."""
    step = torch.compile(lambda layer, x: layer(x), fullgraph=True)
    x = torch.ones(64, 64, dtype=torch.float64)
    for p in (0.25, 0.5, 0.75):
        y = step(dnn.Dropout(p), x)
        assert set(torch.unique(y).tolist()) == {0.0, 1 / (1 - p)}


@pytest.mark.parametrize("op,args", OPCHECK_CASES, ids=[c.id for c in OPCHECK_CASES])
def test_eager_calls_equal_the_registered_custom_op(op, args):
    """Plain eager calls skip torch's dispatcher (dnnbind.torch.eager._Eager) but run the same backend
    forward and backward: results and gradients equal calling the typed op torch.ops.dnnbind.NAME directly.
    (Batch norm's eager call updates the running statistics it was given in place, where the custom op
    returns new ones: both are compared.)"""
    from dnnbind.torch import eager
    from dnnbind.torch.typed import _flat_tensors, _statics, _with_tensors, public_arguments
    spec = SPECS[op]

    def fresh():
        tensors = [None if t is None else t.detach().clone().requires_grad_(t.requires_grad)
                   for t in _flat_tensors(op, args)]
        return tensors, _with_tensors(op, _statics(args), tensors)

    def eager_call(inputs):
        x, arrays, kwargs = public_arguments(op, inputs)
        tensors = [kwargs.pop(name) for name in spec.tensor_arguments]
        assert eager.plain_eager(x, [t for t in tensors if t is not None])
        outputs = eager.call(op, x, *arrays, *tensors, **kwargs)
        return outputs

    def custom_call(inputs):
        outputs = getattr(torch.ops.dnnbind, op)(*inputs)
        return [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)

    results = []
    for run in (eager_call, custom_call):
        tensors, inputs = fresh()
        outputs = run(inputs)
        sum(o.sum() for o in outputs if o.requires_grad).backward()
        results.append((outputs, [None if t is None else t.grad for t in tensors]))
    (eager_out, eager_grads), (custom, custom_grads) = results
    assert len(eager_out) == len(custom) and len(eager_grads) == len(custom_grads)
    for a, b in zip(eager_out + eager_grads, custom + custom_grads):
        if a is None or b is None:
            assert a is None and b is None
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_unbatched_functional_calls_compile_with_fullgraph():
    """The batch axis an unbatched call gets is a tensor view (unsqueeze/squeeze) around the custom op:
    torch.compile(fullgraph=True) traces it and equals eager."""
    import dnnbind.torch as dt
    w = torch.randn(4, 3, 3, 3, requires_grad=True)

    def f(x):
        return dt.maxpool(dt.activation(dt.conv(x, w, padding=1), "relu"), (2, 2)).sum()

    x = torch.randn(3, 8, 8)
    eager = f(x)
    (grad_eager,) = torch.autograd.grad(eager, w)
    compiled = torch.compile(f, fullgraph=True)(x)
    (grad_compiled,) = torch.autograd.grad(compiled, w)
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(grad_compiled, grad_eager)


def test_eager_layers_with_parameters_take_the_eager_path():
    """A layer's weights are nn.Parameters: plain eager calls with them still skip the dispatcher (their
    backward node is the eager one, dnnbind_NAMEBackward, not the custom op's)."""
    conv, lstm = dnn.Conv2d(3, 4, 3), dnn.LSTM(4, 3)
    assert type(conv(torch.randn(1, 3, 5, 5)).grad_fn).__name__ == "dnnbind_convBackward"
    assert type(lstm(torch.randn(5, 2, 4))[0].grad_fn).__name__ == "dnnbind_rnnBackward"


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("wanted", [("x", "w", "b"), ("w", "b"), ("x",), ("b",), ("x", "w")])
def test_conv_backward_computes_only_the_gradients_autograd_needs(monkeypatch, compiled, wanted):
    """A first layer's input needs no gradient, a frozen layer's weights none: the backend's backward is
    told (residual form's ``needs``) and skips them, in eager mode and in a compiled graph, and what it
    computes equals torch's."""
    ref_conv = __import__("dnnbind.highlevel.cpu.conv", fromlist=["conv"])
    calls = []
    paths = __import__("dnnbind.highlevel.cpu.conv_paths", fromlist=["conv_paths"])
    original_dx = paths.Direct.data_grad
    monkeypatch.setattr(paths.Direct, "data_grad", staticmethod(lambda *a: calls.append("x") or original_dx(*a)))
    for name, label in (("_data_grad", "x"), ("_filter_grad", "w"), ("_path_filter_grad", "w"),
                        ("channel_sums", "b")):
        original = getattr(ref_conv, name)
        monkeypatch.setattr(ref_conv, name, lambda *a, _f=original, _l=label: calls.append(_l) or _f(*a))
    torch.manual_seed(2)
    x, w, b = (torch.randn(*s, dtype=torch.float64) for s in ((2, 3, 9, 9), (4, 3, 3, 3), (4,)))
    leaves = {"x": x, "w": w, "b": b}
    for name in wanted:
        leaves[name].requires_grad_(True)

    def f(x, w, b):
        return dt.conv(x, w, b, stride=2, padding=1)     # strided: the im2col path and its col2im data gradient
    run = torch.compile(f, fullgraph=True) if compiled else f
    run(x, w, b).square().sum().backward()
    assert sorted(set(calls)) == sorted(wanted)
    grads = torch.autograd.grad(torch.nn.functional.conv2d(x, w, b, stride=2, padding=1).square().sum(),
                                [leaves[n] for n in wanted])
    for name, expected in zip(wanted, grads):
        torch.testing.assert_close(leaves[name].grad, expected)
    for name in set("xwb") - set(wanted):
        assert leaves[name].grad is None


def test_params_name_what_decides_the_residuals():
    """A graph torch.compile caches on disk holds the training op's ``saves`` text: it names dnnbind's
    version, residual revision and (on the CPU) whether the C kernels run, which decide what the forward
    saves, so a cache entry from other conditions is never reused with residuals of another shape. An
    inference graph holds the forward op, without it."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    import dnnbind
    from torch._dynamo.testing import EagerAndRecordGraphs
    from dnnbind.highlevel.residual import RESIDUAL_REVISION
    code = "from dnnbind.torch import typed; print(typed.saves_tag('cpu'))"
    source = str(Path(dnnbind.__file__).parents[1])          # this checkout's dnnbind in the subprocess too
    tags = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "DNNBIND_NATIVE": value, "PYTHONPATH": source}).stdout.strip()
            for value in ("0", "1")]
    assert tags == [f"{dnnbind.__version__}/r{RESIDUAL_REVISION}/numpy", f"{dnnbind.__version__}/r{RESIDUAL_REVISION}/native"]
    conv = dnn.Conv2d(2, 3, 3, padding=1)
    x = torch.randn(1, 2, 5, 5)
    training, inference = EagerAndRecordGraphs(), EagerAndRecordGraphs()
    torch.compile(conv, backend=training, fullgraph=True)(x)
    with torch.no_grad():
        torch.compile(dnn.Conv2d(2, 3, 3, padding=1), backend=inference, fullgraph=True)(x)
    assert "dnnbind.conv_training" in training.graphs[0].code and repr(tags[1]) in training.graphs[0].code
    code = inference.graphs[0].code
    assert "torch.ops.dnnbind.conv(" in code and dnnbind.__version__ not in code and "{" not in code


def test_repeated_eager_calls_share_one_signature():
    from dnnbind.highlevel import plans
    from dnnbind.torch import calls

    def signatures():
        return [v for v in plans.CACHE.entries.values() if isinstance(v, calls.Call)]
    plans.CACHE.clear()
    conv = dnn.Conv2d(2, 3, 3, padding=1).double()
    x = _r(2, 2, 5, 5)
    for _ in range(3):
        conv(x).sum().backward()
    assert len(signatures()) == 1
    conv(_r(1, 2, 6, 6))                     # another shape: another signature
    assert len(signatures()) == 2


def test_a_changed_setting_or_a_zero_of_another_sign_is_another_signature():
    x = _r(2, 3, 6, 6)
    conv = dnn.Conv2d(3, 2, 3, padding=1).double()
    first = conv(x)
    conv.stride = (2, 2)                      # the layer's settings are read on every call
    assert conv(x).shape == torch.nn.functional.conv2d(x, conv.weight, conv.bias, stride=2, padding=1).shape
    neg = torch.tensor([-1.0, -2.0], dtype=torch.float64)
    pos, negz = dt.activation(neg, "leaky_relu", alpha=0.0), dt.activation(neg, "leaky_relu", alpha=-0.0)
    assert torch.equal(torch.signbit(pos), torch.signbit(neg * 0.0))          # 0.0 * -1 = -0.0
    assert torch.equal(torch.signbit(negz), torch.signbit(neg * -0.0))        # -0.0 * -1 = +0.0
    assert first.shape == (2, 2, 6, 6)


def test_seeded_dropout_calls_take_their_own_seed():
    x = torch.ones(64, dtype=torch.float64)
    a = dt.dropout(x, 0.5, seed=1)
    b = dt.dropout(x, 0.5, seed=2)
    assert torch.equal(a, dt.dropout(x, 0.5, seed=1)) and not torch.equal(a, b)


def test_saved_tensor_hooks_see_the_eager_residuals():
    """The eager Function keeps the backend's residual arrays on its ctx, except under saved-tensor hooks
    (activation offloading, checkpointing), which then pack and unpack them as tensors; the gradients
    are the same either way."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    packed: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(t)
        return t

    grads = []
    for hooked in (False, True):
        if hooked:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                y = dt.conv(x, w, padding=1)
        else:
            y = dt.conv(x, w, padding=1)
        grads.append(torch.autograd.grad(y.square().sum(), (x, w)))
    assert any(t.shape == x.shape for t in packed) and any(t.shape == w.shape for t in packed)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    expected = torch.autograd.grad(torch.nn.functional.conv2d(x, w, padding=1).square().sum(), (x, w))
    for a, b in zip(grads[0], expected):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_torch_grad_mode_decides_not_dnnbind_no_grad():
    """Under dnnbind.no_grad() a tensor that requires grad still gets its gradient (autograd asks for one,
    so the forward saves its residuals), and torch.no_grad() gives the same result without saving."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    expected = torch.nn.functional.conv2d(x, w, padding=1)
    with dnnbind.no_grad():
        y = dt.conv(x, w, padding=1)
        grads = torch.autograd.grad(y.square().sum(), (x, w))
    for a, b in zip(grads, torch.autograd.grad(expected.square().sum(), (x, w))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        torch.testing.assert_close(dt.conv(x, w, padding=1), expected, rtol=1e-5, atol=1e-5)


def test_repeated_backward_op_calls_with_other_float_settings_stay_apart():
    """The backward op remembers what its calls share by op, params and reals: a leaky ReLU slope that
    changes between calls (a float argument, not part of params) gets its own gradient every time."""
    x = torch.randn(5, 7, dtype=torch.float64)
    for alpha in (0.1, 0.3, 0.1, -0.0, 0.0):
        xr = x.clone().requires_grad_(True)
        y = torch.ops.dnnbind.activation(xr, "leaky_relu", alpha)
        (grad,) = torch.autograd.grad(y.sum(), xr)
        expected = torch.where(x > 0, torch.ones_like(x), torch.full_like(x, alpha))
        torch.testing.assert_close(grad, expected, rtol=0, atol=0)
