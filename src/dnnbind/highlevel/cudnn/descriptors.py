"""cuDNN descriptors as Python objects that own them.

Each class builds its descriptor from shapes, dtypes and parameters only (no arrays, no handle), so
plans can be built and checked on a machine without a GPU; ``read()`` returns what cuDNN holds, through
the matching ``cudnnGet*Descriptor`` call. Destroyed on ``close()``, at the end of a ``with`` block or
when collected (see :class:`dnnbind.highlevel.gpu.descriptors.OwnedDescriptor`).
"""
from __future__ import annotations

from ctypes import byref, c_double, c_int
from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.cudnn._lib import DTYPES, lib
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.descriptors import OwnedDescriptor

_FORMATS = {"NCHW": 0, "NHWC": 1}       # cudnnTensorFormat_t: CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NHWC
_MAX_DIMS = 8                            # CUDNN_DIM_MAX


def _ints(n: int) -> np.ndarray:
    return np.zeros(n, np.int32)


class TensorDescriptor(OwnedDescriptor):
    """An N-d tensor (N = 4 or 5 here): logical shape, dtype, element strides."""

    def __init__(self, shape: Sequence[int], dtype: Any, strides: Sequence[int] | None = None,
                 layout: str = "NCHW") -> None:
        c = lib()
        super().__init__(c.cudnnTensorDescriptor_t, c.cudnnCreateTensorDescriptor, c.cudnnDestroyTensorDescriptor)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(strides) if strides is not None else _layout.strides(self.shape, layout)
        self.dtype = DTYPES[dtype]
        c.cudnnSetTensorNdDescriptor(self.handle, self.dtype.library, len(self.shape), self.shape, self.strides)

    def read(self) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """(cudnnDataType_t, dims, strides) as cuDNN holds them."""
        data_type, nb = c_int(), c_int()
        dims, strides = _ints(_MAX_DIMS), _ints(_MAX_DIMS)
        lib().cudnnGetTensorNdDescriptor(self.handle, _MAX_DIMS, byref(data_type), byref(nb), dims, strides)
        return data_type.value, tuple(dims[:nb.value].tolist()), tuple(strides[:nb.value].tolist())


class FilterDescriptor(OwnedDescriptor):
    """A convolution filter: logical shape (K, C/groups, *kernel), dtype, layout (KCRS or KRSC)."""

    def __init__(self, shape: Sequence[int], dtype: Any, layout: str = "NCHW") -> None:
        c = lib()
        super().__init__(c.cudnnFilterDescriptor_t, c.cudnnCreateFilterDescriptor, c.cudnnDestroyFilterDescriptor)
        self.shape = tuple(int(s) for s in shape)
        self.layout = _layout.check_layout(layout)
        self.dtype = DTYPES[dtype]
        c.cudnnSetFilterNdDescriptor(self.handle, self.dtype.library, _FORMATS[layout], len(self.shape), self.shape)

    def read(self) -> tuple[int, int, tuple[int, ...]]:
        """(cudnnDataType_t, cudnnTensorFormat_t, dims)."""
        data_type, fmt, nb = c_int(), c_int(), c_int()
        dims = _ints(_MAX_DIMS)
        lib().cudnnGetFilterNdDescriptor(self.handle, _MAX_DIMS, byref(data_type), byref(fmt), byref(nb), dims)
        return data_type.value, fmt.value, tuple(dims[:nb.value].tolist())


class ConvolutionDescriptor(OwnedDescriptor):
    """Symmetric padding, stride, dilation per spatial dim; mode; compute type; groups; math type."""

    def __init__(self, padding: Sequence[int], stride: Sequence[int], dilation: Sequence[int], *, flip: bool,
                 compute: int, groups: int, math: int) -> None:
        c = lib()
        super().__init__(c.cudnnConvolutionDescriptor_t, c.cudnnCreateConvolutionDescriptor,
                         c.cudnnDestroyConvolutionDescriptor)
        self.math = math
        mode = c.CUDNN_CONVOLUTION if flip else c.CUDNN_CROSS_CORRELATION
        c.cudnnSetConvolutionNdDescriptor(self.handle, len(padding), tuple(padding), tuple(stride), tuple(dilation),
                                          mode, compute)
        c.cudnnSetConvolutionGroupCount(self.handle, groups)
        c.cudnnSetConvolutionMathType(self.handle, math)

    def read(self) -> dict[str, Any]:
        """padding, stride, dilation, mode, compute, groups, math as cuDNN holds them."""
        c = lib()
        n, mode, compute, groups, math = c_int(), c_int(), c_int(), c_int(), c_int()
        pad, stride, dil = _ints(_MAX_DIMS), _ints(_MAX_DIMS), _ints(_MAX_DIMS)
        c.cudnnGetConvolutionNdDescriptor(self.handle, _MAX_DIMS - 2, byref(n), pad, stride, dil, byref(mode),
                                          byref(compute))
        c.cudnnGetConvolutionGroupCount(self.handle, byref(groups))
        c.cudnnGetConvolutionMathType(self.handle, byref(math))
        k = n.value
        return {"padding": tuple(pad[:k].tolist()), "stride": tuple(stride[:k].tolist()),
                "dilation": tuple(dil[:k].tolist()), "mode": mode.value, "compute": compute.value,
                "groups": groups.value, "math": math.value}


