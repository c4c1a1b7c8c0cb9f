"""dnnbind.torch.nn.Sequential: consecutive dnnbind layers as one autograd node, with exactly the results,
gradients and state updates of the same layers run one by one, and the layers one by one wherever
something could see the difference (hooks, subclasses, unplanned calls, unbatched input, tracers)."""
from __future__ import annotations

import copy

import pytest
import torch

from dnnbind.torch import eager, fused
from dnnbind.torch import nn as dnn
from dnnbind.torch import sequential
from dnnbind.torch.sequential import FUSABLE, Sequential

SEQUENCE = "dnnbind_sequenceBackward"


def _per_layer(model: Sequential) -> torch.nn.Sequential:
    """The same layers (copies) in torch's own container, which calls them one by one."""
    twin = copy.deepcopy(model)
    twin.__class__ = torch.nn.Sequential
    return twin


def _step(model: torch.nn.Module, x: torch.Tensor, seed: int) -> tuple:
    """(output, x's gradient, the parameters' gradients) of one forward and backward."""
    model.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(x.requires_grad)
    out = model(x)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    out.backward(cotangent)
    return out.detach(), x.grad, [None if p.grad is None else p.grad.clone() for p in model.parameters()], out.grad_fn


def _same_step(model: torch.nn.Module, twin: torch.nn.Module, x: torch.Tensor, seed: int) -> tuple:
    """:func:`_step` of both models, whose outputs and gradients must agree bit for bit (the same backend
    calls); returns model's."""
    ours, theirs = _step(model, x, seed), _step(twin, x, seed)
    for a, b in zip(ours[:3], theirs[:3]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    return ours


@pytest.fixture(autouse=True)
def no_plans(monkeypatch) -> None:
    """Each test starts without the eager plans an earlier one left (a first call then plans)."""
    monkeypatch.setattr(eager._CACHE, "entries", {})


@pytest.fixture
def runs(monkeypatch) -> list[int]:
    """The number of layers of each fused run."""
    calls: list[int] = []
    original = fused.run
    monkeypatch.setattr(fused, "run", lambda planned, x: calls.append(len(planned)) or original(planned, x))
    return calls


MODELS = {
    "conv-bn-relu-pool": (lambda: dnn.Sequential(dnn.Conv2d(3, 6, 3, padding=1), dnn.BatchNorm2d(6), dnn.ReLU(),
                                                 dnn.MaxPool2d(2), dnn.Conv2d(6, 4, 3, stride=2, padding=1),
                                                 dnn.BatchNorm2d(4), dnn.Tanh()), (4, 3, 10, 10), 7),
    "1d": (lambda: dnn.Sequential(dnn.Conv1d(2, 4, 3, padding="same", bias=False), dnn.BatchNorm1d(4, momentum=0.3),
                                  dnn.LeakyReLU(0.2), dnn.AvgPool1d(2, ceil_mode=True), dnn.ELU(0.5),
                                  dnn.Softmax(dim=1)), (3, 2, 9), 6),
    "3d": (lambda: dnn.Sequential(dnn.Conv3d(2, 3, 2, dilation=1, groups=1), dnn.SiLU(), dnn.MaxPool3d(2, ceil_mode=True),
                                  dnn.Sigmoid(), dnn.AvgPool3d(1), dnn.ReLU6(), dnn.Hardtanh(0.0, 0.5),
                                  dnn.LogSoftmax(dim=1)), (2, 2, 5, 5, 5), 8),
    "transposed": (lambda: dnn.Sequential(dnn.ConvTranspose2d(3, 4, 3, stride=2, output_padding=1), dnn.BatchNorm2d(4),
                                          dnn.ReLU(), dnn.ConvTranspose2d(4, 2, 2, stride=2, groups=2, bias=False),
                                          dnn.Sigmoid()), (2, 3, 5, 5), 5),
    "transposed-3d": (lambda: dnn.Sequential(dnn.ConvTranspose3d(2, 2, 2, dilation=2), dnn.ELU()), (1, 2, 3, 3, 3), 2),
    "grouped": (lambda: dnn.Sequential(dnn.Conv2d(4, 4, 3, groups=4), dnn.BatchNorm2d(4, track_running_stats=False),
                                       dnn.ReLU(), dnn.Conv2d(4, 2, 1)), (2, 4, 6, 6), 4),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_fused_run_equals_the_layers_one_by_one(name, dtype, runs):
    make, shape, layers = MODELS[name]
    torch.manual_seed(0)
    model = make().to(dtype)
    twin = _per_layer(model)
    x = torch.randn(shape, dtype=dtype, requires_grad=True)
    for step in range(3):                      # the first call plans, the later ones run fused
        ours = _same_step(model, twin, x, step)
        assert (type(ours[3]).__name__ == SEQUENCE) == (step > 0)
        for (key, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
            assert torch.equal(a, b), key      # running statistics and num_batches_tracked too
    assert runs == [layers, layers]


def test_frozen_parameters_and_inputs_without_gradient_get_none(runs):
    torch.manual_seed(0)
    model = dnn.Sequential(dnn.Conv2d(2, 3, 3), dnn.BatchNorm2d(3), dnn.ReLU(), dnn.Conv2d(3, 2, 3))
    model[0].weight.requires_grad_(False)
    model[1].bias.requires_grad_(False)
    twin = _per_layer(model)
    x = torch.randn(2, 2, 8, 8)                 # no gradient for x
    for step in range(2):
        ours, theirs = _step(model, x, step), _step(twin, x, step)
        assert ours[1] is None and theirs[1] is None
        for a, b in zip(ours[2], theirs[2]):
            assert (a is None) == (b is None)
            if a is not None:
                assert torch.equal(a, b)
    assert [p.grad is None for p in model.parameters()] == [True, False, False, True, False, False]
    assert runs == [4]


def test_only_the_gradients_asked_for_are_computed(runs):
    """torch.autograd.grad for one parameter in the middle: the steps before it are not run backward."""
    torch.manual_seed(0)
    model = dnn.Sequential(dnn.Conv2d(2, 3, 3), dnn.ReLU(), dnn.Conv2d(3, 3, 3), dnn.ReLU())
    x = torch.randn(1, 2, 9, 9, requires_grad=True)
    model(x)
    out = model(x)
    assert type(out.grad_fn).__name__ == SEQUENCE
    (dw,) = torch.autograd.grad(out.sum(), [model[2].weight])
    twin = _per_layer(model)
    (expected,) = torch.autograd.grad(twin(x).sum(), [twin[2].weight])
    assert torch.equal(dw, expected)


def test_eval_mode_and_no_grad_run_fused_without_saving(runs):
    torch.manual_seed(0)
    model = dnn.Sequential(dnn.Conv2d(3, 4, 3), dnn.BatchNorm2d(4), dnn.ReLU(), dnn.MaxPool2d(2)).eval()
    twin = _per_layer(model)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        for _ in range(2):
            out = model(x)
            assert out.grad_fn is None and torch.equal(out, twin(x))
    assert runs == [4]
    assert int(model[1].num_batches_tracked) == 0


def test_a_retained_graph_runs_backward_again():
    model = dnn.Sequential(dnn.Conv2d(1, 2, 3), dnn.Tanh())
    x = torch.randn(1, 1, 5, 5, requires_grad=True)
    model(x)
    out = model(x)
    assert type(out.grad_fn).__name__ == SEQUENCE
    first = torch.autograd.grad(out.sum(), [x, model[0].weight], retain_graph=True)
    again = torch.autograd.grad(out.sum(), [x, model[0].weight], retain_graph=True)
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def _penalty(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A gradient penalty: the squared norm of d(sum(y^2))/dx, built with create_graph."""
    (dx,) = torch.autograd.grad(model(x).square().sum(), x, create_graph=True)
    return dx.square().sum()


def test_second_derivatives_through_a_fused_run_equal_torchs():
    """A create_graph backward through a fused run is differentiable again (the layers' typed ops run
    once more, each by its second-order rule): a gradient penalty's gradients equal torch's layers',
    and batch norm's running statistics are updated once per forward, not again by that backward."""
    torch.manual_seed(0)
    model = dnn.Sequential(dnn.Conv2d(2, 3, 3, padding=1), dnn.BatchNorm2d(3), dnn.Tanh(), dnn.MaxPool2d(2),
                           dnn.Conv2d(3, 2, 3)).double()
    theirs = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.BatchNorm2d(3), torch.nn.Tanh(),
                                 torch.nn.MaxPool2d(2), torch.nn.Conv2d(3, 2, 3)).double()
    theirs.load_state_dict(model.state_dict())
    x = torch.randn(2, 2, 6, 6, dtype=torch.float64, requires_grad=True)
    for m in (model, theirs):
        m(x)                                          # plans the run (dnnbind) / the same update (torch)
    assert type(model(x).grad_fn).__name__ == SEQUENCE
    theirs(x)
    ours_value, their_value = _penalty(model, x), _penalty(theirs, x)
    torch.testing.assert_close(ours_value, their_value)
    wrt = [x, model[0].weight, model[1].weight, model[4].bias]
    ours = torch.autograd.grad(ours_value, wrt)
    expected = torch.autograd.grad(their_value, [x, theirs[0].weight, theirs[1].weight, theirs[4].bias])
    for a, b in zip(ours, expected):
        torch.testing.assert_close(a, b)
    for (name, a), b in zip(model.state_dict().items(), theirs.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)


def _fused_twice(model: torch.nn.Module, x: torch.Tensor) -> bool:
    """Whether the second call ran a fused node."""
    model(x)
    return type(model(x).grad_fn).__name__ == SEQUENCE


def test_hooks_on_a_layer_or_global_ones_run_the_layers_one_by_one():
    x = torch.randn(1, 1, 6, 6, requires_grad=True)
    model = dnn.Sequential(dnn.Conv2d(1, 2, 3), dnn.ReLU(), dnn.MaxPool2d(2))
    seen: list[str] = []
    handle = model[1].register_forward_hook(lambda m, i, o: seen.append("relu"))
    assert not _fused_twice(model, x) and seen == ["relu", "relu"]
    handle.remove()
    handle = model[1].register_full_backward_hook(lambda m, gi, go: None)
    assert not _fused_twice(model, x)
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, i: seen.append(type(m).__name__))
    try:
        assert not _fused_twice(model, x) and "Conv2d" in seen
    finally:
        handle.remove()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        assert not _fused_twice(model, x)
    assert _fused_twice(model, x)


def test_anomaly_mode_runs_the_layers_one_by_one_and_names_the_layer():
    """torch.autograd.detect_anomaly names the node whose backward returned a NaN: the layer's, as for
    torch's own layers, not the run's."""
    model = dnn.Sequential(dnn.Conv2d(3, 3, 1), dnn.ReLU(), dnn.LogSoftmax(dim=1))
    model(torch.randn(2, 3, 4, 4))
    x = torch.randn(2, 3, 4, 4)
    x[0, 0, 0, 0] = float("inf")
    x.requires_grad_()
    with torch.autograd.detect_anomaly(check_nan=True):
        y = model(x)
        assert type(y.grad_fn).__name__ != SEQUENCE
        with pytest.raises(RuntimeError, match="Function 'dnnbind_logsoftmaxBackward' returned nan"):
            y.sum().backward()
    assert _fused_twice(model, torch.randn(2, 3, 4, 4, requires_grad=True))


def test_subclasses_replaced_forwards_and_other_modules_split_the_runs(runs):
    class MyReLU(dnn.ReLU):
        def forward(self, input):
            return super().forward(input) * 2

    x = torch.randn(1, 1, 8, 8, requires_grad=True)
    model = dnn.Sequential(dnn.Conv2d(1, 2, 3), dnn.ReLU(), MyReLU(), dnn.Conv2d(2, 2, 3), dnn.Dropout(0.0),
                           dnn.Conv2d(2, 1, 1), dnn.Sigmoid(), torch.nn.Flatten(), dnn.ReLU())
    model[3].forward = lambda input: torch.zeros(1)          # an instance's own forward: never skipped
    with pytest.raises(ValueError, match="got input of shape"):
        model(x)                                             # (zeros(1) does not fit the next conv)
    del model[3].forward
    twin = _per_layer(model)
    model(x)
    runs.clear()
    torch.testing.assert_close(model(x), twin(x), rtol=0, atol=0)
    assert runs == [2, 2]                                    # conv-relu, conv-sigmoid
    assert len(FUSABLE) == 25


def test_unplanned_calls_and_unbatched_input_run_one_by_one(runs):
    torch.manual_seed(0)
    model = dnn.Sequential(dnn.Conv2d(1, 2, 3), dnn.BatchNorm2d(2), dnn.ReLU())
    model(torch.randn(2, 1, 6, 6))
    twin = _per_layer(model)
    model.eval()                                   # another batch norm call: planned by this first call
    twin.eval()
    x = torch.randn(2, 1, 6, 6)
    assert torch.equal(model(x), twin(x)) and runs == []
    assert torch.equal(model(x), twin(x)) and runs == [3]
    other = torch.randn(3, 1, 7, 7)                # another shape: planned first
    assert torch.equal(model(other), twin(other)) and runs == [3]
    flat = dnn.Sequential(dnn.Conv1d(1, 2, 3), dnn.ReLU())
    one = torch.randn(1, 7)                        # one unbatched sample: the layers' own forward
    flat(one)
    assert flat(one).shape == (2, 5) and runs == [3]


def test_the_cumulative_average_runs_one_by_one_and_counts(runs):
    model = dnn.Sequential(dnn.Conv2d(1, 2, 3), dnn.BatchNorm2d(2, momentum=None), dnn.ReLU())
    twin = _per_layer(model)
    x = torch.randn(2, 1, 5, 5)
    for _ in range(3):
        assert torch.equal(model(x), twin(x))
    assert runs == [] and int(model[1].num_batches_tracked) == 3
    assert torch.equal(model[1].running_mean, twin[1].running_mean)


def test_a_layer_whose_settings_do_not_fuse_splits_the_run_around_it(runs):
    """A batch norm without affine parameters or with the cumulative average, a convolution padding through
    torch, max pooling with indices: each runs on its own, and the layers before and after it still run
    fused, in eager mode and as sequence ops in a compiled graph."""
    torch.manual_seed(0)
    model = dnn.Sequential(dnn.Conv2d(1, 2, 3), dnn.ReLU(), dnn.BatchNorm2d(2, affine=False),
                           dnn.Conv2d(2, 2, 3, padding=1, padding_mode="reflect"), dnn.Conv2d(2, 2, 1),
                           dnn.BatchNorm2d(2, momentum=None), dnn.ReLU(), dnn.MaxPool2d(2),
                           dnn.MaxPool2d(1, return_indices=True)).double()
    twin = _per_layer(model)
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    for _ in range(3):                                 # planned, then fused
        y, indices = model(x)
        expected, expected_indices = twin(x)
        torch.testing.assert_close(y, expected, rtol=0, atol=0)
        assert torch.equal(indices, expected_indices)
    assert runs[-2:] == [2, 2]                         # conv-relu, relu-maxpool
    del model[5]                                       # (the cumulative average does not compile, as torch's)
    twin = _per_layer(model)
    graphs = []
    aot_eager = torch._dynamo.lookup_backend("aot_eager")
    compiled = torch.compile(model, backend=lambda gm, inputs: graphs.append(gm.code) or aot_eager(gm, inputs),
                             fullgraph=True)
    torch.testing.assert_close(compiled(x)[0], twin(x)[0])
    runs = [line for line in graphs[0].splitlines() if "torch.ops.dnnbind.sequence" in line]
    assert [run.count('{"op": ') for run in runs] == [2, 3]        # conv-relu, conv-relu-maxpool


def test_it_is_torchs_container_with_the_same_state_dict_and_repr():
    ours = dnn.Sequential(dnn.Conv2d(1, 2, 3), dnn.ReLU())
    theirs = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU())
    assert isinstance(ours, torch.nn.Sequential) and repr(ours) == repr(theirs)
    theirs.load_state_dict(ours.state_dict())
    ours.load_state_dict(theirs.state_dict())
    assert type(ours[0:1]) is Sequential and list(ours.state_dict()) == list(theirs.state_dict())


def test_a_layer_used_twice_gets_both_gradients(runs):
    torch.manual_seed(0)
    conv = dnn.Conv2d(2, 2, 3, padding=1)
    model = dnn.Sequential(conv, dnn.ReLU(), conv, dnn.BatchNorm2d(2))
    twin = _per_layer(model)
    x = torch.randn(2, 2, 5, 5, requires_grad=True)
    for step in range(2):
        _same_step(model, twin, x, step)
    assert runs == [4] and int(model[3].num_batches_tracked) == 2


def test_inference_mode_runs_fused(runs):
    model = dnn.Sequential(dnn.Conv2d(1, 2, 3), dnn.BatchNorm2d(2), dnn.ReLU())
    twin = _per_layer(model)
    x = torch.randn(2, 1, 6, 6)
    with torch.inference_mode():
        for _ in range(2):
            assert torch.equal(model(x), twin(x))
    assert runs == [3] and torch.equal(model[1].running_var, twin[1].running_var)


def test_a_batch_norm_called_twice_updates_statistics_that_are_copies(runs):
    """Running statistics that are not contiguous cross as copies: the layer's second call in the run
    reads the copy its first call updated, and both updates reach the tensors, as one by one."""
    torch.manual_seed(0)
    bn = dnn.BatchNorm2d(3)
    bn.running_mean = torch.zeros(6)[::2]
    bn.running_var = torch.ones(6)[::2]
    model = dnn.Sequential(bn, dnn.ReLU(), bn)
    twin = _per_layer(model)
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    for step in range(3):
        _same_step(model, twin, x, step)
        torch.testing.assert_close(bn.running_mean, twin[0].running_mean, rtol=0, atol=0)
        torch.testing.assert_close(bn.running_var, twin[0].running_var, rtol=0, atol=0)
    assert not bn.running_mean.is_contiguous() and runs == [3, 3]


def _changes() -> list:
    """Changes to a planned run's layers (conv, batch norm, relu, max pool) after which its next call
    must be what the layers one by one give: each either plans the run again or runs it one by one."""
    def replace_weight(model):
        model[0].weight = torch.nn.Parameter(torch.randn_like(model[0].weight))

    def register_bias(model):                        # past Module.__setattr__: the parameter dict itself
        model[0].register_parameter("bias", torch.nn.Parameter(torch.randn(3)))

    def new_weight_data(model):                      # the same Parameter, other values
        model[0].weight.data = torch.randn_like(model[0].weight)

    def swap_layer(model):
        model[2] = dnn.Tanh()

    def insert_layer(model):
        model.insert(2, dnn.Sigmoid())

    def raw_setting(model):                          # object.__setattr__: no Module bookkeeping at all
        object.__setattr__(model[3], "stride", (1, 1))

    def hook(model):
        model[2].register_forward_hook(lambda m, i, o: o * 2)

    def list_setting_in_place(model):                # the same list object, other contents
        model[3].stride[1] = 1

    return [lambda m: setattr(m[0], "padding", (2, 2)), lambda m: m.eval(), lambda m: setattr(m[1], "momentum", 0.5),
            lambda m: setattr(m[1], "momentum", None), lambda m: m[1].reset_running_stats(), replace_weight,
            register_bias, new_weight_data, swap_layer, insert_layer, raw_setting, hook,
            lambda m: m.double(), list_setting_in_place]


@pytest.mark.parametrize("change", range(len(_changes())))
def test_a_planned_run_sees_every_change_to_its_layers(change, runs):
    torch.manual_seed(0)
    model = dnn.Sequential(dnn.Conv2d(2, 3, 3, padding=1, bias=False), dnn.BatchNorm2d(3), dnn.ReLU(),
                           dnn.MaxPool2d(2, stride=[2, 2]))
    x = torch.randn(2, 2, 8, 8)
    for seed in range(3):                            # planned, then run fused from the remembered steps
        model(x)
    assert runs == [4, 4]
    _changes()[change](model)
    if next(model.parameters()).dtype == torch.float64:
        x = x.double()
    twin = _per_layer(model)
    for seed in range(3):
        _same_step(model, twin, x, seed)
    for (key, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert torch.equal(a, b), key


def test_planned_runs_are_remembered_per_input_shape(runs):
    model = dnn.Sequential(dnn.Conv2d(1, 2, 3), dnn.ReLU())
    twin = _per_layer(model)
    shapes = [(4, 1, 6, 6), (3, 1, 6, 6)]             # a last batch smaller than the others
    for _ in range(3):
        for shape in shapes:
            x = torch.randn(shape)
            torch.testing.assert_close(model(x), twin(x), rtol=0, atol=0)
    assert runs == [2, 2, 2, 2]
    assert len(sequential._PLANNED[model]) == 2
