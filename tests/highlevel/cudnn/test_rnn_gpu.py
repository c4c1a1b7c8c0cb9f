"""rnn on a real GPU through cuDNN: cuDNN's weight layout against the prediction, results and every
gradient against the reference backend and torch.nn.LSTM/GRU/RNN on CUDA, repeated pullbacks, packed
weights. Every allocation is poisoned with NaN first. Needs CuPy and a CUDA device (marker gpu);
the torch comparisons also need PyTorch with CUDA.

Run: PYTHONPATH=src python -m pytest -q -m gpu tests/highlevel/cudnn/test_rnn_gpu.py
"""
from __future__ import annotations

import numpy as np
import pytest

from dnnbind.highlevel.cudnn import rnn_packing
from dnnbind.highlevel.cudnn._lib import handle
from dnnbind.highlevel.cudnn.rnn import pack_rnn_weights
from dnnbind.highlevel.cudnn.rnn_packing import math_type
from dnnbind.highlevel.cudnn.rnn_plan import NetworkPlan, query_params
from dnnbind.highlevel.cudnn.rnn_weights import canonical_params
from dnnbind.highlevel.dims.rnn import RNNDims
from dnnbind.highlevel.gpu.arrays import current_stream

from . import rnn_cases
from .rnn_cases import GATES, Problem

pytestmark = pytest.mark.gpu

CONFIGS = [(mode, layers, dirs, bias) for mode in GATES for layers in (1, 2) for dirs in (1, 2)
           for bias in (True, False)]


def gpu_problem(cp, rng, *args, **kwargs):
    return Problem(rng, cp.asarray, *args, **kwargs)


def compare(cp, problem, **kwargs):
    return rnn_cases.compare(problem, cp.asnumpy, cp.ndarray, **kwargs)


# ---------------------------------------------------------------------------------------------- layout


@pytest.mark.parametrize("mode, layers, dirs, bias", CONFIGS)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_cudnns_weight_layout_is_the_predicted_one(mode, layers, dirs, bias, dtype, cuda):
    """cudnnGetRNNWeightParams' real answers against canonical_params (the prediction the host-side tests
    check the packing map with); the backend itself only ever uses the real answers."""
    shapes = [((GATES[mode] * 6, 5 if i < dirs else 6 * dirs), (GATES[mode] * 6, 6),
               (GATES[mode] * 6,) if bias else None, (GATES[mode] * 6,) if bias else None)
              for i in range(layers * dirs)]
    dims = RNNDims((3, 2, 5), shapes, mode=mode, hidden_size=6, num_layers=layers, bidirectional=dirs == 2,
                   dtype=dtype)
    plan = NetworkPlan(dims, math_type(dims))
    h = handle(cuda.cuda.runtime.getDevice(), current_stream())
    nbytes = plan.weight_space_bytes(h)
    space = cuda.empty(nbytes, np.uint8)
    real = query_params(h, plan.desc, dims, int(space.data.ptr), nbytes, plan.itemsize)
    predicted, size = canonical_params(dims)
    differences = [(key, real[key], predicted[key]) for key in predicted if real.get(key) != predicted[key]]
    assert not differences, f"cuDNN's layout differs from the prediction, first: {differences[:3]}"
    assert nbytes == size * plan.itemsize
    layout = plan.layout(h, cuda)
    assert layout.whole and layout.dense


# ---------------------------------------------------------------------------------------------- reference


CASES = [(mode, layers, dirs, lengths) for mode in GATES for layers in (1, 2) for dirs in (1, 2)
         for lengths in (None, (5, 2, 4))]


@pytest.mark.parametrize("mode, layers, dirs, lengths", CASES)
def test_matches_the_reference_in_float64(mode, layers, dirs, lengths, poisoned, rng):
    problem = gpu_problem(poisoned, rng, mode, layers, dirs, lengths=lengths, seq=5, inp=4, hidden=3)
    compare(poisoned, problem, public=True)


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-4), ("float16", 3e-2)])
@pytest.mark.parametrize("mode", list(GATES))
def test_matches_the_reference_in_single_and_half_precision(mode, dtype, tol, poisoned, rng):
    problem = gpu_problem(poisoned, rng, mode, 2, 2, lengths=(5, 1, 3), dtype=dtype, seq=5, inp=4, hidden=3)
    compare(poisoned, problem, tol=tol)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_without_biases_or_initial_states(mode, poisoned, rng):
    compare(poisoned, gpu_problem(poisoned, rng, mode, 2, 2, bias=False, states=False, lengths=(2, 4, 4)))


