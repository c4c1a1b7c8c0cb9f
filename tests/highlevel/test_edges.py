"""The edge policy of every public op (dnnbind.highlevel.edges): 0-d and zero-size arrays, None for an
array, read-only running statistics, huge problems, and what a forward pass saves."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dnnbind
from dnnbind.highlevel.ops import ACTIVATION_DEFAULTS

RNG = np.random.default_rng(0)


def _a(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------------- 0-d


@pytest.mark.parametrize("mode", list(ACTIVATION_DEFAULTS))
def test_activation_of_a_0d_array_gives_0d_arrays_that_chain(mode):
    x = np.array(0.5, np.float32)
    y, pullback = dnnbind.activation(x, mode)
    assert isinstance(y, np.ndarray) and y.shape == () and y.dtype == np.float32
    y2, pullback2 = dnnbind.activation(y, "tanh")            # chaining takes the result as an array
    dx = pullback(pullback2(np.array(1.0, np.float32)))
    assert isinstance(dx, np.ndarray) and dx.shape == () and dx.dtype == np.float32
    y1, pb1 = dnnbind.activation(x.reshape(1), mode)
    assert y == y1[0] and pullback(np.array(2.0, np.float32)) == pb1(np.full(1, 2.0, np.float32))[0]


def test_dropout_softmax_logsoftmax_of_0d_arrays_match_pytorch():
    x = np.array(0.7)
    y, pullback = dnnbind.dropout(x, 0.5, seed=3)
    assert y.shape == () and y in (0.0, 1.4)
    assert pullback(np.array(1.0)).shape == () and pullback.mask.shape == ()
    for op, ref in ((dnnbind.softmax, F.softmax), (dnnbind.logsoftmax, F.log_softmax)):
        for axis in (0, -1):
            y, pullback = op(x, axis=axis)
            t = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
            r = ref(t, axis)
            r.backward(torch.tensor(3.0, dtype=torch.float64))
            assert y.shape == () and y == r.item()
            dx = pullback(np.array(3.0))
            assert dx.shape == () and dx == t.grad.item()
    with pytest.raises(ValueError, match=r"dy has shape \(1,\) but must have shape \(\)"):
        dnnbind.softmax(x, axis=0)[1](np.ones(1))


# ---------------------------------------------------------------------------------------------- empty


def _torch_conv(x, w, **kw):
    return F.conv2d(torch.from_numpy(x), torch.from_numpy(w), **kw)


EMPTY_CASES = {
    "conv": (lambda: dnnbind.conv(_a(0, 3, 5, 5), _a(4, 3, 3, 3), _a(4), padding=1),
             lambda: F.conv2d(torch.zeros(0, 3, 5, 5), torch.zeros(4, 3, 3, 3), padding=1)),
    "conv_transpose": (lambda: dnnbind.conv_transpose(_a(0, 3, 5, 5), _a(3, 4, 3, 3), stride=2),
                       lambda: F.conv_transpose2d(torch.zeros(0, 3, 5, 5), torch.zeros(3, 4, 3, 3), stride=2)),
    "maxpool": (lambda: dnnbind.maxpool(_a(0, 3, 4, 4), 2), lambda: F.max_pool2d(torch.zeros(0, 3, 4, 4), 2)),
    "meanpool": (lambda: dnnbind.meanpool(_a(0, 3, 4, 4), 3, padding=1),
                 lambda: F.avg_pool2d(torch.zeros(0, 3, 4, 4), 3, padding=1)),
    "softmax": (lambda: dnnbind.softmax(_a(5, 0, 0), axis=-1), lambda: F.softmax(torch.zeros(5, 0, 0), -1)),
    "softmax_2d": (lambda: dnnbind.softmax(_a(3, 0), axis=1), lambda: F.softmax(torch.zeros(3, 0), 1)),
    "logsoftmax": (lambda: dnnbind.logsoftmax(_a(0, 4)), lambda: F.log_softmax(torch.zeros(0, 4), 1)),
    "activation": (lambda: dnnbind.activation(_a(2, 0, 3), "elu"), lambda: F.elu(torch.zeros(2, 0, 3))),
    "dropout": (lambda: dnnbind.dropout(_a(0, 3), 0.5, seed=1), lambda: F.dropout(torch.zeros(0, 3), 0.5)),
    "batchnorm_train": (lambda: dnnbind.batchnorm(_a(0, 3, 4, 4), _a(3), _a(3)),
                        lambda: F.batch_norm(torch.zeros(0, 3, 4, 4), None, None, torch.ones(3), torch.zeros(3),
                                             training=True)),
    "batchnorm_spatial_0": (lambda: dnnbind.batchnorm(_a(2, 3, 0, 4), _a(3), _a(3), running_mean=np.zeros(3),
                                                      running_var=np.ones(3), training=False),
                            lambda: F.batch_norm(torch.zeros(2, 3, 0, 4), torch.zeros(3), torch.ones(3))),
}


@pytest.mark.parametrize("case", list(EMPTY_CASES))
def test_empty_inputs_give_pytorchs_empty_results_and_zero_gradients(case):
    ours, theirs = EMPTY_CASES[case]
    y, pullback = ours()
    assert isinstance(y, np.ndarray) and y.shape == tuple(theirs().shape) and y.dtype == np.float64
    grads = pullback(np.ones(y.shape))
    grads = grads if isinstance(grads, tuple) else (grads,)
    for g in grads:
        assert isinstance(g, np.ndarray) and g.dtype == np.float64 and not g.any()
    assert grads[0].size == 0                      # dx is empty like x; dw, db, dgamma, dbeta are zeros
    with pytest.raises(ValueError, match="dy has shape"):
        pullback(np.ones((7,)))


def test_empty_batch_norm_leaves_the_running_statistics_alone():
    mean, var = np.full(3, 0.5), np.full(3, 2.0)
    y, _ = dnnbind.batchnorm(_a(0, 3), _a(3), _a(3), running_mean=mean, running_var=var)
    assert y.shape == (0, 3) and (mean == 0.5).all() and (var == 2.0).all()


@pytest.mark.parametrize("bias, proj_size", [(True, 0), (False, 0), (True, 1), (False, 1)],
                         ids=["bias", "no-bias", "projection", "projection-no-bias"])
def test_rnn_over_an_empty_batch(bias, proj_size):
    ref = torch.nn.LSTM(3, 2, num_layers=2, bidirectional=True, bias=bias, proj_size=proj_size).double()
    w = [[None if p is None else p.detach().numpy() for p in entry] for entry in ref.all_weights]
    w = [entry[:2] + (entry[2:4] if bias else [None, None]) + entry[4 if bias else 2:] for entry in w]
    (y, hy, cy), pullback = dnnbind.rnn(_a(5, 0, 3), w, hidden_size=2, num_layers=2, bidirectional=True,
                                        proj_size=proj_size)
    out, (h, c) = ref(torch.zeros(5, 0, 3, dtype=torch.float64))
    assert y.shape == tuple(out.shape) and hy.shape == tuple(h.shape) and cy.shape == tuple(c.shape)
    dx, dh0, dc0, dweights = pullback(np.ones(y.shape), np.ones(hy.shape), np.ones(cy.shape))
    assert dx.shape == (5, 0, 3) and dh0.shape == tuple(h.shape) and dc0.shape == tuple(c.shape)
    for given, grads in zip(w, dweights):       # a zero gradient per array given, None per bias not given
        assert [None if a is None else a.shape for a in given] == [None if g is None else g.shape for g in grads]
        assert not any(g.any() for g in grads if g is not None)


@pytest.mark.parametrize("call, message", [
    (lambda: dnnbind.conv(_a(1, 0, 5, 5), _a(4, 0, 3, 3)), r"x has shape \(1, 0, 5, 5\): a zero-size dimension 1"),
    (lambda: dnnbind.conv(_a(1, 3, 0, 5), _a(4, 3, 1, 1)), r"x has shape \(1, 3, 0, 5\): a zero-size dimension 2"),
    (lambda: dnnbind.conv(_a(1, 3, 5, 5), _a(0, 3, 3, 3)), r"w has shape \(0, 3, 3, 3\): a zero-size dimension 0"),
    (lambda: dnnbind.maxpool(_a(1, 0, 4, 4), 2), r"x has shape \(1, 0, 4, 4\): a zero-size dimension 1 is not "
                                                  r"supported; only the batch N may be 0"),
    (lambda: dnnbind.rnn(_a(0, 2, 3), [(_a(8, 3), _a(8, 2), None, None)], hidden_size=2),
     r"x has shape \(0, 2, 3\): a zero-size dimension 0 is not supported; only the batch may be 0"),
    (lambda: dnnbind.batchnorm(_a(1, 3), _a(3), _a(3)), r"training needs more than one value per channel"),
])
def test_zero_size_that_pytorch_refuses_is_refused_naming_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------------------------------------- None


@pytest.mark.parametrize("call, name", [
    (lambda: dnnbind.conv(None, _a(4, 3, 3, 3)), "x"),
    (lambda: dnnbind.conv(_a(1, 3, 5, 5), None), "w"),
    (lambda: dnnbind.conv_transpose(_a(1, 3, 5, 5), None), "w"),
    (lambda: dnnbind.batchnorm(_a(2, 3), None, _a(3)), "gamma"),
    (lambda: dnnbind.batchnorm(_a(2, 3), _a(3), None), "beta"),
    (lambda: dnnbind.softmax(None), "x"),
    (lambda: dnnbind.maxpool(None, 2), "x"),
    (lambda: dnnbind.activation(None, "relu"), "x"),
    (lambda: dnnbind.dropout(None, 0.5), "x"),
])
def test_none_for_a_required_array_names_it(call, name):
    with pytest.raises(TypeError, match=rf"^{name} must be a numpy or cupy array, not None$"):
        call()


# ---------------------------------------------------------------------------------------------- running stats


@pytest.mark.parametrize("readonly", ["running_mean", "running_var"])
def test_read_only_running_statistics_are_refused_before_either_is_updated(readonly):
    stats = {"running_mean": np.zeros(3), "running_var": np.ones(3)}
    stats[readonly].flags.writeable = False
    with pytest.raises(ValueError, match=rf"{readonly} is read-only, but training updates it in place"):
        dnnbind.batchnorm(_a(4, 3), _a(3), _a(3), **stats)
    assert (stats["running_mean"] == 0).all() and (stats["running_var"] == 1).all()
    dnnbind.batchnorm(_a(4, 3), _a(3), _a(3), training=False, **stats)     # inference only reads them


# ---------------------------------------------------------------------------------------------- huge


@pytest.mark.parametrize("call", [
    lambda: dnnbind.conv(np.broadcast_to(np.float32(1), (1, 1, 100000, 100000)), np.ones((1, 1, 3, 3), np.float32)),
    lambda: dnnbind.conv(np.broadcast_to(np.float16(1), (1, 1, 100000, 100000)), np.ones((1, 1, 3, 3), np.float16)),
    lambda: dnnbind.conv_transpose(np.broadcast_to(np.float32(1), (1, 1, 100000, 100000)),
                                   np.ones((1, 1, 3, 3), np.float32)),
    lambda: dnnbind.maxpool(np.broadcast_to(np.float32(1), (1, 1, 60000, 60000)), 60000),
    lambda: dnnbind.meanpool(np.broadcast_to(np.float64(1), (1, 1, 60000, 60000)), (60000, 1)),
])
def test_huge_problems_fail_at_once_saying_how_much_they_need(call):
    import time
    start = time.perf_counter()
    with pytest.raises(MemoryError, match=r"on x of shape \(1, 1, \d+, \d+\) would need at least [\d.]+ GiB of "
                                          r"memory \(\d+ bytes\) but [\d.]+ GiB is available"):
        call()
    assert time.perf_counter() - start < 2.0


def test_a_huge_transposed_convolution_names_its_own_input():
    """Its dims describe the convolution it transposes, whose x is the transposed one's (huge) output."""
    with pytest.raises(MemoryError, match=r"^conv_transpose_forward on x of shape \(1, 1, 4\) would need at least"):
        dnnbind.conv_transpose(np.ones((1, 1, 4)), np.ones((1, 1, 2)), stride=2**40)


