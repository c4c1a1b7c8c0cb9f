"""The generated cuDNN module as this backend uses it: quiet legacy API, data types, handles.

The backend runs cuDNN's descriptor API (convolution, pooling, activation, batch norm: deprecated since
cuDNN 9.0 in favour of the graph API, and fully supported throughout 9.x). The generated module warns
once per deprecated function; those warnings are about this backend's choice, not the user's code, so
:func:`lib` binds the functions it uses with the warnings silenced.
"""
from __future__ import annotations

import threading
import warnings
from ctypes import byref
from types import ModuleType
from typing import Any, cast

from dnnbind.gen import cudnn as _gen
from dnnbind.highlevel.gpu.dtypes import DataTypes
from dnnbind.highlevel.gpu.handles import HandleRegistry
from dnnbind.runtime.errors import SymbolNotFoundError

#: deprecated functions this backend calls, bound silently on first use
LEGACY = (
    "cudnnCreateFilterDescriptor", "cudnnSetFilterNdDescriptor", "cudnnGetFilterNdDescriptor",
    "cudnnDestroyFilterDescriptor",
    "cudnnCreateConvolutionDescriptor", "cudnnSetConvolutionNdDescriptor", "cudnnGetConvolutionNdDescriptor",
    "cudnnSetConvolutionGroupCount", "cudnnGetConvolutionGroupCount", "cudnnSetConvolutionMathType",
    "cudnnGetConvolutionMathType", "cudnnDestroyConvolutionDescriptor", "cudnnGetConvolutionNdForwardOutputDim",
    "cudnnGetConvolutionForwardAlgorithmMaxCount", "cudnnGetConvolutionForwardAlgorithm_v7",
    "cudnnFindConvolutionForwardAlgorithmEx", "cudnnGetConvolutionForwardWorkspaceSize", "cudnnConvolutionForward",
    "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", "cudnnGetConvolutionBackwardDataAlgorithm_v7",
    "cudnnFindConvolutionBackwardDataAlgorithmEx", "cudnnGetConvolutionBackwardDataWorkspaceSize",
    "cudnnConvolutionBackwardData",
    "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
    "cudnnFindConvolutionBackwardFilterAlgorithmEx", "cudnnGetConvolutionBackwardFilterWorkspaceSize",
    "cudnnConvolutionBackwardFilter", "cudnnConvolutionBackwardBias", "cudnnAddTensor",
    "cudnnCreatePoolingDescriptor", "cudnnSetPoolingNdDescriptor", "cudnnGetPoolingNdDescriptor",
    "cudnnGetPoolingNdForwardOutputDim", "cudnnDestroyPoolingDescriptor", "cudnnPoolingForward",
    "cudnnPoolingBackward",
    "cudnnCreateActivationDescriptor", "cudnnSetActivationDescriptor", "cudnnGetActivationDescriptor",
    "cudnnSetActivationDescriptorSwishBeta", "cudnnGetActivationDescriptorSwishBeta",
    "cudnnDestroyActivationDescriptor", "cudnnActivationForward", "cudnnActivationBackward",
    "cudnnDeriveBNTensorDescriptor", "cudnnBatchNormalizationForwardTraining",
    "cudnnBatchNormalizationForwardInference", "cudnnBatchNormalizationBackward",
)

_bound = False
_bind_lock = threading.Lock()


def lib() -> ModuleType:
    """The generated cuDNN module, with the legacy functions in :data:`LEGACY` bound quietly."""
    global _bound
    if not _bound:
        with _bind_lock:
            if not _bound:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    for name in LEGACY:
                        try:
                            getattr(_gen.unchecked, name)   # binds the symbol (loads the library)
                        except SymbolNotFoundError:         # an older cuDNN: that call fails alone, by name
                            pass
                _bound = True
    return _gen


DTYPES = DataTypes("cuDNN", {
    "float16": _gen.CUDNN_DATA_HALF,
    "bfloat16": _gen.CUDNN_DATA_BFLOAT16,
    "float32": _gen.CUDNN_DATA_FLOAT,
    "float64": _gen.CUDNN_DATA_DOUBLE,
})


def _create() -> Any:
    handle = _gen.cudnnHandle_t()
    lib().cudnnCreate(byref(handle))
    return handle


def _set_stream(handle: Any, stream: int) -> None:
    # the generated parameter takes a stream address as an int (its stub names only cudaStream_t)
    _gen.cudnnSetStream(handle, cast(Any, stream or None))


HANDLES = HandleRegistry(_create, _gen.cudnnDestroy, _set_stream)


def handle(device: int, stream: int) -> Any:
    """This thread's cuDNN handle for ``device`` (which must be current), bound to ``stream``."""
    return HANDLES.get(device, stream)
