"""BatchNorm{1,2,3}d are torch.nn's: training and eval, momentum=None, no affine, no running statistics,
num_batches_tracked, state_dict, input checks."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import dnnbind.torch as dt
from layer_checks import assert_layer_matches, assert_same_grads


@pytest.mark.parametrize("kwargs", [{}, {"momentum": None}, {"affine": False}, {"track_running_stats": False},
                                    {"bias": False}],
                         ids=["default", "cumulative", "no-affine", "no-running-stats", "no-bias"])
def test_batchnorm2d_trains_and_evaluates_like_torch(kwargs):
    torch.manual_seed(0)
    ours, theirs = dt.BatchNorm2d(3, **kwargs), nn.BatchNorm2d(3, **kwargs)
    assert repr(ours) == repr(theirs)
    with torch.no_grad():
        for p in theirs.parameters():
            p.uniform_(0.5, 1.5)
    ours.load_state_dict(theirs.state_dict())
    for step in range(3):
        x = (torch.randn(4, 3, 5, 5) * (step + 1) + step).requires_grad_()
        x_ref = x.detach().clone().requires_grad_()
        y, y_ref = ours(x), theirs(x_ref)
        torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
        (y * y.detach().square()).sum().backward()
        (y_ref * y_ref.detach().square()).sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours.state_dict(), theirs.state_dict(), rtol=1e-5, atol=1e-5)
    assert_same_grads(ours, theirs, 1e-4)
    ours.eval()
    theirs.eval()
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.state_dict(), theirs.state_dict(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, x_shape", [("BatchNorm1d", (6, 3)), ("BatchNorm1d", (4, 3, 5)),
                                           ("BatchNorm3d", (2, 3, 3, 4, 2))], ids=["1d-2d-input", "1d-3d-input", "3d"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batchnorm_ranks_equal_torch(name, x_shape, training):
    torch.manual_seed(0)
    theirs = getattr(nn, name)(3, momentum=0.3, dtype=torch.float64)
    with torch.no_grad():
        theirs.running_mean.uniform_(-1, 1)
        theirs.running_var.uniform_(0.5, 2)
    ours = getattr(dt, name)(3, momentum=0.3, dtype=torch.float64)
    ours.train(training)
    theirs.train(training)
    assert_layer_matches(ours, theirs, torch.randn(x_shape, dtype=torch.float64))


def test_batchnorm_eval_keeps_running_stats_and_counts_train_batches():
    bn = dt.BatchNorm1d(2)
    bn(torch.randn(4, 2) + 3)
    assert int(bn.num_batches_tracked) == 1 and torch.all(bn.running_mean > 0.1)
    before = bn.running_mean.clone()
    bn.eval()
    bn(torch.randn(4, 2) - 5)
    assert torch.equal(bn.running_mean, before) and int(bn.num_batches_tracked) == 1


def test_batchnorm_checks_the_rank_and_names_torchs_tensors():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        dt.BatchNorm2d(3)(torch.randn(3, 4, 4))
    with pytest.raises(ValueError, match=r"weight has shape \(3,\) but must have shape \(4,\)"):
        dt.BatchNorm2d(3)(torch.randn(2, 4, 3, 3))
    with pytest.raises(ValueError, match="input has shape .*more than one value per channel"):
        dt.BatchNorm1d(3)(torch.randn(1, 3))


def test_eager_batchnorm_updates_the_running_stats_in_place_like_torch():
    """An eager training call writes the new running statistics into the buffers themselves, also into a
    buffer that is a strided view; their version counters stay as torch's own update leaves them (it
    saves them for its backward: see test_torch_saved.py)."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5)
    storage = torch.zeros(6)
    mean, var = storage[::2], torch.ones(3)          # mean: not contiguous
    theirs_storage = torch.zeros(6)
    theirs_mean, theirs_var = theirs_storage[::2], torch.ones(3)
    versions = (mean._version, var._version)
    theirs_versions = (theirs_mean._version, theirs_var._version)
    y = dt.batchnorm(x, torch.ones(3), torch.zeros(3), running_mean=mean, running_var=var, momentum=0.25)
    expected = torch.nn.functional.batch_norm(x, theirs_mean, theirs_var, torch.ones(3), torch.zeros(3),
                                              training=True, momentum=0.25)
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(mean, theirs_mean)
    torch.testing.assert_close(var, theirs_var)
    assert (mean._version - versions[0], var._version - versions[1]) == (
        theirs_mean._version - theirs_versions[0], theirs_var._version - theirs_versions[1])
    assert storage[1::2].eq(0).all()                 # the strided view's gaps are untouched


