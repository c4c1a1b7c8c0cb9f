"""dnnbind.torch.symbolic: shapes computed with ints, kept symbolic where the input sizes are."""
from __future__ import annotations

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
    assert len(calls) == 5 and (4, 5) in calls              # four corners and one check
    assert not env.guards                                   # nothing specialized


def test_a_size_that_is_not_affine_is_specialized():
    x, env = _fake((4, 3), (True, False))
    shape = symbolic.shapes(lambda size_of: [(size_of(x)[0] ** 2,)], [x])
    assert shape == [(16,)] and env.guards                  # torch's guard on the example's size


def test_concrete_sizes_are_evaluated_once():
    calls = []
    assert symbolic.shapes(lambda size_of: calls.append(1) or [size_of(torch.empty(2, 3))], [None]) == [(2, 3)]
    assert calls == [1]
