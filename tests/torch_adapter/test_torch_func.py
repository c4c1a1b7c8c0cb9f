"""torch.func on dnnbind's layers, against torch's own: grad, vjp, jacrev, functional_call, vmap (a mapped
axis of x folded into the batch where the spec allows, mapped over otherwise), vmap(grad(...)) per-sample
gradients, model ensembling, and forward mode refused naming the op. float64 throughout."""
from __future__ import annotations

import pytest
import torch
from torch.func import functional_call, grad, jacrev, jvp, stack_module_state, vjp, vmap

import dnnbind.torch as dt
from dnnbind.torch import calls as dnnbind_calls
from dnnbind.torch import nn as dnn

DT = torch.float64


def _cnn(nn):
    return torch.nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                               nn.ConvTranspose2d(4, 4, 2, stride=2), nn.Tanh(), nn.Conv2d(4, 2, 3),
                               nn.AvgPool2d(2)).to(DT)


def _lstm(nn):
    return nn.LSTM(3, 4, num_layers=2, bidirectional=True).to(DT)


def _twins(make):
    torch.manual_seed(3)
    ours = make(dnn)
    theirs = make(torch.nn)
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def _params(model):
    return {k: v.detach() for k, v in model.named_parameters()}


def test_grad_and_functional_call_equal_torchs():
    ours, theirs = _twins(_cnn)
    x = torch.randn(2, 3, 8, 8, dtype=DT)

    def loss(model):
        return lambda p, x: (functional_call(model, p, (x,)) ** 2).sum()
    a, b = grad(loss(ours))(_params(ours), x), grad(loss(theirs))(_params(theirs), x)
    for k in b:
        torch.testing.assert_close(a[k], b[k])
    torch.testing.assert_close(grad(loss(ours), argnums=1)(_params(ours), x),
                               grad(loss(theirs), argnums=1)(_params(theirs), x))


def test_vjp_and_jacrev_equal_torchs():
    ours, theirs = _twins(_cnn)
    x = torch.randn(1, 3, 8, 8, dtype=DT)
    y, pullback = vjp(ours, x)
    y_t, pullback_t = vjp(theirs, x)
    torch.testing.assert_close(y, y_t)
    ct = torch.randn_like(y)
    torch.testing.assert_close(pullback(ct)[0], pullback_t(ct)[0])
    torch.testing.assert_close(jacrev(ours)(x), jacrev(theirs)(x))


def test_vmap_of_a_cnn_equals_torchs_and_folds_into_the_batch():
    ours, theirs = _twins(_cnn)
    xs = torch.randn(5, 2, 3, 8, 8, dtype=DT)
    calls = []
    original = dnnbind_calls.forward
    try:
        dnnbind_calls.forward = lambda call, x, *rest: calls.append((call.op, tuple(x.shape))) or original(call, x,
                                                                                                         *rest)
        out = vmap(ours)(xs)
    finally:
        dnnbind_calls.forward = original
    torch.testing.assert_close(out, vmap(theirs)(xs))
    # each layer ran once, on the 5 * 2 samples (folded), not five times
    assert len(calls) == len(ours) and calls[0] == ("conv", (10, 3, 8, 8))


def test_per_sample_gradients_equal_torchs():
    """vmap(grad(...)) over single samples: the basis of DP-SGD."""
    ours, theirs = _twins(_cnn)
    xs, targets = torch.randn(4, 3, 8, 8, dtype=DT), torch.randn(4, 1, 2, 3, 3, dtype=DT)

    def per_sample(model):
        def loss(p, x, t):
            return ((functional_call(model, p, (x.unsqueeze(0),)) - t) ** 2).sum()
        return vmap(grad(loss), in_dims=(None, 0, 0))(_params(model), xs, targets)
    a, b = per_sample(ours), per_sample(theirs)
    for k in b:
        assert a[k].shape == (4, *_params(theirs)[k].shape)
        torch.testing.assert_close(a[k], b[k])


