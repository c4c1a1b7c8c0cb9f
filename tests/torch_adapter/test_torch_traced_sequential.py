"""dnnbind.torch.nn.Sequential while torch.compile or torch.export traces: torch.export keeps its layers'
typed ops, one per layer; torch.compile runs a run of layers as one ``dnnbind::sequence`` op, given the
layers' tensors and a description of the layers with their typed arguments."""
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


def _graph_code(model: torch.nn.Module, x: torch.Tensor, **options) -> tuple[list[str], torch.Tensor]:
    """(the code of each graph torch.compile hands its backend, the compiled model's result on x)."""
    from torch._inductor.compile_fx import compile_fx
    codes: list[str] = []

    def backend(gm, inputs):
        codes.append(gm.code)
        return compile_fx(gm, inputs)
    return codes, torch.compile(model, backend=backend, fullgraph=True, **options)(x)


def test_compile_runs_a_run_of_layers_as_one_sequence_op():
    """While torch.compile traces, a run is one op given the layers' tensors and their description (each
    layer's op, given arrays and typed arguments); its training forward saves residuals for its pullback,
    and its results equal the layers' own."""
    model, twin = _layers("train"), _layers("train")
    x = torch.randn(SHAPES["train"], dtype=torch.float64)
    codes, out = _graph_code(model, x)
    assert "torch.ops.dnnbind.sequence_training" in codes[0]
    assert "torch.ops.dnnbind.conv" not in codes[0]
    assert '{"op": "conv", "given": ["w", "b"], "stride": [1, 1], "padding": [1, 1]' in codes[0]
    assert '{"op": "conv", "given": ["w"], ' in codes[0]          # the second convolution has no bias
    assert '"training": true, "momentum": "reals[0]", "eps": "reals[1]"}' in codes[0]
    assert "[0.1, 1e-05, 0.1]" in codes[0]                           # (the leaky ReLU's slope last)
    expected = twin(x)
    torch.testing.assert_close(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    for (key, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=key)
    for (key, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        torch.testing.assert_close(a, b, msg=key)


def test_a_compiled_inference_run_saves_nothing_and_dynamic_shapes_keep_one_graph():
    model = _layers("eval")
    with torch.no_grad():
        codes, out = _graph_code(model, torch.randn(SHAPES["eval"], dtype=torch.float64), dynamic=True)
        compiled = torch.compile(model, fullgraph=True, dynamic=True)
        for batch in (2, 5, 7):
            x = torch.randn(batch, *SHAPES["eval"][1:], dtype=torch.float64)
            torch.testing.assert_close(compiled(x), model.__class__.__mro__[1].forward(model, x))
    assert "torch.ops.dnnbind.sequence(" in codes[0] and "_training" not in codes[0]
    for op in ("conv", "batchnorm", "activation", "meanpool", "softmax"):
        assert f'{{"op": "{op}", ' in codes[0]


def _described(*layers: tuple) -> str:
    from dnnbind.torch import typed_sequence
    return typed_sequence.describe(layers)[0]


def test_the_sequence_ops_pass_opcheck_and_equal_the_layers():
    from dnnbind.torch import typed_sequence
    assert typed_sequence.schemas()[0] == "(Tensor x, Tensor[] tensors, str layers, float[] reals) -> Tensor[]"
    layers = _described(("conv", 2, (True, True), (("stride", 1), ("padding", 1), ("dilation", 1), ("groups", 1),
                                                   ("flip", False))),
                        ("batchnorm", 2, (True,) * 4, (("training", True), ("momentum", "reals[0]"), ("eps", 1e-5))),
                        ("activation", 2, (), (("mode", "tanh"), ("alpha", None))))
    assert '"stride": [1, 1], "padding": [1, 1]' in layers and '"momentum": "reals[0]", "eps": 1e-05' in layers
    torch.manual_seed(0)
    w, b = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True), torch.randn(4, dtype=torch.float64)
    gamma = torch.rand(4, dtype=torch.float64, requires_grad=True)
    beta = torch.randn(4, dtype=torch.float64, requires_grad=True)
    mean, var = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64, requires_grad=True)
    inputs = (x, [w, b, gamma, beta, mean, var], layers, [0.1])
    torch.library.opcheck(torch.ops.dnnbind.sequence, inputs)
    results, residuals = torch.ops.dnnbind.sequence_training(*inputs, "tag")
    torch.library.opcheck(torch.ops.dnnbind.sequence_training, (*inputs, "tag"))
    expected = torch.tanh(torch.nn.functional.batch_norm(torch.nn.functional.conv2d(x, w, b, padding=1), mean.clone(),
                                                         var.clone(), gamma, beta, training=True))
    torch.testing.assert_close(results[0], expected)
    assert len(results) == 3 and residuals
    (dx, dw, dgamma), (ex, ew, egamma) = [torch.autograd.grad(y.sum(), (x, w, gamma)) for y in (results[0], expected)]
    torch.testing.assert_close((dx, dw, dgamma), (ex, ew, egamma))
    # of the arrays the layers' backwards read, the training forward returns the one between them (the
    # convolution's result, batch norm's x) once, and no copy of x, w or the result (tanh's): the pullback
    # takes those in their places
    assert [tuple(r.shape) for r in residuals if r.numel() >= 4 * 9] == [(2, 4, 6, 6)]
    pullback = (residuals, results[0].detach(), [torch.ones_like(results[0])], x.detach(),
                [t.detach() for t in inputs[1]], layers, [0.1], [True] * 7)
    torch.library.opcheck(torch.ops.dnnbind.sequence_pullback, pullback)
    found = torch.ops.dnnbind.sequence_pullback(*pullback)
    torch.testing.assert_close((found[0], found[1], found[3]), (ex, ew, egamma))


