"""Per-call overhead on the CPU: a tiny convolution, and the shape-and-argument work of a repeated call."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

import dnnbind
from dnnbind.highlevel import dispatch, plans

#: x(1,1,4,4) w(1,1,3,3) padding 1: the problem costs nothing, the path to it everything
TINY_X, TINY_W, TINY_PADDING = (1, 1, 4, 4), (1, 1, 3, 3), 1
GOAL_TINY = 2.0          # x torch.conv2d
GOAL_ARGUMENT_US = 2.0   # microseconds, absolute


def tiny_arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(TINY_X, dtype=np.float32), rng.standard_normal(TINY_W, dtype=np.float32))


@contextmanager
def backend_doing_nothing(op: str) -> Iterator[None]:
    """Route ``op`` on numpy arrays to a backend function that returns at once, so that a timed public
    call measures dispatch, argument checks and shape logic alone."""
    dispatch.backend_function("cpu", op)                       # fill the dispatch table (numpy arrays run on cpu)
    key = (dispatch.BACKENDS["cpu"], op)
    saved = dispatch._functions[key]
    dispatch._functions[key] = lambda *args, **kwargs: (None, None)      # (result, pullback), both empty
    plans.clear_plan_cache()                                   # the plans hold the backend function too
    try:
        yield
    finally:
        dispatch._functions[key] = saved
        plans.clear_plan_cache()


def tiny_conv() -> Any:
    x, w = tiny_arrays()
    return lambda: dnnbind.conv(x, w, padding=TINY_PADDING)


def torch_tiny_conv(torch: Any) -> Any:
    x, w = tiny_arrays()
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)

    def call() -> None:
        with torch.no_grad():
            torch.conv2d(xt, wt, padding=TINY_PADDING)
    return call