class PoolingDescriptor(OwnedDescriptor):
    """Pooling mode, NaN propagation, window, symmetric padding and stride per spatial dim."""

    def __init__(self, mode: int, window: Sequence[int], padding: Sequence[int], stride: Sequence[int],
                 propagate_nan: bool = True) -> None:
        c = lib()
        super().__init__(c.cudnnPoolingDescriptor_t, c.cudnnCreatePoolingDescriptor, c.cudnnDestroyPoolingDescriptor)
        nan = c.CUDNN_PROPAGATE_NAN if propagate_nan else c.CUDNN_NOT_PROPAGATE_NAN
        c.cudnnSetPoolingNdDescriptor(self.handle, mode, nan, len(window), tuple(window), tuple(padding),
                                      tuple(stride))

    def read(self) -> dict[str, Any]:
        mode, nan, n = c_int(), c_int(), c_int()
        window, pad, stride = _ints(_MAX_DIMS), _ints(_MAX_DIMS), _ints(_MAX_DIMS)
        lib().cudnnGetPoolingNdDescriptor(self.handle, _MAX_DIMS - 2, byref(mode), byref(nan), byref(n), window,
                                          pad, stride)
        k = n.value
        return {"mode": mode.value, "nan": nan.value, "window": tuple(window[:k].tolist()),
                "padding": tuple(pad[:k].tolist()), "stride": tuple(stride[:k].tolist())}

    def output_shape(self, x: TensorDescriptor) -> tuple[int, ...]:
        """cudnnGetPoolingNdForwardOutputDim for input ``x``."""
        out = _ints(len(x.shape))
        lib().cudnnGetPoolingNdForwardOutputDim(self.handle, x.handle, len(x.shape), out)
        return tuple(out.tolist())


class ActivationDescriptor(OwnedDescriptor):
    """Activation mode with its coefficient (clipped relu's ceiling, elu's alpha) or swish's beta."""

    def __init__(self, mode: int, coef: float = 0.0, swish_beta: float | None = None) -> None:
        c = lib()
        super().__init__(c.cudnnActivationDescriptor_t, c.cudnnCreateActivationDescriptor,
                         c.cudnnDestroyActivationDescriptor)
        c.cudnnSetActivationDescriptor(self.handle, mode, c.CUDNN_PROPAGATE_NAN, float(coef))
        if swish_beta is not None:
            c.cudnnSetActivationDescriptorSwishBeta(self.handle, float(swish_beta))

    def read(self) -> dict[str, Any]:
        c = lib()
        mode, nan, coef, beta = c_int(), c_int(), c_double(), c_double()
        c.cudnnGetActivationDescriptor(self.handle, byref(mode), byref(nan), byref(coef))
        c.cudnnGetActivationDescriptorSwishBeta(self.handle, byref(beta))
        return {"mode": mode.value, "nan": nan.value, "coef": coef.value, "swish_beta": beta.value}


class DropoutDescriptor(OwnedDescriptor):
    """A dropout descriptor; bound to a probability and RNG states per call (see dropout.py)."""

    def __init__(self) -> None:
        c = lib()
        super().__init__(c.cudnnDropoutDescriptor_t, c.cudnnCreateDropoutDescriptor, c.cudnnDestroyDropoutDescriptor)


def convolution_output_shape(conv: ConvolutionDescriptor, x: TensorDescriptor, w: FilterDescriptor) -> tuple[int, ...]:
    """cudnnGetConvolutionNdForwardOutputDim: the output shape cuDNN computes for x, w and conv."""
    out = _ints(len(x.shape))
    lib().cudnnGetConvolutionNdForwardOutputDim(conv.handle, x.handle, w.handle, len(x.shape), out)
    return tuple(out.tolist())
