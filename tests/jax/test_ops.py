"""dnnbind.jax against JAX's own primitives: values and gradients under jit, grad, vmap and checkpoint."""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import jax
import jax.numpy as jnp
from jax import lax
from jax.test_util import check_grads

from childproc import run_python
import dnnbind.jax as dj

RNG = np.random.default_rng(0)


def rand(*shape: int) -> jax.Array:
    return jnp.asarray(RNG.standard_normal(shape), jnp.float32)


def close(a, b, tol: float = 1e-4) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def lax_conv(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    n = x.ndim - 2
    y = lax.conv_general_dilated(x, w, (stride,) * n, [(padding, padding)] * n, rhs_dilation=(dilation,) * n,
                                 feature_group_count=groups,
                                 dimension_numbers=("NCHW", "OIHW", "NCHW") if n == 2 else ("NCH", "OIH", "NCH"))
    return y if b is None else y + b.reshape((1, -1) + (1,) * n)


def grads_agree(ours, theirs, args, argnums, tol: float = 1e-3) -> None:
    """Values and gradients of a scalar loss through both, ours under jit."""
    loss = lambda f: (lambda *a: jnp.sum(jnp.sin(f(*a))))
    v1, g1 = jax.jit(jax.value_and_grad(loss(ours), argnums=argnums))(*args)
    v2, g2 = jax.value_and_grad(loss(theirs), argnums=argnums)(*args)
    close(v1, v2, tol)
    for a, b in zip(g1, g2):
        close(a, b, tol)


@pytest.mark.parametrize("stride, padding, dilation, groups", [(1, 1, 1, 1), (2, 0, 1, 2), (1, 2, 2, 1)])
def test_conv(stride, padding, dilation, groups):
    x, w, b = rand(2, 4, 7, 6), rand(6, 4 // groups, 3, 3), rand(6)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    close(dj.conv(x, w, b, **kw), lax_conv(x, w, b, **kw))
    grads_agree(lambda x, w, b: dj.conv(x, w, b, **kw), lambda x, w, b: lax_conv(x, w, b, **kw), (x, w, b), (0, 1, 2))


def test_conv_without_bias_1d_and_check_grads():
    x, w = rand(2, 3, 9), rand(4, 3, 3)
    close(jax.jit(lambda x, w: dj.conv(x, w, padding=1))(x, w), lax_conv(x, w, padding=1))
    check_grads(lambda x, w: dj.conv(x, w, padding=1), (x, w), order=1, modes=["rev"], atol=5e-2, rtol=5e-2, eps=1e-2)


def test_conv_transpose_is_convs_data_gradient():
    """PyTorch's conv_transpose: the vjp of a convolution with respect to its input."""
    x, w, b = rand(2, 4, 4, 5), rand(4, 3, 3, 3), rand(3)
    y = dj.conv_transpose(x, w, b, stride=2, padding=1, output_padding=1)
    z = jnp.zeros((2, 3, 8, 10), jnp.float32)

    def theirs(x, w, b):
        _, vjp = jax.vjp(lambda z: lax_conv(z, w, stride=2, padding=1), z)
        return vjp(x)[0] + b.reshape(1, -1, 1, 1)
    close(y, theirs(x, w, b))
    grads_agree(lambda x, w, b: dj.conv_transpose(x, w, b, stride=2, padding=1, output_padding=1), theirs,
                (x, w, b), (0, 1, 2))


def lax_maxpool(x, k, s, p):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, k, k), (1, 1, s, s), ((0, 0), (0, 0), (p, p), (p, p)))


def lax_meanpool(x, k, s, p):
    return lax.reduce_window(x, 0.0, lax.add, (1, 1, k, k), (1, 1, s, s), ((0, 0), (0, 0), (p, p), (p, p))) / (k * k)


def test_maxpool_and_indices():
    x = rand(2, 3, 7, 7)
    close(dj.maxpool(x, 3, stride=2, padding=1), lax_maxpool(x, 3, 2, 1))
    grads_agree(lambda x: dj.maxpool(x, 3, stride=2, padding=1), lambda x: lax_maxpool(x, 3, 2, 1), (x,), (0,))
    y, indices = dj.maxpool(x, 2, return_indices=True)
    assert indices.dtype == jax.dtypes.canonicalize_dtype(jnp.int64)       # int32 unless jax_enable_x64
    flat = np.asarray(x).reshape(2, 3, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, np.asarray(indices).reshape(2, 3, -1), 2).reshape(y.shape),
                                  np.asarray(y))
    g = jax.grad(lambda x: jnp.sum(dj.maxpool(x, 2, return_indices=True)[0] ** 2))(x)
    close(g, jax.grad(lambda x: jnp.sum(lax_maxpool(x, 2, 2, 0) ** 2))(x))


