"""The reference backend (the oracle) against PyTorch: every op over a spread of shapes and arguments
(tests/highlevel/numpy_cases.py), results and every gradient, in float64 to 1e-10 of the largest magnitude,
and in the half dtypes to their precision."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dnnbind.highlevel.reference as reference
from dnnbind.highlevel.dims.rnn import TORCH_GATES

from ..numpy_cases import all_cases, cast, copies, cotangents_for, flat, is_float

torch = pytest.importorskip("torch")
F = torch.nn.functional

CASES = all_cases(seed=3, torch_padding=True)
TOLERANCE = {np.dtype(np.float64): 1e-10, np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-3,
             np.dtype(ml_dtypes.bfloat16): 1.6e-2}


def _t(a, dtype=torch.float64):
    return None if a is None else torch.tensor(np.asarray(a, np.float64), dtype=dtype, requires_grad=True)


def _activation(mode, x, alpha):
    return {"relu": lambda: F.relu(x), "sigmoid": lambda: torch.sigmoid(x), "tanh": lambda: torch.tanh(x),
            "identity": lambda: x * 1, "elu": lambda: F.elu(x, alpha), "leaky_relu": lambda: F.leaky_relu(x, alpha),
            "clipped_relu": lambda: F.hardtanh(x, 0.0, alpha), "swish": lambda: x * torch.sigmoid(alpha * x)}[mode]()


def _flipped(w, kw):
    return w.flip(list(range(2, w.dim()))) if kw.get("flip") else w


def _conv_kw(kw, *names):
    return {n: kw[n] for n in names if n in kw}


def _rnn(case, inputs):
    """torch.nn.LSTM/GRU/RNN with the case's weights, lengths through pack_padded_sequence."""
    c, (x, weights, h0, c0) = case.kw, inputs
    mode, layers, dirs, proj = c["mode"], c["layers"], c["dirs"], c.get("proj", 0)
    hidden = case.static[0].hidden_size
    kwargs = dict(num_layers=layers, bidirectional=dirs == 2, bias=c["bias"], dtype=x.dtype)
    if mode == "lstm":
        module = torch.nn.LSTM(x.shape[2], hidden, proj_size=proj, **kwargs)
    elif mode == "gru":
        module = torch.nn.GRU(x.shape[2], hidden, **kwargs)
    else:
        module = torch.nn.RNN(x.shape[2], hidden, nonlinearity=mode[4:], **kwargs)
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")
    params = {}
    for idx, entry in enumerate(weights):
        suffix = f"_l{idx // dirs}" + ("_reverse" if idx % dirs else "")
        for name, value in zip(names, entry):
            if value is not None:
                params[name + suffix] = value
    y_packed = x if c["lengths"] is None else torch.nn.utils.rnn.pack_padded_sequence(
        x, torch.tensor(c["lengths"]), enforce_sorted=False)
    state = None if h0 is None else ((h0, c0) if mode == "lstm" else h0)
    out, hy = torch.func.functional_call(module, params, (y_packed, state))
    if c["lengths"] is not None:
        out = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])[0]
    return (out, *hy) if mode == "lstm" else (out, hy)


def _torch(case, inputs):
    """PyTorch's result of the case (a tuple of outputs) on torch tensors ``inputs``."""
    op, kw = case.op, case.kw
    if op == "conv":
        x, w, b = inputs
        n = x.dim() - 2
        return (getattr(F, f"conv{n}d")(x, _flipped(w, kw), b, **_conv_kw(kw, "stride", "padding", "dilation",
                                                                           "groups")),)
    if op == "conv_bias_activation":
        x, w, b = inputs
        n = x.dim() - 2
        y = getattr(F, f"conv{n}d")(x, _flipped(w, kw), b, **_conv_kw(kw, "stride", "padding", "dilation", "groups"))
        return (_activation(kw["mode"], y, case.static[2]),)
    if op == "conv_transpose":
        x, w, b = inputs
        n = x.dim() - 2
        return (getattr(F, f"conv_transpose{n}d")(x, _flipped(w, kw), b, **_conv_kw(
            kw, "stride", "padding", "output_padding", "groups", "dilation")),)
    if op == "maxpool":
        (x,) = inputs
        y, indices = getattr(F, f"max_pool{x.dim() - 2}d")(x, kw["window"], kw.get("stride"), kw.get("padding", 0),
                                                           kw.get("dilation", 1), kw.get("ceil_mode", False), True)
        return (y, indices) if case.static[1] else (y,)
    if op == "meanpool":
        (x,) = inputs
        n = x.dim() - 2
        extra = {} if n == 1 else {"divisor_override": kw["divisor_override"]}
        return (getattr(F, f"avg_pool{n}d")(x, kw["window"], kw.get("stride"), kw.get("padding", 0),
                                            kw.get("ceil_mode", False), kw["count_include_pad"], **extra),)
    if op in ("softmax", "logsoftmax"):
        return ((F.softmax if op == "softmax" else F.log_softmax)(inputs[0], kw["axis"]),)
    if op == "activation":
        return (_activation(kw["mode"], inputs[0], kw["alpha"]),)
    if op == "batchnorm":
        x, gamma, beta, mean, var = inputs
        return (F.batch_norm(x, mean, var, gamma, beta, *case.static),)
    if op == "layer_norm":
        x, weight, bias = inputs
        return (F.layer_norm(x, kw["normalized_shape"], weight, bias, kw["eps"]),)
    if op == "rnn":
        return _rnn(case, inputs)
    raise AssertionError(op)


