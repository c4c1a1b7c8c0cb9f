"""The GPU tests' one way to get numpy's bfloat16 dtype, skipping where CuPy cannot hold bfloat16 arrays."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def bfloat16_or_skip(cp: Any) -> np.dtype:
    """numpy's bfloat16 (ml_dtypes); skips the test when ml_dtypes is missing or this CuPy predates bfloat16."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    try:
        cp.zeros(1, ml_dtypes.bfloat16)
    except Exception as exc:      # CuPy releases before its bfloat16 support
        pytest.skip(f"this CuPy has no bfloat16 arrays: {exc}")
    return np.dtype(ml_dtypes.bfloat16)
