"""dnnbind.torch.tracers: torch.fx records dnnbind's layers as torch's own, torch.jit.trace records their
typed ops, torch.jit.script refuses them by name."""
from __future__ import annotations

import io

import pytest
import torch

import dnnbind.torch as dt

DT = torch.float64


def _cnn(nn):
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64, 2))


class _Recurrent(torch.nn.Module):
    def __init__(self, nn):
        super().__init__()
        self.lstm, self.head = nn.LSTM(3, 5, num_layers=2), nn.Linear(5, 2)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[-1])


MODELS = {"cnn": (_cnn, (4, 3, 8, 8), (3, 3, 8, 8)), "lstm": (_Recurrent, (6, 4, 3), (7, 2, 3))}


def _twins(name):
    torch.manual_seed(0)
    ours, theirs = MODELS[name][0](dt.nn).to(DT), MODELS[name][0](torch.nn).to(DT)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def _gradients(model):
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fx_records_each_layer_as_one_node_as_torchs_own(name):
    ours, theirs = _twins(name)
    graphs = [torch.fx.symbolic_trace(m) for m in (ours, theirs)]
    assert [(n.op, n.target) for n in graphs[0].graph.nodes] == [(n.op, n.target) for n in graphs[1].graph.nodes]
    assert "call_module" in {n.op for n in graphs[0].graph.nodes}
    x = torch.randn(*MODELS[name][2], dtype=DT)
    for training in (True, False):
        outs = []
        for graph in graphs:
            graph.train(training)
            graph.zero_grad()
            out = graph(x)
            out.pow(2).sum().backward()
            outs.append((out, _gradients(graph)))
        torch.testing.assert_close(outs[0], outs[1])


def test_fx_refuses_a_layer_traced_on_its_own_naming_it():
    with pytest.raises(RuntimeError, match=r"torch\.fx cannot trace a dnnbind\.torch Conv2d on its own .* trace a "
                                           r"module that holds it"):
        torch.fx.symbolic_trace(dt.nn.Conv2d(3, 4, 3))


def test_jit_trace_records_the_typed_ops_for_any_batch_and_saves():
    """The trace passes torch's own check (the same graph twice), runs another batch size, takes
    gradients through the recorded ops, and an inference trace saves and loads."""
    ours, theirs = _twins("cnn")
    x, other = torch.randn(4, 3, 8, 8, dtype=DT), torch.randn(3, 3, 8, 8, dtype=DT)
    ours(x), ours(x)                   # (planned: a fused run would be one Python op, the trace takes the layers)
    traced = torch.jit.trace(ours, x)
    assert "dnnbind::conv(" in str(traced.inlined_graph) and "PythonOp" not in str(traced.inlined_graph)
    traced(other).pow(2).sum().backward()
    theirs(other).pow(2).sum().backward()
    torch.testing.assert_close(_gradients(ours), _gradients(theirs))
    theirs.load_state_dict(ours.state_dict())          # (the running statistics the traces updated)
    ours.eval(), theirs.eval()
    with torch.no_grad():
        buffer = io.BytesIO()
        torch.jit.save(torch.jit.trace(ours, x), buffer)
        buffer.seek(0)
        torch.testing.assert_close(torch.jit.load(buffer)(other), theirs(other))


def test_jit_trace_of_a_recurrent_layer_is_refused_naming_the_op_and_the_alternatives():
    ours, _ = _twins("lstm")
    with pytest.raises(RuntimeError, match=r"dnnbind\.rnn: torch\.jit\.trace cannot record this op .* use "
                                           r"torch\.export or torch\.compile"):
        torch.jit.trace(ours, torch.randn(6, 4, 3, dtype=DT))


@pytest.mark.parametrize("model", [lambda: _cnn(dt.nn), lambda: torch.nn.Sequential(torch.nn.Linear(2, 2), dt.nn.ReLU()),
                                   lambda: _Recurrent(dt.nn)], ids=["sequential", "layer", "lstm"])
def test_jit_script_is_refused_naming_the_layer(model):
    with pytest.raises(RuntimeError, match=r"^(Sequential|ReLU|LSTM) \(dnnbind\.torch\) cannot be compiled by "
                                           r"torch\.jit\.script: its forward runs Python\. Use torch\.compile"):
        torch.jit.script(model())


# -- Dynamo never compiles the code that computes on arrays (tracers.untraced) -------------------------------
# Where a compiled function runs code eagerly (after a graph break; under a torch.func transform Dynamo does
# not trace), Dynamo compiles each Python frame called from there: traced, a kernel's numpy code lost the C
# kernels' writes (wrong gradients, uninitialised values, a crash in the average pool's backward).

def _layers(nn):
    return torch.nn.ModuleList([nn.Conv2d(3, 4, 3, padding=1), nn.ELU(), nn.MaxPool2d(2)])


def _stacked(layers, x):
    for layer in layers:
        x = layer(x)
    return x


@pytest.mark.parametrize("dtype", [torch.float32, DT], ids=str)
@pytest.mark.parametrize("kind", ["layers", "sequential", "lstm"])
def test_a_compiled_function_running_the_backward_of_an_eager_forward_gets_torchs_gradients(kind, dtype):
    torch.manual_seed(0)
    if kind == "lstm":
        ours, theirs = (m.to(dtype) for m in _twins("lstm"))
        run, x = (lambda m, x: m(x)), torch.randn(6, 4, 3, dtype=dtype)
    else:
        make = _layers if kind == "layers" else (lambda nn: nn.Sequential(*_layers(nn)))
        ours, theirs = make(dt.nn).to(dtype), make(torch.nn).to(dtype)
        ours.load_state_dict(theirs.state_dict())
        run, x = _stacked, torch.randn(2, 3, 8, 8, dtype=dtype)

    @torch.compile(backend="aot_eager")
    def backward(y):
        y.pow(2).sum().backward()            # (a graph break: Dynamo runs the backward eagerly)

    torch._dynamo.reset()
    xs = [x.clone().requires_grad_() for _ in range(2)]
    backward(run(ours, xs[0]))
    run(theirs, xs[1]).pow(2).sum().backward()
    torch.testing.assert_close([xs[0].grad, *_gradients(ours)], [xs[1].grad, *_gradients(theirs)])


def _jacobian(layer):
    return lambda x: torch.func.jacrev(layer)(x)


def _hessian(layer):
    return lambda x: torch.func.jacrev(torch.func.grad(lambda r: layer(r).pow(3).sum()))(x)


def _per_sample(layer):
    return lambda x: torch.func.vmap(torch.func.grad(lambda r: layer(r[None]).pow(3).sum()))(x)


@pytest.mark.parametrize("transform", [_jacobian, _hessian, _per_sample], ids=["jacrev", "jacrev-grad", "vmap-grad"])
@pytest.mark.parametrize("layer", [("ELU", (), (2, 3, 5)), ("SiLU", (), (2, 3, 5)), ("ReLU6", (), (2, 3, 5)),
                                   ("AvgPool1d", (3, 2, 1, False, False), (2, 1, 6))], ids=lambda p: p[0])
def test_compiled_torch_func_transforms_through_a_layer_give_torchs_numbers(transform, layer):
    name, args, shape = layer
    torch.manual_seed(3)
    x = torch.randn(*shape, dtype=DT) * 2
    torch._dynamo.reset()
    ours = torch.compile(transform(getattr(dt.nn, name)(*args)), backend="aot_eager")(x)
    torch.testing.assert_close(ours, transform(getattr(torch.nn, name)(*args))(x))