def test_working_bytes_bounds_what_a_call_allocates():
    from dnnbind.highlevel.dims import ConvDims, PoolDims
    dims = ConvDims((2, 3, 10, 10), (4, 3, 3, 3), padding=1)
    x_padded, y, w, columns = 2 * 3 * 144, 2 * 4 * 100, 4 * 27, 27 * 100
    assert dims.working_bytes(4) == 4 * (x_padded + y + w + columns) + 9 * 120
    pool = PoolDims((2, 3, 10, 10), 2)
    assert pool.working_bytes(8) == 8 * (600 + 2 * 150) + 4 * 120


# ---------------------------------------------------------------------------------------------- saved arrays


def _ops_for_saving():
    """op name -> (make inputs, run(inputs) -> (result, pullback)); inputs is a list of arrays."""
    w_lstm = [(_a(8, 3), _a(8, 2), _a(8), _a(8))]
    cases = {
        "conv": (lambda: [_a(2, 3, 6, 6), _a(4, 3, 3, 3), _a(4)], lambda a: dnnbind.conv(*a)),
        "conv_big": (lambda: [_a(8, 16, 40, 40), _a(16, 16, 3, 3)], lambda a: dnnbind.conv(*a)),
        "conv_transpose": (lambda: [_a(2, 3, 5, 5), _a(3, 4, 3, 3)], lambda a: dnnbind.conv_transpose(*a)),
        # the cpu backend's special paths (1x1 as a plain product, depthwise by blocks) follow the rule too
        "conv_1x1": (lambda: [_a(2, 3, 6, 6), _a(4, 3, 1, 1)], lambda a: dnnbind.conv(*a)),
        "conv_depthwise": (lambda: [_a(2, 4, 6, 6), _a(4, 1, 3, 3)], lambda a: dnnbind.conv(*a, padding=1, groups=4)),
        "conv_transpose_1x1": (lambda: [_a(2, 3, 5, 5), _a(3, 4, 1, 1)], lambda a: dnnbind.conv_transpose(*a)),
        "conv_transpose_depthwise": (lambda: [_a(2, 4, 5, 5), _a(4, 1, 3, 3)],
                                     lambda a: dnnbind.conv_transpose(*a, groups=4)),
        "maxpool": (lambda: [_a(2, 3, 6, 6)], lambda a: dnnbind.maxpool(a[0], 2)),
        "meanpool": (lambda: [_a(2, 3, 6, 6)], lambda a: dnnbind.meanpool(a[0], 3, padding=1)),
        "softmax": (lambda: [_a(3, 5)], lambda a: dnnbind.softmax(a[0])),
        "logsoftmax": (lambda: [_a(3, 5)], lambda a: dnnbind.logsoftmax(a[0])),
        "batchnorm": (lambda: [_a(4, 3, 2), _a(3), _a(3)], lambda a: dnnbind.batchnorm(*a)),
        "dropout": (lambda: [_a(3, 5)], lambda a: dnnbind.dropout(a[0], 0.5, seed=2)),
        "rnn": (lambda: [_a(5, 2, 3), *w_lstm[0]], lambda a: dnnbind.rnn(a[0], [tuple(a[1:])], hidden_size=2)),
    }
    for mode in ACTIVATION_DEFAULTS:
        cases[f"activation_{mode}"] = (lambda: [_a(3, 5)], lambda a, m=mode: dnnbind.activation(a[0], m))
    return cases


