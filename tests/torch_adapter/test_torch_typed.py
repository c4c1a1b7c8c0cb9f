"""dnnbind's typed custom ops (dnnbind.torch.typed): schemas derived from the specs, exported programs that
name ops and typed arguments only (no residuals, no backend, no version), saved and loaded again."""
from __future__ import annotations

import io
import re

import pytest
import torch

import dnnbind
import dnnbind.torch  # noqa: F401 - registers the ops
from dnnbind.highlevel.specs import SPECS
from dnnbind.torch import nn as dnn
from dnnbind.torch.typed import schemas
from layer_checks import SAMPLES

torch.manual_seed(0)


def test_conv_and_its_backward_have_their_real_arguments():
    forward, backward = schemas(SPECS["conv"])
    assert forward == ("(Tensor x, Tensor w, Tensor? b, SymInt[] stride, SymInt[] padding, SymInt[] dilation, "
                       "SymInt groups, bool flip) -> Tensor")
    assert backward.startswith("(Tensor?[] cotangents, Tensor x, Tensor w, Tensor? b, SymInt[] stride")
    assert backward.endswith("bool[] needs) -> Tensor[]")
    assert str(torch.ops.dnnbind.conv.default._schema).startswith("dnnbind::conv(Tensor x, Tensor w, Tensor? b")


@pytest.mark.parametrize("op", list(SPECS))
def test_every_op_is_registered_with_its_spec_schema(op):
    forward, backward = schemas(SPECS[op])
    registered = str(getattr(torch.ops.dnnbind, op).default._schema)
    assert registered == f"dnnbind::{op}{forward}"
    assert str(getattr(torch.ops.dnnbind, f"{op}_backward").default._schema) == f"dnnbind::{op}_backward{backward}"
    for name in SPECS[op].arguments:        # each public argument is a typed argument of the op
        assert re.search(rf"\b{name}\b", registered)


def test_padding_travels_per_dimension_and_uneven_pairs_flattened():
    x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    ep = torch.export.export(_Conv(w, padding=((1, 1), (0, 2))), (x,))
    assert "[1, 1, 0, 2]" in ep.graph_module.code
    ep = torch.export.export(_Conv(w, padding=1), (x,))
    assert "torch.ops.dnnbind.conv.default(x, p_w, None, [1, 1], [1, 1], [1, 1], 1, False)" in ep.graph_module.code
    torch.testing.assert_close(ep.module()(x), torch.nn.functional.conv2d(x, w, padding=1))


class _Conv(torch.nn.Module):
    def __init__(self, w, **kwargs):
        super().__init__()
        self.w, self.kwargs = torch.nn.Parameter(w), kwargs

    def forward(self, x):
        return dnnbind.torch.conv(x, self.w, **self.kwargs)


class CNN(torch.nn.Module):
    def __init__(self, nn):
        super().__init__()
        self.features = torch.nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                            nn.MaxPool2d(2), nn.Conv2d(8, 4, 3, padding=1), nn.AvgPool2d(2))
        self.head = nn.LogSoftmax(dim=1)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class LSTMNet(torch.nn.Module):
    def __init__(self, nn):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, bidirectional=True)

    def forward(self, x):
        return self.lstm(x)[0]


def _twins(cls):
    torch.manual_seed(1)
    ours = cls(dnn)
    torch.manual_seed(1)
    theirs = cls(torch.nn)
    theirs.load_state_dict(ours.state_dict())
    return ours.eval(), theirs.eval()