@pytest.mark.parametrize("layers, reals, message", [
    ("not json", [], "does not describe a run of layers"),
    ('[{"op": "nosuch", "given": []}]', [], "does not describe a run of layers"),
    ('[{"op": "activation", "given": ["w"], "mode": "relu", "alpha": null}]', [], "does not describe a run of layers"),
    ('[{"op": "activation", "given": [], "mode": "relu"}]', [], "does not describe a run of layers"),
    ('[{"op": "activation", "given": [], "mode": "elu", "alpha": "1.0"}]', [1.0], "nor a place among the reals"),
    ('[{"op": "activation", "given": [], "mode": "elu", "alpha": 1.0}]', [1.0], "are not the described"),
    ('[{"op": "activation", "given": [], "mode": "elu", "alpha": "reals[1]"}]', [1.0], "are not the described"),
    ('[{"op": "activation", "given": [], "mode": "elu", "alpha": "reals[0]"}]', [], "are not the described"),
    ('[{"op": "conv", "given": ["w"], "stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1, '
     '"flip": false}]', [], "0 tensors for layers that give 1"),
])
def test_a_sequence_op_given_a_wrong_description_names_it(layers, reals, message):
    with pytest.raises(ValueError, match=message):
        torch.ops.dnnbind.sequence(torch.randn(1, 3, 4, 4), [], layers, reals)


