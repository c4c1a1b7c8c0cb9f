"""Layer normalization's residual form on the cpu backend (dnnbind.highlevel.cpu.layer_norm) against
torch.nn.functional.layer_norm: values and gradients, every float dtype, normalized shapes of 1 to 3
trailing dims, weight and bias present or not, unbatched and empty inputs, argument checks."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dnnbind.highlevel.cpu.layer_norm import (compute_dtype, layer_norm_backward, layer_norm_forward,
                                              layer_norm_residuals)
from dnnbind.highlevel.dims.checks import check_non_negative_float, numpy_dtype
from dnnbind.highlevel.dims.layer_norm import check_layer_norm
from dnnbind.highlevel.reference.layer_norm import gradients as layer_norm_gradients
from dnnbind.highlevel.residual import ArraySpec

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "float64": torch.float64}
#: (rtol, atol) per dtype for values and gradients against torch's CPU kernel
TOLERANCE = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (1e-5, 1e-5),
             "float64": (1e-12, 1e-12)}

CASES = [  # x shape, normalized_shape (as the caller gives it)
    ((4, 6), 6),
    ((4, 6), (6,)),
    ((2, 3, 5), (3, 5)),
    ((2, 3, 4, 5), [3, 4, 5]),
    ((3, 2, 7), (7,)),
    ((5,), (5,)),              # unbatched: x is one normalized slice
    ((3, 4), (3, 4)),          # unbatched, two normalized dims
]


def _to_numpy(t: torch.Tensor | None, dtype: str) -> np.ndarray | None:
    if t is None:
        return None
    if dtype == "bfloat16":
        return t.detach().view(torch.int16).numpy().view(numpy_dtype("bfloat16")).copy()
    return t.detach().numpy().copy()


def _to_torch(a: np.ndarray, dtype: str) -> torch.Tensor:
    if dtype == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _torch_case(x_shape: tuple[int, ...], normalized: tuple[int, ...], dtype: str, affine: tuple[bool, bool],
                seed: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tdt = TORCH_DTYPES[dtype]
    x = (torch.randn(x_shape, generator=gen, dtype=torch.float64) * 3 + 1).to(tdt).requires_grad_()
    w = torch.randn(normalized, generator=gen, dtype=torch.float64).to(tdt).requires_grad_() if affine[0] else None
    b = torch.randn(normalized, generator=gen, dtype=torch.float64).to(tdt).requires_grad_() if affine[1] else None
    dy = torch.randn(x_shape, generator=gen, dtype=torch.float64).to(tdt)
    return x, w, b, dy


def _close(actual: np.ndarray | None, expected: torch.Tensor | None, dtype: str, what: str) -> None:
    assert (actual is None) == (expected is None), what
    if expected is None:
        return
    assert actual is not None
    assert actual.dtype == numpy_dtype(dtype), what
    assert actual.shape == tuple(expected.shape), what
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(actual.astype(np.float64), expected.detach().double().numpy(), rtol=rtol,
                               atol=atol, err_msg=what)


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
@pytest.mark.parametrize("affine", [(True, True), (False, False), (True, False), (False, True)])
@pytest.mark.parametrize("x_shape, normalized_shape", CASES)
def test_matches_torch(x_shape: tuple[int, ...], normalized_shape: object, dtype: str,
                       affine: tuple[bool, bool]) -> None:
    ndim = check_layer_norm(x_shape, normalized_shape, None, None)
    normalized = x_shape[len(x_shape) - ndim:]
    x, w, b, dy = _torch_case(x_shape, normalized, dtype, affine, seed=len(x_shape) * 7 + ndim)
    y_t = F.layer_norm(x, normalized, w, b, 1e-5)
    y_t.backward(dy)

    y, residuals = layer_norm_forward(_to_numpy(x, dtype), _to_numpy(w, dtype), _to_numpy(b, dtype), ndim, 1e-5)
    _close(y, y_t, dtype, "y")
    needs = (True, w is not None, b is not None)
    dx, dw, db = layer_norm_backward(residuals, (_to_numpy(dy, dtype),), ndim, 1e-5, needs=needs)
    _close(dx, x.grad, dtype, "dx")
    _close(dw, None if w is None else w.grad, dtype, "dweight")
    _close(db, None if b is None else b.grad, dtype, "dbias")


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
def test_residuals_spec_matches_forward(dtype: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4)).astype(numpy_dtype(dtype))
    w = rng.standard_normal((3, 4)).astype(numpy_dtype(dtype))
    for weight in (w, None):
        _, saved = layer_norm_forward(x, weight, None, 2, 1e-5)
        spec = layer_norm_residuals(ArraySpec(x.shape, x.dtype),
                                    None if weight is None else ArraySpec(w.shape, w.dtype),
                                    None, 2, 1e-5)
        assert [(a.shape, a.dtype) for a in saved] == [(s.shape, s.dtype) for s in spec]
    assert spec[1].dtype == (np.float64 if dtype == "float64" else np.float32)


def test_statistics_are_computed_wide() -> None:
    """float32 data with a large offset: a float32 two-pass mean/variance would lose the small spread, so the
    forward computes in float64; it saves the statistics in float32 (as torch and MIOpen do)."""
    x = (np.float32(1e4) + np.arange(8, dtype=np.float32) * np.float32(1e-3)).reshape(1, 8)
    y, (_, mean, rstd) = layer_norm_forward(x, None, None, 1, 0.0)
    expected = x.astype(np.float64)
    assert compute_dtype(np.float32) == np.float64 and mean.dtype == rstd.dtype == np.float32
    np.testing.assert_allclose(y, ((expected - expected.mean()) / expected.std()).astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(mean, expected.mean(axis=1), rtol=1e-7)
    np.testing.assert_allclose(rstd, 1 / expected.std(axis=1), rtol=1e-7)


def test_residuals_are_private() -> None:
    """Changing x or weight after the forward changes nothing the pullback returns."""
    rng = np.random.default_rng(5)
    x, w, b, dy = (rng.standard_normal(s) for s in ((3, 4), (4,), (4,), (3, 4)))
    _, saved = layer_norm_forward(x, w, b, 1, 1e-5)
    first = layer_norm_backward(saved, (dy,), 1, 1e-5)
    x[...] = 7.0
    w[...] = -2.0
    again = layer_norm_backward(saved, (dy,), 1, 1e-5)
    for a, c in zip(first, again):
        np.testing.assert_array_equal(a, c)


def test_needs_leaves_gradients_out() -> None:
    rng = np.random.default_rng(6)
    x, w, dy = rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal((3, 4))
    _, saved = layer_norm_forward(x, w, None, 1, 1e-5)
    full = layer_norm_backward(saved, (dy,), 1, 1e-5)
    assert all(g is not None for g in full)
    dx, dw, db = layer_norm_backward(saved, (dy,), 1, 1e-5, needs=(False, True, False))
    assert dx is None and db is None
    np.testing.assert_array_equal(dw, full[1])
    # the array-method formulas take the same residuals directly
    np.testing.assert_array_equal(layer_norm_gradients(saved, dy, 1)[0], full[0])


@pytest.mark.parametrize("affine", [(True, True), (False, False), (True, False), (False, True)])
@pytest.mark.parametrize("x_shape, normalized", [((0, 4), (4,)), ((0, 3, 2), (3, 2)), ((3, 0), (0,)),
                                                  ((2, 3, 0), (3, 0))])
def test_empty_like_torch(x_shape: tuple[int, ...], normalized: tuple[int, ...], affine: tuple[bool, bool]) -> None:
    """The backend's guarded residual form (the edge policy) on empty calls: zeros of the right shapes,
    and the backward tells which of weight and bias were given."""
    from dnnbind.highlevel import cpu
    x, w, b, dy = _torch_case(x_shape, normalized, "float32", affine, seed=1)
    y_t = F.layer_norm(x, normalized, w, b)
    y_t.backward(dy)
    ndim = check_layer_norm(x_shape, normalized, normalized, normalized)
    arrays = (_to_numpy(x, "float32"), _to_numpy(w, "float32"), _to_numpy(b, "float32"))
    with np.errstate(all="raise"):        # no warning, no division by zero on empty work
        y, saved = cpu.layer_norm_forward(*arrays, ndim, 1e-5)
        grads = cpu.layer_norm_backward(saved, (_to_numpy(dy, "float32"),), ndim, 1e-5)
    specs = cpu.layer_norm_residuals(*(None if a is None else ArraySpec(a.shape, a.dtype) for a in arrays), ndim,
                                     1e-5)
    assert [(a.shape, a.dtype) for a in saved] == [(s.shape, s.dtype) for s in specs]
    _close(y, y_t, "float32", "y")
    for g, t, what in zip(grads, (x, w, b), ("dx", "dweight", "dbias")):
        _close(g, None if t is None else t.grad, "float32", what)


def test_eps_zero_on_constant_slice_is_nan_like_torch() -> None:
    x = np.ones((2, 3))
    x[1] = [1.0, 2.0, 4.0]
    y, _ = layer_norm_forward(x, None, None, 1, 0.0)
    expected = F.layer_norm(torch.from_numpy(x), (3,), eps=0.0).numpy()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
    np.testing.assert_allclose(y[1], expected[1])


# -- argument checks ---------------------------------------------------------------------------------

def test_check_returns_normalized_ndim() -> None:
    assert check_layer_norm((2, 3, 4), 4, (4,), (4,)) == 1
    assert check_layer_norm((2, 3, 4), (3, 4), (3, 4), None) == 2
    assert check_layer_norm((2, 3, 4), torch.Size([2, 3, 4]), None, None) == 3
    assert check_layer_norm((4,), [4], None, (4,)) == 1


@pytest.mark.parametrize("x_shape, normalized, weight, bias, error, words", [
    ((3, 4), (5,), None, None, ValueError, ["x has shape (3, 4)", "normalized_shape=(5,)"]),
    ((3, 4), (2, 3, 4), None, None, ValueError, ["x has shape (3, 4)", "(*, 2, 3, 4)"]),
    ((3, 4), (), None, None, ValueError, ["normalized_shape=()", "at least one"]),
    ((), (), None, None, ValueError, ["normalized_shape=()"]),
    ((), 1, None, None, ValueError, ["x has shape ()"]),
    ((3, 4), (-4,), None, None, ValueError, ["normalized_shape=(-4,)", "non-negative"]),
    ((3, 4), (4.0,), None, None, TypeError, ["normalized_shape=(4.0,)", "float"]),
    ((3, 4), 4.0, None, None, TypeError, ["normalized_shape=4.0", "float"]),
    ((3, 4), (True,), None, None, TypeError, ["normalized_shape=(True,)", "bool"]),
    ((3, 4), "4", None, None, TypeError, ["normalized_shape='4'"]),
    ((3, 4), (4,), (3,), None, ValueError, ["weight has shape (3,)", "(4,)", "normalized_shape"]),
    ((3, 4), (4,), None, (4, 1), ValueError, ["bias has shape (4, 1)", "(4,)"]),
])
def test_bad_arguments_named(x_shape: tuple[int, ...], normalized: object, weight: tuple[int, ...] | None,
                             bias: tuple[int, ...] | None, error: type[Exception], words: list[str]) -> None:
    with pytest.raises(error) as info:
        check_layer_norm(x_shape, normalized, weight, bias)
    for word in words:
        assert word in str(info.value)


def check_layer_norm_eps(eps: object) -> float:
    return check_non_negative_float("eps", eps)


@pytest.mark.parametrize("eps, error, words", [
    (-1e-5, ValueError, ["eps=-1e-05", "negative"]),
    (float("nan"), ValueError, ["eps=nan", "finite"]),
    (float("inf"), ValueError, ["eps=inf", "finite"]),
    ("1e-5", TypeError, ["eps='1e-5'"]),
    (True, TypeError, ["eps=True"]),
])
def test_bad_eps_named(eps: object, error: type[Exception], words: list[str]) -> None:
    with pytest.raises(error) as info:
        check_layer_norm_eps(eps)
    for word in words:
        assert word in str(info.value)


def test_eps_accepted_as_torch_does() -> None:
    assert check_layer_norm_eps(0) == 0.0 and isinstance(check_layer_norm_eps(0), float)
    assert check_layer_norm_eps(1e-12) == 1e-12
    assert check_layer_norm_eps(np.float32(0.5)) == 0.5


def test_bad_cotangent_named() -> None:
    x = np.ones((2, 3))
    _, saved = layer_norm_forward(x, None, None, 1, 1e-5)
    with pytest.raises(ValueError, match=r"dy has shape \(3, 2\)"):
        layer_norm_backward(saved, (np.ones((3, 2)),), 1, 1e-5)
    with pytest.raises(TypeError, match="dy must be a numpy array"):
        layer_norm_backward(saved, ([[1.0] * 3] * 2,), 1, 1e-5)


def test_no_grad_saves_nothing() -> None:
    """Under dnnbind.no_grad() the forward keeps no copy of x (no backward can come); same result."""
    from dnnbind.highlevel.grad_mode import no_grad
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal(4)
    y, saved = layer_norm_forward(x, w, None, 1, 1e-5)
    with no_grad():
        y_inference, nothing = layer_norm_forward(x, w, None, 1, 1e-5)
    assert nothing == () and len(saved) == 4
    np.testing.assert_array_equal(y_inference, y)


# -- the public function (dnnbind.layer_norm, made from the spec) ---------------------------------

@pytest.mark.parametrize("affine", [(True, True), (False, False), (True, False), (False, True)])
def test_public_function_matches_torch_and_drops_absent_gradients(affine: tuple[bool, bool]) -> None:
    import dnnbind
    x, w, b, dy = _torch_case((2, 3, 4), (3, 4), "float32", affine, seed=9)
    y_t = F.layer_norm(x, (3, 4), w, b)
    y_t.backward(dy)
    for normalized_shape in ((3, 4), [3, 4], torch.Size([3, 4])):
        y, pullback = dnnbind.layer_norm(_to_numpy(x, "float32"), normalized_shape, _to_numpy(w, "float32"),
                                         _to_numpy(b, "float32"))
        _close(y, y_t, "float32", "y")
        grads = pullback(_to_numpy(dy, "float32"))
        expected = [x.grad] + [t.grad for t in (w, b) if t is not None]
        assert len(grads) == len(expected)
        for g, t in zip(grads, expected):
            _close(g, t, "float32", "gradient")


@pytest.mark.parametrize("call, error, words", [
    (lambda ln, x: ln(x, (5,)), ValueError, ["x has shape (3, 4)", "normalized_shape=(5,)"]),
    (lambda ln, x: ln(x, 4, eps=-1.0), ValueError, ["eps=-1.0", "negative"]),
    (lambda ln, x: ln(x, 4, np.ones(4, np.float64)), TypeError, ["weight"]),
    (lambda ln, x: ln(x, 4, None, np.ones(3, np.float32)), ValueError, ["bias has shape (3,)"]),
])
def test_public_function_names_bad_arguments(call, error, words) -> None:
    import dnnbind
    with pytest.raises(error) as info:
        call(dnnbind.layer_norm, np.ones((3, 4), np.float32))
    for word in words:
        assert word in str(info.value)
