"""dnnbind.torch.symbolic: shapes computed with ints, kept symbolic where the input sizes are."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

from dnnbind.torch import symbolic


def _fake(shape, dynamic):
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env, static_shapes=False)
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC if d else DimDynamic.STATIC
                                                      for d in dynamic])
    return mode.from_tensor(torch.empty(shape), symbolic_context=context), env


def test_affine_sizes_stay_symbolic_without_a_guard():
    x, env = _fake((4, 3, 5), (True, False, True))
    n, length = x.shape[0], x.shape[2]
    calls = []

    def evaluate(size_of):
        a, c, b = size_of(x)
        calls.append((a, b))
        return [(2 * a + 1, c), None, (a * b, 7)]

    (first, second), nothing, (rows, seven) = symbolic.shapes(evaluate, [x])
    assert nothing is None and second == 3 and seven == 7
    assert isinstance(first, torch.SymInt) and first.node.expr == (2 * n + 1).node.expr
    assert rows.node.expr == (n * length).node.expr
    assert len(calls) == 5 + len(symbolic.FAR) and (4, 5) in calls     # four corners, a check, the far ones
    assert not env.guards                                   # nothing specialized


def test_a_size_that_is_not_affine_is_specialized():
    x, env = _fake((4, 3), (True, False))
    shape = symbolic.shapes(lambda size_of: [(size_of(x)[0] ** 2,)], [x])
    assert shape == [(16,)] and env.guards                  # torch's guard on the example's size


def test_concrete_sizes_are_evaluated_once():
    calls = []
    assert symbolic.shapes(lambda size_of: calls.append(1) or [size_of(torch.empty(2, 3))], [None]) == [(2, 3)]
    assert calls == [1]


def test_a_floor_divided_size_stays_symbolic_without_a_guard():
    """A strided output length, (h + 2p - k) // s + 1, is quasi-affine in h: kept symbolic (torch's floor
    division), found from a run of sizes, and checked where every symbol moves at once."""
    x, env = _fake((4, 3, 9, 11), (True, False, True, True))
    n, h, w = x.shape[0], x.shape[2], x.shape[3]

    def evaluate(size_of):
        a, c, b, d = size_of(x)
        return [(a, c, (b + 2 - 3) // 2 + 1, -(-(d - 2) // 3) + 1), (a * c, 5)]

    (batch, channels, height, width), (rows, five) = symbolic.shapes(evaluate, [x])
    assert channels == 3 and five == 5 and batch.node.expr == n.node.expr
    assert rows.node.expr == (3 * n).node.expr
    for size, symbol, formula in ((height, h, lambda v: (v - 1) // 2 + 1), (width, w, lambda v: -(-(v - 2) // 3) + 1)):
        assert size.node.expr.free_symbols == {symbol.node.expr}
        assert all(size.node.expr.subs(symbol.node.expr, v) == formula(v) for v in range(3, 60))
    assert (int(height.node.hint), int(width.node.hint)) == (5, 4)
    assert not env.guards


@pytest.mark.parametrize("stride, example", [(3, 224), (16, 224), (64, 256), (1000, 3000), (2000, 3000)])
def test_a_size_that_steps_only_every_few_sizes_is_never_taken_for_a_constant(stride, example):
    """A patch embedding's output length, (h - s) // s + 1, is the same at h, h + 1 and h + 2 for a stride
    of 3 or more: kept symbolic where it steps twice within the last far offset of the example, else
    specialized (a guard), never written as the example's constant."""
    x, env = _fake((2, example), (False, True))
    h = x.shape[1]
    calls = []

    def evaluate(size_of):
        calls.append(1)
        return [((size_of(x)[1] - stride) // stride + 1,)]

    [(size,)] = symbolic.shapes(evaluate, [x])
    if 2 * stride <= symbolic.FAR[-1] + (example - stride) % stride:
        assert isinstance(size, torch.SymInt) and not env.guards
        assert all(size.node.expr.subs(h.node.expr, v) == (v - stride) // stride + 1
                   for v in range(stride, 5 * stride, max(1, stride // 50)))
    else:
        assert size == (example - stride) // stride + 1 and env.guards
    assert len(calls) < 60                       # bisection, not a run of every size


def test_a_size_moving_with_two_symbols_not_multilinearly_is_specialized():
    x, env = _fake((4, 6), (True, True))
    shape = symbolic.shapes(lambda size_of: [((size_of(x)[0] + size_of(x)[1]) // 2,)], [x])
    assert shape == [(5,)] and env.guards


SPATIAL = {
    "maxpool": lambda nn: nn.MaxPool2d(2),
    "maxpool_ceil_indices": lambda nn: nn.MaxPool2d(3, 2, 1, ceil_mode=True, return_indices=True),
    "avgpool": lambda nn: nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
    "conv_strided": lambda nn: nn.Conv2d(3, 4, 3, stride=2, padding=1, dilation=2),
    "conv1d_pool": lambda nn: nn.Sequential(nn.Conv1d(3, 4, 5, stride=3), nn.ReLU(), nn.MaxPool1d(3)),
}


@pytest.mark.parametrize("make, example, others", [
    (lambda nn: nn.Conv2d(3, 4, 16, stride=16), 224, (256, 240, 32)),        # a ViT's patch embedding
    (lambda nn: nn.Conv2d(3, 4, 64, stride=64), 256, (320, 448, 128)),
    (lambda nn: nn.MaxPool2d(3), 9, (12, 13, 20, 6)),
    (lambda nn: nn.AvgPool2d(4, 3, padding=2, ceil_mode=True), 9, (10, 17, 30, 6)),
], ids=["patch16", "patch64", "maxpool3", "avgpool_ceil"])
def test_strided_layers_whose_size_steps_past_the_example_give_torchs_shapes(make, example, others):
    """A stride of 3 or more (the output length equal at the example's height and the next two): export
    (heights from the last of ``others``, where the output is 2 long: torch's symbolic sizes treat 1
    apart) and compile(dynamic=True) give torch's results at other heights, never the example's length."""
    from dnnbind.torch import nn as dnn
    from torch.export import Dim
    torch.manual_seed(0)
    ours, theirs = make(dnn).double(), make(torch.nn).double()
    ours.load_state_dict(theirs.state_dict())
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: ours(x).flatten(2), backend="aot_eager", dynamic=True, fullgraph=True)
    program = torch.export.export(ours, (torch.randn(1, 3, example, example, dtype=torch.float64),),
                                  dynamic_shapes=({2: Dim("height", min=others[-1], max=512)},))
    for height in (example, *others):
        x = torch.randn(1, 3, height, example, dtype=torch.float64)
        torch.testing.assert_close(compiled(x), theirs(x).flatten(2))
        torch.testing.assert_close(program.module()(x), theirs(x))


def _spatial_twins(name):
    from dnnbind.torch import nn as dnn
    torch.manual_seed(0)
    ours, theirs = SPATIAL[name](dnn).double(), SPATIAL[name](torch.nn).double()
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs, 1 if name == "conv1d_pool" else 2


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name", sorted(SPATIAL))
def test_exported_pooling_and_strided_layers_keep_spatial_sizes_dynamic(name):
    """torch.export with dynamic heights and widths: one program for every size, equal to torch's layer."""
    from torch.export import Dim
    ours, theirs, rank = _spatial_twins(name)
    # (conv1d_pool's output is 1 long at 16 and 17, which torch's symbolic sizes treat apart: from 20)
    low = 20 if name == "conv1d_pool" else 16
    sizes = {0: Dim("batch")} | {2 + k: Dim(f"size{k}", min=low, max=64) for k in range(rank)}
    program = torch.export.export(ours, (torch.randn(2, 3, *[20] * rank, dtype=torch.float64),),
                                  dynamic_shapes=(sizes,))
    for shape in ((3, 3, *[23, 17][:rank]), (1, 3, *[40, 31][:rank])):
        x = torch.randn(*shape, dtype=torch.float64)
        torch.testing.assert_close(_first(program.module()(x)), _first(theirs(x)))


@pytest.mark.parametrize("name", sorted(SPATIAL))
def test_compile_dynamic_runs_several_spatial_sizes_without_recompiling(name):
    """torch.compile(dynamic=True) over images of several sizes: one graph, forward and backward equal to
    torch's layer."""
    from torch._dynamo.testing import CompileCounter
    torch._dynamo.reset()
    ours, theirs, rank = _spatial_twins(name)
    counter = CompileCounter()
    step = torch.compile(lambda m, x: _first(m(x)).sum(), backend=counter, dynamic=True, fullgraph=True)
    for size in (16, 19, 24, 33):
        x = torch.randn(2, 3, *[size, size + 5][:rank], dtype=torch.float64, requires_grad=True)
        x_theirs = x.detach().clone().requires_grad_(True)
        step(ours, x).backward()
        _first(theirs(x_theirs)).sum().backward()
        torch.testing.assert_close(x.grad, x_theirs.grad)
    assert counter.frame_count == 1


VOLUMETRIC = {
    "conv3d": lambda nn: nn.Conv3d(2, 3, 3, padding=1),
    "batchnorm3d": lambda nn: nn.BatchNorm3d(2).eval(),
    "maxpool3d": lambda nn: nn.MaxPool3d(2),
    "avgpool3d": lambda nn: nn.AvgPool3d(2),
    "relu": lambda nn: nn.ReLU(),
    "softmax": lambda nn: nn.Softmax(1),
}


@pytest.mark.parametrize("name", sorted(VOLUMETRIC))
def test_five_symbolic_sizes_stay_symbolic(name):
    """A 5-d input whose batch, depth, height and width (and, past an op reading no channel count, channels)
    all vary: torch.compile(dynamic=True) compiles the graphs torch's layer does, and torch.export keeps
    every dim dynamic that torch's does (channels free only where the op takes any)."""
    from torch._dynamo.testing import CompileCounter
    from torch.export import Dim
    from dnnbind.torch import nn as dnn
    torch.manual_seed(0)
    ours, theirs = VOLUMETRIC[name](dnn).double(), VOLUMETRIC[name](torch.nn).double()
    ours.load_state_dict(theirs.state_dict())
    counts = []
    for model in (ours, theirs):
        torch._dynamo.reset()
        counter = CompileCounter()
        compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
        for k in range(4):
            x = torch.randn(2 + k, 2, 12 + k, 13 + 2 * k, 14 + 3 * k, dtype=torch.float64)
            torch.testing.assert_close(compiled(x), theirs(x))
        counts.append(counter.frame_count)
    assert counts[0] == counts[1]
    free = name in ("relu", "softmax")
    dims = {i: Dim(f"d{i}", min=2 if i < 2 else 4, max=64) for i in range(5) if free or i != 1}
    program = torch.export.export(ours, (torch.randn(5, 2, 6, 7, 8, dtype=torch.float64),), dynamic_shapes=(dims,))
    x = torch.randn(4, 3 if free else 2, 9, 10, 11, dtype=torch.float64)
    torch.testing.assert_close(program.module()(x), theirs(x) if not free else VOLUMETRIC[name](torch.nn)(x))