def test_meanpool():
    x = rand(2, 3, 8, 6)
    close(dj.meanpool(x, 2, padding=1, stride=2), lax_meanpool(x, 2, 2, 1))
    grads_agree(lambda x: dj.meanpool(x, 2, padding=1, stride=2), lambda x: lax_meanpool(x, 2, 2, 1), (x,), (0,))
    check_grads(lambda x: dj.meanpool(x, 3), (x,), order=1, modes=["rev"], atol=5e-2, rtol=5e-2, eps=1e-2)


@pytest.mark.parametrize("ours, theirs", [(dj.softmax, jax.nn.softmax), (dj.logsoftmax, jax.nn.log_softmax)])
@pytest.mark.parametrize("axis", [1, -1, 0])
def test_softmax_and_logsoftmax(ours, theirs, axis):
    x = rand(3, 4, 5)
    close(ours(x, axis=axis), theirs(x, axis=axis))
    grads_agree(lambda x: ours(x, axis=axis), lambda x: theirs(x, axis=axis), (x,), (0,))


@pytest.mark.parametrize("mode, theirs", [("relu", jax.nn.relu), ("sigmoid", jax.nn.sigmoid), ("tanh", jnp.tanh),
                                          ("elu", jax.nn.elu), ("swish", jax.nn.silu),
                                          ("leaky_relu", lambda x: jax.nn.leaky_relu(x, 0.01))])
def test_activation(mode, theirs):
    x = rand(4, 5) + 0.01          # away from relu's kink at 0
    close(dj.activation(x, mode), theirs(x))
    grads_agree(lambda x: dj.activation(x, mode), theirs, (x,), (0,))


def test_batchnorm_training_returns_new_running_statistics():
    x, gamma, beta = rand(4, 3, 5, 5), rand(3), rand(3)
    mean0, var0 = jnp.zeros(3), jnp.ones(3)

    def theirs(x, gamma, beta):
        mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
        shape = (1, -1, 1, 1)
        normalized = (x - mean.reshape(shape)) / jnp.sqrt(var.reshape(shape) + 1e-5)
        return normalized * gamma.reshape(shape) + beta.reshape(shape)

    y, mean1, var1 = jax.jit(lambda *a: dj.batchnorm(*a, running_mean=mean0, running_var=var0, momentum=0.1))(
        x, gamma, beta)
    close(y, theirs(x, gamma, beta))
    n = x.size // 3
    close(mean1, 0.9 * mean0 + 0.1 * x.mean((0, 2, 3)))
    close(var1, 0.9 * var0 + 0.1 * x.var((0, 2, 3)) * n / (n - 1))
    close(mean0, np.zeros(3))                     # the inputs are JAX arrays: unchanged
    grads_agree(lambda x, g, b: dj.batchnorm(x, g, b), theirs, (x, gamma, beta), (0, 1, 2))
    y_eval = dj.batchnorm(x, gamma, beta, running_mean=mean1, running_var=var1, training=False)[0]
    close(y_eval, (x - mean1.reshape(1, -1, 1, 1)) / jnp.sqrt(var1.reshape(1, -1, 1, 1) + 1e-5)
          * gamma.reshape(1, -1, 1, 1) + beta.reshape(1, -1, 1, 1))


@pytest.mark.parametrize("training", [False, True])
def test_a_gradient_with_respect_to_the_running_statistics_is_refused_as_torch_refuses_it(training):
    """Batch norm is not differentiable by its running statistics (the spec's without_gradient): JAX
    differentiating with respect to one is refused while it traces, naming the op and the argument (it got
    zeros); a gradient of the other arrays with the statistics given runs."""
    x, gamma, beta = rand(4, 3, 5), rand(3), rand(3)

    def loss(x, mean, var):
        return jnp.sum(dj.batchnorm(x, gamma, beta, running_mean=mean, running_var=var, training=training)[0])

    for argnums, name in (((1,), "running_mean"), ((0, 2), "running_var")):
        with pytest.raises(TypeError, match=rf"^dnnbind.batchnorm is not differentiable with respect to argument "
                                            rf"'{name}': JAX differentiates with respect to it here"):
            jax.grad(loss, argnums)(x, jnp.zeros(3), jnp.ones(3))
    assert jax.grad(loss)(x, jnp.zeros(3), jnp.ones(3)).shape == x.shape
    mean = jnp.zeros(3)
    assert jax.grad(lambda m: loss(x, jax.lax.stop_gradient(m), jnp.ones(3)))(mean).tolist() == [0.0] * 3


def jnp_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean, var = x.mean(axes, keepdims=True), x.var(axes, keepdims=True)
    y = (x - mean) / jnp.sqrt(var + eps)
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


@pytest.mark.parametrize("shape, normalized, affine", [
    ((4, 6), (6,), (True, True)), ((2, 3, 5), (3, 5), (False, False)), ((2, 3, 4), (3, 4), (True, False)),
    ((5,), (5,), (False, True))])
