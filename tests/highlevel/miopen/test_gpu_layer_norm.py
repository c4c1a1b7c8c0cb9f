"""MIOpen's layer norm on an AMD GPU against the cpu backend's numpy residual form: values, saved statistics and
gradients (float16, float32, float64; 1 to 3 normalized dims; weight/bias present or not; unbatched).

Needs CuPy built for ROCm and a visible AMD GPU (marker gpu); skipped everywhere else.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from dnnbind.highlevel.cpu.layer_norm import layer_norm_backward, layer_norm_forward

from .rocm import count_calls, missing

REASON = missing()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

layer_norm = importlib.import_module("dnnbind.highlevel.miopen.layer_norm")
TOLERANCE = {"float16": 5e-3, "float32": 2e-5, "float64": 1e-10}
CASES = [((64, 33), 1), ((4, 5, 6), 2), ((3, 2, 4, 5), 3), ((40,), 1), ((50, 2, 1000), 1)]


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("affine", [(True, True), (False, False), (True, False), (False, True)])
@pytest.mark.parametrize("shape, n", CASES)
def test_matches_reference(shape, n, dtype, affine, monkeypatch):
    import cupy as cp
    rng = np.random.default_rng(len(shape) + n)
    normalized = shape[len(shape) - n:]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    w = rng.standard_normal(normalized).astype(dtype) if affine[0] else None
    b = rng.standard_normal(normalized).astype(dtype) if affine[1] else None
    dy = rng.standard_normal(shape).astype(dtype)
    calls = count_calls(monkeypatch, "miopenLayerNormForward")
    dev = [None if a is None else cp.asarray(a) for a in (x, w, b)]
    y, saved = layer_norm.layer_norm_forward(*dev, n, 1e-5)
    assert calls == ["miopenLayerNormForward"]
    y_ref, saved_ref = layer_norm_forward(x, w, b, n, 1e-5)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(cp.asnumpy(y).astype(np.float64), y_ref.astype(np.float64), rtol=tol, atol=tol)
    for ours, ref in zip(saved[1:3], saved_ref[1:3]):         # mean and rstd as MIOpen saved them
        np.testing.assert_allclose(cp.asnumpy(ours), ref, rtol=tol, atol=tol)
    needs = (True, w is not None, b is not None)
    grads = layer_norm.layer_norm_backward(saved, (cp.asarray(dy),), n, 1e-5, needs=needs)
    grads_ref = layer_norm_backward(saved_ref, (dy,), n, 1e-5, needs=needs)
    for ours, ref in zip(grads, grads_ref):
        assert (ours is None) == (ref is None)
        if ref is not None:
            np.testing.assert_allclose(cp.asnumpy(ours).astype(np.float64), ref.astype(np.float64), rtol=tol * 10,
                                       atol=tol * 10)
