"""Type-checked (not run) by tests/typing/test_stubs.py: correct raw-API use that mypy must accept."""
from ctypes import byref, c_int, c_size_t

import numpy as np

from dnnbind.gen import cudnn, miopen

desc = cudnn.cudnnTensorDescriptor_t()
cudnn.cudnnCreateTensorDescriptor(byref(desc))
cudnn.cudnnSetTensor4dDescriptor(desc, cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_DATA_FLOAT, 1, 2, 3, 4)
cudnn.cudnnSetTensorNdDescriptor(desc, cudnn.CUDNN_DATA_FLOAT, 2, [3, 4], np.array([4, 1], np.int32))
size = c_size_t()
cudnn.cudnnGetTensorSizeInBytes(desc, byref(size))
version: int = cudnn.cudnnGetVersion()
text: str | None = cudnn.cudnnGetErrorString(cudnn.CUDNN_STATUS_BAD_PARAM)
status: cudnn.cudnnStatus_t = cudnn.CUDNN_STATUS_SUCCESS
cudnn.cudnnConvolutionForward(None, byref(c_int()), desc, 0x1000, None, None, None, 0, None, 0, None, desc, None)
pooling = miopen.miopenPoolingDescriptor_t()
miopen.miopenCreatePoolingDescriptor(byref(pooling))
perf = cudnn.cudnnConvolutionFwdAlgoPerf_t()
elapsed: float = perf.time