def _ensembled(make, x: torch.Tensor) -> list[tuple[torch.Tensor, dict]]:
    """For dnnbind's and torch's layers: three models of ``make`` (the same weights on both sides) run on x
    by stack_module_state and vmap: (outputs, the stacked buffers after the call)."""
    pairs = [_twins(make) for _ in range(3)]
    results = []
    for side in (0, 1):
        params, buffers = stack_module_state([p[side] for p in pairs])
        base = pairs[0][side]
        out = vmap(lambda p, b: functional_call(base, (p, b), (x,)))(params, buffers)
        results.append((out, buffers))
    return results


def test_model_ensembling_maps_over_stacked_weights():
    results = _ensembled(_cnn, torch.randn(2, 3, 8, 8, dtype=DT))
    torch.testing.assert_close(results[0], results[1])


def test_vmap_and_per_sample_gradients_of_an_lstm_equal_torchs_loop():
    """torch's own LSTM has no batching rule (aten::lstm): a loop over it is the oracle."""
    ours, theirs = _twins(_lstm)
    xs = torch.randn(3, 5, 2, 3, dtype=DT)          # 3 mapped entries of (seq 5, batch 2, input 3)
    torch.testing.assert_close(vmap(lambda x: ours(x)[0])(xs), torch.stack([theirs(x)[0] for x in xs]))

    def loss(model):
        return lambda p, x: functional_call(model, p, (x,))[0].pow(2).sum()
    a = vmap(grad(loss(ours)), in_dims=(None, 0))(_params(ours), xs)
    b = [grad(loss(theirs))(_params(theirs), x) for x in xs]
    for k in a:
        torch.testing.assert_close(a[k], torch.stack([g[k] for g in b]))


def test_vmap_maps_over_batch_norm_and_softmax():
    """Batch norm's statistics run over its batch and softmax's axis may be any: no fold, one call per entry."""
    xs = torch.randn(3, 4, 5, 2, dtype=DT)
    gamma, beta = torch.randn(5, dtype=DT), torch.randn(5, dtype=DT)
    torch.testing.assert_close(
        vmap(lambda x: dt.batchnorm(x, gamma, beta, training=True))(xs),
        vmap(lambda x: torch.nn.functional.batch_norm(x, None, None, gamma, beta, training=True))(xs))
    torch.testing.assert_close(vmap(lambda x: dt.softmax(x, axis=0))(xs),
                               vmap(lambda x: torch.softmax(x, 0))(xs))


def _calls_of(f, *args):
    """(f(*args), the (op, x's shape) of each backend call it made)."""
    calls = []
    original = dnnbind_calls.forward
    try:
        dnnbind_calls.forward = lambda call, x, *rest, **kw: calls.append((call.op, tuple(x.shape))) or original(
            call, x, *rest, **kw)
        return f(*args), calls
    finally:
        dnnbind_calls.forward = original


def test_vmap_folds_softmax_and_layer_norm_where_their_samples_are_apart():
    """Softmax along any axis but the batch's and layer norm over fewer dims than x's fold the mapped axis
    into the batch (one call); along the batch axis, or normalizing every dim, one call per entry."""
    xs = torch.randn(3, 4, 5, 2, dtype=DT)
    w, b = torch.randn(5, 2, dtype=DT), torch.randn(5, 2, dtype=DT)
    cases = [(lambda x: dt.softmax(x, axis=-1), lambda x: torch.softmax(x, -1), 1),
             (lambda x: dt.logsoftmax(x, axis=1), lambda x: torch.log_softmax(x, 1), 1),
             (lambda x: dt.softmax(x, axis=-3), lambda x: torch.softmax(x, -3), 3),
             (lambda x: dt.layer_norm(x, (5, 2), w, b), lambda x: torch.nn.functional.layer_norm(x, (5, 2), w, b), 1),
             (lambda x: dt.layer_norm(x, (4, 5, 2)), lambda x: torch.nn.functional.layer_norm(x, (4, 5, 2)), 3)]
    for ours, theirs, count in cases:
        out, calls = _calls_of(vmap(ours), xs)
        torch.testing.assert_close(out, vmap(theirs)(xs))
        assert len(calls) == count and calls[0][1] == ((12, 5, 2) if count == 1 else (4, 5, 2))
    loss = lambda f: (lambda w, x: f(x, w).square().sum())   # noqa: E731
    ours = lambda x, w: dt.layer_norm(x, (2,), w)            # noqa: E731
    theirs = lambda x, w: torch.nn.functional.layer_norm(x, (2,), w)   # noqa: E731
    torch.testing.assert_close(vmap(grad(loss(ours)), in_dims=(None, 0))(w[0], xs),
                               vmap(grad(loss(theirs)), in_dims=(None, 0))(w[0], xs))


