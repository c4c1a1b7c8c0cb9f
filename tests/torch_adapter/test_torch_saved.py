"""What autograd saves of a dnnbind.torch call: the inputs and results its backward reads (the spec's
``backward_reads``), so that an in-place change to one of them between the forward and the backward is
refused as torch refuses it for its own layers, and a change to anything else leaves the gradient the
forward's."""
from __future__ import annotations

import contextlib
import gc
import warnings
import weakref
from typing import Any, Callable

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import dnnbind.torch as dt
from dnnbind.torch import nn as dnn

IMAGE, SEQUENCE = (2, 3, 6, 6), (5, 2, 3)

#: name -> (a layer from a torch.nn-like namespace, its input's shape)
LAYERS: dict[str, tuple[Callable[[Any], Any], tuple[int, ...]]] = {
    "Conv2d": (lambda nn: nn.Conv2d(3, 4, 3), IMAGE),
    "Conv1d-no-bias": (lambda nn: nn.Conv1d(3, 4, 3, bias=False), (2, 3, 7)),
    "ConvTranspose2d": (lambda nn: nn.ConvTranspose2d(3, 4, 3, stride=2), IMAGE),
    "MaxPool2d": (lambda nn: nn.MaxPool2d(2), IMAGE),
    "MaxPool2d-indices": (lambda nn: nn.MaxPool2d(2, return_indices=True), IMAGE),
    "AvgPool2d": (lambda nn: nn.AvgPool2d(2), IMAGE),
    "BatchNorm2d": (lambda nn: nn.BatchNorm2d(3), IMAGE),
    "BatchNorm2d-eval": (lambda nn: nn.BatchNorm2d(3).eval(), IMAGE),
    "BatchNorm1d-no-statistics": (lambda nn: nn.BatchNorm1d(3, track_running_stats=False), (4, 3)),
    "LayerNorm": (lambda nn: nn.LayerNorm(6), IMAGE),
    "Dropout": (lambda nn: nn.Dropout(0.5), IMAGE),
    "Softmax": (lambda nn: nn.Softmax(1), IMAGE),
    "LogSoftmax": (lambda nn: nn.LogSoftmax(-1), IMAGE),
    "ReLU": (lambda nn: nn.ReLU(), IMAGE),
    "ReLU6": (lambda nn: nn.ReLU6(), IMAGE),
    "ELU": (lambda nn: nn.ELU(), IMAGE),
    "LeakyReLU": (lambda nn: nn.LeakyReLU(0.2), IMAGE),
    "Hardtanh": (lambda nn: nn.Hardtanh(0.0, 2.0), IMAGE),
    "SiLU": (lambda nn: nn.SiLU(), IMAGE),
    "Sigmoid": (lambda nn: nn.Sigmoid(), IMAGE),
    "Tanh": (lambda nn: nn.Tanh(), IMAGE),
    **{f"{name}-inplace": (lambda nn, name=name: getattr(nn, name)(inplace=True), IMAGE)
       for name in ("ReLU", "ReLU6", "ELU", "LeakyReLU", "SiLU")},
    "Sequential": (lambda nn: nn.Sequential(nn.Tanh(), nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()), IMAGE),
    "LSTM": (lambda nn: nn.LSTM(3, 4), SEQUENCE),
    "LSTM-projection": (lambda nn: nn.LSTM(3, 4, proj_size=2), SEQUENCE),
    "GRU": (lambda nn: nn.GRU(3, 4), SEQUENCE),
    "RNN": (lambda nn: nn.RNN(3, 4, nonlinearity="relu"), SEQUENCE),
}

#: the single layers (not the Sequential, whose layers each run alone but for a compiled run)
SINGLE = [name for name in LAYERS if name != "Sequential"]

#: where dnnbind refuses what torch's CPU layer allows: its RNNs save what cuDNN's RNN saves for torch
#: (all weights, y), as torch's CPU LSTM does, where its CPU GRU, RNN and projected LSTM read no bias nor y
STRICTER = {("GRU", "bias_ih_l0"), ("GRU", "bias_hh_l0"), ("GRU", "output 0"),
            ("RNN", "bias_ih_l0"), ("RNN", "bias_hh_l0"), ("RNN", "output 0"),
            ("LSTM-projection", "bias_ih_l0"), ("LSTM-projection", "bias_hh_l0"), ("LSTM-projection", "output 0")}