def test_layer_norm(shape, normalized, affine):
    """layer_norm comes from its spec like every op: values and the gradients of the given arrays under jit."""
    x = rand(*shape) * 3 + 1
    params = [rand(*normalized) if given else None for given in affine]
    given = [p for p in params if p is not None]

    def bind(f):
        def call(x, *arrays):
            it = iter(arrays)
            weight, bias = (next(it) if p is not None else None for p in params)
            return f(x, normalized, weight, bias, eps=1e-5)
        return call

    close(jax.jit(bind(dj.layer_norm))(x, *given), bind(jnp_layer_norm)(x, *given))
    grads_agree(bind(dj.layer_norm), bind(jnp_layer_norm), (x, *given), tuple(range(1 + len(given))))


def test_dropout_seed_key_and_gradient():
    x = rand(6, 7)
    y1 = jax.jit(lambda x, s: dj.dropout(x, 0.5, seed=s))(x, 3)
    y2 = dj.dropout(x, 0.5, seed=jnp.uint32(3))
    np.testing.assert_array_equal(np.asarray(y1), np.asarray(y2))
    kept = np.asarray(y1) != 0
    assert 0 < kept.sum() < x.size
    close(np.asarray(y1)[kept], 2 * np.asarray(x)[kept])
    g = jax.grad(lambda x: jnp.sum(dj.dropout(x, 0.5, seed=3)))(x)
    close(g, 2.0 * kept)
    y3 = dj.dropout(x, 0.5, seed=jax.random.key(1))
    assert not np.array_equal(np.asarray(y3) != 0, kept) or True   # another stream; any mask is legal
    for big in (2**40 + 7, np.int64(2**40 + 7), -1, np.int32(-1)):     # (numpy's ints as Python's)
        with pytest.raises(ValueError, match=r"seed=\S*?-?\d+\)? must be in \[0, 2\*\*32\)"):
            dj.dropout(x, 0.5, seed=big)
    close(dj.dropout(x, 0.5, seed=np.uint32(3)), y2)
    with pytest.raises(ValueError, match="explicit seed"):
        dj.dropout(x, 0.5)


def lstm_scan(x, weights, h0, c0):
    """A one-layer LSTM in PyTorch's gate order (i, f, g, o), with lax.scan."""
    w_ih, w_hh, b_ih, b_hh = weights[0]

    def step(carry, xt):
        h, c = carry
        gates = xt @ w_ih.T + b_ih + h @ w_hh.T + b_hh
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h
    (h, c), y = lax.scan(step, (h0[0], c0[0]), x)
    return y, h[None], c[None]


def test_lstm_against_a_scan():
    seq, batch, inp, hid = 5, 3, 4, 6
    x = rand(seq, batch, inp)
    weights = [(rand(4 * hid, inp) * 0.3, rand(4 * hid, hid) * 0.3, rand(4 * hid) * 0.1, rand(4 * hid) * 0.1)]
    h0, c0 = rand(1, batch, hid), rand(1, batch, hid)
    ours = lambda x, w, h0, c0: dj.rnn(x, w, mode="lstm", hidden_size=hid, h0=h0, c0=c0)
    for a, b in zip(jax.jit(ours)(x, weights, h0, c0), lstm_scan(x, weights, h0, c0)):
        close(a, b)
    loss = lambda f: (lambda *a: sum(jnp.sum(jnp.sin(o)) for o in f(*a)))
    g1 = jax.jit(jax.grad(loss(ours), argnums=(0, 1, 2, 3)))(x, weights, h0, c0)
    g2 = jax.grad(loss(lstm_scan), argnums=(0, 1, 2, 3))(x, weights, h0, c0)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        close(a, b, 1e-3)


def test_rnn_takes_the_numpy_ops_argument_forms():
    """As dnnbind.rnn: mode left to its default (lstm; it comes before the required hidden_size), a weight
    group given as a named tuple; a nested list where an array belongs is refused naming its place."""
    import collections
    Group = collections.namedtuple("Group", "w_ih w_hh b_ih b_hh")
    x = rand(4, 2, 3)
    weights = (rand(20, 3) * 0.3, rand(20, 5) * 0.3, rand(20), rand(20))
    expected = dj.rnn(x, [weights], mode="lstm", hidden_size=5)
    for a, b in zip(dj.rnn(x, [weights], hidden_size=5), expected):
        close(a, b)
    for a, b in zip(dj.rnn(x, [Group(*weights)], mode="lstm", hidden_size=5), expected):
        close(a, b)
    with pytest.raises(TypeError, match=r"weights\[0\]\[0\] must be a JAX or numpy array, not list"):
        dj.rnn(x, [(np.asarray(weights[0]).tolist(), *weights[1:])], mode="lstm", hidden_size=5)


@pytest.mark.parametrize("op", ["conv", "maxpool"])
def test_a_padding_mixing_ints_and_pairs_is_taken_as_by_the_numpy_ops(op):
    """padding=[1, (0, 2)]: one int for both sides of a dimension, a (low, high) pair for another."""
    x, w = rand(2, 3, 6, 7), rand(4, 3, 3, 3)
    call = (lambda p: dj.conv(x, w, padding=p)) if op == "conv" else (lambda p: dj.maxpool(x, 2, padding=p)[0])
    close(call([1, (0, 1)]), call([(1, 1), (0, 1)]))