@pytest.mark.parametrize("transform", ["jvp", "jacfwd"])
def test_forward_mode_is_refused_naming_the_op(transform):
    w = torch.randn(2, 3, 3, 3, dtype=DT)
    x = torch.randn(1, 3, 5, 5, dtype=DT)
    f = lambda x: dt.conv(x, w)  # noqa: E731
    with pytest.raises(RuntimeError, match=r"dnnbind\.conv: forward-mode AD"):
        if transform == "jvp":
            jvp(f, (x,), (torch.ones_like(x),))
        else:
            torch.func.jacfwd(f)(x)


def _bn_cnn(nn):
    return torch.nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).to(DT)


def test_vmap_of_batch_norm_updating_unmapped_running_statistics_is_refused_naming_them():
    """torch refuses too ("Batch norm got a batched tensor as input while the running_mean or running_var
    ... were not batched"); the op's error names itself and the statistics."""
    ours, _ = _twins(_bn_cnn)
    with pytest.raises(RuntimeError, match=r"dnnbind\.batchnorm: under vmap, running_mean, running_var, which this "
                                           r"call updates in place, are not mapped"):
        vmap(ours)(torch.randn(2, 3, 3, 5, 5, dtype=DT))
    x = torch.randn(4, 2, dtype=DT)
    with pytest.raises(RuntimeError, match=r"dnnbind\.batchnorm: under vmap, running_var, which .* is not mapped"):
        vmap(lambda g, mean: dt.batchnorm(x, g, torch.zeros(2, dtype=DT), running_mean=mean,
                                          running_var=torch.ones(2, dtype=DT)))(torch.randn(3, 2, dtype=DT),
                                                                                torch.zeros(3, 2, dtype=DT))
    # inference reads them only: mapped x, shared statistics
    ours.eval()
    xs = torch.randn(2, 3, 3, 5, 5, dtype=DT)
    torch.testing.assert_close(vmap(ours)(xs), torch.stack([ours(x) for x in xs]))


@pytest.mark.parametrize("entries", [3, 0])
def test_vmap_over_batch_norms_parameters_alone_updates_the_shared_statistics_once_as_torchs(entries):
    """x and the running statistics unmapped, gamma and beta mapped (an ensemble of affine parameters over
    one batch): every entry's update is the same, made once, as torch's own batch norm makes it (also
    over an empty axis); the results per entry equal torch's."""
    ours, theirs = _twins(lambda nn: nn.BatchNorm2d(3).to(DT))
    x = torch.randn(4, 3, 5, 5, dtype=DT)
    stacked = {k: torch.stack([v.detach() * (1 + i) + i for i in range(entries)]) if entries else v.detach()[None][:0]
               for k, v in theirs.named_parameters()}
    results = [vmap(lambda p: torch.func.functional_call(m, (p, dict(m.named_buffers())), (x,)))(stacked)
               for m in (ours, theirs)]
    torch.testing.assert_close(results[0], results[1])
    assert results[0].shape == (entries, 4, 3, 5, 5)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(ours, name), getattr(theirs, name))
    assert not torch.equal(ours.running_var, torch.ones(3, dtype=DT))
    mean, var = torch.zeros(3, dtype=DT), torch.ones(3, dtype=DT)
    gammas = torch.rand(entries, 3, dtype=DT)
    y = vmap(lambda g: dt.batchnorm(x, g, torch.zeros(3, dtype=DT), running_mean=mean, running_var=var,
                                    momentum=0.5))(gammas)
    expected = [torch.nn.functional.batch_norm(x, None, None, g, training=True) for g in gammas]
    torch.testing.assert_close(y, torch.stack(expected) if expected else x.new_empty((0, *x.shape)))
    torch.testing.assert_close(mean, 0.5 * x.mean((0, 2, 3)))


