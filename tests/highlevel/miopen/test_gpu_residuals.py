"""The MIOpen backend's residual form on an AMD GPU: NAME_forward's residuals are device arrays exactly as
NAME_residuals describes them, NAME_backward leaves them alone and gives the same gradients every time, as
the (result, pullback) form and the reference backend do; changing the inputs or the result after the
forward changes nothing.

Needs CuPy built for ROCm and a visible AMD GPU (marker gpu); skipped everywhere else. The residual specs
alone are checked on the CPU (test_residual_specs.py).
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import dnnbind.highlevel.reference as reference
from dnnbind.highlevel.dims import ConvDims, PoolDims, RNNDims
from dnnbind.highlevel.residual import ArraySpec
from dnnbind.highlevel.specs import SPECS

from .gpu_cases import TOLERANCE, assert_close, rnn_inputs, tree_map
from .rocm import count_calls, missing

REASON = missing()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]

miopen = importlib.import_module("dnnbind.highlevel.miopen")


def _conv(x_shape, w_shape, bias=True, transposed=False, **kw):
    def make(rng, dtype):
        x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
        channels = w_shape[1] * kw.get("groups", 1) if transposed else w_shape[0]
        b = rng.standard_normal(channels).astype(dtype) if bias else None
        dims = (ConvDims.transposed if transposed else ConvDims)(x_shape, w_shape, dtype=dtype, **kw)
        return [x, w, b], (dims,)
    return make


def _pool(x_shape, window, *extra, **kw):
    def make(rng, dtype):
        return [rng.standard_normal(x_shape).astype(dtype)], (PoolDims(x_shape, window, dtype=dtype, **kw), *extra)
    return make


def _x(shape, *static):
    return lambda rng, dtype: ([rng.standard_normal(shape).astype(dtype)], static)


def _batchnorm(shape, training, running=True):
    def make(rng, dtype):
        c = shape[1]
        stats = [rng.standard_normal(c).astype(dtype), rng.random(c).astype(dtype) + 0.5] if running else [None, None]
        arrays = [rng.standard_normal(shape).astype(dtype), rng.standard_normal(c).astype(dtype),
                  rng.standard_normal(c).astype(dtype), *stats]
        return arrays, (training, 0.2, 1e-5)
    return make


def _rnn(*args, h0=True, c0=True, **kw):
    def make(rng, dtype):
        (x, weights), options = rnn_inputs(*args, states=True, **kw)(rng, dtype)
        h, c = options.pop("h0", None), options.pop("c0", None)
        h, c = h if h0 else None, c if c0 else None
        shapes = [[None if a is None else a.shape for a in entry] for entry in weights]
        dims = RNNDims(x.shape, shapes, h0_shape=None if h is None else h.shape, c0_shape=None if c is None else c.shape,
                       dtype=dtype, **options)
        return [x, weights, h, c], (dims,)
    return make


#: (name, op, make(rng, dtype) -> (arrays in the spec's order, static arguments))
CASES = [
    ("conv", "conv", _conv((2, 4, 9, 8), (6, 2, 3, 2), stride=(2, 1), padding=((1, 2), (0, 1)), groups=2)),
    ("conv_nobias_flip", "conv", _conv((2, 3, 7, 7), (4, 3, 3, 2), bias=False, dilation=2, padding=1, flip=True)),
    ("conv1d", "conv", _conv((2, 3, 11), (4, 3, 3), padding=2)),
    ("conv_transpose", "conv_transpose", _conv((2, 4, 4, 5), (4, 3, 3, 3), transposed=True, stride=2, padding=1,
                                               output_padding=1, groups=2)),
    ("conv_transpose_extended", "conv_transpose", _conv((2, 4, 5, 5), (4, 3, 3, 3), bias=False, transposed=True,
                                                        dilation=2, output_padding=1)),
    ("maxpool2d", "maxpool", _pool((2, 3, 9, 9), 3, stride=2, padding=1)),
    ("maxpool3d", "maxpool", _pool((1, 2, 6, 5, 6), 2, padding=(1, 0, 1))),
    ("maxpool_dilated_ceil", "maxpool", _pool((2, 3, 9, 10), 3, stride=2, padding=1, dilation=(2, 1),
                                              ceil_mode=True)),          # on CuPy: saves the winners
    ("meanpool_ceil", "meanpool", _pool((2, 3, 8, 9), 3, True, stride=2, padding=1, ceil_mode=True)),
    ("meanpool_exclude_pad", "meanpool", _pool((2, 3, 7, 6), 3, False, stride=2, padding=((1, 0), 1))),
    ("softmax", "softmax", _x((2, 5, 3, 4), 1)),
    ("logsoftmax", "logsoftmax", _x((3, 5, 4), 2)),
    ("relu", "activation", _x((4, 6, 3), "relu", None)),
    ("elu", "activation", _x((4, 6, 3), "elu", 0.7)),
    ("swish", "activation", _x((4, 6, 3), "swish", 1.0)),
    ("identity", "activation", _x((4, 6, 3), "identity", None)),
    ("batchnorm_training", "batchnorm", _batchnorm((4, 3, 5, 6), True)),
    ("batchnorm_training_no_stats", "batchnorm", _batchnorm((8, 5), True, running=False)),
    ("batchnorm_inference", "batchnorm", _batchnorm((4, 3, 5), False)),
    ("lstm", "rnn", _rnn("lstm", 6, 3, 4, 5, layers=2, bidirectional=True)),
    ("lstm_c0_only", "rnn", _rnn("lstm", 5, 2, 3, 4, h0=False)),
    ("gru_lengths", "rnn", _rnn("gru", 5, 4, 3, 4, lengths=[1, 5, 3, 5], h0=False, c0=False)),
    ("rnn_tanh_nobias", "rnn", _rnn("rnn_tanh", 5, 2, 3, 4, bias=False, c0=False)),
]
#: cases also run in float16 (as in limits.HALF: the ones whose float16 results are known to compare)
HALF = ("conv", "conv_transpose", "maxpool2d", "meanpool_exclude_pad", "softmax", "relu", "swish",
        "batchnorm_training", "lstm")
PARAMS32 = [pytest.param(*case, "float32", id=f"{case[0]}-float32") for case in CASES]
PARAMS = PARAMS32 + [pytest.param(*case, "float16", id=f"{case[0]}-float16") for case in CASES if case[0] in HALF]


@pytest.fixture
def cp():
    import cupy
    return cupy


def _spec(tree):
    if tree is None:
        return None
    if isinstance(tree, (list, tuple)):
        return type(tree)(_spec(t) for t in tree)
    return ArraySpec(tuple(tree.shape), np.dtype(tree.dtype))


def _outputs(result):
    return list(result) if isinstance(result, tuple) else [result]


def _cotangents(rng, result, dtype):
    return tuple(None if o is None else rng.standard_normal(o.shape).astype(dtype) for o in _outputs(result))


def _host(cp, tree):
    return tree_map(cp.asnumpy, tree)


def _run_reference(op, arrays, static, cotangents):
    arrays = tree_map(np.copy, arrays)                   # batch norm updates its copies of the statistics
    result, pullback = getattr(reference, op)(*arrays, *static)
    return result, pullback(*cotangents)


@pytest.mark.parametrize("name, op, make, dtype", PARAMS)
def test_forward_saves_what_residuals_says_and_backward_leaves_it_alone(cp, name, op, make, dtype):
    rng = np.random.default_rng(0)
    arrays, static = make(rng, dtype)
    device = tree_map(cp.asarray, arrays)
    spec = getattr(miopen, f"{op}_residuals")(*_spec(arrays), *static)
    result, saved = getattr(miopen, f"{op}_forward")(*device, *static)

    assert isinstance(saved, tuple) and all(isinstance(r, cp.ndarray) for r in saved), [type(r) for r in saved]
    assert {r.device.id for r in saved} <= {device[0].device.id}
    assert [(tuple(r.shape), np.dtype(r.dtype)) for r in saved] == [(s.shape, np.dtype(s.dtype)) for s in spec]

    cotangents = _cotangents(rng, result, dtype)
    dev_cotangents = tree_map(cp.asarray, cotangents)
    before = [r.copy() for r in saved]
    backward = getattr(miopen, f"{op}_backward")
    first = _host(cp, backward(saved, dev_cotangents, *static))
    for r, b in zip(saved, before):
        cp.testing.assert_array_equal(r, b)                        # the backward never writes its residuals
    for a in [a for a in device if a is not None and not isinstance(a, list)] + _outputs(result):
        if a is not None:
            a[...] = np.nan                                        # nor do later changes of inputs or results
    assert_close(_host(cp, backward(saved, dev_cotangents, *static)), first, 0.0, f"{name} second backward")

    grads = first if isinstance(first, tuple) else (first,)
    assert len(grads) == len(SPECS[op].gradients)
    ref_result, ref_grads = _run_reference(op, arrays, static, cotangents)
    ref_grads = ref_grads if isinstance(ref_grads, tuple) else (ref_grads,)
    tol, grad_tol = TOLERANCE[dtype]
    if op in ("conv", "conv_transpose"):
        dy = cotangents[0].astype(np.float32)
        np.testing.assert_allclose(grads[2], dy.sum(axis=(0,) + tuple(range(2, dy.ndim))), rtol=grad_tol,
                                   atol=grad_tol * dy[0].size)           # db, computed even without b
        grads = grads[:2]
    assert_close(list(grads), list(ref_grads[:len(grads)]), grad_tol, f"{name} gradients")


@pytest.mark.parametrize("name, op, make, dtype", PARAMS32)
def test_the_pullback_form_runs_the_same_backward(cp, name, op, make, dtype):
    rng = np.random.default_rng(1)
    arrays, static = make(rng, dtype)
    result, saved = getattr(miopen, f"{op}_forward")(*tree_map(cp.asarray, arrays), *static)
    cotangents = tree_map(cp.asarray, _cotangents(rng, result, dtype))
    expected = getattr(miopen, f"{op}_backward")(saved, cotangents, *static)
    _, pullback = getattr(miopen, op)(*tree_map(cp.asarray, arrays), *static)
    got = pullback(*cotangents)
    if op in ("conv", "conv_transpose") and arrays[2] is None and len(got) == 2:
        expected = expected[:2]                   # the pullback form drops db when b is None
    assert_close(_host(cp, got), _host(cp, expected), TOLERANCE[dtype][1], f"{name} pullback")


def test_dropout_saves_the_mask_that_made_y(cp):
    x = cp.asarray(np.random.default_rng(2).standard_normal((64, 33)).astype(np.float32))
    spec = miopen.dropout_residuals(ArraySpec(x.shape, np.dtype(np.float32)), 0.3, 5)
    y, saved = miopen.dropout_forward(x, 0.3, 5)
    (mask,) = saved
    assert (mask.shape, np.dtype(mask.dtype)) == (spec[0].shape, spec[0].dtype) == ((64, 33), np.dtype(bool))
    cp.testing.assert_allclose(y, cp.where(mask, x / 0.7, 0), rtol=1e-6, atol=1e-6)
    dy = cp.ones_like(x)
    cp.testing.assert_allclose(miopen.dropout_backward(saved, (dy,), 0.3, 5), mask / 0.7, rtol=1e-6)
    _, pullback = miopen.dropout(x, 0.3, 5)
    cp.testing.assert_array_equal(pullback.mask, mask)                     # the same seed, the same mask
    xf = cp.asfortranarray(x)                                               # the mask follows x's memory order
    yf, (maskf,) = miopen.dropout_forward(xf, 0.3, 5)
    cp.testing.assert_array_equal(yf != 0, maskf)
    gen = np.random.default_rng(3)
    yg, savedg = miopen.dropout_forward(x, 0.3, gen)
    state = gen.bit_generator.state
    cp.testing.assert_array_equal(miopen.dropout_backward(savedg, (dy,), 0.3, gen) != 0, savedg[0])
    assert gen.bit_generator.state == state                                # the backward draws nothing


def test_0d_and_empty_calls_save_what_residuals_says(cp):
    y, saved = miopen.softmax_forward(cp.asarray(0.5, cp.float32), 0)
    assert y.shape == () and [r.shape for r in saved] == [s.shape for s in miopen.softmax_residuals(
        ArraySpec((), np.dtype(np.float32)), 0)] == [(1,)]
    assert miopen.softmax_backward(saved, (cp.asarray(1.0, cp.float32),), 0).shape == ()
    x, w = cp.zeros((0, 2, 5, 5), cp.float32), cp.ones((3, 2, 3, 3), cp.float32)
    dims = ConvDims(x.shape, w.shape)
    y, saved = miopen.conv_forward(x, w, None, dims)
    spec = miopen.conv_residuals(ArraySpec(x.shape, np.dtype(np.float32)), ArraySpec(w.shape, np.dtype(np.float32)),
                                 None, dims)
    assert [(r.shape, np.dtype(r.dtype)) for r in saved] == [(s.shape, s.dtype) for s in spec]
    dx, dw, _ = miopen.conv_backward(saved, (y,), dims)
    assert dx.shape == x.shape and dw.shape == w.shape and not cp.asnumpy(dw).any()


def test_the_conv_pullback_keeps_the_forward_s_settings(cp, monkeypatch):
    """The settings are a thread's or task's; the pullback form hands the forward's to its backward."""
    finds = count_calls(monkeypatch, "miopenFindConvolutionBackwardDataAlgorithm")
    x = cp.asarray(np.random.default_rng(4).standard_normal((1, 3, 13, 17)).astype(np.float32))
    w = cp.ones((2, 3, 3, 3), cp.float32)
    dims = ConvDims(x.shape, w.shape, padding=1)
    with miopen.settings(immediate=True):
        y, pullback = miopen.conv(x, w, None, dims)
    pullback(cp.ones_like(y))                                  # outside the block: still immediate mode, no Find
    assert finds == []
    y, saved = miopen.conv_forward(x, w, None, dims, settings=miopen.MIOpenSettings(immediate=True))
    miopen.conv_backward(saved, (cp.ones_like(y),), dims)       # the residual form: the settings in force here
    assert len(finds) == 1
