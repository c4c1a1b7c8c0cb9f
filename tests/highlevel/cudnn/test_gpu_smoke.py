"""One case of every op on every dtype, on the GPU against the reference backend: what `make gpu-check`
runs first, so that a short first run already says whether each op works in each dtype.

Results and gradients are compared with a relative error per dtype (bfloat16: a few units of its 8-bit
mantissa). Needs CuPy, numpy and pytest only (bfloat16 also ml_dtypes and a CuPy with bfloat16 arrays).
"""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind
from cupy_bfloat16 import bfloat16_or_skip
from highlevel.gpu.device import cuda  # noqa: F401  (fixture)

pytestmark = pytest.mark.gpu

TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2}
DTYPES = list(TOLERANCE)

#: op -> call(a) where a(*shape) makes an input; every op once
OPS = {
    "conv": lambda a: dnnbind.conv(a(2, 4, 9, 8), a(6, 2, 3, 3), a(6), padding=1, groups=2),
    "conv_transpose": lambda a: dnnbind.conv_transpose(a(2, 4, 5, 5), a(4, 3, 3, 3), stride=2, output_padding=1),
    "maxpool": lambda a: dnnbind.maxpool(a(2, 3, 7, 7), 3, stride=2, padding=1),
    "meanpool": lambda a: dnnbind.meanpool(a(2, 3, 6, 6), 3, padding=1, count_include_pad=False),
    "softmax": lambda a: dnnbind.softmax(a(4, 5, 3), axis=1),
    "logsoftmax": lambda a: dnnbind.logsoftmax(a(4, 7), axis=-1),
    "activation": lambda a: dnnbind.activation(a(4, 7), "elu"),
    "batchnorm": lambda a: dnnbind.batchnorm(a(4, 3, 5), a(3), a(3)),
    "rnn": lambda a: dnnbind.rnn(a(4, 2, 3), [(a(8, 3), a(8, 2), a(8), a(8))], hidden_size=2),
}


def _flat(tree):
    if isinstance(tree, (tuple, list)):
        return [a for t in tree for a in _flat(t)]
    return [] if tree is None else [tree]


def _numpy_dtype(cp, name):
    if name != "bfloat16":
        return np.dtype(name)
    return bfloat16_or_skip(cp)


def _close(got, want, tol, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    assert not np.isnan(got).any(), f"{what}: NaN (an element never written)"
    scale = max(float(np.abs(want).max()), 1.0)
    assert float(np.abs(got - want).max()) <= tol * scale, f"{what}: off by {np.abs(got - want).max()}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
def test_op_on_every_dtype(cuda, op, dtype):
    cp = cuda
    npdt = _numpy_dtype(cp, dtype)
    rng = np.random.default_rng(0)
    host_inputs = []

    def host(*shape):
        host_inputs.append((rng.standard_normal(shape) * 0.5).astype(npdt))
        return host_inputs[-1]

    ref, ref_pb = OPS[op](host)
    inputs = iter(host_inputs)
    out, pullback = OPS[op](lambda *shape: cp.asarray(next(inputs)))
    tol = TOLERANCE[dtype]
    for i, (g, r) in enumerate(zip(_flat(out), _flat(ref))):
        assert g.dtype == npdt, (op, g.dtype)
        _close(cp.asnumpy(g).astype(np.float64), r.astype(np.float64), tol, f"{op} result {i}")
    cotangents = [(rng.standard_normal(r.shape) * 0.5).astype(npdt) for r in _flat(ref)]
    if op == "rnn":
        cotangents = cotangents[:1]
    got = _flat(pullback(*[cp.asarray(c) for c in cotangents]))
    want = _flat(ref_pb(*cotangents))
    assert len(got) == len(want)
    for i, (g, r) in enumerate(zip(got, want)):
        _close(cp.asnumpy(g).astype(np.float64), r.astype(np.float64), tol, f"{op} gradient {i}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_on_every_dtype(cuda, dtype):
    cp = cuda
    npdt = _numpy_dtype(cp, dtype)
    x = cp.asarray(np.ones((64, 64), npdt))
    y, pullback = dnnbind.dropout(x, 0.25, seed=5)
    yh = cp.asnumpy(y).astype(np.float64)
    kept = yh != 0
    assert 0.65 < kept.mean() < 0.85 and np.allclose(yh[kept], 1 / 0.75, rtol=TOLERANCE[dtype])
    dx = cp.asnumpy(pullback(cp.asarray(np.ones((64, 64), npdt)))).astype(np.float64)
    np.testing.assert_array_equal(dx != 0, kept)
