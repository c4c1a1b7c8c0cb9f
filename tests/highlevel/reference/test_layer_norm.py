"""The reference backend's layer norm (the oracle): computed in float64 whatever the dtype, residual specs that
match what the forward saves; its values against torch are in test_against_torch.py (numpy_cases)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import dnnbind.highlevel.reference as reference
from dnnbind.highlevel.residual import ArraySpec


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
@pytest.mark.parametrize("with_weight", [True, False])
def test_saves_float64_statistics_as_its_specs_say(dtype, with_weight):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4)).astype(dtype)
    w = rng.standard_normal((3, 4)).astype(dtype) if with_weight else None
    y, saved = reference.layer_norm_forward(x, w, None, 2, 1e-5)
    specs = reference.layer_norm_residuals(ArraySpec(x.shape, x.dtype),
                                           None if w is None else ArraySpec(w.shape, w.dtype), None, 2, 1e-5)
    assert [(a.shape, a.dtype) for a in saved] == [(s.shape, s.dtype) for s in specs]
    assert y.dtype == x.dtype and saved[1].dtype == np.float64 and len(saved) == 3 + with_weight


def test_large_offset_small_spread():
    """float64 statistics: a float32 x with a large offset keeps its small spread."""
    x = (np.float32(1e4) + np.arange(8, dtype=np.float32) * np.float32(1e-3)).reshape(1, 8)
    y, _ = reference.layer_norm_forward(x, None, None, 1, 0.0)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, ((x64 - x64.mean()) / x64.std()).astype(np.float32), rtol=1e-6)
