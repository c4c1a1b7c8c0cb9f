"""MIOpen descriptors as Python objects that own them.

Each class builds its descriptor from shapes, dtypes and parameters only (no arrays, no handle), so
plans build and can be checked on a machine without a GPU; ``read()`` returns what MIOpen holds.
MIOpen has no filter descriptors: convolution weights are tensor descriptors. Destroyed on
``close()``, at the end of a ``with`` block or when collected (see
:class:`dnnbind.highlevel.gpu.descriptors.OwnedDescriptor`).
"""
from __future__ import annotations

from ctypes import byref, c_double, c_int, c_size_t
from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.descriptors import OwnedDescriptor
from dnnbind.highlevel.miopen._lib import DTYPES, lib

_MAX_DIMS = 8


def _ints(values: Sequence[int] | int) -> np.ndarray:
    """int32 array of ``values``, or of zeros when given a length."""
    if isinstance(values, int):
        return np.zeros(values, np.int32)
    return np.asarray(tuple(values), np.int32)


class TensorDescriptor(OwnedDescriptor):
    """An N-d tensor: logical shape, dtype, element strides (packed ``layout`` by default)."""

    def __init__(self, shape: Sequence[int], dtype: Any, strides: Sequence[int] | None = None,
                 layout: str = "NCHW") -> None:
        m = lib
        super().__init__(m.miopenTensorDescriptor_t, m.miopenCreateTensorDescriptor, m.miopenDestroyTensorDescriptor)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides) if strides is not None else _layout.strides(self.shape, layout)
        self.dtype = DTYPES[dtype]
        m.miopenSetTensorDescriptor(self.handle, self.dtype.library, len(self.shape), _ints(self.shape),
                                    _ints(self.strides))

    def read(self) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """(miopenDataType_t, dims, strides) as MIOpen holds them."""
        m = lib
        n, data_type = c_int(), c_int()
        m.miopenGetTensorDescriptorSize(self.handle, byref(n))
        dims, strides = _ints(n.value), _ints(n.value)
        m.miopenGetTensorDescriptor(self.handle, byref(data_type), dims, strides)
        return data_type.value, tuple(dims.tolist()), tuple(strides.tolist())

    def nbytes(self) -> int:
        """miopenGetTensorNumBytes."""
        size = c_size_t()
        lib.miopenGetTensorNumBytes(self.handle, byref(size))
        return size.value


class ConvolutionDescriptor(OwnedDescriptor):
    """Cross-correlation with symmetric padding, stride and dilation per spatial dim, groups, and
    optionally MIOpen's deterministic attribute and find mode."""

    def __init__(self, padding: Sequence[int], stride: Sequence[int], dilation: Sequence[int], *, groups: int,
                 deterministic: bool = False, find_mode: int | None = None) -> None:
        m = lib
        super().__init__(m.miopenConvolutionDescriptor_t, m.miopenCreateConvolutionDescriptor,
                         m.miopenDestroyConvolutionDescriptor)
        m.miopenInitConvolutionNdDescriptor(self.handle, len(padding), _ints(padding), _ints(stride),
                                            _ints(dilation), m.miopenConvolution)
        m.miopenSetConvolutionGroupCount(self.handle, groups)
        if deterministic:
            m.miopenSetConvolutionAttribute(self.handle, m.MIOPEN_CONVOLUTION_ATTRIB_DETERMINISTIC, 1)
        if find_mode is not None:
            m.miopenSetConvolutionFindMode(self.handle, find_mode)

    def read(self) -> dict[str, Any]:
        """padding, stride, dilation, mode, groups, deterministic, find_mode as MIOpen holds them."""
        m = lib
        n, mode, groups, det, find = c_int(), c_int(), c_int(), c_int(), c_int()
        pad, stride, dil = _ints(_MAX_DIMS), _ints(_MAX_DIMS), _ints(_MAX_DIMS)
        m.miopenGetConvolutionSpatialDim(self.handle, byref(n))
        m.miopenGetConvolutionNdDescriptor(self.handle, n.value, byref(n), pad, stride, dil, byref(mode))
        m.miopenGetConvolutionGroupCount(self.handle, byref(groups))
        m.miopenGetConvolutionAttribute(self.handle, m.MIOPEN_CONVOLUTION_ATTRIB_DETERMINISTIC, byref(det))
        m.miopenGetConvolutionFindMode(self.handle, byref(find))
        k = n.value
        return {"padding": tuple(pad[:k].tolist()), "stride": tuple(stride[:k].tolist()),
                "dilation": tuple(dil[:k].tolist()), "mode": mode.value, "groups": groups.value,
                "deterministic": det.value, "find_mode": find.value}

    def output_shape(self, x: TensorDescriptor, w: TensorDescriptor) -> tuple[int, ...]:
        """miopenGetConvolutionNdForwardOutputDim: the output shape MIOpen computes for x and w."""
        n = c_int()
        out = _ints(_MAX_DIMS)
        lib.miopenGetConvolutionNdForwardOutputDim(self.handle, x.handle, w.handle, byref(n), out)
        return tuple(out[:n.value].tolist())