@pytest.mark.parametrize("op", ["rnn", "conv", "batchnorm"])
def test_an_inference_computes_and_returns_no_residuals(op):
    """Where nothing is differentiated, the forward FFI call returns the results alone (the backend saves
    nothing, as inside dnnbind.no_grad), with the values a differentiated call gives; under jax.grad it
    returns the residuals the backward reads too."""
    x, w, filters = rand(6, 4, 5), [(rand(32, 5), rand(32, 8), rand(32), rand(32))], rand(3, 4, 3)
    call = {"rnn": lambda x: dj.rnn(x, w, mode="lstm", hidden_size=8)[0],
            "conv": lambda x: dj.conv(x, filters),
            "batchnorm": lambda x: dj.batchnorm(x, jnp.ones(4), jnp.zeros(4), running_mean=jnp.zeros(4),
                                                running_var=jnp.ones(4), training=True)[0]}[op]

    def results(f: Any, *args: Any) -> int:
        line = next(li for li in jax.jit(f).lower(*args).as_text().splitlines() if f"dnnbind_{op}_forward" in li)
        return len(re.findall(r"tensor<", line.split("->")[-1]))

    updated = 2 if op == "batchnorm" else 0                 # (its running statistics, updated)
    outputs = {"rnn": 3, "conv": 1, "batchnorm": 1}[op] + updated
    assert results(call, x) == outputs
    kept = results(jax.value_and_grad(lambda x: jnp.sum(call(x))), x) - outputs
    assert kept > 0 if op != "conv" else kept == 0          # (conv's residuals are x and w: JAX keeps those)
    y, vjp = jax.vjp(call, x)
    close(jax.jit(call)(x), y)
    assert vjp(jnp.ones_like(y))[0].shape == x.shape


def test_a_shape_polymorphic_export_is_refused_saying_why():
    (b,) = jax.export.symbolic_shape("b")
    with pytest.raises(NotImplementedError, match=r"^dnnbind.jax needs every array's sizes known while JAX traces; "
                                                  r"an array has shape \(b, 3, 5\) with symbolic sizes"):
        jax.export.export(jax.jit(lambda x: dj.activation(x, "relu")))(jax.ShapeDtypeStruct((b, 3, 5), jnp.float32))


def test_gru_returns_no_cell_state():
    x = rand(4, 2, 3)
    weights = [(rand(15, 3), rand(15, 5), rand(15), rand(15))]
    y, hy, cy = dj.rnn(x, weights, mode="gru", hidden_size=5)
    assert y.shape == (4, 2, 5) and hy.shape == (1, 2, 5) and cy is None


def test_vmap_conv_pool_activation_and_grad_of_vmap():
    xs, w = rand(3, 2, 2, 6, 6), rand(4, 2, 3, 3)
    ours = jax.vmap(lambda x: dj.maxpool(dj.activation(dj.conv(x, w, padding=1), "relu"), 2))(xs)
    theirs = jax.vmap(lambda x: lax_maxpool(jax.nn.relu(lax_conv(x, w, padding=1)), 2, 2, 0))(xs)
    close(ours, theirs)
    f = lambda f_conv: (lambda w: jnp.sum(jax.vmap(lambda x: jnp.tanh(f_conv(x, w, padding=1)))(xs)))
    close(jax.jit(jax.grad(f(dj.conv)))(w), jax.grad(f(lax_conv))(w), 1e-3)
    close(jax.vmap(lambda x: dj.activation(x, "tanh"))(xs), jnp.tanh(xs))      # broadcast_all: one call


def test_checkpoint():
    x, w = rand(2, 3, 6, 6), rand(4, 3, 3, 3)
    f = lambda conv: jax.checkpoint(lambda x, w: jnp.sum(jnp.tanh(conv(x, w, padding=1)) ** 2))
    close(jax.jit(jax.grad(f(dj.conv), argnums=1))(x, w), jax.grad(f(lax_conv), argnums=1)(x, w), 1e-3)
    # a rematerialized dropout draws the same mask again: its seed is an input, not hidden state
    drop = lambda x, seed: jnp.sum(dj.dropout(x, 0.5, seed=seed) ** 2)
    close(jax.grad(jax.checkpoint(drop))(x, 7), jax.grad(drop)(x, 7))


def test_bad_arguments_fail_while_tracing_with_dnnbinds_errors():
    x, w = rand(2, 3, 6, 6), rand(4, 5, 3, 3)
    with pytest.raises(ValueError, match="channel"):
        jax.jit(lambda x, w: dj.conv(x, w))(x, w)
    with pytest.raises(ValueError, match="padding"):
        dj.conv(x, rand(4, 3, 3, 3), padding=-1)
    with pytest.raises(ValueError, match="mode"):
        dj.activation(x, "nope")
    with pytest.raises(TypeError):
        dj.conv(x, rand(4, 3, 3, 3), stride="2")


