"""The cuDNN backend's residual form on a GPU: NAME_forward saves exactly what NAME_residuals says
(count, shapes, dtypes), as CuPy arrays of its own on the device; NAME_backward gives the reference
backend's gradients, the same ones on every call, and never changes the residuals; options and layouts
are read back from the residuals. Needs CuPy, numpy and pytest only."""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel import cudnn as backend
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.dims.rnn import RNNDims
from dnnbind.highlevel.gpu import layout
from dnnbind.highlevel.residual import ArraySpec

from .rnn_cases import make_weights
from .test_gpu_ops import assert_close, host, random

pytestmark = pytest.mark.gpu


def spec(a):
    return None if a is None else ArraySpec(tuple(a.shape), a.dtype)


def _flat(tree):
    if isinstance(tree, (tuple, list)):
        return [a for t in tree for a in _flat(t)]
    return [] if tree is None else [tree]


class Case:
    """One call: numpy arrays (nested for rnn), static arguments, options, the public op on numpy for the
    reference (result, pullback), and the memory layout the device copies of the arrays get."""

    def __init__(self, arrays, static, reference, options=None, lay="NCHW"):
        self.arrays, self.static, self.reference, self.options, self.lay = arrays, static, reference, options or {}, lay

    def device(self, cp):
        def move(a, lay):
            return None if a is None else layout.in_layout(cp, cp.asarray(a), lay)
        out = []
        for i, a in enumerate(self.arrays):
            if isinstance(a, list):
                out.append([[move(w, "NCHW") for w in entry] for entry in a])
            else:
                out.append(move(a, self.lay if i == 0 else "NCHW"))
        return out

    def specs(self, arrays):
        return [[[spec(w) for w in e] for e in a] if isinstance(a, list) else spec(a) for a in arrays]


def _cases():
    rng = np.random.default_rng(70)
    f32 = "float32"
    x, w, b = random(rng, (2, 3, 9, 8), f32), random(rng, (4, 3, 3, 2), f32), random(rng, (4,), f32)
    conv_kw = dict(stride=(2, 1), padding=((1, 2), (0, 1)))
    xt, wt = random(rng, (1, 2, 3, 4), f32), random(rng, (2, 3, 2, 2), f32)
    tkw = dict(stride=2, dilation=3, output_padding=2)
    xp = (rng.permutation(2 * 3 * 9 * 10).reshape(2, 3, 9, 10) / 16.0).astype(f32)
    pdims = PoolDims(xp.shape, (3, 2), stride=(2, 1), padding=((1, 0), (0, 1)), dtype=f32)
    pkw = dict(stride=(2, 1), padding=((1, 0), (0, 1)))
    xs = random(rng, (4, 5, 6), f32)
    gamma, beta = random(rng, (3,), f32), random(rng, (3,), f32)
    xb = 2 + 3 * random(rng, (4, 3, 5, 6), f32)
    mean, var = random(rng, (3,), f32), (rng.random(3) + 0.5).astype(f32)
    weights = make_weights(rng, "lstm", 3, 4, 2, 2, True, f32)
    xr, h0, c0 = random(rng, (5, 3, 3), f32), random(rng, (4, 3, 4), f32), random(rng, (4, 3, 4), f32)
    rdims = RNNDims(xr.shape, [tuple(None if a is None else a.shape for a in e) for e in weights], mode="lstm",
                    hidden_size=4, num_layers=2, bidirectional=True, lengths=(5, 2, 4), dtype=f32)
    return {
        "conv": Case([x, w, b], (ConvDims(x.shape, w.shape, dtype=f32, **conv_kw),),
                     lambda: dnnbind.conv(x, w, b, **conv_kw), lay="NHWC"),
        "conv_transpose": Case([xt, wt, None], (ConvDims.transposed(xt.shape, wt.shape, dtype=f32, **tkw),),
                               lambda: dnnbind.conv_transpose(xt, wt, **tkw)),
        "maxpool": Case([xp], (pdims,), lambda: dnnbind.maxpool(xp, (3, 2), **pkw), lay="NHWC"),
        "meanpool": Case([xp], (pdims, False), lambda: dnnbind.meanpool(xp, (3, 2), count_include_pad=False, **pkw)),
        "softmax": Case([xs], (1,), lambda: dnnbind.softmax(xs, axis=1)),
        "logsoftmax": Case([xs], (2,), lambda: dnnbind.logsoftmax(xs, axis=2)),
        "activation": Case([xb], ("swish", 1.3), lambda: dnnbind.activation(xb, "swish", alpha=1.3), lay="NHWC"),
        "batchnorm": Case([xb, gamma, beta, mean, var], (True, 0.3, 1e-3),
                          lambda: dnnbind.batchnorm(xb, gamma, beta, running_mean=mean.copy(), running_var=var.copy(),
                                                    training=True, momentum=0.3, eps=1e-3), lay="NHWC"),
        "batchnorm_inference": Case([xb, gamma, beta, mean, var], (False, 0.3, 1e-3),
                                    lambda: dnnbind.batchnorm(xb, gamma, beta, running_mean=mean, running_var=var,
                                                              training=False, momentum=0.3, eps=1e-3)),
        "rnn": Case([xr, weights, h0, c0], (rdims,),
                    lambda: dnnbind.rnn(xr, weights, h0=h0, c0=c0, hidden_size=4, num_layers=2, bidirectional=True,
                                        lengths=(5, 2, 4))),
    }


