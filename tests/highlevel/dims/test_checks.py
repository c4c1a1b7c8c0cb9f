"""The small argument checks (dnnbind.highlevel.dims.checks)."""
from __future__ import annotations

import numpy as np
import pytest

from dnnbind.highlevel.dims.checks import check_dtype, check_probability, normalize_axis

def test_check_dtype():
    assert check_dtype("x", np.float16) == "float16"
    assert check_dtype("x", np.dtype("float64")) == "float64"
    # the same names by the fast lookup and the long way
    for dtype in ("float16", "float32", "float64", "=f4", "<f8", np.float32, "bfloat16"):
        if dtype == "bfloat16":
            pytest.importorskip("ml_dtypes")
            import ml_dtypes
            dtype = ml_dtypes.bfloat16
        assert check_dtype("x", dtype) == np.dtype(dtype).name
    with pytest.raises(TypeError, match=r"^x has dtype"):
        check_dtype("x", [np.float32])          # unhashable: the long way's error
    with pytest.raises(TypeError, match=r"^x has dtype >f4, float32 in non-native byte order"):
        check_dtype("x", ">f4")                 # float32 by name, but the kernels cannot read it
    for bad in (np.int64, np.complex64, bool, "float128" if hasattr(np, "float128") else np.uint8):
        with pytest.raises(TypeError, match=r"^x has dtype \w+; dnnbind supports"):
            check_dtype("x", bad)


def test_normalize_axis():
    assert normalize_axis(-1, 3) == 2 and normalize_axis(0, 1) == 0
    with pytest.raises(ValueError, match=r"axis=3 is out of range for an array with 3 dimensions"):
        normalize_axis(3, 3)
    with pytest.raises(ValueError, match=r"axis=-4 is out of range"):
        normalize_axis(-4, 3)
    with pytest.raises(TypeError, match=r"axis=1.0 must be an int"):
        normalize_axis(1.0, 3)


def test_check_probability():
    assert check_probability("p", 0) == 0.0 and check_probability("p", 1) == 1.0
    for bad in (-0.1, 1.01):
        with pytest.raises(ValueError, match=r"p=.* must be in \[0, 1\]"):
            check_probability("p", bad)
    with pytest.raises(ValueError, match=r"p=nan must be finite"):
        check_probability("p", float("nan"))
    with pytest.raises(TypeError, match=r"p='0.5' must be a real number"):
        check_probability("p", "0.5")


def test_an_axis_out_of_range_is_both_a_value_error_and_an_index_error():
    """numpy's AxisError: code written for torch (IndexError) and for dnnbind's other checks (ValueError)
    both catch it."""
    from dnnbind.highlevel.dims.checks import normalize_axis
    with pytest.raises(IndexError, match=r"dim=2 is out of range"):
        normalize_axis(2, 2, "dim")
    with pytest.raises(ValueError):
        normalize_axis(-3, 2)
