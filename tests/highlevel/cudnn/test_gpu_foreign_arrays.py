"""The public ops on PyTorch CUDA tensors: adopted as CuPy arrays without a copy (marker gpu)."""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind

pytestmark = pytest.mark.gpu


def test_torch_cuda_tensors_run_on_cudnn_and_return_cupy(cuda):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    x = torch.randn(2, 3, 8, 8, device="cuda", dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, device="cuda", dtype=torch.float64)
    y, pullback = dnnbind.conv(x, w, padding=1)
    assert isinstance(y, cuda.ndarray)
    expected = torch.nn.functional.conv2d(x, w, padding=1)
    np.testing.assert_allclose(cuda.asnumpy(y), expected.cpu().numpy(), rtol=1e-10, atol=1e-10)
    dx, dw = pullback(cuda.ones_like(y))
    assert dx.shape == (2, 3, 8, 8) and dw.shape == (4, 3, 3, 3)
    from dnnbind.highlevel import dispatch
    assert dispatch._adopt("x", x).data.ptr == x.data_ptr()          # adopted without a copy
    probs, _ = dnnbind.softmax(x)
    assert isinstance(probs, cuda.ndarray)


def test_tensors_requiring_grad_point_to_dnnbind_torch(cuda):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    x = torch.randn(2, 3, device="cuda", requires_grad=True)
    with pytest.raises(TypeError, match=r"x is a PyTorch tensor that requires grad: use dnnbind.torch"):
        dnnbind.softmax(x)
