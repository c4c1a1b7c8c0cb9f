"""Tracing raw calls: what the log shows, and that untraced calls run the untouched ctypes function."""
from __future__ import annotations

import ctypes
import io
from ctypes import byref

import numpy as np
import pytest

import dnnbind
from childproc import run_python
from dnnbind.gen import cudnn


@pytest.fixture
def tensor():
    desc = cudnn.cudnnTensorDescriptor_t()
    cudnn.cudnnCreateTensorDescriptor(byref(desc))
    yield desc
    cudnn.cudnnDestroyTensorDescriptor(desc)


def test_trace_names_enums_arrays_handles_and_status(tensor):
    log = io.StringIO()
    with dnnbind.trace(file=log) as calls:
        cudnn.cudnnSetTensorNdDescriptor(tensor, cudnn.CUDNN_DATA_FLOAT, 2, [3, 4], np.array([4, 1], np.int32))
        with pytest.raises(dnnbind.CudnnError):
            cudnn.cudnnSetTensor4dDescriptor(tensor, cudnn.CUDNN_TENSOR_NCHW, 99, 2, 3, 4, 5)
    first, failed = calls[0], calls[1]
    assert first.function == "cudnnSetTensorNdDescriptor" and first.result == "CUDNN_STATUS_SUCCESS"
    args = dict(first.arguments)
    assert args["dataType"] == "CUDNN_DATA_FLOAT" and args["dimA"] == "int[2]([3, 4])"
    assert args["strideA"] == "int[2]([4, 1])"          # what C gets: the numpy array's bytes
    assert args["tensorDesc"].startswith("cudnnTensorDescriptor_t@0x")
    assert dict(failed.arguments)["dataType"] == "99 (not a cudnnDataType_t)"
    assert failed.result == "CUDNN_STATUS_BAD_PARAM" and failed.seconds > 0
    assert "cudnnSetTensor4dDescriptor(" in log.getvalue()


def test_untraced_calls_use_the_bare_ctypes_function(tensor):
    cudnn.cudnnSetTensor4dDescriptor(tensor, 0, 0, 1, 1, 1, 1)          # bound before tracing
    with dnnbind.trace(file=None) as calls:
        cudnn.cudnnGetVersion()
        assert not isinstance(cudnn._cudnnSetTensor4dDescriptor, ctypes._CFuncPtr)
    assert len(calls) == 1
    assert isinstance(cudnn._cudnnSetTensor4dDescriptor, ctypes._CFuncPtr)
    assert isinstance(cudnn._cudnnGetVersion, ctypes._CFuncPtr)       # bound while tracing, unwrapped after


def test_environment_variable_traces_from_import(tmp_path):
    log = tmp_path / "calls.log"
    result = run_python(f"""
        import os
        os.environ["DNNBIND_TRACE"] = {str(log)!r}
        from dnnbind.gen import cudnn
        cudnn.cudnnGetVersion()
        """)
    assert result.returncode == 0, result.stderr
    assert "[cuDNN] cudnnGetVersion() -> 92801" in log.read_text()