CASES = _cases()


@pytest.mark.parametrize("name", list(CASES))
def test_forward_saves_what_residuals_says_and_backward_matches_the_reference(poisoned, name):
    cp, case, rng = poisoned, CASES[name], np.random.default_rng(71)
    op = name.split("_inference")[0]
    forward, backward = getattr(backend, f"{op}_forward"), getattr(backend, f"{op}_backward")
    arrays = case.device(cp)
    with backend.settings(deterministic=True):
        result, residuals = forward(*arrays, *case.static, **case.options)
        assert isinstance(residuals, tuple) and all(isinstance(r, cp.ndarray) for r in residuals)
        expected = getattr(backend, f"{op}_residuals")(*case.specs(arrays), *case.static, **case.options)
        assert [(r.shape, r.dtype) for r in residuals] == [(s.shape, s.dtype) for s in expected]
        device = cp.cuda.runtime.getDevice()
        for r in residuals:
            assert r.device.id == device
            for a in _flat(arrays) + _flat(result):
                assert not cp.may_share_memory(r, a), "a residual shares memory with an input or the result"
        ref_result, ref_pullback = case.reference()
        assert_close(host(_flat(result)), _flat(ref_result), "float32", "result")
        cotangents = tuple(random(rng, r.shape, r.dtype) for r in _flat(ref_result))
        saved = [r.copy() for r in residuals]
        grads = backward(residuals, tuple(cp.asarray(c) for c in cotangents), *case.static, **case.options)
        again = backward(residuals, tuple(cp.asarray(c) for c in cotangents), *case.static, **case.options)
    for r, s in zip(residuals, saved):
        cp.testing.assert_array_equal(r, s)
    assert_close(host(_flat(again)), host(_flat(grads)), "float32", "second backward")
    want = _flat(ref_pullback(*cotangents))
    got = _flat(grads)[:len(want)]          # conv's db is computed even without b
    assert_close(host(got), want, "float32", "gradients")
    if op in ("conv", "conv_transpose"):
        db = _flat(grads)[2]
        axes = (0,) + tuple(range(2, cotangents[0].ndim))
        assert_close(host(db), cotangents[0].astype(np.float64).sum(axis=axes), "float32", "db")


