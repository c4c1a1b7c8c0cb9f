"""The edge policy and the GPU-only fixes on a real GPU: empty and 0-d arrays without library calls,
private saved arrays, arrays of 2**31+ elements in chunks, dropout states across streams, bfloat16.
Needs CuPy, numpy and pytest only."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import dnnbind
from cupy_bfloat16 import bfloat16_or_skip
from highlevel.gpu.device import cuda, poisoned  # noqa: F401  (fixtures)

pytestmark = pytest.mark.gpu


def _flat(tree):
    if isinstance(tree, (tuple, list)):
        return [a for t in tree for a in _flat(t)]
    return [] if tree is None else [tree]


EMPTY = {
    "conv": lambda cp: dnnbind.conv(cp.zeros((0, 3, 5, 5), cp.float32), cp.ones((4, 3, 3, 3), cp.float32),
                                    cp.ones(4, cp.float32), padding=1),
    "maxpool": lambda cp: dnnbind.maxpool(cp.zeros((0, 3, 4, 4), cp.float32), 2),
    "softmax": lambda cp: dnnbind.softmax(cp.zeros((5, 0, 0), cp.float32), axis=-1),
    "activation": lambda cp: dnnbind.activation(cp.zeros((2, 0), cp.float16), "tanh"),
    "dropout": lambda cp: dnnbind.dropout(cp.zeros((0, 3), cp.float32), 0.5),
    "batchnorm": lambda cp: dnnbind.batchnorm(cp.zeros((0, 3, 2), cp.float32), cp.ones(3, cp.float32),
                                              cp.zeros(3, cp.float32)),
}


@pytest.mark.parametrize("op", list(EMPTY))
def test_empty_work_never_reaches_cudnn(poisoned, op):
    cp = poisoned
    with dnnbind.trace(file=None) as calls:
        y, pullback = EMPTY[op](cp)
        grads = _flat(pullback(cp.ones(y.shape, y.dtype)))
    assert not calls, [c.function for c in calls]
    assert isinstance(y, cp.ndarray) and 0 in y.shape
    assert all(isinstance(g, cp.ndarray) and not bool(g.any()) for g in grads)


@pytest.mark.parametrize("mode", ["relu", "tanh", "leaky_relu", "identity"])
def test_0d_activation_and_dropout_give_0d_device_arrays(cuda, mode):
    cp = cuda
    y, pullback = dnnbind.activation(cp.asarray(np.float32(0.5)), mode)
    assert isinstance(y, cp.ndarray) and y.shape == ()
    ref, ref_pb = dnnbind.activation(np.array(0.5, np.float32), mode)
    np.testing.assert_allclose(cp.asnumpy(y), ref, rtol=1e-6)
    np.testing.assert_allclose(cp.asnumpy(pullback(cp.asarray(np.float32(2.0)))), ref_pb(np.array(2.0, np.float32)),
                               rtol=1e-6)
    y, pullback = dnnbind.dropout(cp.asarray(np.float32(0.5)), 0.5, seed=1)
    assert y.shape == () and pullback(cp.asarray(np.float32(1.0))).shape == () and pullback.mask.shape == ()


SAVING = {
    "conv": lambda cp, a: dnnbind.conv(a(2, 3, 6, 6), a(4, 3, 3, 3)),
    "conv_transpose": lambda cp, a: dnnbind.conv_transpose(a(2, 3, 5, 5), a(3, 4, 3, 3)),
    "maxpool": lambda cp, a: dnnbind.maxpool(a(2, 3, 6, 6), 2),
    "softmax": lambda cp, a: dnnbind.softmax(a(3, 5)),
    "sigmoid": lambda cp, a: dnnbind.activation(a(3, 5), "sigmoid"),
    "leaky_relu": lambda cp, a: dnnbind.activation(a(3, 5), "leaky_relu"),
    "batchnorm": lambda cp, a: dnnbind.batchnorm(a(4, 3, 2), a(3), a(3)),
    "rnn": lambda cp, a: dnnbind.rnn(a(5, 2, 3), [(a(8, 3), a(8, 2), a(8), a(8))], hidden_size=2),
}


@pytest.mark.parametrize("op", list(SAVING))
def test_changing_inputs_or_results_after_the_forward_leaves_the_pullback_alone(cuda, op):
    cp, rng = cuda, np.random.default_rng(3)
    inputs = []

    def a(*shape):
        inputs.append(cp.asarray(rng.standard_normal(shape)))
        return inputs[-1]

    result, pullback = SAVING[op](cp, a)
    cotangents = [cp.ones_like(r) for r in _flat(result)]
    expected = [cp.asnumpy(g) for g in _flat(pullback(*cotangents))]
    for arr in inputs + _flat(result):
        arr.fill(np.nan)
    for g, e in zip(_flat(pullback(*cotangents)), expected):
        np.testing.assert_array_equal(cp.asnumpy(g), e)


def test_activation_and_dropout_of_more_than_2_31_elements(cuda):
    """The flat descriptors hold C ints: 2**31 + 1000 float16 elements (4 GiB) run in chunks, and every
    element of y and dx is written (the tail past 2**31 included)."""
    cp = cuda
    n = 2**31 + 1000
    x = cp.full(n, -1.0, cp.float16)
    x[-2000:] = 2.0
    y, pullback = dnnbind.activation(x, "relu")
    assert float(y[:1000].max()) == 0.0 and bool((y[-2000:] == 2.0).all()) and bool((y[2**30 - 5:2**30 + 5] == 0).all())
    dx = pullback(cp.ones(n, cp.float16))
    assert bool((dx[-2000:] == 1).all()) and float(dx[:1000].max()) == 0.0
    del y, dx
    y, pullback = dnnbind.dropout(cp.ones(n, cp.float16), 0.5, seed=3)
    tail, head = y[-100000:], y[:100000]
    assert 0.4 < float((tail != 0).mean()) < 0.6 and 0.4 < float((head != 0).mean()) < 0.6
    assert bool(((tail == 0) | (tail == 2)).all())
    dx = pullback(cp.ones(n, cp.float16))
    assert bool((dx[-100000:] == tail).all())


def test_dropout_from_many_threads_and_streams(cuda):
    """Unseeded dropout advances per-stream states; seeded dropout gives one mask on every stream."""
    cp = cuda
    x = cp.ones((256, 256), cp.float32)
    expected = cp.asnumpy(dnnbind.dropout(x, 0.5, seed=42)[0])
    failures = []

    def work():
        try:
            with cp.cuda.Stream(non_blocking=True):
                for _ in range(5):
                    y = dnnbind.dropout(x, 0.5, seed=42)[0]
                    if not np.array_equal(cp.asnumpy(y), expected):
                        failures.append("seeded mask differs")
                    z = dnnbind.dropout(x, 0.5)[0]
                    if not 0.4 < float((z != 0).mean()) < 0.6:
                        failures.append("unseeded keep rate")
        except Exception as exc:     # noqa: BLE001 - reported below
            failures.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]


BF16_TOL = 3e-2       # bfloat16 has an 8-bit mantissa: a few units of 2**-8 after float32 accumulation


BF16_CASES = {
    "conv": lambda a: dnnbind.conv(a(2, 4, 8, 8), a(6, 4, 3, 3), a(6), padding=1),
    "conv_transpose": lambda a: dnnbind.conv_transpose(a(2, 4, 5, 5), a(4, 3, 3, 3), stride=2),
    "maxpool": lambda a: dnnbind.maxpool(a(2, 3, 6, 6), 2),
    "meanpool": lambda a: dnnbind.meanpool(a(2, 3, 6, 6), 3, padding=1),
    "softmax": lambda a: dnnbind.softmax(a(4, 7)),
    "tanh": lambda a: dnnbind.activation(a(4, 7), "tanh"),
    "leaky_relu": lambda a: dnnbind.activation(a(4, 7), "leaky_relu"),
    "batchnorm": lambda a: dnnbind.batchnorm(a(4, 3, 5), a(3), a(3)),
}


@pytest.mark.parametrize("op", list(BF16_CASES))
def test_bfloat16_matches_the_reference(cuda, op):
    cp = cuda
    bf16 = bfloat16_or_skip(cp)
    rng = np.random.default_rng(7)
    host_inputs = []

    def host_a(*shape):
        host_inputs.append(rng.standard_normal(shape).astype(bf16))
        return host_inputs[-1]

    y_ref, pb_ref = BF16_CASES[op](host_a)
    it = iter(host_inputs)
    y, pullback = BF16_CASES[op](lambda *shape: cp.asarray(next(it)))
    assert y.dtype == bf16
    np.testing.assert_allclose(cp.asnumpy(y).astype(np.float32), y_ref.astype(np.float32), rtol=BF16_TOL,
                               atol=BF16_TOL)
    dy = rng.standard_normal(y.shape).astype(bf16)
    for g, r in zip(_flat(pullback(cp.asarray(dy))), _flat(pb_ref(dy))):
        assert g.dtype == bf16
        scale = max(1.0, float(np.abs(r.astype(np.float32)).max()))
        np.testing.assert_allclose(cp.asnumpy(g).astype(np.float32), r.astype(np.float32), rtol=BF16_TOL,
                                   atol=BF16_TOL * scale)
