"""dnnbind.torch.nn.Sequential while torch.compile or torch.export traces: its layers' typed ops, one per
layer (a run of layers was one ``dnnbind::sequence`` op with a params text before; it is gone)."""
from __future__ import annotations

import pytest
import torch

from dnnbind.torch import nn as dnn


def _layers(name: str) -> torch.nn.Sequential:
    torch.manual_seed(0)
    if name == "train":
        return dnn.Sequential(dnn.Conv2d(3, 4, 3, padding=1), dnn.BatchNorm2d(4), dnn.ReLU(), dnn.MaxPool2d(2),
                              dnn.Conv2d(4, 2, 1, bias=False), dnn.LeakyReLU(0.1)).double()
    return dnn.Sequential(dnn.Conv1d(2, 3, 3), dnn.BatchNorm1d(3), dnn.Tanh(), dnn.AvgPool1d(2),
                          dnn.Softmax(dim=1)).double().eval()


SHAPES = {"train": (2, 3, 6, 6), "eval": (3, 2, 9)}


def _typed_only(exported, model) -> list[str]:
    """The exported program's dnnbind ops: typed ones, one per layer, no sequence op, no params text."""
    targets = [str(node.target) for node in exported.graph.nodes if node.op == "call_function"]
    ours = [t for t in targets if t.startswith("dnnbind.")]
    assert "dnnbind.sequence.default" not in targets and len(ours) == len(model)
    assert "{" not in exported.graph_module.code
    return ours


def test_export_captures_a_sequential_as_typed_ops_one_per_layer():
    """torch.export takes a Sequential's layers one by one, each a typed op (the sequence op's params text
    names this install: torch.compile only)."""
    model = _layers("eval")
    x = torch.randn(SHAPES["eval"], dtype=torch.float64)
    exported = torch.export.export(model, (x,))
    assert "dnnbind.conv.default" in _typed_only(exported, model)
    torch.testing.assert_close(exported.module()(x), model(x))


def test_compile_with_frozen_layers_equals_eager():
    eager = _layers("train")
    compiled_model = _layers("train")
    for model in (eager, compiled_model):
        model[0].requires_grad_(False)
    compiled = torch.compile(compiled_model, fullgraph=True)
    x = torch.randn(SHAPES["train"], dtype=torch.float64)
    for _ in range(2):
        outs = []
        for model in (eager, compiled):
            model.zero_grad()
            out = model(x)
            out.square().sum().backward()
            outs.append((out.detach(), [p.grad for p in model.parameters()]))
        torch.testing.assert_close(outs[1][0], outs[0][0])
        for a, b in zip(outs[1][1], outs[0][1]):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b)
    for (name, a), b in zip(eager.state_dict().items(), compiled_model.state_dict().values()):
        torch.testing.assert_close(b, a, msg=name)


def test_a_global_module_hook_keeps_the_layers_apart_while_tracing():
    """A hook for every module sees each layer, as in eager mode: no sequence op then."""
    model = _layers("eval")
    x = torch.randn(SHAPES["eval"], dtype=torch.float64)
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, inputs, output: output * 2 if isinstance(module, dnn.Tanh) else None)
    try:
        exported = torch.export.export(model, (x,))
        expected = model(x)
    finally:
        handle.remove()
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert "dnnbind.sequence.default" not in targets and "dnnbind.conv.default" in targets
    torch.testing.assert_close(exported.module()(x), expected)


def test_a_decoder_of_transposed_convolutions_exports_as_typed_ops():
    torch.manual_seed(0)
    model = dnn.Sequential(dnn.ConvTranspose2d(4, 3, 3, stride=2, output_padding=1), dnn.BatchNorm2d(3), dnn.ReLU(),
                           dnn.ConvTranspose2d(3, 1, 2, stride=2), dnn.Sigmoid()).double().eval()
    x = torch.randn(2, 4, 3, 3, dtype=torch.float64)
    exported = torch.export.export(model, (x,))
    assert _typed_only(exported, model).count("dnnbind.conv_transpose.default") == 2
    torch.testing.assert_close(exported.module()(x), model(x))
    model.__class__ = torch.nn.Sequential            # the same layers one by one
    torch.testing.assert_close(exported.module()(x), model(x), rtol=0, atol=0)


def test_a_batch_norm_called_twice_in_a_run_reads_its_own_update():
    """One layer twice in a compiled run: the second call normalises with, and updates, the running
    statistics the first call left, as torch's own layers one by one do."""
    torch.manual_seed(0)
    ours, theirs = dnn.BatchNorm2d(3).double(), torch.nn.BatchNorm2d(3).double()
    compiled = torch.compile(dnn.Sequential(ours, dnn.ReLU(), ours), fullgraph=True)
    reference = torch.nn.Sequential(theirs, torch.nn.ReLU(), theirs)
    x = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), reference(x))
    torch.testing.assert_close(ours.running_mean, theirs.running_mean)
    torch.testing.assert_close(ours.running_var, theirs.running_var)
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 4