class PoolingDescriptor(OwnedDescriptor):
    """Pooling mode, window, symmetric padding, stride, and the index type and index mode of the
    workspace that max pooling saves for its backward pass."""

    def __init__(self, mode: int, window: Sequence[int], padding: Sequence[int], stride: Sequence[int], *,
                 index_type: int, index_mode: int) -> None:
        m = lib
        super().__init__(m.miopenPoolingDescriptor_t, m.miopenCreatePoolingDescriptor, m.miopenDestroyPoolingDescriptor)
        m.miopenSetNdPoolingDescriptor(self.handle, mode, len(window), _ints(window), _ints(padding), _ints(stride))
        m.miopenSetPoolingIndexType(self.handle, index_type)
        m.miopenSetPoolingWorkSpaceIndexMode(self.handle, index_mode)

    def read(self) -> dict[str, Any]:
        m = lib
        mode, n, index_type, index_mode = c_int(), c_int(), c_int(), c_int()
        window, pad, stride = _ints(_MAX_DIMS), _ints(_MAX_DIMS), _ints(_MAX_DIMS)
        m.miopenGetNdPoolingDescriptor(self.handle, _MAX_DIMS, byref(mode), byref(n), window, pad, stride)
        m.miopenGetPoolingIndexType(self.handle, byref(index_type))
        m.miopenGetPoolingWorkSpaceIndexMode(self.handle, byref(index_mode))
        k = n.value
        return {"mode": mode.value, "window": tuple(window[:k].tolist()), "padding": tuple(pad[:k].tolist()),
                "stride": tuple(stride[:k].tolist()), "index_type": index_type.value,
                "index_mode": index_mode.value}

    def output_shape(self, x: TensorDescriptor) -> tuple[int, ...]:
        """miopenGetPoolingNdForwardOutputDim for input ``x``."""
        out = _ints(len(x.shape))
        lib.miopenGetPoolingNdForwardOutputDim(self.handle, x.handle, len(x.shape), out)
        return tuple(out.tolist())

    def workspace_size(self, y: TensorDescriptor) -> int:
        """miopenPoolingGetWorkSpaceSizeV2: bytes of the index workspace for output ``y``."""
        size = c_size_t()
        lib.miopenPoolingGetWorkSpaceSizeV2(self.handle, y.handle, byref(size))
        return size.value


class ActivationDescriptor(OwnedDescriptor):
    """An activation mode with MIOpen's three coefficients (alpha, beta, gamma)."""

    def __init__(self, mode: int, alpha: float = 0.0, beta: float = 0.0, gamma: float = 0.0) -> None:
        m = lib
        super().__init__(m.miopenActivationDescriptor_t, m.miopenCreateActivationDescriptor,
                         m.miopenDestroyActivationDescriptor)
        m.miopenSetActivationDescriptor(self.handle, mode, float(alpha), float(beta), float(gamma))

    def read(self) -> dict[str, Any]:
        mode, a, b, g = c_int(), c_double(), c_double(), c_double()
        lib.miopenGetActivationDescriptor(self.handle, byref(mode), byref(a), byref(b), byref(g))
        return {"mode": mode.value, "alpha": a.value, "beta": b.value, "gamma": g.value}