def test_pullback_twice_gives_the_same_gradients(poisoned, rng):
    cp = poisoned
    problem = gpu_problem(cp, rng, "lstm", 2, 2, lengths=(4, 1, 3), seq=4, inp=5, hidden=4)
    grads, pullback = compare(cp, problem)
    saved = [a.copy() for a in pullback.residuals]
    again = pullback(*problem.cotangents())
    for a, b in zip(pullback.residuals, saved):     # the reserve space above all: BackwardData writes into it
        assert bool((a == b).all()), "the backward changed a residual"
    first = [grads[0], grads[1], grads[2]] + [a for e in grads[3] for a in e]
    second = [again[0], again[1], again[2]] + [a for e in again[3] for a in e]
    for a, b in zip(first, second):
        np.testing.assert_allclose(cp.asnumpy(a), cp.asnumpy(b), rtol=1e-12, atol=1e-12)


def test_inference_mode_gives_the_training_forward(poisoned, rng):
    problem = gpu_problem(poisoned, rng, "gru", 2, 2, lengths=(3, 4, 1), seq=4)
    (y, hy, _), _ = problem.run()
    (yi, hyi, _), pullback = problem.run(training=False)
    np.testing.assert_allclose(poisoned.asnumpy(yi), poisoned.asnumpy(y), rtol=1e-12)
    np.testing.assert_allclose(poisoned.asnumpy(hyi), poisoned.asnumpy(hy), rtol=1e-12)
    with pytest.raises(RuntimeError, match="inference mode"):
        pullback(*problem.cotangents())


def test_packed_weights_run_in_place(poisoned, rng, monkeypatch):
    cp = poisoned
    problem = gpu_problem(cp, rng, "lstm", 2, 2, lengths=(4, 2, 3), dtype="float32", seq=4)
    (y, hy, cy), pullback = problem.run()
    grads = pullback(*problem.cotangents())
    packed = pack_rnn_weights(problem.device_weights(), **{k: v for k, v in problem.options().items()
                                                          if k != "lengths"})
    monkeypatch.setattr(rnn_packing, "pack", lambda *a: pytest.fail("packed weights were packed again"))
    (py, phy, pcy), ppull = problem.run(weights=packed, public=True)
    pgrads = ppull(*problem.cotangents())
    pairs = [(y, py), (hy, phy), (cy, pcy)] + list(zip(grads[:3], pgrads[:3]))
    pairs += [(a, b) for ea, eb in zip(grads[3], pgrads[3]) for a, b in zip(ea, eb)]
    for a, b in pairs:                           # the same weights in the same layout: the same results
        np.testing.assert_allclose(cp.asnumpy(b), cp.asnumpy(a), rtol=1e-6, atol=1e-7)
    packed[1][3][...] += 1.0                     # b_hh of the reverse direction, in place
    problem.weights[1] = problem.weights[1][:3] + (problem.weights[1][3] + 1.0,)
    compare(cp, problem, weights=packed, tol=1e-4)


# ---------------------------------------------------------------------------------------------- torch


def _torch_module(torch, problem):
    d = problem.dims
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(d.mode, torch.nn.RNN)
    kwargs = {"nonlinearity": d.mode[4:]} if cls is torch.nn.RNN else {}
    module = cls(d.input_size, d.hidden_size, num_layers=d.num_layers, bias=d.has_bias,
                 bidirectional=d.num_directions == 2, dtype=getattr(torch, d.dtype), device="cuda", **kwargs)
    suffixes = ["", "_reverse"][:d.num_directions]
    with torch.no_grad():
        for i, entry in enumerate(problem.weights):
            layer, suffix = divmod(i, d.num_directions)
            for name, a in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"), entry):
                if a is not None:
                    getattr(module, f"{name}_l{layer}{suffixes[suffix]}").copy_(torch.from_numpy(a))
    return module