SAVING = _ops_for_saving()


def _flat(tree):
    if isinstance(tree, (tuple, list)):
        return [a for t in tree for a in _flat(t)]
    return [] if tree is None else [tree]


@pytest.mark.parametrize("op", list(SAVING))
def test_changing_inputs_or_results_after_the_forward_leaves_the_pullback_alone(op):
    make, run = SAVING[op]
    inputs = make()
    result, pullback = run(inputs)
    cotangents = [np.ones_like(r) for r in _flat(result)]
    expected = [g.copy() for g in _flat(pullback(*cotangents))]
    for a in inputs + _flat(result):
        a[...] = np.nan
    assert all(np.array_equal(g, e) for g, e in zip(_flat(pullback(*cotangents)), expected))


# ---------------------------------------------------------------------------------------------- every backend


@pytest.mark.parametrize("backend", ["cpu", "reference", "cudnn", "miopen"])
def test_every_backend_op_is_guarded_by_the_edge_policy(backend):
    """Direct backend calls follow the policy too: every op of every backend is wrapped by edges.guard."""
    from dnnbind.highlevel.dispatch import load_backend
    from dnnbind.highlevel.specs import SPECS
    module = load_backend(backend)
    assert {op: getattr(getattr(module, op), "edge_policy", None) for op in SPECS} == {op: op for op in SPECS}


