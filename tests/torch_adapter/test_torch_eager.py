"""The eager path's plans (dnnbind.torch.eager): a repeated plain call skips the checks and the dispatcher,
gives what the first call gave, and never serves a call whose tensors or arguments differ in any way the
checks could see."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import dnnbind.torch as dt  # noqa: E402
from dnnbind.torch import eager, spec_functions  # noqa: E402
from dnnbind.torch import nn as dnn  # noqa: E402


def _r(*shape: int) -> "torch.Tensor":
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def _bn_stats() -> tuple:
    return torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)


#: one call of every planned op: (name, tensors maker, call)
CALLS = [
    ("conv", lambda: (_r(2, 3, 6, 6), _r(4, 3, 3, 3), _r(4)), lambda x, w, b: dt.conv(x, w, b, padding=1, stride=2)),
    ("conv_transpose", lambda: (_r(2, 3, 4, 4), _r(3, 2, 3, 3), _r(2)),
     lambda x, w, b: dt.conv_transpose(x, w, b, stride=2, output_padding=1)),
    ("maxpool", lambda: (_r(2, 3, 6, 6),), lambda x: dt.maxpool(x, 2, return_indices=True)[0]),
    ("meanpool", lambda: (_r(2, 3, 6, 6),), lambda x: dt.meanpool(x, 3, stride=2, padding=1)),
    ("softmax", lambda: (_r(4, 5),), lambda x: dt.softmax(x)),
    ("logsoftmax", lambda: (_r(4, 5),), lambda x: dt.logsoftmax(x, axis=0)),
    ("activation", lambda: (_r(4, 5),), lambda x: dt.activation(x, "leaky_relu", alpha=0.2)),
    ("batchnorm", lambda: (_r(4, 3, 5), _r(3), _r(3)),
     lambda x, g, b: dt.batchnorm(x, g, b, running_mean=torch.zeros(3, dtype=torch.float64),
                                  running_var=torch.ones(3, dtype=torch.float64), momentum=0.25)),
]


@pytest.fixture
def checks(monkeypatch):
    """The checked path's calls of spec_functions._check (dnnbind.torch.functional's), counted."""
    seen = []
    original = spec_functions._check
    monkeypatch.setattr(spec_functions, "_check", lambda **t: seen.append(sorted(t)) or original(**t))
    eager._CACHE.clear()
    return seen


@pytest.mark.parametrize("name,make,run", CALLS, ids=[c[0] for c in CALLS])
def test_a_repeated_call_is_planned_and_equals_the_first(checks, name, make, run):
    torch.manual_seed(0)
    tensors = make()
    results = []
    for _ in range(3):
        for t in tensors:
            t.grad = None
        y = run(*tensors)
        (y * torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape)).sum().backward()
        results.append((y.detach(), [t.grad for t in tensors]))
    assert len(checks) == 1                  # the first call only: the others found its plan
    assert name in {key[0] for key in eager._CACHE.entries}
    for y, grads in results[1:]:
        torch.testing.assert_close(y, results[0][0], rtol=0, atol=0)
        for g, first in zip(grads, results[0][1]):
            torch.testing.assert_close(g, first, rtol=0, atol=0)


@pytest.mark.parametrize("bad,message", [({"groups": True}, "groups=True"), ({"stride": (True, 1)}, "stride=True"),
                                         ({"stride": 2.0}, "stride=2.0"), ({"padding": 1.0}, "padding=1.0")])
def test_an_argument_equal_but_of_another_type_is_checked_again(checks, bad, message):
    """True == 1 == 1.0 as dictionary keys: a plan of groups=1 must not serve groups=True, which the
    checks refuse."""
    x, w = torch.randn(1, 2, 5, 5), torch.randn(2, 2, 3, 3)
    arguments = {"groups": 1, "stride": (1, 1), "padding": 1}
    for _ in range(2):
        dt.conv(x, w, **arguments)
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(".", r"\.")):
        dt.conv(x, w, **{**arguments, **bad})


def test_tensors_of_another_dtype_shape_or_kind_are_checked_again(checks):
    x, w = torch.randn(1, 2, 5, 5), torch.randn(2, 2, 3, 3)
    dt.conv(x, w)
    dt.conv(x, w)
    assert len(checks) == 1
    with pytest.raises(TypeError, match="w has dtype torch.float64 but x has dtype torch.float32"):
        dt.conv(x, w.double())
    assert dt.conv(torch.randn(1, 2, 6, 6), w).shape == (1, 2, 4, 4)
    assert dt.conv(x[0], w).shape == (2, 3, 3)                      # unbatched: its own checked call
    assert len(checks) == 4


def test_a_zero_of_another_sign_is_another_plan(checks):
    x = torch.tensor([-1.0, -2.0], dtype=torch.float64)
    for _ in range(2):
        positive = dt.activation(x, "leaky_relu", alpha=0.0)
    negative = dt.activation(x, "leaky_relu", alpha=-0.0)
    assert len(checks) == 2
    assert torch.signbit(positive).tolist() == [True, True] and torch.signbit(negative).tolist() == [False, False]


def test_calls_under_a_dispatch_mode_take_no_plan(checks):
    """Under a dispatch mode a call goes through the registered op (a plan left by an eager call is not
    used), and computes the same."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    x = torch.randn(3, 4, dtype=torch.float64)
    first = dt.activation(x, "tanh")
    dt.activation(x, "tanh")
    with Counting() as mode:
        traced = dt.activation(x, "tanh")
    assert any("dnnbind.activation" in op for op in mode.ops)
    torch.testing.assert_close(traced, first, rtol=0, atol=0)


