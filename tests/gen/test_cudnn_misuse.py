"""Every documented misuse of the cuDNN bindings raises a clear error and never crashes the process.

The calls run in a child interpreter: a binding bug that let a bad pointer through would kill it,
and the test would see the exit status instead of taking pytest down with it.
"""
from __future__ import annotations

import json

from childproc import run_python

CHILD = r'''
import ctypes, json
import numpy as np
from dnnbind.gen import cudnn as c

class FakeDeviceArray:
    """Stands for a CuPy/PyTorch CUDA array on a machine without a GPU."""
    __cuda_array_interface__ = {"data": (0x7F000000, False), "shape": (4,), "typestr": "<f4", "version": 3}

t = c.cudnnTensorDescriptor_t(); c.cudnnCreateTensorDescriptor(ctypes.byref(t))
f = c.cudnnFilterDescriptor_t(); c.cudnnCreateFilterDescriptor(ctypes.byref(f))
conv = c.cudnnConvolutionDescriptor_t(); c.cudnnCreateConvolutionDescriptor(ctypes.byref(conv))
one = ctypes.byref(ctypes.c_float(1.0))

def forward(**overrides):
    args = dict(handle=None, alpha=one, xDesc=t, x=None, wDesc=f, w=None, convDesc=conv, algo=0, workSpace=None,
                workSpaceSizeInBytes=0, beta=one, yDesc=t, y=None)
    args.update(overrides)
    return c.cudnnConvolutionForward(*args.values())

cases = {
    "numpy as device": lambda: forward(x=np.zeros(4, np.float32)),
    "bytes as device": lambda: forward(w=b"\0" * 16),
    "ctypes buffer as device": lambda: forward(y=ctypes.create_string_buffer(16)),
    "device as host": lambda: forward(alpha=FakeDeviceArray()),
    "size_t out given c_int": lambda: c.cudnnGetTensorSizeInBytes(t, ctypes.byref(ctypes.c_int())),
    "filter as tensor": lambda: c.cudnnSetTensor4dDescriptor(f, 0, 0, 1, 1, 1, 1),
    "negative workspace size": lambda: forward(workSpaceSizeInBytes=-8),
    "list for output array": lambda: c.cudnnGetTensorNdDescriptor(t, 4, ctypes.byref(ctypes.c_int()),
                                                                  ctypes.byref(ctypes.c_int()), [0] * 4, [0] * 4),
    "int64 numpy for int array": lambda: c.cudnnSetTensorNdDescriptor(t, 0, 2, np.array([1, 2]), [2, 1]),
    "NULL descriptor": lambda: c.cudnnSetTensor4dDescriptor(None, 0, 0, 1, 1, 1, 1),
    "NULL out-parameters": lambda: c.cudnnGetTensor4dDescriptor(t, *([None] * 9)),
    "float for int": lambda: c.cudnnSetConvolutionGroupCount(conv, 2.5),
}
out = {}
for name, call in cases.items():
    try:
        call()
        out[name] = ["no error"]
    except Exception as exc:
        out[name] = [type(exc).__name__, isinstance(exc, TypeError), isinstance(exc, ctypes.ArgumentError), str(exc)]
print(json.dumps(out))
'''


def test_misuse_raises_documented_errors_without_crashing():
    result = run_python(CHILD)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    fn = "cudnnConvolutionForward: parameter"
    assert out["numpy as device"][1:] == [True, True, f"{fn} 'x' needs device memory, got numpy.ndarray (host memory)"]
    assert out["bytes as device"][3] == f"{fn} 'w' needs device memory, got bytes (host memory)"
    assert out["ctypes buffer as device"][3] == f"{fn} 'y' needs device memory, got ctypes.c_char_Array_16 (host memory)"
    assert out["device as host"][3].startswith(f"{fn} 'alpha' cannot take the host address of a __main__.FakeDeviceArray")
    assert out["size_t out given c_int"][1:3] == [True, True]
    assert "cudnnGetTensorSizeInBytes: parameter 'size'" in out["size_t out given c_int"][3]
    assert out["filter as tensor"][2] is True
    assert "parameter 'tensorDesc' expected LP_cudnnTensorStruct instance instead of LP_cudnnFilterStruct" \
        in out["filter as tensor"][3]
    assert out["negative workspace size"][3] == f"{fn} 'workSpaceSizeInBytes' needs a non-negative byte count, got -8"
    assert "parameter 'dimA' is an output (c_int*)" in out["list for output array"][3]
    assert "parameter 'dimA' needs a numpy array of dtype int32 (c_int), got dtype int64" \
        in out["int64 numpy for int array"][3]
    # NULL where cuDNN expects an object: the library itself refuses with a status, no crash
    assert out["NULL descriptor"][0] == "CudnnError" and "CUDNN_STATUS_BAD_PARAM" in out["NULL descriptor"][3]
    assert out["NULL out-parameters"][0] == "CudnnError"
    assert out["float for int"][1:3] == [True, True] and "parameter 'groupCount'" in out["float for int"][3]