#: where torch refuses what dnnbind allows: torch's in-place relu_, elu_ and leaky_relu_ save their
#: result, the input they overwrote; dnnbind's layer writes a copy into it (see eager.overwriting), so
#: its backward reads its own copy, and the gradient is the forward's
LAXER = {(f"{name}-inplace", target) for name in ("ReLU", "ELU", "LeakyReLU") for target in ("x", "output 0")}
#: through the typed op, which cannot tell a layer made with inplace=True (whose result is written into x
#: after the op, under torch.compile) from another: a result that stands for x (ReLU6's, LeakyReLU's,
#: Hardtanh's, Dropout's) is saved in x's place, where torch's layer reads x (or, dropout, its mask alone);
#: batch norm's running statistics are kept by reference, as the op's own update must not fail the backward
TYPED_STRICTER = {(name, "output 0") for name in ("ReLU6", "LeakyReLU", "Hardtanh", "Dropout")}
TYPED_LAXER = ({(name, "x") for name in ("ReLU6", "LeakyReLU", "Hardtanh")}
               | {(name, f"{at}running_{s}") for name, at in (("BatchNorm2d", ""), ("BatchNorm2d-eval", ""), ("Sequential", "2."))
                  for s in ("mean", "var")})


def _outputs(out: Any) -> list[torch.Tensor]:
    flat: list[torch.Tensor] = []
    for o in out if isinstance(out, tuple) else (out,):
        flat += list(o) if isinstance(o, tuple) else [o]
    return flat


def _targets(name: str) -> list[str]:
    make, shape = LAYERS[name]
    layer = make(torch.nn)
    out = _outputs(layer(torch.randn(shape)))
    return (["x"] + [n for n, _ in layer.named_parameters()]
            + [n for n, b in layer.named_buffers() if b.is_floating_point()] + [f"output {i}" for i in range(len(out))])


#: how a dnnbind.torch layer runs: eager (an autograd.Function per call), through its typed training op (a
#: dispatch mode's, what compiled graphs hold), or torch.compile'd
RUNS: dict[str, Callable[[Any], Any]] = {
    "eager": lambda layer: layer,
    "typed": lambda layer: lambda x: _under_a_dispatch_mode(layer, x),
    "compiled": lambda layer: _compiled(layer),
    # (no partitioner: what the backward graph takes is what the traced backward reads)
    "compiled aot_eager": lambda layer: _compiled(layer, "aot_eager"),
}


def _compiled(layer: Any, backend: str = "inductor") -> Any:
    torch._dynamo.reset()                    # (each case's layer is new: no recompile limit)
    return torch.compile(layer, fullgraph=True, dynamic=False, backend=backend)


def _under_a_dispatch_mode(layer: Any, x: torch.Tensor) -> Any:
    with FlopCounterMode(display=False):
        return layer(x)


def _step(nn: Any, name: str, target: str, run: str = "eager") -> tuple[str, Any]:
    """("raised" or "ran", the gradients of x and the parameters) of a forward (``run``: RUNS, for
    dnnbind's layers), an in-place change of ``target``, and a backward."""
    make, shape = LAYERS[name]
    torch.manual_seed(0)
    layer = make(nn)
    if nn is dnn:
        layer.load_state_dict(_REFERENCE[name].state_dict())
    source = torch.randn(shape, dtype=torch.float32, generator=torch.Generator().manual_seed(1), requires_grad=True)
    x = source * 1
    torch.manual_seed(2)
    outputs = _outputs((RUNS[run](layer) if nn is dnn else layer)(x))
    with torch.no_grad():
        if target == "x":
            x.add_(0.5)
        elif target == "none":
            pass
        elif target.startswith("output"):
            outputs[int(target.split()[1])].add_(1)
        else:
            {**dict(layer.named_parameters()), **dict(layer.named_buffers())}[target].add_(0.5)
    first = outputs[0]
    weights = torch.linspace(-1, 1, first.numel()).reshape(first.shape)
    try:
        (first * weights).sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        return "raised", None
    return "ran", [source.grad, *[p.grad for p in layer.parameters()]]


_REFERENCE: dict[str, Any] = {}