def _torch_inputs(case, arrays, dtype):
    """The case's arrays as torch tensors: differentiable ones, and batch norm's running statistics plain."""
    if case.op == "batchnorm":
        x, gamma, beta, mean, var = arrays
        stats = [None if a is None else torch.tensor(np.asarray(a, np.float64)) for a in (mean, var)]
        return [_t(x, dtype), _t(gamma, dtype), _t(beta, dtype)] + stats
    if case.op == "rnn":
        x, weights, h0, c0 = arrays
        return [_t(x, dtype), [tuple(_t(a, dtype) for a in e) for e in weights], _t(h0, dtype), _t(c0, dtype)]
    return [_t(a, dtype) for a in arrays]


def _close(ours, theirs, dtype, what):
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs), err_msg=what)
    finite = np.isfinite(theirs)
    np.testing.assert_array_equal(ours[~finite & ~np.isnan(theirs)], theirs[~finite & ~np.isnan(theirs)], err_msg=what)
    scale = float(np.abs(theirs[finite]).max(initial=0.0)) or 1.0
    error = float(np.abs(ours[finite] - theirs[finite]).max(initial=0.0))
    assert error <= TOLERANCE[np.dtype(dtype)] * scale, f"{what}: max error {error:.3g} of scale {scale:.3g}"


def _differentiable(case, inputs):
    """The torch inputs whose gradients the pullback returns, in its order (None: not given)."""
    if case.op == "rnn":
        x, weights, h0, c0 = inputs
        return [x, h0, c0] + [a for e in weights for a in e]
    return inputs[:3] if case.op == "batchnorm" else inputs


def _our_gradients(case, grads):
    if case.op == "rnn":
        dx, dh0, dc0, dweights = grads
        return [dx, dh0, dc0] + [g for e in dweights for g in e]
    grads = list(grads) if isinstance(grads, tuple) else [grads]
    if case.op == "layer_norm":                 # no weight, no dweight; no bias, no dbias
        given = iter(grads)
        return [None if a is None else next(given) for a in case.arrays]
    return grads + [None] * (case.op.startswith("conv") and case.arrays[2] is None)     # no b, no db


DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
#: every case but dropout's in every dtype, deep RNNs in float64 only (low precision: the one-layer cases)
PAIRS = [(c, name) for c in CASES if c.op != "dropout" for name in DTYPES
         if name == "float64" or not (c.op == "rnn" and c.kw["layers"] > 1)]


@pytest.mark.parametrize("case, dtype_name", PAIRS, ids=[f"{c.id}-{name}" for c, name in PAIRS])
def test_reference_equals_torch(case, dtype_name):
    dtype = DTYPES[dtype_name]
    arrays = copies(cast(case.arrays, dtype))           # the values as the low-precision dtype holds them
    result, pullback = getattr(reference, case.op)(*copies(arrays), *case.static)
    cotangents = cotangents_for(result, np.random.default_rng(4))
    grads = _our_gradients(case, pullback(*cotangents))

    # torch computes on the same values in float64 (and rounds to the dtype, as the reference does)
    inputs = _torch_inputs(case, arrays, torch.float64)
    expected = _torch(case, inputs)
    for i, (ours, theirs) in enumerate(zip(flat(result), expected, strict=True)):
        theirs = theirs.detach().numpy()
        if not is_float(ours):
            np.testing.assert_array_equal(ours, theirs, err_msg="indices")
            continue
        assert ours.dtype == np.dtype(dtype)
        _close(ours, theirs.astype(dtype), dtype, f"result {i}")
    outs = [o for o, c in zip(expected, cotangents) if c is not None]
    cots = [torch.tensor(np.asarray(c, np.float64)) for c in cotangents if c is not None]
    wanted = _differentiable(case, inputs)
    given = [t for t in wanted if t is not None]
    theirs = iter(torch.autograd.grad(outs, given, cots, allow_unused=True))
    for i, (ours, t) in enumerate(zip(grads, wanted, strict=True)):
        if t is None:
            continue
        expected_grad = next(theirs)
        expected_grad = np.zeros(t.shape) if expected_grad is None else expected_grad.numpy()
        assert ours.dtype == np.dtype(dtype), (i, ours.dtype)
        _close(ours, expected_grad.astype(dtype), dtype, f"gradient {i}")
    if case.op == "batchnorm" and case.static[0]:       # running statistics updated in place, as torch's
        for i in (3, 4):
            if arrays[i] is not None:
                ours = copies(arrays)
                reference.batchnorm(*ours, *case.static)
                _close(ours[i], inputs[i].numpy(), dtype, "running statistics")