class DropoutDescriptor(OwnedDescriptor):
    """A dropout descriptor; bound to a probability and RNG states per call (see dropout.py)."""

    def __init__(self) -> None:
        m = lib
        super().__init__(m.miopenDropoutDescriptor_t, m.miopenCreateDropoutDescriptor, m.miopenDestroyDropoutDescriptor)


class RNNDescriptor(OwnedDescriptor):
    """A multi-layer RNN (linear input, MIOpen's default algorithm) of one mode and data type."""

    def __init__(self, hidden: int, layers: int, *, mode: int, bidirectional: bool, bias: bool,
                 dtype: Any) -> None:
        m = lib
        super().__init__(m.miopenRNNDescriptor_t, m.miopenCreateRNNDescriptor, m.miopenDestroyRNNDescriptor)
        self.dtype = DTYPES[dtype]
        m.miopenSetRNNDescriptor(self.handle, hidden, layers, m.miopenRNNlinear,
                                 m.miopenRNNbidirection if bidirectional else m.miopenRNNunidirection, mode,
                                 m.miopenRNNwithBias if bias else m.miopenRNNNoBias, m.miopenRNNdefault,
                                 self.dtype.library)

    def read(self) -> dict[str, int]:
        mode, algo, inp, direction, bias, hidden, layers = (c_int() for _ in range(7))
        lib.miopenGetRNNDescriptor(self.handle, byref(mode), byref(algo), byref(inp), byref(direction), byref(bias),
                                   byref(hidden), byref(layers))
        return {"mode": mode.value, "algo": algo.value, "input_mode": inp.value, "direction": direction.value,
                "bias": bias.value, "hidden": hidden.value, "layers": layers.value}

    def param_offset(self, layer: int, x: TensorDescriptor, param: int) -> tuple[int, tuple[int, ...]]:
        """(element offset, matrix shape) of weight matrix ``param`` of ``layer`` in the weight space
        (miopenGetRNNLayerParamOffset; no handle needed)."""
        return self._offset(lib.miopenGetRNNLayerParamOffset, layer, x, param)

    def bias_offset(self, layer: int, x: TensorDescriptor, bias: int) -> tuple[int, tuple[int, ...]]:
        """(element offset, shape) of bias vector ``bias`` of ``layer`` (miopenGetRNNLayerBiasOffset)."""
        return self._offset(lib.miopenGetRNNLayerBiasOffset, layer, x, bias)

    def _offset(self, query: Any, layer: int, x: TensorDescriptor, ident: int) -> tuple[int, tuple[int, ...]]:
        desc = TensorDescriptor((1,), self.dtype.name)      # MIOpen describes the piece into it
        try:
            offset = c_size_t()
            query(self.handle, layer, x.handle, ident, desc.handle, byref(offset))
            return offset.value, desc.read()[1]
        finally:
            desc.close()


class SeqTensorDescriptor(OwnedDescriptor):
    """RNN sequence data: layout, longest sequence, batch, vector size and each sequence's length."""

    def __init__(self, dtype: Any, layout: int, max_len: int, batch: int, vector: int,
                 lengths: Sequence[int]) -> None:
        m = lib
        super().__init__(m.miopenSeqTensorDescriptor_t, m.miopenCreateSeqTensorDescriptor,
                         m.miopenDestroySeqTensorDescriptor)
        self.dtype = DTYPES[dtype]
        m.miopenSetRNNDataSeqTensorDescriptor(self.handle, self.dtype.library, layout, max_len, batch, vector,
                                              _ints(lengths), None)

    def read(self) -> dict[str, Any]:
        dtype, layout, max_len, batch, vector = (c_int() for _ in range(5))
        m = lib
        m.miopenGetRNNDataSeqTensorDescriptor(self.handle, byref(dtype), byref(layout), byref(max_len), byref(batch),
                                              byref(vector), 0, None, None)
        lengths = _ints(batch.value)
        m.miopenGetRNNDataSeqTensorDescriptor(self.handle, byref(dtype), byref(layout), byref(max_len), byref(batch),
                                              byref(vector), batch.value, lengths, None)
        return {"dtype": dtype.value, "layout": layout.value, "max_len": max_len.value, "batch": batch.value,
                "vector": vector.value, "lengths": tuple(lengths.tolist())}