def test_planned_batch_norm_layers_update_their_running_statistics_as_torch_does():
    torch.manual_seed(1)
    ours, theirs = dnn.BatchNorm2d(3).double(), torch.nn.BatchNorm2d(3).double()
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5, dtype=torch.float64)
        torch.testing.assert_close(ours(x), theirs(x))
    torch.testing.assert_close(ours.running_mean, theirs.running_mean)
    torch.testing.assert_close(ours.running_var, theirs.running_var)
    assert int(ours.num_batches_tracked) == 3


def test_frozen_weights_get_no_gradient_on_a_planned_call(checks):
    x, w = _r(2, 3, 6, 6), torch.randn(4, 3, 3, 3, dtype=torch.float64)
    for _ in range(2):
        x.grad = None
        dt.conv(x, w, padding=1).sum().backward()
    assert len(checks) == 1 and w.grad is None and x.grad.shape == x.shape
    w.requires_grad_(True)
    dt.conv(x, w, padding=1).sum().backward()              # the same plan: autograd now wants dw
    torch.testing.assert_close(w.grad, torch.autograd.grad(torch.nn.functional.conv2d(x, w, padding=1).sum(), w)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_signature_runs_the_innermost_forward_its_tensors_allow(dtype):
    """A float32 call's signature runs the cpu conv_forward without the wrappers that only call
    through for it (edge policy, memory check, BLAS-thread scope, half precision); a float16 call's keeps
    the half-precision wrapper, which computes in float32 and returns float16. Both run inside numpy's
    quiet floating-point scope, which every call keeps (residual.kept_around)."""
    from dnnbind.highlevel import cpu
    from dnnbind.highlevel.reference._arrays import quiet
    from dnnbind.torch import calls
    x, w = torch.randn(2, 3, 6, 6, dtype=dtype), torch.randn(4, 3, 3, 3, dtype=dtype)
    y = dt.conv(x, w)
    sig = calls.call_of("conv", x, [w, None], dt.conv.__dnnbind_spec__.arguments_function(1, 0, 1, 1))
    chain, f = [], cpu.conv_forward
    while f is not None:
        chain.append(f)
        f = getattr(f, "__wrapped__", None)
    assert sig.forward.__wrapped__ is (chain[-1] if dtype == torch.float32 else chain[-2])
    assert chain[1].__dnnbind_around__[1] is quiet
    assert y.dtype == dtype
    torch.testing.assert_close(y.float(), torch.nn.functional.conv2d(x.float(), w.float()), rtol=2e-3, atol=2e-3)
