"""Per-thread scratch buffers of the cpu backend: reused memory that never leaks into results."""
from __future__ import annotations

import threading

import numpy as np

import dnnbind
from dnnbind.highlevel.cpu import _scratch


def test_a_role_reuses_its_memory_and_roles_do_not_share():
    n = _scratch.MIN_BYTES // 4
    a = _scratch.scratch("test a", (4, n), np.float32)
    b = _scratch.scratch("test a", (2, n // 2), np.float64)
    c = _scratch.scratch("test b", (4, n), np.float32)
    assert np.shares_memory(a, b) and not np.shares_memory(a, c)
    assert b.shape == (2, n // 2) and b.dtype == np.float64


def test_large_and_small_requests_get_fresh_memory():
    for count in (_scratch.MAX_BYTES // 4 + 1, _scratch.MIN_BYTES // 4 - 1):
        assert not np.shares_memory(_scratch.scratch("test fresh", (count,), np.float32),
                                    _scratch.scratch("test fresh", (count,), np.float32))


def test_threads_have_their_own_buffers():
    seen = {}

    def grab(name):
        seen[name] = _scratch.scratch("test thread", (_scratch.MIN_BYTES,), np.float32)

    threads = [threading.Thread(target=grab, args=(n,)) for n in ("one", "two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not np.shares_memory(seen["one"], seen["two"])


def test_results_and_gradients_never_alias_the_scratch(rng):
    """A second call (same problem, other data) must leave the first call's results untouched."""
    # (large enough for the reused buffers: from MIN_BYTES)
    shapes = [((2, 3, 40, 40), (4, 3, 3, 3), dict(padding=1)),           # flat rows
              ((2, 4, 40, 41), (6, 2, 3, 3), dict(stride=2, groups=2)),  # windows, col2im
              ((2, 5, 40, 40), (5, 1, 3, 3), dict(padding=1, groups=5))]  # depthwise
    for x_shape, w_shape, kw in shapes:
        x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
        y, pullback = dnnbind.conv(x, w, **kw)
        grads = pullback(np.ones_like(y))
        copies = [a.copy() for a in (y, *grads)]
        y2, pullback2 = dnnbind.conv(2 * x + 1, -w, **kw)
        pullback2(np.full_like(y2, 3.0))
        for kept, copy in zip((y, *grads), copies):
            np.testing.assert_array_equal(kept, copy)
        for again, copy in zip(pullback(np.ones_like(y)), copies[1:]):
            np.testing.assert_array_equal(again, copy)