@pytest.mark.parametrize("name", ["cpu", "reference"])
def test_direct_numpy_backend_calls_follow_the_policy(name):
    from dnnbind.highlevel.dispatch import load_backend
    reference = load_backend(name)
    from dnnbind.highlevel.dims import ConvDims, PoolDims
    x, w = np.zeros((0, 3, 5, 5)), np.ones((4, 3, 3, 3))
    y, pullback = reference.conv(x, w, None, ConvDims(x.shape, w.shape))
    assert y.shape == (0, 4, 3, 3) and [g.shape for g in pullback(y)] == [x.shape, w.shape]
    y, pullback = reference.maxpool(x, PoolDims(x.shape, 2))
    assert y.shape == (0, 3, 2, 2) and pullback(y).shape == x.shape
    y, pullback = reference.dropout(np.array(2.0), 0.5, 1)
    assert y.shape == () and pullback(np.array(1.0)).shape == () and pullback.mask.shape == ()
    y, pullback = reference.dropout(np.zeros((0, 2)), 0.5, 1)
    assert pullback.mask.shape == (0, 2) and pullback.mask.dtype == bool


def test_the_memory_check_compares_with_what_is_available():
    from dnnbind.highlevel.dims import ConvDims
    from dnnbind.highlevel.cpu import _memory
    assert 0 < _memory.available_bytes()
    big = ConvDims((1, 1, 20000, 20000), (1, 1, 3, 3))          # about 4.5 GiB in float32
    need = big.working_bytes(4)
    assert need > _memory.CHECK_FROM_BYTES
    if need < _memory.available_bytes():
        _memory.check_fits("conv", big, 4)                        # fits: no error
    with pytest.raises(MemoryError, match=r"conv on x of shape \(1, 1, 20000, 20000\) would need at least [\d.]+ GiB"):
        _memory.check_fits("conv", big, 4 * (_memory.available_bytes() // need + 1))


@pytest.mark.parametrize("weight, bias", [(True, True), (False, False), (True, False), (False, True)])
def test_an_empty_call_records_which_optional_arrays_it_was_given(weight, bias):
    """An op whose spec has optional arrays with gradients and no regroup of its own (layer_norm): its empty
    call saves a last zero-size residual whose shape says which were given, so its backward returns each
    gradient in its place, on every backend and in the residual specs alike."""
    from dnnbind.highlevel import cpu, reference
    from dnnbind.highlevel.residual import ArraySpec
    x = np.zeros((0, 3), np.float32)
    w = np.ones(3, np.float32) if weight else None
    b = np.ones(3, np.float32) if bias else None
    for backend in (cpu, reference):
        y, saved = backend.layer_norm_forward(x, w, b, 1, 1e-5)
        assert y.shape == (0, 3) and saved[-1].shape == (0, int(weight), int(bias)) and saved[-1].size == 0
        specs = backend.layer_norm_residuals(ArraySpec(x.shape, x.dtype), ArraySpec((3,), x.dtype) if weight else None,
                                             ArraySpec((3,), x.dtype) if bias else None, 1, 1e-5)
        assert tuple(ArraySpec(s.shape, s.dtype) for s in saved) == specs
        dx, dw, db = backend.layer_norm_backward(saved, (np.zeros((0, 3), np.float32),), 1, 1e-5)
        assert dx.shape == (0, 3)
        for given, grad in ((weight, dw), (bias, db)):
            assert (grad is None) if not given else (grad.shape == (3,) and not grad.any())