def _cases() -> list[tuple[str, str]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # (torch's LSTM with a projection: not with oneDNN)
        return [(name, target) for name in LAYERS for target in _targets(name)]


@pytest.mark.parametrize("run", ["eager", "typed"])
@pytest.mark.parametrize("name,target", _cases())
def test_an_in_place_change_is_refused_where_torch_refuses_it(name, target, run):
    """Changed between the forward and the backward: refused where torch's own layer refuses it (apart
    from STRICTER and LAXER), otherwise the gradients are those of the forward's values; eager and through
    the typed training op, which saves no array its backward reads only the metadata of (conv's bias)."""
    _compare(name, target, run)


def _compare(name: str, target: str, run: str) -> None:
    """The layer (``run``: RUNS) without a change ran; with ``target`` changed it was refused where torch's
    was (apart from STRICTER, LAXER and, through the typed op, TYPED_STRICTER and TYPED_LAXER), else its
    gradients are those of the forward's values."""
    torch.manual_seed(0)
    _REFERENCE[name] = LAYERS[name][0](torch.nn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, _ = _step(torch.nn, name, target)
        ours, gradients = _step(dnn, name, target, run)
        unchanged, forward_gradients = _step(dnn, name, "none", run)
    assert unchanged == "ran"
    if (name, target) in STRICTER or (run == "typed" and (name, target) in TYPED_STRICTER):
        assert (theirs, ours) == ("ran", "raised")
    elif (name, target) in LAXER or (run == "typed" and (name, target) in TYPED_LAXER):
        assert (theirs, ours) == ("raised", "ran")
    else:
        assert ours == theirs
    if ours == "ran":
        for g, e in zip(gradients, forward_gradients):
            assert (g is None) == (e is None)
            if g is not None:
                torch.testing.assert_close(g, e)


#: compiled, the typed ops' training graphs and a Sequential's one run (dnnbind::sequence_training) save
#: what their backwards read, not a bias nor a batch norm's beta; a layer made with inplace=True on a
#: graph input (whose write reaches the input itself) gives its op a copy the compiler keeps
COMPILED = [("Conv2d", "x"), ("Conv2d", "weight"), ("Conv2d", "bias"), ("ConvTranspose2d", "bias"),
            ("BatchNorm2d", "weight"), ("BatchNorm2d", "bias"), ("BatchNorm2d-eval", "running_var"),
            ("LayerNorm", "bias"), ("ELU-inplace", "x"), ("SiLU-inplace", "x"), ("SiLU-inplace", "output 0"),
            ("ReLU-inplace", "x"), ("Dropout", "x"),
            *[("Sequential", target) for target in ("x", "1.weight", "1.bias", "2.weight", "2.bias", "output 0")]]


@pytest.mark.parametrize("name,target,run", [(name, target, "compiled") for name, target in COMPILED] + [
    (name, target, "compiled aot_eager") for name, target in (("Conv2d", "bias"), ("BatchNorm2d", "bias"),
                                                              ("Sequential", "1.bias"), ("Conv2d", "weight"))])
def test_a_compiled_call_refuses_an_in_place_change_where_torch_refuses_it(name, target, run):
    """torch.compile'd (inductor, and aot_eager, whose backward graph takes whatever the traced backward
    reads): refused where torch's own (eager) layer refuses it, otherwise the gradients are those of the
    forward's values."""
    _compare(name, target, run)


def test_a_fused_run_saves_its_input_its_weights_and_its_result_where_its_layers_read_them():
    """A Sequential run (one autograd node) saves what its layers' backwards read of the run's tensors:
    its input for the first convolution, the weights, a final ReLU's result; not a bias."""
    def run(target: str) -> str:
        torch.manual_seed(0)
        model = dnn.Sequential(dnn.Conv2d(3, 4, 3), dnn.BatchNorm2d(4), dnn.ReLU())
        x = torch.randn(IMAGE, requires_grad=True) * 1
        for _ in range(2):                   # the second call runs fused
            y = model(x)
        assert y.grad_fn.name() == "dnnbind_sequenceBackward"
        with torch.no_grad():
            {"x": x, "y": y, "weight": model[0].weight, "bias": model[0].bias, "gamma": model[1].weight,
             "beta": model[1].bias}[target].add_(1)
        try:
            y.sum().backward()
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e)
            return "raised"
        return "ran"
    assert {t: run(t) for t in ("x", "y", "weight", "bias", "gamma", "beta")} == {
        "x": "raised", "y": "raised", "weight": "raised", "bias": "ran", "gamma": "raised", "beta": "ran"}


def test_an_inference_tensor_is_refused_where_torch_saves_it():
    """An inference tensor cannot be saved for a backward: a convolution whose weight takes a gradient
    refuses it as x, as torch's does."""
    with torch.inference_mode():
        x = torch.randn(IMAGE)
    for nn in (torch.nn, dnn):
        for layer in (nn.Conv2d(3, 4, 3), nn.LayerNorm(6)):
            with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
                layer(x)


def test_two_batch_norm_forwards_then_one_backward_as_torch():
    """Batch norm's own update of its running statistics (saved for the backward, as torch's are) does not
    fail an earlier call's backward: the update leaves their version counters alone, as torch's does."""
    for nn in (torch.nn, dnn):
        torch.manual_seed(0)
        layer = nn.BatchNorm2d(3)
        versions = (layer.running_mean._version, layer.running_var._version)
        x = torch.randn(IMAGE, requires_grad=True)
        (layer(x).sum() + layer(x * 2).sum()).backward()
        assert (layer.running_mean._version, layer.running_var._version) == versions
        assert x.grad is not None


@pytest.mark.parametrize("make", [lambda nn: nn.ReLU(inplace=True), lambda nn: nn.ELU(inplace=True),
                                  lambda nn: nn.Dropout(0.5, inplace=True)], ids=["ReLU", "ELU", "Dropout"])
def test_in_place_layers_under_a_dispatch_mode(make):
    """Under a dispatch mode the call goes through the typed op, which saves x: a layer made with
    inplace=True runs it on a copy of x (its write into x would fail the version check), with torch's
    gradient."""
    grads = []
    for nn in (torch.nn, dnn):
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
        with FlopCounterMode(display=False):
            torch.manual_seed(0)
            h = x * 1
            y = make(nn)(h)
            assert y is h
            y.sum().backward()
        grads.append(x.grad)
    if isinstance(make(torch.nn), torch.nn.Dropout):    # (the masks differ: where x passes, 2; else 0)
        assert set(grads[1].unique().tolist()) <= {0.0, 2.0}
    else:
        torch.testing.assert_close(grads[1], grads[0])


def test_a_typed_call_refuses_a_changed_weight():
    """Through the typed op (a dispatch mode) the inputs its backward reads are saved: a weight changed in place
    is refused."""
    layer = dt.Conv2d(3, 4, 3)
    with FlopCounterMode(display=False):
        y = layer(torch.randn(IMAGE))
        with torch.no_grad():
            layer.weight.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


@pytest.mark.parametrize("make", [lambda: dnn.Dropout(0.5), lambda: dnn.Sequential(dnn.Dropout(0.5), dnn.Dropout(0.2)),
                                  lambda: dnn.Softmax(1), lambda: dnn.Conv1d(2, 2, 1)],
                         ids=["dropout", "fused-dropouts", "softmax", "conv"])
def test_a_second_backward_without_retain_graph_is_refused_as_torchs(make):
    """Autograd frees what a node saved after its backward: a second one through it is refused, also where
    the op's backward reads none of the call's tensors (dropout's mask is a residual array: it saves a
    placeholder); with retain_graph the gradients add up."""
    model = make()
    x = torch.randn(3, 2, 4, requires_grad=True)
    model(x)                                  # (a Sequential's second call runs fused)
    torch.manual_seed(0)
    loss = (model(x) * torch.linspace(0, 1, 24).view(3, 2, 4)).sum()
    loss.backward(retain_graph=True)
    once = x.grad.clone()
    loss.backward()
    torch.testing.assert_close(x.grad, 2 * once)
    torch.manual_seed(0)
    loss = (model(x) * 2).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def _residuals_of(node: Any) -> list[Any]:
    """The backend's residual arrays a dnnbind node keeps (an eager call's, or a fused run's steps')."""
    if hasattr(node, "residual_arrays"):
        return list(node.residual_arrays)
    return [r for step in node.residuals for r in step]


def _own_bytes(node: Any, kept: list[torch.Tensor]) -> int:
    """The bytes of the node's residual arrays that are not views of a tensor autograd keeps anyway."""
    views = [t.detach().numpy() for t in kept]
    return sum(r.nbytes for r in _residuals_of(node) if not any(np.shares_memory(r, v) for v in views))


#: layers whose backward reads x, a parameter or the result, as torch's own layer does: a training forward
#: keeps those tensors themselves (guarded by autograd's version check), no copy of them
KEEPING = [name for name in SINGLE if not name.endswith("-inplace") and LAYERS[name][1] == IMAGE
           and not name.startswith(("MaxPool", "AvgPool", "Dropout"))]


@pytest.mark.parametrize("name", KEEPING)
def test_a_training_forward_keeps_no_copy_of_its_tensors(name):
    """What the backend keeps for the backward of a layer's training call: the tensors autograd keeps
    anyway (x, the parameters, the result), never a copy of them, as torch's own layers keep theirs; at
    most per-channel or per-row statistics of its own (batch norm's, layer norm's), far smaller than x."""
    make, _ = LAYERS[name]
    layer = make(dnn)
    x = torch.randn(8, 3, 32, 6, requires_grad=True) * 1       # (LayerNorm(6): its last dim)
    y = layer(x)
    node = y.grad_fn
    assert _own_bytes(node, [x, y, *layer.parameters()]) < x.numel() * x.element_size() // 2


class _TrainingOps(TorchDispatchMode):
    """Records the residuals every typed training op returns (what a compiled graph keeps of them)."""

    def __init__(self) -> None:
        super().__init__()
        self.residuals: list[torch.Tensor] = []
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace == "dnnbind" and func._opname.endswith("_training"):
            self.ops.append(func._opname)
            self.residuals += out[1]
        return out


@pytest.mark.parametrize("name", KEEPING)
def test_a_typed_training_op_returns_no_copy_of_its_tensors(name):
    """A typed training op (what torch.compile's graphs and a dispatch mode run) returns no residual that is
    the value of x, a parameter or the result: autograd keeps those and its pullback takes them in their
    places. At most per-channel or per-row statistics of its own, and the gradients the eager call gives."""
    make, _ = LAYERS[name]
    grads = []
    for recorded in (False, True):
        torch.manual_seed(0)
        layer = make(dnn)
        x = torch.randn(8, 3, 32, 6, requires_grad=True)
        mode = _TrainingOps()
        with mode if recorded else contextlib.nullcontext():
            y = layer(x * 1)
        y.square().sum().backward()
        grads.append([x.grad, *[p.grad for p in layer.parameters()]])
    assert len(mode.ops) == 1
    assert sum(r.numel() * r.element_size() for r in mode.residuals) < x.numel() * x.element_size() // 2
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def test_a_fused_run_keeps_no_copy_of_its_layers_arrays():
    """A Sequential run keeps each layer's input and result once, as the layers' own calls do."""
    model = dnn.Sequential(dnn.Conv2d(3, 8, 3, padding=1), dnn.BatchNorm2d(8), dnn.ReLU(), dnn.Conv2d(8, 8, 3, padding=1),
                           dnn.Tanh())
    x = torch.randn(8, 3, 16, 16, requires_grad=True) * 1
    for _ in range(2):                   # the second call runs fused
        y = model(x)
    assert y.grad_fn.name() == "dnnbind_sequenceBackward"
    # the run's arrays between its layers are its own: each kept once (a convolution's input, batch norm's
    # input, relu's and tanh's results), plus batch norm's per-channel statistics
    residuals = _residuals_of(y.grad_fn)
    distinct = {(r.__array_interface__["data"][0], r.shape) for r in residuals}
    assert len(distinct) == len(residuals) - 1       # the second convolution's input is relu's result
    big = [r for r in residuals if r.size >= x.numel()]
    assert sum(r.nbytes for r in big) <= 5 * y.numel() * y.element_size()


def _keeps_input(nn: Any, name: str) -> bool:
    """Whether a training call of the layer keeps its input alive (nothing else holds it)."""
    make, shape = LAYERS[name]
    torch.manual_seed(0)
    layer = make(nn)
    x = torch.randn(shape, requires_grad=True)
    h = x * 2                              # (MulBackward0 of a constant keeps nothing of h)
    out = layer(h)
    held = weakref.ref(h)
    del h
    gc.collect()
    kept = held() is not None
    del out
    return kept


NOT_INPLACE = [name for name in SINGLE if not name.endswith("-inplace")]


@pytest.mark.parametrize("name", NOT_INPLACE)
def test_a_training_call_keeps_its_input_alive_where_torchs_layer_does(name):
    """A layer whose backward reads its result alone (ReLU, Sigmoid, Tanh, Softmax, Dropout) lets its
    input go, as torch's does: a create_graph backward then differentiates through the result; the
    others keep it, as torch's do."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _keeps_input(dnn, name) == _keeps_input(torch.nn, name)


@pytest.mark.parametrize("name", ["Sigmoid", "Tanh", "Softmax", "LogSoftmax"])
def test_a_typed_call_whose_backward_reads_its_result_keeps_no_input(name):
    """Its typed training op (compiled graphs, dispatch modes) keeps the result in x's place: x changed in
    place after the forward is no error, as for torch's layer, and a second derivative differentiates the
    spec's rule written on the result, giving torch's."""
    make, _ = LAYERS[name]
    found = []
    for nn in (torch.nn, dnn):
        x = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0), requires_grad=True)
        h = x * 1
        mode = _TrainingOps()
        with mode if nn is dnn else contextlib.nullcontext():
            y = make(nn)(h)
        assert nn is torch.nn or mode.ops
        with torch.no_grad():
            h.add_(1)
        weights = torch.linspace(-1, 1, y.numel(), dtype=torch.float64).reshape(y.shape)
        (g,) = torch.autograd.grad((y * weights).sum(), x, create_graph=True)
        (gg,) = torch.autograd.grad(g.square().sum(), x)
        found.append((g, gg))
        assert _keeps_input(nn, name) is False
    torch.testing.assert_close(found[1], found[0])
