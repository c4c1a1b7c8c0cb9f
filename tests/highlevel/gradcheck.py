"""Finite-difference gradient checks shared by the high-level tests.

``check_gradients(run, inputs, select)`` calls ``run()`` (an op returning ``(result, pullback)``),
feeds the pullback random cotangents, and compares the gradients it returns with central differences
of ``sum(result * cotangent)``, perturbing the arrays in ``inputs`` in place (float64 only). It also
checks that a second pullback call gives identical results and that neither call changes the inputs
or the forward result.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np


def _outputs(result: Any) -> list[np.ndarray | None]:
    return list(result) if isinstance(result, tuple) else [result]


def _loss(result: Any, cotangents: Sequence[np.ndarray | None]) -> float:
    return float(sum(np.sum(o * c) for o, c in zip(_outputs(result), cotangents) if o is not None))


def check_gradients(run: Callable[[], tuple[Any, Callable]], inputs: Sequence[np.ndarray],
                    select: Callable[[Any], Sequence[np.ndarray]] = lambda g: g, *, seed: int = 0,
                    max_points: int = 40, eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-7) -> Any:
    """Assert that the pullback of ``run()`` matches central differences for every array in ``inputs``.

    ``select(pullback_output)`` returns the gradients aligned with ``inputs``. At most ``max_points``
    randomly chosen elements of each input are checked. Returns the pullback's output.
    """
    rng = np.random.default_rng(seed)
    for a in inputs:
        assert a.dtype == np.float64, "finite differences need float64"
    result, pullback = run()
    outputs = _outputs(result)
    cotangents = [None if o is None else rng.standard_normal(o.shape) for o in outputs]
    before_inputs = [a.copy() for a in inputs]
    before_outputs = [None if o is None else o.copy() for o in outputs]

    grads_out = pullback(*cotangents)
    first = _copy(grads_out)
    _scribble(grads_out)                 # a caller may overwrite what it got back ...
    grads_out = pullback(*cotangents)    # ... without changing the next call's answer
    _assert_identical(grads_out, first)
    for a, b in zip(inputs, before_inputs):
        np.testing.assert_array_equal(a, b, err_msg="the pullback changed an input")
    for o, b in zip(outputs, before_outputs):
        if o is not None:
            np.testing.assert_array_equal(o, b, err_msg="the pullback changed the forward result")

    grads = list(select(grads_out))
    assert len(grads) == len(inputs)
    for which, (a, g) in enumerate(zip(inputs, grads)):
        assert g.shape == a.shape, f"gradient {which} has shape {g.shape}, input {a.shape}"
        flat = a.reshape(-1)  # a view: the arrays are contiguous
        assert np.shares_memory(flat, a)
        points = np.arange(a.size) if a.size <= max_points else rng.choice(a.size, max_points, replace=False)
        numeric = np.empty(len(points))
        for i, p in enumerate(points):
            keep = flat[p]
            flat[p] = keep + eps
            plus = _loss(run()[0], cotangents)
            flat[p] = keep - eps
            minus = _loss(run()[0], cotangents)
            flat[p] = keep
            numeric[i] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(g.reshape(-1)[points], numeric, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {which} (shape {a.shape})")
    return grads_out


def _assert_identical(a: Any, b: Any) -> None:
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_identical(x, y)
    elif a is None:
        assert b is None
    else:
        np.testing.assert_array_equal(a, b, err_msg="a second pullback call gave a different result")


def _copy(tree: Any) -> Any:
    if isinstance(tree, (tuple, list)):
        return type(tree)(_copy(t) for t in tree)
    return None if tree is None else np.array(tree, copy=True)


def _scribble(tree: Any) -> None:
    if isinstance(tree, (tuple, list)):
        for t in tree:
            _scribble(t)
    elif isinstance(tree, np.ndarray) and tree.flags.writeable:
        tree.fill(np.nan)


def random(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Random float64 test data: standard normal, never exactly zero or one."""
    return rng.standard_normal(shape)