def test_conv_backward_reads_the_layout_from_the_saved_x(poisoned):
    """float64 computes in NCHW but saves x in the caller's NHWC layout; ``layout=`` given to the forward only,
    or to both, gives the same gradients, in that layout."""
    cp, rng = poisoned, np.random.default_rng(72)
    for dtype, option in (("float64", None), ("float32", "NHWC")):
        x, w = random(rng, (2, 4, 7, 7), dtype), random(rng, (3, 4, 3, 3), dtype)
        dims = ConvDims(x.shape, w.shape, padding=((0, 1), 1), dtype=dtype)
        dx = layout.in_layout(cp, cp.asarray(x), "NHWC" if option is None else "NCHW")
        options = {} if option is None else {"layout": option}
        y, residuals = backend.conv_forward(dx, cp.asarray(w), None, dims, **options)
        assert layout.has_layout(residuals[0], "NHWC") and layout.has_layout(y, "NHWC")
        dy = cp.asarray(random(rng, dims.y_shape, dtype))
        grads = backend.conv_backward(residuals, (dy,), dims, **options)
        plain = backend.conv_backward(residuals, (dy,), dims)
        assert all(layout.has_layout(g, "NHWC") for g in grads[:2])
        for a, b in zip(grads, plain):
            assert_close(host(a), host(b), dtype, "the same gradients")


def test_backward_under_other_settings_still_gives_the_gradients(poisoned):
    """The backward takes its plans from the caches under the settings in force when it runs."""
    cp, rng = poisoned, np.random.default_rng(73)
    x, w = random(rng, (2, 8, 9, 9), "float32"), random(rng, (8, 8, 3, 3), "float32")
    dims = ConvDims(x.shape, w.shape, padding=1, dtype="float32")
    y, residuals = backend.conv_forward(cp.asarray(x), cp.asarray(w), None, dims)
    dy = random(rng, dims.y_shape, "float32")
    _, ref_pullback = dnnbind.conv(x, w, padding=1)
    with backend.settings(deterministic=True, algo="benchmark"):
        grads = backend.conv_backward(residuals, (cp.asarray(dy),), dims)
    assert_close(host(grads[:2]), ref_pullback(dy)[:2], "float32", "gradients")
    xp = (rng.permutation(2 * 3 * 8 * 8).reshape(2, 3, 8, 8) / 8.0).astype("float32")
    pdims = PoolDims(xp.shape, 3, stride=1, padding=1, dtype="float32")
    y, residuals = backend.maxpool_forward(cp.asarray(xp), pdims)
    with backend.settings(deterministic=True):
        dx = backend.maxpool_backward(residuals, (cp.ones_like(y),), pdims)
    assert_close(host(dx), dnnbind.maxpool(xp, 3, stride=1, padding=1)[1](np.ones(y.shape, np.float32)),
                 "float32", "maxpool dx")


@pytest.mark.parametrize("seed", [None, 11])
def test_dropout_masks_are_in_c_order_whatever_the_layouts(poisoned, seed):
    """The reserve spaces carry no layout: x and dy of any layout meet the mask in C order."""
    cp = poisoned
    x = cp.arange(1, 2 * 6 * 5 * 4 + 1, dtype=cp.float32).reshape(2, 6, 5, 4)
    x_nhwc = layout.in_layout(cp, x, "NHWC")
    y, residuals = backend.dropout_forward(x_nhwc, 0.4, seed)
    assert layout.layout_of(y) == "NHWC"
    assert [(r.shape, r.dtype) for r in residuals] == [(s.shape, s.dtype) for s in
                                                       backend.dropout_residuals(spec(x), 0.4, seed)]
    kept = y != 0
    cp.testing.assert_allclose(y, x * kept / 0.6, rtol=1e-6)
    dy = cp.asarray(np.random.default_rng(74).standard_normal(x.shape).astype(np.float32))
    for d in (dy, layout.in_layout(cp, dy, "NHWC"), cp.asfortranarray(dy)):
        dx = backend.dropout_backward(residuals, (d,), 0.4, seed)
        cp.testing.assert_allclose(dx, dy * kept / 0.6, rtol=1e-6)
    _, pullback = backend.dropout(x_nhwc, 0.4, seed)
    if seed is not None:
        cp.testing.assert_array_equal(pullback.mask, kept)        # the same seed, the same (C-order) mask
    with pytest.raises(ValueError, match="reserve spaces"):
        backend.dropout_backward(residuals, (cp.ones(2 * 10 ** 6, cp.float32),), 0.4, seed)