@pytest.mark.parametrize("mode, layers, dirs, lengths", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_torch_nn_on_cuda(mode, layers, dirs, lengths, dtype, poisoned, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA")
    cp = poisoned
    problem = gpu_problem(cp, rng, mode, layers, dirs, lengths=lengths, dtype=dtype, seq=5, inp=4, hidden=3)
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        module = _torch_module(torch, problem)
        t = lambda a: torch.tensor(a, device="cuda", requires_grad=True)      # noqa: E731
        x, h0 = t(problem.x), t(problem.h0)
        state = (h0, t(problem.c0)) if mode == "lstm" else h0
        inp = x
        if lengths is not None:
            inp = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=False)
        out, hidden = module(inp, state)
        if lengths is not None:
            out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=problem.x.shape[0])
        hy, cy = hidden if mode == "lstm" else (hidden, None)
        loss = (out * torch.from_numpy(problem.dy).cuda()).sum() + (hy * torch.from_numpy(problem.dhy).cuda()).sum()
        if cy is not None:
            loss = loss + (cy * torch.from_numpy(problem.dcy).cuda()).sum()
        loss.backward()
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    (y, ohy, ocy), pullback = problem.run(public=True)
    dx, dh0, dc0, dw = pullback(*problem.cotangents())
    tol = 1e-10 if dtype == "float64" else 1e-4
    pairs = [("y", y, out), ("hy", ohy, hy), ("dx", dx, x.grad), ("dh0", dh0, h0.grad)]
    if mode == "lstm":
        pairs += [("cy", ocy, cy), ("dc0", dc0, state[1].grad)]
    suffixes = ["", "_reverse"]
    for i, entry in enumerate(dw):
        layer, d = divmod(i, dirs)
        for name, ours in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"), entry):
            if ours is not None:
                pairs.append((f"{name}_l{layer}{suffixes[d]}.grad", ours,
                              getattr(module, f"{name}_l{layer}{suffixes[d]}").grad))
    for name, ours, theirs in pairs:
        np.testing.assert_allclose(cp.asnumpy(ours), theirs.detach().cpu().numpy(), rtol=tol, atol=tol,
                                   err_msg=name)


# ---------------------------------------------------------------------------------------------- LSTM projection

PROJ_CASES = [(layers, dirs, bias, lengths) for layers in (1, 2) for dirs in (1, 2) for bias in (True, False)
              for lengths in (None, (5, 2, 4))]


@pytest.mark.parametrize("layers, dirs, bias", [(1, 1, True), (2, 2, True), (2, 2, False), (3, 1, False)])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_cudnns_projection_layout_is_the_predicted_one(layers, dirs, bias, dtype, cuda):
    """cuDNN's answers for an LSTM with projSize < hiddenSize: linLayerID 8 the (proj, hidden) projection
    matrix without bias, the recurrent matrices (hidden, proj); against canonical_params' guess of where
    it sits (the backend packs by the real answers either way)."""
    shapes = [((24, 5 if i < dirs else 2 * dirs), (24, 2)) + (((24,), (24,)) if bias else (None, None)) + ((2, 6),)
              for i in range(layers * dirs)]
    dims = RNNDims((3, 2, 5), shapes, mode="lstm", hidden_size=6, num_layers=layers, bidirectional=dirs == 2,
                   dtype=dtype, proj_size=2)
    plan = NetworkPlan(dims, math_type(dims))
    h = handle(cuda.cuda.runtime.getDevice(), current_stream())
    nbytes = plan.weight_space_bytes(h)
    space = cuda.empty(nbytes, np.uint8)
    real = query_params(h, plan.desc, dims, int(space.data.ptr), nbytes, plan.itemsize)
    for p in range(layers * dirs):
        assert real[(p, 8)].matrix_shape == (2, 6) and real[(p, 8)].bias_offset is None
        assert all(real[(p, lin)].matrix_shape == (6, 2) for lin in range(4, 8))
    predicted, size = canonical_params(dims)
    assert nbytes == size * plan.itemsize
    layout = plan.layout(h, cuda)
    assert layout.whole and layout.dense and layout.has_proj
    differences = [(key, real[key], predicted[key]) for key in predicted if real.get(key) != predicted[key]]
    assert not differences, f"cuDNN's layout differs from the prediction, first: {differences[:3]}"


@pytest.mark.parametrize("layers, dirs, bias, lengths", PROJ_CASES)
def test_projection_matches_the_reference_in_float64(layers, dirs, bias, lengths, poisoned, rng):
    problem = gpu_problem(poisoned, rng, "lstm", layers, dirs, bias=bias, lengths=lengths, seq=5, inp=4, hidden=5,
                          proj=3)
    compare(poisoned, problem, public=True)


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-4), ("float16", 3e-2)])
def test_projection_matches_the_reference_in_single_and_half_precision(dtype, tol, poisoned, rng):
    problem = gpu_problem(poisoned, rng, "lstm", 2, 2, lengths=(5, 1, 3), dtype=dtype, seq=5, inp=4, hidden=5,
                          proj=2)
    compare(poisoned, problem, tol=tol)


def test_projection_without_initial_states_and_packed_weights(poisoned, rng):
    cp = poisoned
    problem = gpu_problem(cp, rng, "lstm", 2, 2, states=False, lengths=(4, 2, 3), seq=4, inp=3, hidden=4, proj=2)
    compare(cp, problem)
    packed = pack_rnn_weights(problem.device_weights(), **{k: v for k, v in problem.options().items()
                                                          if k != "lengths"})
    assert all(len(e) == 5 for e in packed)
    compare(cp, problem, weights=packed)