@pytest.mark.parametrize("cls,shape", [(CNN, (2, 3, 8, 8)), (LSTMNet, (5, 3, 4))], ids=["cnn", "lstm"])
def test_an_exported_program_is_typed_and_saved_and_loaded_runs(cls, shape):
    ours, theirs = _twins(cls)
    x = torch.randn(*shape)
    program = torch.export.export(ours, (x,))
    code = program.graph_module.code
    calls = re.findall(r"torch\.ops\.dnnbind\.(\w+)\.default\(", code)
    assert calls and all(c in SPECS for c in calls)
    # nothing backend- or version-specific: no JSON text, no version, no backend's name, no residuals
    for word in ("{", "saves", dnnbind.__version__, "reference", "native", "numpy", "cudnn", "miopen"):
        assert word not in code
    for node in program.graph.nodes:
        if node.op == "call_function" and str(node.target).startswith("dnnbind."):
            value = node.meta["val"]
            op = str(node.target).split(".")[1]
            count = 1 if isinstance(value, torch.Tensor) else len(value)
            spec = SPECS[op]
            # results only (batch norm: its running statistics after them), never residual tensors
            assert count <= len(spec.outputs) + len(spec.updated_in_place)
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    with torch.no_grad():
        torch.testing.assert_close(loaded.module()(x), theirs(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_layer_exports_saves_loads_and_runs_as_torchs(name, training):
    """Each drop-in layer, in eval and in training mode: its exported program survives torch.export.save
    and load, and the loaded program gives torch's layer's output and (batch norm in training) updates its
    running statistics as torch's layer does."""
    args, shape = SAMPLES[name]
    torch.manual_seed(0)
    ours, theirs = getattr(dnn, name)(*args).train(training), getattr(torch.nn, name)(*args).train(training)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(shape)
    program = torch.export.export(ours, (x,))
    if name != "Dropout" or training:             # (eval dropout is the identity: no op at all)
        assert "torch.ops.dnnbind." in program.graph_module.code
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer).module()
    y, expected = loaded(x), theirs(x)
    y, expected = (y[0], expected[0]) if isinstance(y, tuple) else (y, expected)
    if name == "Dropout" and training:            # its own random mask: zeros or the input scaled by 2
        assert ((y == 0) | torch.isclose(y, 2 * x)).all()
    else:
        torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-5)
    for buffer_name, value in theirs.named_buffers():
        torch.testing.assert_close(loaded.get_buffer(buffer_name), value, msg=buffer_name)


def test_an_exported_training_program_holds_no_residuals_and_its_gradients_equal_torchs():
    """A program exported with its parameters requiring gradients still holds only the ops' results; its
    module's backward runs the typed backward ops and equals torch's."""
    ours, theirs = _twins(CNN)
    ours.train(), theirs.train()
    x = torch.randn(2, 3, 8, 8)
    program = torch.export.export(ours, (x,))
    module = program.module()
    module(x).sum().backward()
    theirs(x).sum().backward()
    grads = {k: v.grad for k, v in module.named_parameters()}
    for k, v in theirs.named_parameters():
        torch.testing.assert_close(grads[k], v.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls,shape,axis", [(CNN, (2, 3, 8, 8), 0), (LSTMNet, (5, 2, 4), 1)], ids=["cnn", "lstm"])
def test_compile_dynamic_runs_several_batch_sizes_without_recompiling(cls, shape, axis):
    """torch.compile(dynamic=True): one graph for every batch size (the fake kernels keep it symbolic),
    forward and backward equal to torch's layers."""
    from torch._dynamo.testing import CompileCounter
    torch._dynamo.reset()
    ours, theirs = _twins(cls)
    ours.train(), theirs.train()
    counter = CompileCounter()
    step = torch.compile(lambda m, x: m(x).sum(), backend=counter, dynamic=True, fullgraph=True)
    for batch in (2, 3, 5, 7):
        size = list(shape)
        size[axis] = batch
        x = torch.randn(*size)
        for p in ours.parameters():
            p.grad = None
        step(ours, x).backward()
        theirs.zero_grad()
        theirs(x).sum().backward()
        for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4, msg=name)
    assert counter.frame_count == 1


def test_a_repeated_kernel_call_finds_its_call_and_a_changed_argument_makes_another():
    """A typed kernel keeps its checked call in the one plan cache by the typed inputs (a compiled graph's
    repeated calls skip the checks); an input whose value differs is another call; dropout's seed tensor,
    whose value is a static argument, is read each call."""
    x, gamma, beta = torch.randn(2, 3, 4, 4), torch.rand(3), torch.randn(3)
    run = torch.ops.dnnbind.batchnorm.default
    first = run(x, gamma, beta, None, None, True, 0.1, 1e-5)[0]
    misses = dnnbind.plan_cache_info().misses
    torch.testing.assert_close(run(x, gamma, beta, None, None, True, 0.1, 1e-5)[0], first)
    assert dnnbind.plan_cache_info().misses == misses
    other = run(x, gamma, beta, None, None, True, 0.1, 1.0)[0]
    assert dnnbind.plan_cache_info().misses > misses
    assert not torch.allclose(other, first)
    expected = torch.nn.functional.batch_norm(x, None, None, gamma, beta, training=True, eps=1.0)
    torch.testing.assert_close(other, expected)
    ones = torch.ones(64, 64)
    masks = [torch.ops.dnnbind.dropout.default(ones, 0.5, torch.tensor(seed)) for seed in (1, 2, 1)]
    assert not torch.equal(masks[0], masks[1]) and torch.equal(masks[0], masks[2])