def _lowered(f, *args) -> str:
    return jax.jit(f).lower(*args).as_text()


def test_vmap_folds_pooling_into_one_call_and_runs_conv_per_element():
    """Pooling and activations work on each position of x's leading axis apart: vmap's batch folds into it
    (one FFI call, no loop); a convolution's forward too where x alone is mapped; with its weights mapped
    it runs once per batch element, as does its backward (a per-sample filter gradient is each sample's)."""
    xs = rand(3, 2, 4, 6, 6)
    pooled = lambda x: dj.meanpool(dj.maxpool(x, 2), 2, padding=1)
    assert "while" not in _lowered(jax.vmap(pooled), xs)
    w = rand(3, 4, 3, 3)
    assert "while" not in _lowered(jax.vmap(lambda x: dj.conv(x, w)), xs)
    assert "while" in _lowered(jax.vmap(lambda w: dj.conv(xs[0], w)), jnp.stack([w, w]))
    theirs = lambda x: lax_meanpool(lax_maxpool(x, 2, 2, 0), 2, 2, 1)
    close(jax.vmap(pooled)(xs), jax.vmap(theirs)(xs))
    loss = lambda f: (lambda xs: jnp.sum(jnp.sin(jax.vmap(f)(xs))))
    close(jax.jit(jax.grad(loss(pooled)))(xs), jax.grad(loss(theirs))(xs))
    # nested vmaps fold the same way
    nested = rand(2, 3, 2, 4, 6, 6)
    close(jax.vmap(jax.vmap(lambda x: dj.maxpool(x, 2)))(nested),
          jax.vmap(jax.vmap(lambda x: lax_maxpool(x, 2, 2, 0)))(nested))
    g = jax.grad(lambda xs: jnp.sum(jax.vmap(jax.vmap(lambda x: dj.activation(x, "tanh")))(xs) ** 2))(xs)
    close(g, 2 * jnp.tanh(xs) * (1 - jnp.tanh(xs) ** 2))


@pytest.mark.parametrize("op", ["conv", "conv_transpose", "conv_bias_activation"])
def test_a_vmap_of_x_alone_folds_a_convolution_into_one_call_with_lax_values_and_gradients(op):
    """Folded (one call on the batch of batches), also nested and under grad; per-sample gradients (vmap
    of grad) and mapped weights as lax's."""
    xs, b = rand(2, 3, 4, 5, 5), rand(6)
    w = rand(4, 6, 3, 3) if op == "conv_transpose" else rand(6, 4, 3, 3)
    kw = {"mode": "tanh"} if op == "conv_bias_activation" else {}
    ours = lambda x, w: getattr(dj, op)(x, w, b, padding=1, stride=2, **kw)

    def theirs(x, w):
        if op == "conv_transpose":            # (a convolution's data gradient)
            _, vjp = jax.vjp(lambda z: lax_conv(z, w, stride=2, padding=1), jnp.zeros((x.shape[0], 6, 9, 9)))
            return vjp(x)[0] + b.reshape(1, -1, 1, 1)
        y = lax_conv(x, w, b, stride=2, padding=1)
        return jnp.tanh(y) if kw else y
    close(jax.jit(jax.vmap(ours, (0, None)))(xs, w), jax.vmap(theirs, (0, None))(xs, w))
    close(jax.vmap(jax.vmap(ours, (0, None)), (0, None))(xs[None], w), jax.vmap(theirs, (0, None))(xs, w)[None])
    loss = lambda f: (lambda w, x: jnp.sum(jnp.sin(f(x, w))))
    close(jax.jit(jax.vmap(jax.grad(loss(ours)), (None, 0)))(w, xs), jax.vmap(jax.grad(loss(theirs)), (None, 0))(w, xs),
          1e-3)
    close(jax.jit(jax.grad(lambda w: jnp.sum(jnp.sin(jax.vmap(ours, (0, None))(xs, w)))))(w),
          jax.grad(lambda w: jnp.sum(jnp.sin(jax.vmap(theirs, (0, None))(xs, w))))(w), 1e-3)
    ws = jnp.stack([w, -w])
    close(jax.vmap(ours, (None, 0))(xs[0], ws), jax.vmap(theirs, (None, 0))(xs[0], ws))
    # the backward folds too where it computes x's gradient alone; a filter's per-sample gradient (each
    # sample's, which JAX then sums) runs per element
    of_x = jax.grad(lambda xs: jnp.sum(jnp.sin(jax.vmap(ours, (0, None))(xs, w))))
    assert "while" not in _lowered(of_x, xs)
    close(of_x(xs), jax.grad(lambda xs: jnp.sum(jnp.sin(jax.vmap(theirs, (0, None))(xs, w))))(xs), 1e-3)
    assert "while" in _lowered(jax.grad(lambda w: jnp.sum(jax.vmap(ours, (0, None))(xs, w))), w)