def test_seeded_dropout_residuals_are_copies_of_the_kept_mask(poisoned):
    cp = poisoned
    x = cp.ones((64, 64), cp.float32)
    _, first = backend.dropout_forward(x, 0.5, 5)
    _, second = backend.dropout_forward(x, 0.5, 5)
    cp.testing.assert_array_equal(first[0], second[0])
    assert not cp.may_share_memory(first[0], second[0])
    first[0].fill(0)                                # the caller owns its residuals
    y, _ = backend.dropout_forward(x, 0.5, 5)
    assert 0.4 < float((y != 0).mean()) < 0.6


def test_rnn_inference_saves_nothing_and_its_backward_refuses(poisoned):
    cp, case = poisoned, CASES["rnn"]
    arrays = case.device(cp)
    (y, hy, cy), residuals = backend.rnn_forward(*arrays, *case.static, training=False)
    assert residuals == () and backend.rnn_residuals(*case.specs(arrays), *case.static, training=False) == ()
    with pytest.raises(RuntimeError, match="inference mode"):
        backend.rnn_backward(residuals, (cp.ones_like(y),), *case.static, training=False)


def test_rnn_saves_a_copy_of_packed_weights(poisoned):
    """Packed weights run without packing; the residual weight space is the forward's own copy, so updating
    the packed weights after the forward leaves the gradients alone."""
    cp, case = poisoned, CASES["rnn"]
    x, weights, h0, c0 = case.device(cp)
    (dims,) = case.static
    packed = backend.pack_rnn_weights(weights, mode="lstm", hidden_size=4, num_layers=2, bidirectional=True)
    (y, hy, cy), residuals = backend.rnn_forward(x, packed, h0, c0, dims)
    assert not any(cp.may_share_memory(r, packed.space) for r in residuals)
    cotangents = (cp.ones_like(y), cp.ones_like(hy), cp.ones_like(cy))
    before = _flat(backend.rnn_backward(residuals, cotangents, dims))
    packed[0][0][...] += 1.0
    after = _flat(backend.rnn_backward(residuals, cotangents, dims))
    for a, b in zip(before, after):
        np.testing.assert_allclose(host(a), host(b), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["conv", "conv_transpose"])
def test_conv_backward_computes_only_what_needs_asks_for(poisoned, name):
    """The residual form's ``needs``: every gradient asked for equals the full backward's, the others None."""
    import itertools
    cp, case, rng = poisoned, CASES[name], np.random.default_rng(73)
    forward, backward = getattr(backend, f"{name}_forward"), getattr(backend, f"{name}_backward")
    with backend.settings(deterministic=True):
        result, residuals = forward(*case.device(cp), *case.static, **case.options)
        dy = cp.asarray(random(rng, result.shape, result.dtype))
        full = backward(residuals, (dy,), *case.static, **case.options)
        for needs in itertools.product((False, True), repeat=3):
            got = backward(residuals, (dy,), *case.static, needs=needs, **case.options)
            for need, g, f in zip(needs, got, full):
                if need:
                    cp.testing.assert_array_equal(g, f)
                else:
                    assert g is None


def test_rnn_backward_computes_only_what_needs_asks_for(poisoned):
    """rnn's ``needs`` (dx, dh0, dc0, dweights): the weights' pass runs only for dweights; every gradient
    asked for equals the full backward's (the data pass is the same call either way), the others None."""
    import itertools
    cp, case, rng = poisoned, CASES["rnn"], np.random.default_rng(79)
    (y, hy, cy), residuals = backend.rnn_forward(*case.device(cp), *case.static)
    cotangents = tuple(cp.asarray(random(rng, a.shape, a.dtype)) for a in (y, hy, cy))
    full = backend.rnn_backward(residuals, cotangents, *case.static)
    for needs in itertools.product((False, True), repeat=4):
        got = backend.rnn_backward(residuals, cotangents, *case.static, needs=needs)
        for i, (need, g, f) in enumerate(zip(needs, got, full, strict=True)):
            if not need:
                assert g is None
            elif i == 3:
                assert_close([[host(a) for a in entry if a is not None] for entry in g],
                             [[host(a) for a in entry if a is not None] for entry in f], "float32", "dweights")
            else:
                cp.testing.assert_array_equal(g, f)
