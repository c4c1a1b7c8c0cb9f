"""The cuDNN backend against torch.nn.functional on the same GPU (results and autograd gradients).

Skipped unless PyTorch with CUDA is importable. PyTorch's TF32 convolutions are switched off for the
comparison (dnnbind computes float32 in full precision unless told otherwise).
"""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind

pytestmark = pytest.mark.gpu

TOLERANCE = {"float64": 1e-12, "float32": 1e-4, "float16": 1e-2}


@pytest.fixture(scope="module")
def torch(cuda):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield torch
    torch.backends.cudnn.allow_tf32 = tf32


def check(cuda, torch, dtype, ours, theirs, inputs, seed=0):
    """ours(*cupy arrays) -> (y, pullback); theirs(*torch tensors) -> y. Compare y and every gradient."""
    rng = np.random.default_rng(seed)
    tensors = [torch.tensor(a, device="cuda", requires_grad=True) for a in inputs]
    y_t = theirs(*tensors)
    y, pullback = ours(*[cuda.asarray(a) for a in inputs])
    dy = rng.standard_normal(y.shape).astype(dtype)
    y_t.backward(torch.tensor(dy, device="cuda"))
    grads = pullback(cuda.asarray(dy))
    grads = grads if isinstance(grads, tuple) else (grads,)
    pairs = [("y", y, y_t)] + [(f"grad {i}", g, t.grad) for i, (g, t) in enumerate(zip(grads, tensors))]
    for what, got, want in pairs:
        got, want = cuda.asnumpy(got).astype(np.float64), want.detach().cpu().numpy().astype(np.float64)
        err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
        assert err <= TOLERANCE[dtype], f"{what}: relative error {err:.3g} against PyTorch ({dtype})"


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("xs, ws, kw", [
    ((4, 6, 20), (8, 3, 5), dict(stride=2, padding=1, dilation=2, groups=2)),
    ((4, 6, 12, 10), (8, 6, 3, 3), dict(stride=(2, 1), padding=(1, 2))),
    ((2, 4, 6, 7, 8), (4, 2, 3, 2, 3), dict(padding=1, groups=2)),
])
def test_conv(cuda, torch, dtype, xs, ws, kw):
    rng = np.random.default_rng(1)
    fn = {3: torch.nn.functional.conv1d, 4: torch.nn.functional.conv2d, 5: torch.nn.functional.conv3d}[len(xs)]
    b = rng.standard_normal(ws[0]).astype(dtype)
    check(cuda, torch, dtype, lambda x, w, b: dnnbind.conv(x, w, b, **kw), lambda x, w, b: fn(x, w, b, **kw),
          [rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype), b])


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_conv_transpose(cuda, torch, dtype):
    rng = np.random.default_rng(2)
    kw = dict(stride=2, padding=1, output_padding=1, groups=2, dilation=1)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((3, 4, 7, 6), (4, 3, 3, 3), (6,)))
    check(cuda, torch, dtype, lambda x, w, b: dnnbind.conv_transpose(x, w, b, **kw),
          lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, **kw), [x, w, b])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_pooling(cuda, torch, dtype):
    rng = np.random.default_rng(3)
    x = (rng.permutation(4 * 3 * 9 * 10).reshape(4, 3, 9, 10) / 64).astype(dtype)
    F = torch.nn.functional
    check(cuda, torch, dtype, lambda x: dnnbind.maxpool(x, 3, stride=2, padding=1),
          lambda x: F.max_pool2d(x, 3, stride=2, padding=1), [x])
    for include in (True, False):
        check(cuda, torch, dtype, lambda x: dnnbind.meanpool(x, 3, stride=2, padding=1, count_include_pad=include),
              lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=include), [x])


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(cuda, torch, dtype, axis):
    x = np.random.default_rng(4).standard_normal((6, 5, 7)).astype(dtype)
    F = torch.nn.functional
    check(cuda, torch, dtype, lambda x: dnnbind.softmax(x, axis=axis), lambda x: F.softmax(x, dim=axis), [x])
    check(cuda, torch, dtype, lambda x: dnnbind.logsoftmax(x, axis=axis), lambda x: F.log_softmax(x, dim=axis), [x])


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_activations(cuda, torch, dtype):
    x = (2 * np.random.default_rng(5).standard_normal((4, 3, 8, 8))).astype(dtype)
    F = torch.nn.functional
    pairs = [("relu", None, F.relu), ("sigmoid", None, torch.sigmoid), ("tanh", None, torch.tanh),
             ("elu", 0.5, lambda t: F.elu(t, 0.5)), ("leaky_relu", 0.1, lambda t: F.leaky_relu(t, 0.1)),
             ("clipped_relu", 1.5, lambda t: F.hardtanh(t, 0.0, 1.5)), ("swish", None, F.silu),
             ("swish", 1.7, lambda t: t * torch.sigmoid(1.7 * t)), ("identity", None, lambda t: t * 1)]
    for mode, alpha, fn in pairs:
        check(cuda, torch, dtype, lambda x: dnnbind.activation(x, mode, alpha=alpha), fn, [x])


@pytest.mark.parametrize("dtype", ["float64", "float32"])     # PyTorch wants float32 gamma for float16 x
@pytest.mark.parametrize("training", [True, False])
def test_batchnorm(cuda, torch, dtype, training):
    rng = np.random.default_rng(6)
    x = (1 + 2 * rng.standard_normal((8, 4, 5, 6))).astype(dtype)
    gamma, beta = rng.standard_normal(4).astype(dtype), rng.standard_normal(4).astype(dtype)
    mean, var = rng.standard_normal(4).astype(dtype), (rng.random(4) + 0.5).astype(dtype)
    ours_mean, ours_var = cuda.asarray(mean), cuda.asarray(var)
    theirs_mean, theirs_var = torch.tensor(mean, device="cuda"), torch.tensor(var, device="cuda")
    kw = dict(training=training, momentum=0.2, eps=1e-4)
    check(cuda, torch, dtype,
          lambda x, g, b: dnnbind.batchnorm(x, g, b, running_mean=ours_mean, running_var=ours_var, **kw),
          lambda x, g, b: torch.nn.functional.batch_norm(x, theirs_mean, theirs_var, g, b, **kw), [x, gamma, beta])
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(cuda.asnumpy(ours_mean), theirs_mean.cpu().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(cuda.asnumpy(ours_var), theirs_var.cpu().numpy(), rtol=tol, atol=tol)