def test_a_vmap_folds_softmax_and_layer_norm_where_their_samples_are_apart():
    """Softmax along any axis but the batch's and layer norm over fewer dims than x's fold a vmap into
    one call; along the batch axis, or normalizing every dim, one call per element."""
    xs = rand(3, 4, 5, 6)

    def lax_layer_norm(x, n):
        axes = tuple(range(x.ndim - n, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        return (x - mean) / jnp.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + 1e-5)
    for ours, theirs, folds in ((lambda x: dj.softmax(x, axis=-1), lambda x: jax.nn.softmax(x, axis=-1), True),
                                (lambda x: dj.logsoftmax(x, axis=1), lambda x: jax.nn.log_softmax(x, axis=1), True),
                                (lambda x: dj.softmax(x, axis=0), lambda x: jax.nn.softmax(x, axis=0), False),
                                (lambda x: dj.layer_norm(x, (5, 6)), lambda x: lax_layer_norm(x, 2), True),
                                (lambda x: dj.layer_norm(x, (4, 5, 6)), lambda x: lax_layer_norm(x, 3), False)):
        assert ("while" not in _lowered(jax.vmap(ours), xs)) == folds
        close(jax.vmap(ours)(xs), jax.vmap(theirs)(xs))
        loss = lambda f: (lambda xs: jnp.sum(jnp.sin(jax.vmap(f)(xs))))   # noqa: E731
        assert ("while" not in _lowered(jax.grad(loss(ours)), xs)) == folds
        close(jax.jit(jax.grad(loss(ours)))(xs), jax.grad(loss(theirs))(xs), 1e-3)


def test_empty_and_0d_inputs_follow_dnnbinds_edge_policy():
    """Empty in, empty out (zero gradients of the right shapes); 0-d arrays where the pointwise ops take them."""
    x, w = jnp.ones((0, 3, 6, 6)), rand(4, 3, 3, 3)
    assert dj.conv(x, w).shape == (0, 4, 4, 4)
    dx, dw = jax.grad(lambda x, w: jnp.sum(dj.conv(x, w)), argnums=(0, 1))(x, w)
    assert dx.shape == x.shape and dw.shape == w.shape and not np.any(np.asarray(dw))
    b = rand(4)                    # (an empty call saves what the edge policy saves: no fold probe)
    for op in (dj.conv, dj.conv_transpose):
        weight = w if op is dj.conv else rand(3, 4, 3, 3)
        db = jax.grad(lambda b: jnp.sum(op(x, weight, b)))(b)
        assert db.shape == (4,) and not np.any(np.asarray(db))
    # an empty mapped axis: empty results, also of the ops that fold a vmap (and jacrev of an empty output)
    empty = jnp.ones((0, 2, 3, 6, 6))
    assert jax.vmap(lambda x: dj.conv(x, w, b))(empty).shape == (0, 2, 4, 4, 4)
    assert jax.vmap(lambda x: dj.softmax(x, axis=1))(empty).shape == empty.shape
    assert jax.vmap(lambda x: dj.layer_norm(x, (6,)))(empty).shape == empty.shape
    assert jax.jacrev(lambda x: dj.softmax(x, axis=1))(jnp.ones((0, 5))).shape == (0, 5, 0, 5)
    assert float(dj.softmax(jnp.float32(3.0), axis=0)) == 1.0
    close(jax.grad(lambda x: dj.activation(x, "sigmoid"))(jnp.float32(0.0)), 0.25)
    with pytest.raises(ValueError, match="axis=1 is out of range for a 0-d array"):
        dj.softmax(jnp.float32(3.0))


def test_one_sample_without_its_batch_axis_runs_as_the_numpy_ops_take_it():
    """conv's (C, *spatial), pooling's (C, *spatial) with a per-dimension window, rnn's (seq, input): the
    batch axis of one added and dropped again, gradients included; so vmap over samples works."""
    x, w = rand(3, 7, 6), rand(4, 3, 3, 2)
    close(dj.conv(x, w, padding=1), dj.conv(x[None], w, padding=1)[0])
    close(jax.grad(lambda x: jnp.sum(jnp.sin(dj.conv(x, w, padding=1))))(x),
          jax.grad(lambda x: jnp.sum(jnp.sin(dj.conv(x[None], w, padding=1))))(x))
    images = rand(5, 3, 7, 6)
    close(jax.vmap(lambda x: dj.conv(x, w, padding=1))(images), dj.conv(images, w, padding=1))
    sample = rand(3, 8, 8)
    close(dj.maxpool(sample, (2, 2)), lax_maxpool(sample[None], 2, 2, 0)[0])
    weights = [(rand(18, 4), rand(18, 6), rand(18), rand(18))]
    sequence, h0 = rand(5, 4), rand(1, 6)
    y, hy, _ = dj.rnn(sequence, weights, mode="gru", hidden_size=6, h0=h0)
    y_batch, hy_batch, _ = dj.rnn(sequence[:, None], weights, mode="gru", hidden_size=6, h0=h0[:, None])
    close(y, y_batch[:, 0])
    close(hy, hy_batch[:, 0])


def test_array_arguments_that_are_no_arrays_are_refused_naming_them():
    with pytest.raises(TypeError, match="x must be a JAX or numpy array, not list"):
        dj.softmax([[1.0, 2.0]])
    with pytest.raises(TypeError, match="w must be a JAX or numpy array, not None"):
        dj.conv(rand(1, 1, 3, 3), None)
    with pytest.raises(TypeError, match="x must be a JAX or numpy array, not str"):
        dj.activation("x", "relu")
    assert float(dj.activation(-1.0, "relu")) == 0.0            # (a Python number is an array, as in jax.numpy)


def test_sizes_no_machine_holds_are_refused_while_tracing():
    """XLA aborts the process on a size beyond 64 bits: the call is refused before it sees one."""
    x, w = jnp.zeros((1, 1, 2, 2)), jnp.ones((1, 1, 1, 1))
    with pytest.raises(MemoryError, match="more than any machine has"):
        dj.conv(x, w, padding=2**40)
    with pytest.raises(MemoryError, match="more than any machine has"):
        jax.eval_shape(lambda x: dj.conv_transpose(x, w, stride=2**40), x)
    with pytest.raises(ValueError, match="stride=18446744073709551616 does not fit in 64 bits"):
        dj.conv(x, w, stride=2**64)


def test_rnn_lengths_may_be_numpy_or_concrete_arrays_never_traced_ones():
    x = rand(5, 3, 4)
    weights = [(rand(18, 4), rand(18, 6), rand(18), rand(18))]
    run = lambda lengths: dj.rnn(x, weights, mode="gru", hidden_size=6, lengths=lengths)[0]   # noqa: E731
    expected = run([5, 3, 2])
    close(run(np.array([5, 3, 2])), expected)
    close(run(jnp.array([5, 3, 2])), expected)
    with pytest.raises(TypeError, match="lengths must be known while JAX traces"):
        jax.jit(run)(jnp.array([5, 3, 2]))
    with pytest.raises(TypeError, match=r"^alpha must be known while JAX traces \(a Python or numpy value\), "
                                        r"not a traced array"):
        jax.jit(lambda a: dj.activation(x, "elu", alpha=a))(1.0)


def test_dropout_takes_a_raw_prng_key_as_its_typed_key():
    x = jnp.ones((2, 3, 8))
    close(dj.dropout(x, 0.5, seed=jax.random.PRNGKey(7)), dj.dropout(x, 0.5, seed=jax.random.key(7)))
    assert not np.array_equal(np.asarray(dj.dropout(x, 0.5, seed=jax.random.PRNGKey(7))),
                              np.asarray(dj.dropout(x, 0.5, seed=jax.random.PRNGKey(8))))


def test_an_exported_program_runs_in_a_fresh_process_after_register_targets(tmp_path):
    """jax.export with dnnbind's custom calls allowed by name, serialized, then deserialized and run in a
    process that never traced dnnbind's ops (dj.register_targets() registers them)."""
    import subprocess
    import sys
    from jax import export
    x, w = rand(2, 3, 8, 8), rand(4, 3, 3, 3)
    f = jax.jit(jax.grad(lambda x, w: jnp.sum(dj.activation(dj.conv(x, w, padding=1), "tanh")), argnums=1))
    allowed = [export.DisabledSafetyCheck.custom_call(dj.targets.target_name(op, phase))
               for op in ("conv", "activation") for phase in ("forward", "backward")]
    (tmp_path / "program.bin").write_bytes(export.export(f, disabled_checks=allowed)(x, w).serialize())
    np.save(tmp_path / "x.npy", np.asarray(x))
    np.save(tmp_path / "w.npy", np.asarray(w))
    code = ("import numpy as np, jax.numpy as jnp\nfrom jax import export\nimport dnnbind.jax as dj\n"
            "dj.register_targets()\n"
            f"p = export.deserialize(bytearray(open({str(tmp_path / 'program.bin')!r}, 'rb').read()))\n"
            f"x, w = (jnp.asarray(np.load({str(tmp_path / 'x.npy')!r})), jnp.asarray(np.load({str(tmp_path / 'w.npy')!r})))\n"
            f"np.save({str(tmp_path / 'out.npy')!r}, np.asarray(p.call(x, w)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    close(np.load(tmp_path / "out.npy"), f(x, w))


def test_inside_shard_map_results_vary_over_the_devices_and_gradients_equal_lax():
    """Inside jax.shard_map an op's results vary over the mesh axes its inputs vary over, as jax.lax's do:
    an out_specs that claims a replicated result is refused (not one device's shard returned for the whole),
    and a gradient with respect to a replicated filter is summed over the devices, equal to lax's."""
    result = run_python("""
        import numpy as np, jax, jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        import dnnbind.jax as dj
        mesh = Mesh(np.array(jax.devices()), ("b",))
        x = jax.device_put(jnp.arange(24.0).reshape(4, 6) - 9, NamedSharding(mesh, P("b")))
        relu = lambda v: dj.activation(v, "relu")
        try:
            jax.jit(jax.shard_map(relu, mesh=mesh, in_specs=P("b"), out_specs=P()))(x)
            raise SystemExit("a per-device result was taken for a replicated one")
        except ValueError as e:
            assert "out_specs" in str(e), e
        y = jax.jit(jax.shard_map(relu, mesh=mesh, in_specs=P("b"), out_specs=P("b")))(x)
        np.testing.assert_array_equal(np.asarray(y), np.maximum(np.asarray(x), 0))
        rng = np.random.default_rng(0)
        w = jnp.asarray(rng.standard_normal((2, 3, 3, 3)), jnp.float32)
        xi = jax.device_put(jnp.asarray(rng.standard_normal((4, 3, 5, 5)), jnp.float32), NamedSharding(mesh, P("b")))
        lax = lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                                      dimension_numbers=("NCHW", "OIHW", "NCHW"))
        grads = []
        for conv in (lax, lambda x, w: dj.conv(x, w, padding=1)):
            loss = lambda x, w: jnp.sum(jax.shard_map(conv, mesh=mesh, in_specs=(P("b"), P()), out_specs=P("b"))(x, w) ** 2)
            grads.append(jax.jit(jax.grad(loss, argnums=(0, 1)))(xi, w))
        for ours, theirs in zip(grads[1], grads[0]):
            np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-4, atol=1e-4)
        print("ok")
    """, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"})
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]


@pytest.mark.parametrize("argnums", [(0,), (1,), (2,), (1, 2), (0, 1, 2)])
def test_a_gradient_of_some_arrays_computes_those_alone_and_equals_lax(argnums):
    """JAX differentiating with respect to some of a convolution's arrays (the data needs no dx, a frozen
    filter no dw): the backward is told which (its needs=, one flag per gradient, from JAX's symbolic
    zeros) and computes those alone; the values are jax.lax's."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((2, 3, 8, 8)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((4, 3, 3, 3)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((4,)), jnp.float32)

    def reference(x, w, b):
        return lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                        dimension_numbers=("NCHW", "OIHW", "NCHW")) + b[None, :, None, None]

    def ours(x, w, b):
        return dj.conv(x, w, b, padding=1)

    loss = lambda conv: (lambda *a: jnp.sum(conv(*a) ** 2))
    found = jax.jit(jax.grad(loss(ours), argnums=argnums))(x, w, b)
    expected = jax.grad(loss(reference), argnums=argnums)(x, w, b)
    for a, e in zip(found, expected):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-4, atol=1e-3)
    text = str(jax.make_jaxpr(jax.grad(loss(ours), argnums=argnums))(x, w, b))
    flags = [int(i in argnums) for i in range(3)]
    assert f"('__needs', HashableArray(array({flags})))" in text, text[-600:]


def _forward_results(f, *args):
    """Per forward FFI call of f's vjp (also inside another primitive's jaxpr: a custom_vmap's): (its target,
    how many results it returns)."""
    def calls(jaxpr):
        for e in jaxpr.eqns:
            if e.primitive.name == "ffi_call" and e.params["target_name"].endswith("_forward"):
                yield e.params["target_name"], len(e.outvars)
            for value in e.params.values():
                inner = getattr(value, "jaxpr", value)
                if hasattr(inner, "eqns"):
                    yield from calls(inner)
    return list(calls(jax.make_jaxpr(lambda *a: jax.vjp(f, *a))(*args).jaxpr))


def test_a_forward_returns_no_copy_of_an_array_its_backward_reads_as_given():
    """What the backend declares the value of an input or a result (x, w, softmax's y) is not a result of
    the forward call: JAX keeps those arrays for the backward, which gets them in the residuals' places."""
    x, w, b = rand(2, 3, 6, 6), rand(4, 3, 3, 3), rand(4)
    assert _forward_results(lambda x, w, b: dj.conv(x, w, b, padding=1), x, w, b) == [("dnnbind_conv_forward", 1)]
    assert _forward_results(lambda x: dj.softmax(x, axis=1), x) == [("dnnbind_softmax_forward", 1)]
    assert _forward_results(lambda x: dj.activation(x, "sigmoid"), x) == [("dnnbind_activation_forward", 1)]
    # strided 1x1: its sample of x is saved, w is not
    assert _forward_results(lambda x, w: dj.conv(x, w, stride=2), x, rand(4, 3, 1, 1)) == [("dnnbind_conv_forward", 2)]
    grads_agree(lambda x, w, b: jax.nn.sigmoid(dj.softmax(dj.conv(x, w, b, padding=1), axis=1)),
                lambda x, w, b: jax.nn.sigmoid(jax.nn.softmax(lax_conv(x, w, b, padding=1), axis=1)), (x, w, b),
                (0, 1, 2))