@pytest.mark.parametrize("case", [c for c in CASES if c.op == "dropout"], ids=[c.id for c in CASES if c.op == "dropout"])
def test_dropout_keeps_scales_and_zeroes_by_its_mask(case):
    (x,), (p, seed) = case.arrays, case.static
    y, pullback = reference.dropout(x, p, seed)
    mask = pullback.mask
    assert mask.dtype == bool and not mask.flags.writeable
    scale = 0.0 if p == 1 else 1 / (1 - p)
    np.testing.assert_array_equal(y, np.where(mask, x * scale, 0.0))
    np.testing.assert_array_equal(pullback(np.ones_like(x)), np.where(mask, scale, 0.0))
    if p == 0:
        assert mask.all()
    if p == 1:
        assert not mask.any() and not y.any()
    if 0 < p < 1 and x.size > 100:
        assert abs(mask.mean() - (1 - p)) < 0.1
    np.testing.assert_array_equal(reference.dropout(x.astype(np.float16), p, seed)[1].mask, mask)


def test_maxpool_ties_nan_and_minus_infinity_like_torch():
    """Ties go to the first maximum, the last NaN wins, and an all -inf window routes its gradient to its first
    element in x, not to the padding."""
    from dnnbind.highlevel.dims import PoolDims
    x = np.array([[[1.0, 1.0, np.nan, 0.0, np.nan, -np.inf, -np.inf, 2.0, 2.0]]])
    dims = PoolDims(x.shape, 3, stride=2, padding=1)
    (y, indices), pullback = reference.maxpool(x, dims, True)
    xt = _t(x)
    yt, it = F.max_pool1d(xt, 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_array_equal(indices, it.numpy())
    dy = np.arange(1.0, y.size + 1).reshape(y.shape)
    np.testing.assert_array_equal(pullback(dy), torch.autograd.grad(yt, xt, torch.tensor(dy))[0].numpy())


def test_activation_kinks_and_nan_like_torch():
    x = np.array([0.0, -0.0, np.nan, 6.0, -1.0, 1.0])
    for mode in ("relu", "elu", "leaky_relu", "clipped_relu"):
        alpha = {"relu": None, "elu": 1.0, "leaky_relu": 0.01, "clipped_relu": 6.0}[mode]
        y, pullback = reference.activation(x, mode, alpha)
        xt = _t(x)
        yt = _activation(mode, xt, alpha)
        np.testing.assert_array_equal(y, yt.detach().numpy())
        np.testing.assert_array_equal(np.signbit(y), np.signbit(yt.detach().numpy()))
        dx = torch.autograd.grad(yt, xt, torch.ones(x.shape, dtype=torch.float64))[0].numpy()
        if mode == "clipped_relu":      # at NaN torch's hardtanh backward gives 1 or 0 by dtype and size; ours: 0
            assert pullback(np.ones_like(x))[2] == 0
            dx[2] = 0
        np.testing.assert_array_equal(pullback(np.ones_like(x)), dx)
        if mode in ("relu", "clipped_relu"):    # dy selected, not times 0: inf or NaN at x = -1 gives 0
            dy = np.where(x == -1.0, np.inf, 1.0)
            dx = torch.autograd.grad(_activation(mode, xt, alpha), xt, torch.from_numpy(dy))[0].numpy()
            assert dx[4] == 0 and pullback(dy)[4] == 0


def test_every_rnn_mode_is_covered():
    assert {c.kw["mode"] for c in CASES if c.op == "rnn"} == set(TORCH_GATES)
