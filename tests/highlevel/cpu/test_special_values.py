"""inf, -inf, NaN and values near the dtype's largest in an op's input and cotangents: the numpy backends
give their IEEE results (inf * 0 = NaN in a product) without numpy's floating-point warnings, as torch and
the vendors' libraries do. Every case of every op, forward and backward, on the cpu backend (with and
without the C kernels: the Makefile runs this folder again with DNNBIND_NATIVE=0) and on the reference."""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import dnnbind.highlevel.cpu as cpu
import dnnbind.highlevel.reference as reference

from ..numpy_cases import all_cases, cast, copies, cotangents_for, flat, is_float

CASES = all_cases(seed=4)
DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _with_special_values(a: np.ndarray) -> np.ndarray:
    """``a`` with inf, -inf, NaN and +-(largest / 2) spread over it (its first entries where it is small)."""
    out = a.copy()
    flat_view = out.reshape(-1)
    big = float(np.finfo(np.float32 if out.dtype.name == "bfloat16" else out.dtype).max) / 2
    specials = np.array([np.inf, -np.inf, np.nan, big, -big]).astype(out.dtype)
    where = np.linspace(0, flat_view.size - 1, min(flat_view.size, 3 * len(specials))).astype(int)
    flat_view[where] = np.resize(specials, where.size)
    return out


@pytest.mark.parametrize("backend", [cpu, reference], ids=["cpu", "reference"])
@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_special_values_give_results_without_numpy_warnings(case, dtype_name, backend):
    arrays = copies(cast(case.arrays, DTYPES[dtype_name]))
    arrays[0] = _with_special_values(arrays[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result, pullback = getattr(backend, case.op)(*arrays, *case.static)
        cotangents = tuple(None if c is None else _with_special_values(c)
                           for c in cotangents_for(result, np.random.default_rng(2)))
        grads = pullback(*cotangents)
    x = arrays[0]
    assert flat(result)[0].dtype == x.dtype
    assert all(g.dtype == x.dtype for g in flat(grads) if is_float(g) and g.shape == x.shape)


@pytest.mark.parametrize("context_variable", [True, False], ids=["numpy-2-state", "np.errstate"])
def test_quiet_silences_numpy_inside_the_call_only(context_variable, monkeypatch):
    """quiet: through numpy 2's error-state context variable, or np.errstate where numpy has none; the
    caller's own error state stands before and after (here: raise on invalid), also when the call raises."""
    from dnnbind.highlevel.reference import _arrays
    if not context_variable:
        monkeypatch.setattr(_arrays, "_STATE", None)
    elif _arrays._STATE is None:
        pytest.skip("this numpy keeps no error-state context variable")   # (numpy 1.x)
    inf = np.array([np.inf])

    def product():
        return inf * 0

    def failing():
        inf * 0
        raise KeyError("inside")

    with np.errstate(invalid="raise"):
        assert np.isnan(_arrays.quiet(product)()[0])
        with pytest.raises(KeyError):
            _arrays.quiet(failing)()
        with pytest.raises(FloatingPointError):
            product()

