"""The cpu backend against the reference backend (the oracle): every op over a spread of shapes and arguments,
results and every gradient, float64 to 1e-12 of the largest magnitude, float32 and the half dtypes to
their precision. Run with and without the C kernels (DNNBIND_NATIVE=0, see the Makefile's test target)."""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import dnnbind.highlevel.cpu as cpu
import dnnbind.highlevel.reference as reference
from dnnbind.highlevel import grad_mode
from dnnbind.highlevel.specs import SPECS

from ..numpy_cases import all_cases, cast, copies, cotangents_for, flat, is_float

CASES = all_cases(seed=11)
#: relative tolerance (of the largest magnitude of the expected array) per dtype
TOLERANCE = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 2e-5, np.dtype(np.float16): 4e-3,
             np.dtype(ml_dtypes.bfloat16): 3e-2}


def _close(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (what, ours.shape, theirs.shape)
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=what)
    finite = np.isfinite(b)
    np.testing.assert_array_equal(a[~finite & ~np.isnan(b)], b[~finite & ~np.isnan(b)], err_msg=what)
    scale = float(np.abs(b[finite]).max(initial=0.0)) or 1.0
    error = float(np.abs(a[finite] - b[finite]).max(initial=0.0))
    assert error <= TOLERANCE[theirs.dtype] * scale, f"{what}: max error {error:.3g} of scale {scale:.3g}"


def _run(backend, case, dtype, rng_seed):
    arrays = copies(cast(case.arrays, dtype))
    result, pullback = getattr(backend, case.op)(*arrays, *case.static)
    cotangents = cotangents_for(result, np.random.default_rng(rng_seed))
    return result, pullback(*cotangents), arrays


DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
#: every case in every dtype, but deep RNNs in float64 only (low precision: the one-layer cases)
PAIRS = [(c, name) for c in CASES for name in DTYPES
         if name == "float64" or not (c.op == "rnn" and c.kw.get("layers", 1) > 1)]


@pytest.mark.parametrize("case, dtype_name", PAIRS, ids=[f"{c.id}-{name}" for c, name in PAIRS])
def test_cpu_equals_the_reference(case, dtype_name):
    dtype = DTYPES[dtype_name]
    ours, our_grads, our_arrays = _run(cpu, case, dtype, 5)
    theirs, their_grads, their_arrays = _run(reference, case, dtype, 5)
    for i, (a, b) in enumerate(zip(flat(ours), flat(theirs), strict=True)):
        if not is_float(b):                     # maxpool's indices, exactly
            np.testing.assert_array_equal(a, b)
            continue
        _close(a, b, f"result {i}")
    for i, (a, b) in enumerate(zip(flat(our_grads), flat(their_grads), strict=True)):
        _close(a, b, f"gradient {i}")
    if case.op == "batchnorm":                  # the running statistics, updated in place
        for a, b in zip(our_arrays[3:], their_arrays[3:]):
            if b is not None:
                _close(a, b, "running statistics")


#: the ops whose backward reads an array torch's own layer keeps anyway, so that a lent forward keeps it
#: rather than an array of its own (maxpool keeps its winners' indices, smaller than x; meanpool nothing)
KEEPS_A_LENT_ARRAY = {"conv", "conv_transpose", "conv_bias_activation", "softmax", "logsoftmax", "activation",
                      "batchnorm", "layer_norm", "rnn"}
LENT = [(c, name) for c in CASES for name in ("float64", "float32")]


def _residual_form(case, arrays, borrowed):
    forward, backward = getattr(cpu, f"{case.op}_forward"), getattr(cpu, f"{case.op}_backward")
    with grad_mode.saving_residuals(True, borrowed=borrowed):
        result, saved = forward(*arrays, *case.static)
    return result, saved, backward(saved, cotangents_for(result, np.random.default_rng(5)), *case.static)


@pytest.mark.parametrize("case, dtype_name", LENT, ids=[f"{c.id}-{name}" for c, name in LENT])
def test_a_lent_forward_keeps_only_what_its_backward_reads(case, dtype_name):
    """Where the caller lends its arrays (grad_mode.borrowing: the torch adapter, whose autograd guards what
    the spec's ``backward_reads`` names), a residual may be an input or a result itself, but only one the
    spec names (anything else could change unguarded), and what it keeps of its own is never more than
    an owning forward keeps; results and gradients are an owning forward's."""
    dtype = DTYPES[dtype_name]
    spec = SPECS[case.op]
    owned = _residual_form(case, copies(cast(case.arrays, dtype)), False)
    arrays = copies(cast(case.arrays, dtype))
    result, saved, grads = _residual_form(case, arrays, True)
    results = result if isinstance(result, tuple) else (result,)
    named = {**{n: flat(a) for n, a in zip(spec.array_names, arrays)},
             **{n: flat(r) for n, r in zip(spec.output_names, results)}}
    reads = set(spec.reads(case.kw))
    borrowed = 0
    for residual in flat(saved):
        lenders = [n for n, lent in named.items() if any(np.shares_memory(residual, a) for a in lent)]
        assert set(lenders) <= reads, (lenders, reads)
        borrowed += bool(lenders)
    if case.op in KEEPS_A_LENT_ARRAY and not (case.op == "activation" and case.kw["mode"] == "identity"):
        assert borrowed
    lent_bytes = sum(r.nbytes for r in flat(saved) if any(np.shares_memory(r, a) for v in named.values() for a in v))
    assert sum(r.nbytes for r in flat(saved)) - lent_bytes <= sum(r.nbytes for r in flat(owned[1]))
    for i, (a, b) in enumerate(zip(flat(result), flat(owned[0]), strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"result {i}")
    for i, (a, b) in enumerate(zip(flat(grads), flat(owned[2]), strict=True)):
        _close(a, b, f"gradient {i}")


SKIPPABLE = [c for c in CASES if SPECS[c.op].skippable]


@pytest.mark.parametrize("case", SKIPPABLE, ids=[c.id for c in SKIPPABLE])
def test_skipped_gradients_are_none_on_both(case):
    """A skippable op's ``needs``: each gradient asked for equals the full backward's, bit for bit (rnn
    without dx skips the first layer's input product, without dweights every weight product), the others
    are None."""
    count = len(SPECS[case.op].gradients)
    for backend in (cpu, reference):
        forward, backward = getattr(backend, f"{case.op}_forward"), getattr(backend, f"{case.op}_backward")
        y, saved = forward(*case.arrays, *case.static)
        cts = cotangents_for(y, np.random.default_rng(3))
        full = backward(saved, cts, *case.static)
        for needs in itertools.product((False, True), repeat=count):
            part = backward(saved, cts, *case.static, needs=needs)
            assert len(part) == count
            for need, g, g_full in zip(needs, part, full):
                if not need:
                    assert g is None
                    continue
                for a, b in zip(flat(g), flat(g_full), strict=True):
                    np.testing.assert_array_equal(a, b)


def test_dropout_masks_are_the_same_on_both():
    x = np.ones((64, 33), np.float32)
    for seed in (0, 7, 123):
        _, cpu_pullback = cpu.dropout(x, 0.4, seed)
        _, ref_pullback = reference.dropout(x, 0.4, seed)
        np.testing.assert_array_equal(cpu_pullback.mask, ref_pullback.mask)
        assert 0 < cpu_pullback.mask.sum() < x.size
