"""A training step (forward, backward, Adam) of small models built from dnnbind.torch layers and from
torch's own layers, with the same sizes and the same initial weights."""
from __future__ import annotations

from typing import Any, Callable

#: a training step through dnnbind.torch against the same model on torch's layers (issue 43: at most 1.1x)
GOAL = 1.1


def cnn_models(torch: Any) -> tuple[Any, Any, Any]:
    """(dnnbind model, torch model, batch): conv-bn-relu-pool twice, then a linear classifier, 32x32 RGB."""
    import dnnbind.torch as dt
    nn = torch.nn

    class Ours(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = dt.Conv2d(3, 16, 3, padding=1), dt.BatchNorm2d(16)
            self.c2, self.b2 = dt.Conv2d(16, 32, 3, padding=1), dt.BatchNorm2d(32)
            self.pool = dt.MaxPool2d(2)
            self.fc = nn.Linear(32 * 8 * 8, 10)

        def forward(self, x):
            h = self.pool(dt.activation(self.b1(self.c1(x)), "relu"))
            h = self.pool(dt.activation(self.b2(self.c2(h)), "relu"))
            return self.fc(h.flatten(1))

    theirs = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                           nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                           nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
    ours = Ours()
    with torch.no_grad():
        for a, b in ((ours.c1, theirs[0]), (ours.c2, theirs[4]), (ours.fc, theirs[9])):
            a.weight.copy_(b.weight)
            a.bias.copy_(b.bias)
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g))
    return ours, theirs, batch


def lstm_models(torch: Any) -> tuple[Any, Any, Any]:
    """(dnnbind model, torch model, batch): a 2-layer LSTM (64 -> 128) over 30 steps of 16 sequences and
    a linear head on the last step."""
    import dnnbind.torch as dt
    nn = torch.nn

    class Model(nn.Module):
        def __init__(self, lstm: Any) -> None:
            super().__init__()
            self.lstm, self.head = lstm, nn.Linear(128, 10)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.head(y[-1])

    theirs = Model(nn.LSTM(64, 128, num_layers=2))
    ours = Model(dt.LSTM(64, 128, num_layers=2))
    ours.load_state_dict(theirs.state_dict())
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(30, 16, 64, generator=g), torch.randint(0, 10, (16,), generator=g))
    return ours, theirs, batch


def step(torch: Any, model: Any, batch: tuple) -> Callable[[], None]:
    """One training step of ``model`` on ``batch`` with its own Adam optimizer."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, labels = batch

    def run() -> None:
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return run


#: the memory a training forward keeps for its backward, against the same model on torch's layers: each
#: activation kept once, as torch keeps it, beside the arrays of dnnbind's own (an LSTM's four tapes per
#: layer, where torch's CPU LSTM keeps fewer)
MEMORY_GOAL = 1.5

#: the adapter's overhead goal: dnnbind.torch layers against the same ops called on numpy arrays
ADAPTER_GOAL = 1.1
#: issue 43's compiled goal: a compiled model within 5% of its ops on numpy plus torch.compile's own cost
#: for a do-nothing custom op pair
COMPILED_GOAL = 1.05


def cnn_features(torch: Any, nn: Any) -> Any:
    """conv-bn-relu-pool twice (the small CNN's dnnbind part) from ``nn`` (dnnbind.torch.nn)."""
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))


def torch_fwd_bwd(torch: Any, model: Any, x: Any) -> Callable[[], None]:
    """Forward and backward of ``model`` (output summed): the adapter's side of the comparison."""
    def run() -> None:
        model.zero_grad(set_to_none=True)
        out = model(x)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
    return run


def numpy_cnn_fwd_bwd(features: Any, x: Any) -> Callable[[], None]:
    """The same forward and backward as :func:`torch_fwd_bwd` of :func:`cnn_features`, through dnnbind's
    public ops on numpy arrays (the weights and statistics copied from the layers). The same work too:
    the first convolution's input takes no gradient, so its backward runs through the residual form
    with ``needs`` (as autograd has dnnbind.torch do)."""
    import numpy as np
    import dnnbind
    from dnnbind.highlevel import cpu as reference  # the cpu backend (the benchmarked one)
    from dnnbind.highlevel.dims import ConvDims
    params = [(c.weight.detach().numpy().copy(), c.bias.detach().numpy().copy(), b.weight.detach().numpy().copy(),
               b.bias.detach().numpy().copy(), b.running_mean.numpy().copy(), b.running_var.numpy().copy())
              for c, b in ((features[0], features[1]), (features[4], features[5]))]
    xa = x.numpy()
    w1 = params[0][0]
    dims = ConvDims(xa.shape, w1.shape, padding=1, dtype=xa.dtype)

    def first_conv(h: Any) -> tuple[Any, Any]:
        y, saved = reference.conv_forward(h, w1, params[0][1], dims)
        return y, lambda dy: reference.conv_backward(saved, (dy,), dims, needs=(False, True, True))

    def run() -> None:
        h, pullbacks = xa, []
        for i, (w, bias, gamma, beta, mean, var) in enumerate(params):
            for y_pb in (first_conv if i == 0 else lambda h: dnnbind.conv(h, w, bias, padding=1),
                         lambda h: dnnbind.batchnorm(h, gamma, beta, running_mean=mean, running_var=var),
                         lambda h: dnnbind.activation(h, "relu"), lambda h: dnnbind.maxpool(h, 2)):
                h, pb = y_pb(h)
                pullbacks.append(pb)
        h.sum()                                  # the loss torch_fwd_bwd's side computes
        d = np.ones_like(h)
        for pb in reversed(pullbacks):
            grads = pb(d)
            d = grads[0] if isinstance(grads, tuple) else grads
    return run


