"""GPU plumbing on a real device: handles per (thread, device) and stream, workspace, array adaptation."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from dnnbind.highlevel.cudnn._lib import HANDLES, handle
from dnnbind.highlevel.gpu.arrays import as_device_array, current_stream
from dnnbind.highlevel.gpu.workspace import allocate

pytestmark = pytest.mark.gpu


def test_one_handle_per_thread_and_device_stream_set_only_on_change(cuda):
    device = cuda.cuda.runtime.getDevice()
    h = handle(device, current_stream())
    before = HANDLES.stats()
    assert handle(device, current_stream()) is h
    assert HANDLES.stats().stream_changes == before.stream_changes
    stream = cuda.cuda.Stream(non_blocking=True)
    with stream:
        assert current_stream() == stream.ptr
        assert handle(device, current_stream()) is h
        assert handle(device, current_stream()) is h
    assert HANDLES.stats().stream_changes == before.stream_changes + 1
    handle(device, current_stream())
    assert HANDLES.stats().stream_changes == before.stream_changes + 2
    other = []
    t = threading.Thread(target=lambda: other.append(handle(device, current_stream())))
    t.start()
    t.join()
    assert other[0] is not h and HANDLES.stats().created >= before.created + 1


def test_workspace_comes_from_the_pool(cuda):
    pool = cuda.get_default_memory_pool()
    used = pool.used_bytes()
    memory = allocate(1 << 20, limit=1 << 21)
    assert memory.ptr != 0 and pool.used_bytes() >= used + (1 << 20)
    del memory
    assert pool.used_bytes() == used


def test_device_arrays_are_wrapped_without_copies(cuda):
    a = cuda.arange(12, dtype=cuda.float32).reshape(3, 4)
    assert as_device_array("x", a) is a
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "cuda") or not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    wrapped = as_device_array("x", t)
    assert isinstance(wrapped, cuda.ndarray) and wrapped.data.ptr == t.data_ptr()
    np.testing.assert_array_equal(cuda.asnumpy(wrapped), t.cpu().numpy())
    with pytest.raises(TypeError, match=r"x is a torch.Tensor in host memory \(DLPack device type 1\)"):
        as_device_array("x", torch.zeros(3))


def test_poisoned_allocations_are_nan(poisoned):
    cp = poisoned
    for dtype in (cp.float16, cp.float32, cp.float64):
        assert bool(cp.isnan(cp.empty(100, dtype)).all())
