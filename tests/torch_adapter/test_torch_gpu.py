"""CUDA tensors through dnnbind.torch: zero-copy DLPack, torch's current stream, results equal torch's.

Needs a CUDA device, CuPy and PyTorch with CUDA (marker gpu); the op tests also need dnnbind's cuDNN
backend (or MIOpen's on ROCm). Run: PYTHONPATH=src python -m pytest -q -m gpu tests/torch_adapter
"""
from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import dnnbind.torch as dt
from cupy_bfloat16 import bfloat16_or_skip
from layer_checks import Net
from dnnbind.highlevel.dispatch import load_backend
from dnnbind.torch.convert import device_scope, to_array, to_tensor


def _missing() -> str | None:
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to PyTorch"
    return None


def _gpu_backend() -> Any:
    """The GPU backend module for this machine, or a skip when it does not exist yet."""
    import cupy
    name = "miopen" if cupy.cuda.runtime.is_hip else "cudnn"
    try:
        return load_backend(name)
    except NotImplementedError as exc:
        pytest.skip(str(exc))


_MISSING = _missing()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]


@pytest.fixture
def backend():
    """needs(op): skips unless dnnbind's GPU backend has ``op``; torch computes in full float32 (no TF32)."""
    module = _gpu_backend()

    def needs(*ops: str) -> None:
        missing = [op for op in ops if not hasattr(module, op)]
        if missing:
            pytest.skip(f"{module.__name__} does not implement {', '.join(missing)} yet")
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield needs
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_cuda_tensors_cross_without_copies():
    import cupy
    t = torch.arange(12.0, device="cuda").reshape(3, 4)
    a = to_array(t)
    assert isinstance(a, cupy.ndarray) and a.data.ptr == t.data_ptr()
    back = to_tensor(a)
    assert back.device == t.device and back.data_ptr() == t.data_ptr()
    a[0, 0] = 42.0
    assert t[0, 0].item() == 42.0


def test_cupy_runs_on_torchs_current_stream():
    import cupy
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with device_scope(torch.device("cuda")):
            assert cupy.cuda.get_current_stream().ptr == stream.cuda_stream
    with device_scope(torch.device("cuda")):
        assert cupy.cuda.get_current_stream().ptr == torch.cuda.current_stream().cuda_stream


def test_mixed_devices_are_refused():
    x = torch.zeros(1, 2, 4, 4)
    with pytest.raises(TypeError, match="w is on cuda:0 but x is on cpu"):
        dt.conv(x, torch.zeros(2, 2, 3, 3, device="cuda"))


OP_OF_CASE = {"conv2d": "conv", "conv1d": "conv", "conv3d": "conv", "conv_transpose2d": "conv_transpose",
              "maxpool2d": "maxpool", "meanpool3d": "meanpool", "relu": "activation", "swish": "activation",
              "clipped_relu": "activation"}


@pytest.mark.parametrize("name", ["conv2d", "conv1d", "conv3d", "conv_transpose2d", "maxpool2d", "meanpool3d",
                                  "softmax", "logsoftmax", "relu", "swish", "clipped_relu", "batchnorm"])
def test_ops_on_cuda_equal_torch(name, backend):
    from test_torch_functional import CASES
    backend(OP_OF_CASE.get(name, name))
    shapes, ours_fn, theirs_fn = CASES[name]
    g = torch.Generator(device="cuda").manual_seed(0)
    ours_in = [torch.randn(s, device="cuda", generator=g).requires_grad_() for s in shapes]
    theirs_in = [t.detach().clone().requires_grad_() for t in ours_in]
    ours, theirs = ours_fn(*ours_in), theirs_fn(*theirs_in)
    assert ours.device == theirs.device
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    v = torch.randn(theirs.shape, device="cuda", generator=g)
    ours.backward(v)
    theirs.backward(v)
    for a, b in zip(ours_in, theirs_in):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-3)


def test_ops_on_a_side_stream(backend):
    backend("conv")
    x = torch.randn(4, 3, 16, 16, device="cuda")
    w = torch.randn(8, 3, 3, 3, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y = dt.conv(x, w, padding=1)
        y_ref = F.conv2d(x, w, padding=1)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-4)


def test_gradcheck_on_cuda(backend):
    backend("conv", "maxpool")
    g = torch.Generator(device="cuda").manual_seed(1)

    def r(*shape):
        return torch.randn(shape, device="cuda", dtype=torch.float64, generator=g).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w, b: dt.conv(x, w, b, padding=1), (r(2, 3, 5, 5), r(4, 3, 3, 3), r(4)))
    assert torch.autograd.gradcheck(lambda x: dt.maxpool(x, 2), (r(2, 3, 4, 4),))


def test_lstm_module_on_cuda_equals_torch(backend):
    backend("rnn")
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(8, 16, num_layers=2, bidirectional=True).cuda()
    ours = dt.LSTM(8, 16, num_layers=2, bidirectional=True).cuda()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(10, 4, 8, device="cuda")
    (y, (h, c)), (y_ref, (h_ref, c_ref)) = ours(x), theirs(x)
    torch.testing.assert_close((y, h, c), (y_ref, h_ref, c_ref), rtol=1e-4, atol=1e-4)
    y.sum().backward()
    y_ref.sum().backward()
    for p, p_ref in zip(ours.parameters(), theirs.parameters()):
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-3, atol=1e-3)


