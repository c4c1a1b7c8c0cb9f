"""Owned descriptors, error context, handles, workspace and dtypes: the parts that run without a GPU.

The library calls are real cuDNN host-side calls (the generated module, libcudnn from the wheel).
"""
from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

from childproc import run_python
from dnnbind import CudnnError
from dnnbind.gen import cudnn
from dnnbind.highlevel.cudnn._lib import DTYPES, HANDLES
from dnnbind.highlevel.gpu.descriptors import OwnedDescriptor
from dnnbind.highlevel.gpu.errors import describe_call, op_errors
from dnnbind.highlevel.gpu.workspace import WorkspaceTooLarge, allocate

class Tensor(OwnedDescriptor):
    def __init__(self):
        super().__init__(cudnn.cudnnTensorDescriptor_t, cudnn.cudnnCreateTensorDescriptor,
                         cudnn.cudnnDestroyTensorDescriptor)
        cudnn.cudnnSetTensor4dDescriptor(self.handle, cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_DATA_FLOAT, 1, 2, 3, 4)


def test_descriptor_close_and_context_manager():
    t = Tensor()
    size = ctypes.c_size_t()
    cudnn.cudnnGetTensorSizeInBytes(t.handle, ctypes.byref(size))
    assert size.value == 96 and not t.closed
    t.close()
    t.close()                                  # idempotent
    assert t.closed
    with pytest.raises(ValueError, match="Tensor is closed"):
        t.handle
    with Tensor() as u:
        assert not u.closed
    assert u.closed and "closed" in repr(u)


def test_descriptor_is_destroyed_when_collected():
    t = Tensor()
    finalizer = t._finalizer
    assert finalizer.alive
    del t
    gc.collect()
    assert not finalizer.alive


def test_descriptor_that_fails_to_set_up_is_still_destroyed():
    class Bad(OwnedDescriptor):
        def __init__(self):
            super().__init__(cudnn.cudnnTensorDescriptor_t, cudnn.cudnnCreateTensorDescriptor,
                             cudnn.cudnnDestroyTensorDescriptor)
            self.finalizer = self._finalizer
            cudnn.cudnnSetTensor4dDescriptor(self.handle, cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_DATA_FLOAT,
                                             -1, 2, 3, 4)

    with pytest.raises(CudnnError) as info:
        Bad()
    frame_locals = info.tb.tb_next.tb_frame.f_locals
    finalizer = frame_locals["self"].finalizer
    del frame_locals, info
    gc.collect()
    assert not finalizer.alive


def test_descriptors_left_at_interpreter_exit_are_harmless():
    result = run_python("""
        import gc
        from dnnbind.highlevel.cudnn.descriptors import TensorDescriptor, ConvolutionDescriptor
        from dnnbind.highlevel.cudnn.conv_plan import plan_for
        from dnnbind.highlevel.cudnn.settings import settings
        from dnnbind.highlevel.dims import ConvDims
        kept = [TensorDescriptor((2, 3, 4, 5), "float32") for _ in range(50)]
        cycle = []
        cycle.append(cycle)
        cycle.append(TensorDescriptor((1, 1, 1, 1), "float64"))
        plan = plan_for(ConvDims((2, 3, 8, 8), (4, 3, 3, 3), padding=((0, 1), 1)), "NHWC", settings.current(), 0)
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok" and result.stderr == ""


def test_errors_name_the_op_shapes_dtypes_parameters_status_and_cudnn_text():
    x = np.zeros((2, 3, 8, 8), np.float32)
    w = np.zeros((4, 3, 3, 3), np.float16)
    with pytest.raises(CudnnError) as info:
        with op_errors("conv", {"x": x, "w": w, "b": None}, lambda: {"stride": (1, 1), "padding": (-1, -1)}):
            desc = cudnn.cudnnConvolutionDescriptor_t()
            cudnn.cudnnCreateConvolutionDescriptor(ctypes.byref(desc))
            try:
                cudnn.cudnnSetConvolutionNdDescriptor(desc, 2, [-1, -1], [1, 1], [1, 1],
                                                      cudnn.CUDNN_CROSS_CORRELATION, cudnn.CUDNN_DATA_FLOAT)
            finally:
                cudnn.cudnnDestroyConvolutionDescriptor(desc)
    exc = info.value
    text = str(exc)
    assert type(exc) is CudnnError and exc.status == cudnn.CUDNN_STATUS_BAD_PARAM
    assert exc.function == "cudnnSetConvolutionNdDescriptor"
    assert text.startswith("cudnnSetConvolutionNdDescriptor failed: CUDNN_STATUS_BAD_PARAM (2000): ")
    assert "padding[0] = -1 is negative" in text                              # cuDNN's own last-error text
    assert "in conv(x: float32 (2, 3, 8, 8), w: float16 (4, 3, 3, 3)); stride=(1, 1), padding=(-1, -1)" in text
    assert exc.__suppress_context__


def test_other_errors_pass_through_unchanged():
    original = ValueError("not a library error")
    with pytest.raises(ValueError) as info:
        with op_errors("conv", {}, {}):
            raise original
    assert info.value is original
    assert describe_call("softmax", {"x": np.zeros(3)}, {}) == "softmax(x: float64 (3,))"


def test_handle_creation_without_a_gpu_fails_clearly_and_caches_nothing():
    before = HANDLES.stats()
    for _ in range(2):
        with pytest.raises(CudnnError, match=r"cudnnCreate failed: CUDNN_STATUS_NOT_INITIALIZED") as info:
            HANDLES.get(0, 0)
        assert info.value.status == cudnn.CUDNN_STATUS_NOT_INITIALIZED
    after = HANDLES.stats()
    assert after.created == before.created and after.live_in_this_thread == before.live_in_this_thread


def test_workspace_limit_is_checked_before_any_allocation():
    assert allocate(0) is None
    with pytest.raises(WorkspaceTooLarge, match=r"workspace of 2048 bytes exceeds the workspace limit of 1024 "
                                                r"bytes; raise it with settings\(workspace_limit=...\)"):
        allocate(2048, 1024)


def test_dtype_table():
    f16, bf16, f32, f64 = (DTYPES[n] for n in ("float16", "bfloat16", "float32", "float64"))
    assert (f16.library, f16.compute, f16.param) == (cudnn.CUDNN_DATA_HALF, cudnn.CUDNN_DATA_FLOAT, "float32")
    assert (bf16.library, bf16.compute) == (cudnn.CUDNN_DATA_BFLOAT16, cudnn.CUDNN_DATA_FLOAT)
    assert (f32.library, f32.compute, f32.param) == (cudnn.CUDNN_DATA_FLOAT, cudnn.CUDNN_DATA_FLOAT, "float32")
    assert (f64.library, f64.compute, f64.param) == (cudnn.CUDNN_DATA_DOUBLE, cudnn.CUDNN_DATA_DOUBLE, "float64")
    assert type(f64.one) is ctypes.c_double and type(f16.one) is ctypes.c_float
    assert (f32.one.value, f32.zero.value) == (1.0, 0.0) and f16.half and not f32.half
    assert DTYPES[np.float32] is DTYPES[np.dtype("float32")] is f32
    with pytest.raises(TypeError, match=r"the cuDNN backend has no data type for int32; it supports float16, "
                                        r"bfloat16, float32, float64"):
        DTYPES[np.int32]