#: Sequentials of every layer family a run fuses, with the settings that change its plan
RUNS = {
    "conv-bn-pool": lambda nn: nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True),
        nn.Conv2d(4, 2, 3, stride=2, padding=1, bias=False), nn.AvgPool2d(2, divisor_override=3), nn.ELU()),
    "transposed-grouped": lambda nn: nn.Sequential(
        nn.ConvTranspose2d(3, 4, 3, stride=2, output_padding=1), nn.BatchNorm2d(4, eps=1e-3),
        nn.LeakyReLU(0.2), nn.Conv2d(4, 4, 3, groups=2, dilation=2)),
    "1d": lambda nn: nn.Sequential(nn.Conv1d(3, 4, 3, padding="same"), nn.BatchNorm1d(4, momentum=0.3), nn.Tanh(),
                                   nn.MaxPool1d(3, 2, 1), nn.Softmax(dim=1)),
    "3d": lambda nn: nn.Sequential(nn.Conv3d(2, 3, 2), nn.BatchNorm3d(3, track_running_stats=False), nn.SiLU(),
                                   nn.AvgPool3d(2, ceil_mode=True, count_include_pad=False)),
    "layer-norm": lambda nn: nn.Sequential(nn.Conv2d(2, 3, 1), nn.LayerNorm([3, 4, 4]), nn.Sigmoid(),
                                           nn.LogSoftmax(dim=1)),
    "eval": lambda nn: nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU6(),
                                     nn.Hardtanh(0.0, 0.5)).eval(),
    "shared-bn": lambda nn: (lambda bn: nn.Sequential(nn.Conv2d(2, 2, 3, padding=1), bn, nn.ReLU(),
                                                      nn.Conv2d(2, 2, 3, padding=1), bn))(nn.BatchNorm2d(2)),
}
RUN_SHAPES = {"conv-bn-pool": (3, 9, 9), "transposed-grouped": (3, 5, 5), "1d": (3, 10), "3d": (2, 5, 5, 5),
              "layer-norm": (2, 4, 4), "eval": (2, 6, 6), "shared-bn": (2, 5, 5)}


@pytest.mark.slow
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_compiled_run_of_every_layer_family_equals_torchs_layers(name, dynamic):
    """A compiled Sequential (one typed sequence op per run) over several batch sizes: results, input and
    parameter gradients, running statistics, and its inference under no_grad equal torch's own layers."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    ours = RUNS[name](dnn).double()
    theirs = RUNS[name](torch.nn).double()
    theirs.load_state_dict(ours.state_dict())
    graphs = []
    aot_eager = torch._dynamo.lookup_backend("aot_eager")
    compiled = torch.compile(ours, backend=lambda gm, inputs: graphs.append(gm.code) or aot_eager(gm, inputs),
                             dynamic=dynamic, fullgraph=True)
    for batch in (2, 3, 4):
        x = torch.randn(batch, *RUN_SHAPES[name], dtype=torch.float64, requires_grad=True)
        x_theirs = x.detach().clone().requires_grad_()
        y, expected = compiled(x), theirs(x_theirs)
        torch.testing.assert_close(y, expected)
        weights = torch.randn_like(y)
        (y * weights).sum().backward()
        (expected * weights).sum().backward()
        torch.testing.assert_close(x.grad, x_theirs.grad)
        for (key, p), q in zip(ours.named_parameters(), theirs.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=key)
            p.grad = q.grad = None
        for (key, a), b in zip(ours.named_buffers(), theirs.buffers()):
            torch.testing.assert_close(a, b, msg=key)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), theirs(x))
    assert graphs and all("torch.ops.dnnbind.sequence" in code for code in graphs)


@pytest.mark.parametrize("last,refused", [("MaxPool2d", False), ("Sigmoid", True)])
def test_a_compiled_run_keeps_its_result_for_the_backward_where_its_last_layer_reads_it(last, refused):
    """Changed in place before the backward, a compiled run's result is refused where the last layer's
    backward reads it (sigmoid's), as torch refuses it; maxpool's reads its indices, not its result."""
    outcomes = []
    for nn in (torch.nn, dnn):
        torch.manual_seed(0)
        tail = nn.MaxPool2d(2) if last == "MaxPool2d" else nn.Sigmoid()
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), tail).double()
        compiled = torch.compile(model, fullgraph=True)
        x = torch.randn(SHAPES["train"], dtype=torch.float64)
        y = compiled(x)
        loss = y.sum()
        with torch.no_grad():
            y.mul_(2)
        try:
            loss.backward()
            outcomes.append(("ran", model[0].weight.grad))
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e)
            outcomes.append(("raised", None))
    assert [o[0] for o in outcomes] == ["raised" if refused else "ran"] * 2
    if not refused:
        torch.testing.assert_close(outcomes[1][1], outcomes[0][1])