def test_eager_batchnorm_in_eval_mode_leaves_the_running_stats_alone():
    mean, var = torch.zeros(3), torch.ones(3)
    versions = (mean._version, var._version)
    dt.batchnorm(torch.randn(2, 3, 4), torch.ones(3), torch.zeros(3), running_mean=mean, running_var=var,
                 training=False)
    assert (mean._version, var._version) == versions
    assert mean.eq(0).all() and var.eq(1).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("training", [True, False])
def test_half_input_with_float32_parameters_like_torch(dtype, training):
    """Mixed precision (autocast leaves batch norm's parameters in float32): a half or bfloat16 input is
    normalised in float32, as torch's CPU kernel does; the result has the input's dtype, the parameters'
    gradients float32, the running statistics stay float32. Inside a Sequential and compiled too."""
    torch.manual_seed(0)
    ours, theirs = dt.BatchNorm2d(3), nn.BatchNorm2d(3)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-0.5, 0.5)
    ours.load_state_dict(theirs.state_dict())
    ours.train(training), theirs.train(training)
    x = (torch.randn(4, 3, 5, 5) * 2 + 1).to(dtype).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = ours(x), theirs(x_ref)
    assert y.dtype == dtype
    torch.testing.assert_close(y, y_ref)
    dy = torch.randn_like(y)
    y.backward(dy), y_ref.backward(dy)
    assert x.grad.dtype == dtype and ours.weight.grad.dtype == torch.float32
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.bias.grad, theirs.bias.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.running_var, theirs.running_var)
    conv = dt.Conv2d(3, 3, 1).to(dtype)
    model = dt.nn.Sequential(conv, ours, dt.ReLU()).train(training)
    reference = nn.Sequential(nn.Conv2d(3, 3, 1).to(dtype), theirs, nn.ReLU()).train(training)
    reference[0].load_state_dict(conv.state_dict())
    for run in (model, torch.compile(model, fullgraph=True)):
        torch.testing.assert_close(run(x.detach()), reference(x.detach()))


def _statistics_asking_for_a_gradient(how, lib, training):
    """A batch norm call whose running mean asks for a gradient, as ``how`` makes it."""
    x = torch.randn(4, 3, dtype=torch.float64)
    layer = lib.BatchNorm1d(3).double().train(training)
    if how == "func.grad":
        buffers = {"running_mean": torch.zeros(3, dtype=torch.float64), "running_var": torch.ones(3, dtype=torch.float64)}
        return lambda: torch.func.grad(lambda b: torch.func.functional_call(layer, b, (x,)).sum())(buffers)
    if how == "sequential":                             # (dnnbind's: a fused run of planned layers)
        layer = lib.Sequential(lib.BatchNorm1d(3), lib.ReLU()).double().train(training)
        [layer(x) for _ in range(3)]
        layer[0].running_mean.requires_grad_(True)
        return lambda: layer(x)
    if how == "sequential-unaffine":                    # (a step after another, without gamma and beta)
        x = torch.randn(4, 3, 5, dtype=torch.float64)
        layer = lib.Sequential(lib.Conv1d(3, 3, 1), lib.BatchNorm1d(3, affine=False), lib.ReLU()).double()
        [layer(x) for _ in range(3)]
        layer[1].running_mean.requires_grad_(True)
        return lambda: layer(x)
    layer.running_mean.requires_grad_(True)
    return lambda: [layer(x) for _ in range(2)]        # (the second call: the eager plan's)


@pytest.mark.parametrize("how, training", [("eager", False), ("eager", True), ("sequential", True),
                                           ("sequential-unaffine", True), ("func.grad", False)],
                         ids=["eager-eval", "eager-train", "sequential-train", "sequential-unaffine-train",
                              "func.grad-eval"])
def test_running_statistics_asking_for_a_gradient_are_refused_as_torch_refuses_them(how, training):
    """Batch norm is not differentiable by its running statistics: a call where one asks for a gradient is
    refused, naming the op and the argument, as torch's is (it used to leave them no gradient in eager
    mode, and raise autograd's internal shape error under torch.func); under no_grad it runs."""
    with pytest.raises(RuntimeError, match=r"not differentiable with respect to argument 'running_mean'"):
        _statistics_asking_for_a_gradient(how, nn, training)()
    with pytest.raises(RuntimeError, match=r"^dnnbind\.batchnorm is not differentiable with respect to argument "
                                           r"'running_mean'\. This input cannot have requires_grad True\.$"):
        _statistics_asking_for_a_gradient(how, dt.nn, training)()
    if how != "func.grad":
        with torch.no_grad():
            _statistics_asking_for_a_gradient(how, dt.nn, training)()