def numpy_lstm_fwd_bwd(lstm: Any, x: Any) -> Callable[[], None]:
    """Forward and backward of a dnnbind LSTM layer's op on numpy arrays (y summed)."""
    import numpy as np
    import dnnbind
    weights = [[p.detach().numpy().copy() for p in entry] for entry in lstm.weights()]
    xa = x.numpy()

    def run() -> None:
        (y, _, _), pullback = dnnbind.rnn(xa, weights, hidden_size=lstm.hidden_size, num_layers=lstm.num_layers)
        y.sum()                                  # the loss torch_fwd_bwd's side computes
        pullback(np.ones_like(y))
    return run


def saved_tensors(torch: Any, model: Any, x: Any) -> tuple[list[Any], Any]:
    """(the tensors a forward of ``model`` on ``x`` saves for its backward (its layers' residuals), as
    saved-tensor hooks see them; the forward's result)."""
    saved: list[Any] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = model(x)
    return saved, out


def null_compiled_step(torch: Any, like: Any, x: Any) -> Callable[[], None]:
    """What torch.compile's machinery alone costs a step of :func:`torch_fwd_bwd` on a model like
    ``like``: a compiled module with ``like``'s parameters whose forward is one custom op pair that
    does nothing (copies x, returns empty residuals and zero gradients), saving as many residuals as
    ``like``'s layers save (:func:`saved_tensors`). Its kernels leave the caches as they found them; see
    :func:`cold_null_compiled_step` for the machinery beside kernels that stream memory."""
    op = _null_op(torch, len(saved_tensors(torch, like, x)[0]))
    params = [torch.nn.Parameter(p.detach().clone()) for p in like.parameters()]

    class Null(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.params = torch.nn.ParameterList(params)

        def forward(self, h: Any) -> Any:
            return op(h, list(self.params))[0]

    return torch_fwd_bwd(torch, torch.compile(Null(), fullgraph=True), x)


def with_null_pair(torch: Any, model: Any, residuals: int) -> Any:
    """``model`` followed by the do-nothing custom op pair of :func:`null_compiled_step` (without
    parameters, saving ``residuals`` empty tensors), as one module: compiled, the pair sits in the same
    graph as the model's own ops."""
    op = _null_op(torch, residuals)

    class Paired(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: Any) -> Any:
            return op(self.model(x), [])[0]

    return Paired()


def cold_null_compiled_step(torch: Any, like: Any, x: Any, nbytes: int) -> tuple[Callable[[], None],
                                                                                  Callable[[], None]]:
    """(a step of :func:`null_compiled_step` whose two kernels each write ``nbytes`` of memory, as the
    real kernels stream their activations through the caches; the two writes alone). Their difference
    is torch.compile's machinery on the caches the real kernels leave: the share of a compiled step that
    no work inside the custom ops can win back."""
    import numpy as np
    buffer = np.zeros(max(1, nbytes // 4), np.float32)

    def writes() -> None:
        buffer.fill(1.0)
        buffer.fill(2.0)

    step = null_compiled_step(torch, like, x)

    def run() -> None:
        _TOUCHED[:] = [buffer]
        try:
            step()
        finally:
            _TOUCHED.clear()
    return run, writes


#: the buffer the null op's kernels write while :func:`cold_null_compiled_step` runs (else none)
_TOUCHED: list[Any] = []


def _touch() -> None:
    for buffer in _TOUCHED:
        buffer.fill(1.0)


def _null_op(torch: Any, residuals: int) -> Any:
    """The custom op pair of :func:`null_compiled_step` saving ``residuals`` empty tensors, registered once
    per count (namespace dnnbind_bench)."""
    found = _NULL_OPS.get(residuals)
    if found is not None:
        return found

    def forward(x: Any, params: list) -> tuple:
        _touch()
        return x.clone(), [x.new_empty(0) for _ in range(residuals)]

    def fake_forward(x: Any, params: list) -> tuple:
        return x.new_empty(x.shape), [x.new_empty(0) for _ in range(residuals)]

    def backward_kernel(saved: list, d: Any, params: list) -> list:
        _touch()
        return [d.clone()] + [torch.zeros_like(p) for p in params]

    def fake_backward(saved: list, d: Any, params: list) -> list:
        return [d.new_empty(d.shape)] + [p.new_empty(p.shape) for p in params]

    null = torch.library.custom_op(f"dnnbind_bench::null{residuals}", forward, mutates_args=(),
                                   schema="(Tensor x, Tensor[] params) -> (Tensor, Tensor[])")
    null.register_fake(fake_forward)
    null_backward = torch.library.custom_op(f"dnnbind_bench::null{residuals}_backward", backward_kernel,
                                            mutates_args=(),
                                            schema="(Tensor[] saved, Tensor d, Tensor[] params) -> Tensor[]")
    null_backward.register_fake(fake_backward)

    def setup(ctx: Any, inputs: tuple, output: tuple) -> None:
        ctx.save_for_backward(*output[1], *inputs[1])

    def gradient(ctx: Any, d_y: Any, d_residuals: Any) -> tuple:
        saved = ctx.saved_tensors
        grads = null_backward(list(saved[:residuals]), d_y, list(saved[residuals:]))
        return grads[0], grads[1:]

    null.register_autograd(gradient, setup_context=setup)
    _NULL_OPS[residuals] = null
    return null


#: the null op pairs registered so far, by the count of residuals they save
_NULL_OPS: dict[int, Any] = {}