def test_a_second_derivative_through_an_lstm_on_cuda_is_refused_as_torchs(backend):
    """torch's cuDNN LSTM refuses a double backward; dnnbind's on the GPU backend does too, naming
    dnnbind.rnn, at the second backward (its first derivative with create_graph runs)."""
    backend("rnn")
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(3, 4).cuda()
    ours = dt.LSTM(3, 4).cuda()
    ours.load_state_dict(theirs.state_dict())

    def second(layer):
        x = torch.randn(5, 2, 3, device="cuda", requires_grad=True)
        (gx,) = torch.autograd.grad(layer(x)[0].pow(2).sum(), x, create_graph=True)
        return lambda: gx.pow(2).sum().backward()
    with pytest.raises(RuntimeError, match="(?i)double backward"):
        second(theirs)()
    backward = second(ours)
    with pytest.raises(RuntimeError, match=r"dnnbind\.rnn: double backward is not supported on the (cudnn|miopen)"):
        backward()


def test_batchnorm_module_updates_cuda_buffers_in_place(backend):
    backend("batchnorm")
    bn = dt.BatchNorm2d(3).cuda()
    ref = torch.nn.BatchNorm2d(3).cuda()
    x = torch.randn(4, 3, 5, 5, device="cuda") + 2
    torch.testing.assert_close(bn(x), ref(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bn.running_mean, ref.running_mean)
    torch.testing.assert_close(bn.running_var, ref.running_var)


def test_bfloat16_cuda_tensors_pass_through(backend):
    """bfloat16 CUDA tensors cross as int16 views and come back bfloat16; conv and its gradients agree
    with torch's bfloat16 conv within bfloat16's precision."""
    backend("conv")
    import cupy
    bfloat16_or_skip(cupy)
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(2, 4, 8, 8, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    w = torch.randn(6, 4, 3, 3, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    a = to_array(x.detach())
    assert a.dtype.name == "bfloat16" and a.data.ptr == x.data_ptr()
    y = dt.conv(x, w, padding=1)
    assert y.dtype == torch.bfloat16 and y.is_cuda
    xr, wr = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    yr = F.conv2d(xr, wr, padding=1)
    torch.testing.assert_close(y.float(), yr, rtol=3e-2, atol=3e-2)
    v = torch.randn(yr.shape, device="cuda", generator=g).to(torch.bfloat16)
    y.backward(v)
    yr.backward(v.float())
    assert x.grad.dtype == torch.bfloat16
    torch.testing.assert_close(x.grad.float(), xr.grad, rtol=3e-2, atol=6e-2)
    torch.testing.assert_close(w.grad.float(), wr.grad, rtol=3e-2, atol=2e-1)


def test_a_model_from_the_dnnbind_namespace_on_cuda_equals_torch(backend):
    """conv, batch norm, activations, pooling with ceil_mode (asymmetric padding) and divisor_override,
    dropout, and an LSTM over packed sequences, against the same model from torch.nn."""
    backend("conv", "batchnorm", "activation", "maxpool", "meanpool", "rnn", "logsoftmax")
    torch.manual_seed(0)
    theirs, ours = Net(torch.nn, p=0.0).cuda(), Net(dt.nn, p=0.0).cuda()
    ours.load_state_dict(theirs.state_dict())
    images = torch.randn(4, 3, 12, 12, device="cuda")
    lengths = [9, 4, 7, 2]
    results = []
    for model in (ours, theirs):
        x = images.clone().requires_grad_()
        logp, padded = model(x, lengths)
        (logp.square().sum() + padded.sin().sum()).backward()
        results.append((logp, padded, x.grad, [p.grad for p in model.parameters()]))
    torch.testing.assert_close(results[0], results[1], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(ours.state_dict(), theirs.state_dict(), rtol=1e-4, atol=1e-4)


def test_a_compiled_sequential_on_cuda_equals_torch(backend):
    """nn.Sequential while torch.compile traces: each layer's typed op (training ops and pullbacks) on CUDA
    tensors (eager calls off the CPU take the layers one by one), against torch.nn's own layers."""
    backend("conv", "batchnorm", "activation", "maxpool")

    def make(nn):
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 4, 3), nn.Tanh())

    torch.manual_seed(0)
    theirs, ours = make(torch.nn).cuda(), make(dt.nn).cuda()
    ours.load_state_dict(theirs.state_dict())
    compiled = torch.compile(ours, fullgraph=True)
    x = torch.randn(4, 3, 12, 12, device="cuda")
    for _ in range(2):
        results = []
        for model in (compiled, theirs):
            model.zero_grad()
            xi = x.clone().requires_grad_()
            out = model(xi)
            out.square().sum().backward()
            results.append((out, xi.grad, [p.grad for p in model.parameters()]))
        torch.testing.assert_close(results[0], results[1], rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(ours.state_dict(), theirs.state_dict(), rtol=1e-4, atol=1e-4)