def test_ensembles_of_batch_norm_in_training_update_their_stacked_statistics_as_torchs():
    """Model ensembling with stack_module_state maps the buffers too: each model's running statistics
    updated from its own batch; and replace_all_batch_norm_modules_ (no running statistics) vmaps."""
    results = _ensembled(_bn_cnn, torch.randn(2, 3, 6, 6, dtype=DT))
    torch.testing.assert_close(results[0], results[1])
    assert not torch.equal(results[0][1]["1.running_mean"][0], torch.zeros(4, dtype=DT))
    ours, theirs = _twins(_bn_cnn)
    for m in (ours, theirs):
        torch.func.replace_all_batch_norm_modules_(m)
    xs = torch.randn(3, 2, 3, 6, 6, dtype=DT)
    torch.testing.assert_close(vmap(ours)(xs), vmap(theirs)(xs))


def test_vmap_over_an_empty_axis_gives_the_entries_shapes():
    """No entries: the results are shaped by the ops' fake kernels (folded and mapped ops, and the
    backward's rule), nothing runs. (torch 2.13's own conv2d under vmap loses an axis there.)"""
    w = torch.randn(2, 3, 3, 3, dtype=DT)
    for f, entry in ((lambda x: dt.conv(x, w), (1, 2, 3, 3)), (lambda x: dt.softmax(x, axis=1), (1, 3, 5, 5)),
                     (lambda x: dt.maxpool(x, 2, return_indices=True)[1], (1, 3, 2, 2))):
        out = vmap(f)(torch.randn(0, 1, 3, 5, 5, dtype=DT))
        assert out.shape == (0, *entry) and out.dtype == f(torch.randn(1, 3, 5, 5, dtype=DT)).dtype
    assert vmap(grad(lambda x: dt.conv(x, w).sum()))(torch.randn(0, 3, 5, 5, dtype=DT)).shape == (0, 3, 5, 5)
    assert vmap(lambda x: dt.conv(x, w))(torch.randn(2, 0, 3, 5, 5, dtype=DT)).shape == (2, 0, 2, 3, 3)


def test_an_ensemble_of_lstms_maps_over_stacked_weights_as_torchs_loop():
    """stack_module_state over LSTMs (torch's own LSTM has no batching rule: a loop over it is the oracle),
    and vmap(grad(...)) over the ensemble's weights."""
    pairs = [_twins(_lstm) for _ in range(3)]
    x = torch.randn(4, 2, 3, dtype=DT)
    params, buffers = stack_module_state([p[0] for p in pairs])
    base = pairs[0][0]
    torch.testing.assert_close(vmap(lambda p, b: functional_call(base, (p, b), (x,))[0])(params, buffers),
                               torch.stack([theirs(x)[0] for _, theirs in pairs]))

    def loss(model):
        return lambda p, b: functional_call(model, (p, b), (x,))[0].pow(2).sum()
    found = vmap(grad(loss(base)))(params, buffers)
    for k, g in found.items():
        torch.testing.assert_close(g, torch.stack([grad(loss(theirs))(_params(theirs), {})[k] for _, theirs in pairs]))



@pytest.mark.slow
def test_compiled_torch_func_transforms_equal_torchs():
    """torch.compile of grad and of vmap(grad) (per-sample gradients) of the functional op, with torch's
    numbers (the tensors of a grad do not require a gradient in Dynamo's view: the call runs outside the
    graph)."""
    w, b = torch.randn(2, 3, 3, 3, dtype=DT), torch.randn(2, dtype=DT)
    xs = torch.randn(3, 3, 5, 5, dtype=DT)

    def loss(conv):
        return lambda w, x: conv(x.unsqueeze(0), w, b).pow(2).sum()
    torch.testing.assert_close(torch.compile(vmap(grad(loss(dt.conv)), in_dims=(None, 0)))(w, xs),
                               vmap(grad(loss(torch.nn.functional.conv2d)), in_dims=(None, 0))(w, xs))
    torch.testing.assert_close(torch.compile(grad(loss(dt.conv), argnums=1))(w, xs[0]),
                               grad(loss(torch.nn.functional.conv2d), argnums=1)(w, xs[0]))


def _compiled_cases():
    """(name, transform of a model, its arguments from (model, x), whether fullgraph=True traces it)."""
    def loss(model):
        return lambda p, x: functional_call(model, p, (x,)).pow(2).sum()
    return [
        ("grad of x", lambda m: grad(lambda x: m(x).pow(2).sum()), lambda m, x: (x,), True),
        ("vmap", lambda m: vmap(lambda x: m(x)), lambda m, x: (x[:, None],), True),
        ("vmap of vmap", lambda m: vmap(vmap(lambda x: m(x[None]))), lambda m, x: (x[:, None],), False),
        ("jacrev", lambda m: jacrev(lambda x: m(x).sum(0)), lambda m, x: (x[:1],), True),
        ("grad of the parameters", lambda m: grad(loss(m)), lambda m, x: (_params(m), x), False),
        ("per-sample gradients", lambda m: vmap(grad(lambda p, x: loss(m)(p, x[None])), in_dims=(None, 0)),
         lambda m, x: (_params(m), x), False),
        ("grad of vmap", lambda m: grad(lambda x: vmap(lambda y: m(y[None]))(x).pow(2).sum()),
         lambda m, x: (x,), False),
        ("vmap of grad of x", lambda m: vmap(grad(lambda x: m(x[None]).pow(2).sum())), lambda m, x: (x,), False),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize("case", range(len(_compiled_cases())))
def test_compiled_transforms_of_layers_equal_torchs_or_leave_the_graph(case, fullgraph):
    """torch.compile of torch.func transforms of a layer: torch's numbers. Under one grad (a tensor requiring
    a gradient) or one vmap the op goes into the graph (fullgraph=True traces it); elsewhere the call runs
    outside the graph: a graph break, which fullgraph=True refuses rather than lose a gradient."""
    name, transform, arguments, traced = _compiled_cases()[case]
    ours, theirs = _twins(lambda nn: nn.Conv2d(2, 3, 3, padding=1).to(DT))
    x = torch.randn(4, 2, 5, 5, dtype=DT)
    expected = transform(theirs)(*arguments(theirs, x))
    torch._dynamo.reset()
    compiled = torch.compile(transform(ours), fullgraph=fullgraph)
    if fullgraph and not traced:
        with pytest.raises(torch._dynamo.exc.Unsupported, match="disable"):
            compiled(*arguments(ours, x))
        return
    found = compiled(*arguments(ours, x))
    torch.testing.assert_close(found, expected, msg=name)


@pytest.mark.parametrize("transform", ["grad", "jacrev", "vjp", "grad_of_grad"])
def test_batch_norm_updates_captured_running_statistics_under_transforms_as_torchs(transform):
    """Running statistics the transformed function captures (not its inputs) are updated as torch's
    batch norm updates them: once per forward, with the batch's statistics; the gradients equal torch's."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    x, gamma, beta = torch.randn(4, 2, 3), torch.rand(2) + 0.5, torch.randn(2)
    found = []
    for norm in (lambda x, m, v: F.batch_norm(x, m, v, gamma, beta, training=True),
                 lambda x, m, v: dt.batchnorm(x, gamma, beta, running_mean=m, running_var=v, training=True)):
        mean, var = torch.zeros(2), torch.ones(2)

        def loss(x):
            return norm(x, mean, var).pow(3).sum()
        result = {"grad": lambda: grad(loss)(x),
                  "jacrev": lambda: jacrev(lambda x: norm(x, mean, var))(x),
                  "vjp": lambda: vjp(loss, x)[1](torch.tensor(1.0))[0],
                  "grad_of_grad": lambda: grad(lambda x: grad(loss)(x).sum())(x)}[transform]()
        found.append((result, mean, var))
    for ours, theirs in zip(found[1], found[0]):
        torch.testing.assert_close(ours, theirs)
    layers = [cls(2) for cls in (torch.nn.BatchNorm1d, dnn.BatchNorm1d)]
    for layer in layers:                         # a layer without a batch counter: captured as well
        layer.num_batches_tracked = None
        grad(lambda x: layer(x).sum())(x)
    torch.testing.assert_close(layers[1].running_mean, layers[0].running_mean)
    torch.testing.assert_close(layers[1].running_var, layers[0].running_var)
