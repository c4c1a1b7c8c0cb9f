"""Host-side cuDNN calls through the generated module against the real libcudnn 9 (no GPU needed)."""
from __future__ import annotations

import ctypes
from ctypes import byref, c_int, c_size_t

import numpy as np
import pytest

import dnnbind
from childproc import run_python
from dnnbind.gen import cudnn


def make(create, handle_type):
    handle = handle_type()
    create(byref(handle))
    return handle


@pytest.fixture
def tensor():
    desc = make(cudnn.cudnnCreateTensorDescriptor, cudnn.cudnnTensorDescriptor_t)
    yield desc
    cudnn.cudnnDestroyTensorDescriptor(desc)


@pytest.fixture
def filt():
    desc = make(cudnn.cudnnCreateFilterDescriptor, cudnn.cudnnFilterDescriptor_t)
    yield desc
    cudnn.cudnnDestroyFilterDescriptor(desc)


@pytest.fixture
def conv():
    desc = make(cudnn.cudnnCreateConvolutionDescriptor, cudnn.cudnnConvolutionDescriptor_t)
    yield desc
    cudnn.cudnnDestroyConvolutionDescriptor(desc)


def test_library_version_matches_header():
    assert cudnn.library_version()[0] == 9
    assert cudnn.HEADER_VERSION == "9.28.1"
    assert cudnn.CUDNN_VERSION == 92801 == cudnn.cudnnGetVersion()
    assert "libcudnn.so.9" in cudnn.library_path()


def test_tensor_4d_round_trip(tensor):
    cudnn.cudnnSetTensor4dDescriptor(tensor, cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_DATA_HALF, 2, 3, 4, 5)
    out = [c_int() for _ in range(9)]
    cudnn.cudnnGetTensor4dDescriptor(tensor, *map(byref, out))
    assert [o.value for o in out] == [cudnn.CUDNN_DATA_HALF, 2, 3, 4, 5, 60, 20, 5, 1]
    size = c_size_t()
    cudnn.cudnnGetTensorSizeInBytes(tensor, byref(size))
    assert size.value == 2 * 3 * 4 * 5 * 2


@pytest.mark.parametrize("as_array", [list, tuple, lambda v: np.array(v, dtype=np.int32),
                                      lambda v: (c_int * len(v))(*v)])
def test_tensor_nd_accepts_every_array_form(tensor, as_array):
    dims, strides = [2, 3, 4, 5, 6], [360, 120, 30, 6, 1]
    cudnn.cudnnSetTensorNdDescriptor(tensor, cudnn.CUDNN_DATA_DOUBLE, 5, as_array(dims), as_array(strides))
    data_type, nb = c_int(), c_int()
    got_dims, got_strides = np.zeros(8, np.int32), np.zeros(8, np.int32)
    cudnn.cudnnGetTensorNdDescriptor(tensor, 8, byref(data_type), byref(nb), got_dims, got_strides)
    assert (data_type.value, nb.value) == (cudnn.CUDNN_DATA_DOUBLE, 5)
    assert got_dims[:5].tolist() == dims and got_strides[:5].tolist() == strides


def test_filter_round_trip(filt):
    cudnn.cudnnSetFilterNdDescriptor(filt, cudnn.CUDNN_DATA_FLOAT, cudnn.CUDNN_TENSOR_NCHW, 4, [8, 3, 5, 7])
    data_type, fmt, nb = c_int(), c_int(), c_int()
    dims = (c_int * 4)()
    cudnn.cudnnGetFilterNdDescriptor(filt, 4, byref(data_type), byref(fmt), byref(nb), dims)
    assert list(dims) == [8, 3, 5, 7] and nb.value == 4


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_convolution_output_dims_with_groups(tensor, filt, conv, groups):
    cudnn.cudnnSetTensor4dDescriptor(tensor, cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_DATA_FLOAT, 2, 8, 17, 19)
    cudnn.cudnnSetFilter4dDescriptor(filt, cudnn.CUDNN_DATA_FLOAT, cudnn.CUDNN_TENSOR_NCHW, 12, 8 // groups, 3, 5)
    cudnn.cudnnSetConvolutionNdDescriptor(conv, 2, [1, 2], [2, 1], [1, 2], cudnn.CUDNN_CROSS_CORRELATION,
                                          cudnn.CUDNN_DATA_FLOAT)
    cudnn.cudnnSetConvolutionGroupCount(conv, groups)
    count = c_int()
    cudnn.cudnnGetConvolutionGroupCount(conv, byref(count))
    assert count.value == groups
    out = np.zeros(4, np.int32)
    cudnn.cudnnGetConvolutionNdForwardOutputDim(conv, tensor, filt, 4, out)
    # floor((in + 2p - d(k-1) - 1) / s) + 1
    assert out.tolist() == [2, 12, (17 + 2 - 2 - 1) // 2 + 1, (19 + 4 - 8 - 1) // 1 + 1]


def test_convolution_group_count_must_divide_channels(tensor, filt, conv):
    cudnn.cudnnSetTensor4dDescriptor(tensor, cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_DATA_FLOAT, 1, 6, 8, 8)
    cudnn.cudnnSetFilter4dDescriptor(filt, cudnn.CUDNN_DATA_FLOAT, cudnn.CUDNN_TENSOR_NCHW, 4, 4, 3, 3)
    cudnn.cudnnSetConvolution2dDescriptor(conv, 0, 0, 1, 1, 1, 1, cudnn.CUDNN_CROSS_CORRELATION,
                                          cudnn.CUDNN_DATA_FLOAT)
    out = np.zeros(4, np.int32)
    with pytest.raises(dnnbind.CudnnError) as info:
        cudnn.cudnnGetConvolutionNdForwardOutputDim(conv, tensor, filt, 4, out)
    assert info.value.status == cudnn.CUDNN_STATUS_BAD_PARAM
    assert info.value.function == "cudnnGetConvolutionNdForwardOutputDim"


def test_pooling_output_dims(tensor):
    pool = make(cudnn.cudnnCreatePoolingDescriptor, cudnn.cudnnPoolingDescriptor_t)
    try:
        cudnn.cudnnSetPoolingNdDescriptor(pool, cudnn.CUDNN_POOLING_MAX, cudnn.CUDNN_NOT_PROPAGATE_NAN, 2,
                                          [3, 2], [1, 0], [2, 2])
        cudnn.cudnnSetTensor4dDescriptor(tensor, cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_DATA_FLOAT, 2, 3, 9, 8)
        out = np.zeros(4, np.int32)
        cudnn.cudnnGetPoolingNdForwardOutputDim(pool, tensor, 4, out)
        assert out.tolist() == [2, 3, (9 + 2 - 3) // 2 + 1, (8 - 2) // 2 + 1]
        mode, nan, nb = c_int(), c_int(), c_int()
        window, padding, stride = (c_int * 2)(), (c_int * 2)(), (c_int * 2)()
        cudnn.cudnnGetPoolingNdDescriptor(pool, 2, byref(mode), byref(nan), byref(nb), window, padding, stride)
        assert (list(window), list(padding), list(stride)) == ([3, 2], [1, 0], [2, 2])
    finally:
        cudnn.cudnnDestroyPoolingDescriptor(pool)


def test_activation_descriptor_round_trip():
    act = make(cudnn.cudnnCreateActivationDescriptor, cudnn.cudnnActivationDescriptor_t)
    try:
        cudnn.cudnnSetActivationDescriptor(act, cudnn.CUDNN_ACTIVATION_CLIPPED_RELU, cudnn.CUDNN_PROPAGATE_NAN, 6.0)
        mode, nan, coef = c_int(), c_int(), ctypes.c_double()
        cudnn.cudnnGetActivationDescriptor(act, byref(mode), byref(nan), byref(coef))
        assert (mode.value, nan.value, coef.value) == (cudnn.CUDNN_ACTIVATION_CLIPPED_RELU, 1, 6.0)
    finally:
        cudnn.cudnnDestroyActivationDescriptor(act)


def test_dropout_and_rnn_descriptors():
    drop = make(cudnn.cudnnCreateDropoutDescriptor, cudnn.cudnnDropoutDescriptor_t)
    rnn = make(cudnn.cudnnCreateRNNDescriptor, cudnn.cudnnRNNDescriptor_t)
    data = make(cudnn.cudnnCreateRNNDataDescriptor, cudnn.cudnnRNNDataDescriptor_t)
    try:
        cudnn.cudnnSetRNNDescriptor_v8(rnn, cudnn.CUDNN_RNN_ALGO_STANDARD, cudnn.CUDNN_LSTM,
                                       cudnn.CUDNN_RNN_DOUBLE_BIAS, cudnn.CUDNN_BIDIRECTIONAL,
                                       cudnn.CUDNN_LINEAR_INPUT, cudnn.CUDNN_DATA_FLOAT, cudnn.CUDNN_DATA_FLOAT,
                                       cudnn.CUDNN_DEFAULT_MATH, 16, 32, 32, 2, drop, 0)
        got = [c_int() for _ in range(9)] + [ctypes.c_int32() for _ in range(4)]
        algo, mode, bias, direction, inp, dtype, prec, math = got[:8]
        in_size, hidden, proj, layers = got[9:13]
        returned_drop = cudnn.cudnnDropoutDescriptor_t()
        aux = ctypes.c_uint32()
        cudnn.cudnnGetRNNDescriptor_v8(rnn, byref(algo), byref(mode), byref(bias), byref(direction), byref(inp),
                                       byref(dtype), byref(prec), byref(math), byref(in_size), byref(hidden),
                                       byref(proj), byref(layers), byref(returned_drop), byref(aux))
        assert (mode.value, direction.value, in_size.value, hidden.value, layers.value) == \
            (cudnn.CUDNN_LSTM, cudnn.CUDNN_BIDIRECTIONAL, 16, 32, 2)
        cudnn.cudnnSetRNNDataDescriptor(data, cudnn.CUDNN_DATA_FLOAT, cudnn.CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                        7, 3, 16, [7, 5, 2], None)
        lengths = np.zeros(3, np.int32)
        dtype2, layout, max_len, batch, vec = c_int(), c_int(), c_int(), c_int(), c_int()
        cudnn.cudnnGetRNNDataDescriptor(data, byref(dtype2), byref(layout), byref(max_len), byref(batch),
                                        byref(vec), 3, lengths, byref(ctypes.c_float()))
        assert (max_len.value, batch.value, vec.value, lengths.tolist()) == (7, 3, 16, [7, 5, 2])
    finally:
        cudnn.cudnnDestroyRNNDataDescriptor(data)
        cudnn.cudnnDestroyRNNDescriptor(rnn)
        cudnn.cudnnDestroyDropoutDescriptor(drop)


def test_create_without_gpu_reports_not_initialized():
    handle = cudnn.cudnnHandle_t()
    with pytest.raises(dnnbind.CudnnError) as info:
        cudnn.cudnnCreate(byref(handle))
    err = info.value
    assert err.status is cudnn.CUDNN_STATUS_NOT_INITIALIZED
    assert err.function == "cudnnCreate"
    assert "cudaGetDeviceCount" in err.message          # cudnnGetLastErrorString's text
    assert isinstance(err, dnnbind.DnnError)


def test_unchecked_variant_returns_raw_status():
    handle = cudnn.cudnnHandle_t()
    assert cudnn.unchecked.cudnnCreate(byref(handle)) == cudnn.CUDNN_STATUS_NOT_INITIALIZED


def test_status_enum_aliases_print_current_names():
    assert cudnn.CUDNN_STATUS_VERSION_MISMATCH is cudnn.CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH
    assert cudnn.cudnnStatus_t(1002).name == "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH"
    assert cudnn.CUDNN_SEV_ERROR_EN == 1 << cudnn.CUDNN_SEV_ERROR
    assert cudnn.cudnnGetErrorString(cudnn.CUDNN_STATUS_BAD_PARAM) == "CUDNN_STATUS_BAD_PARAM"


def test_deprecated_function_warns_once():
    code = ("import warnings, ctypes\nwarnings.simplefilter('always')\nfrom dnnbind.gen import cudnn\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always')\n"
            "    for _ in range(3):\n"
            "        d = cudnn.cudnnPoolingDescriptor_t(); cudnn.cudnnCreatePoolingDescriptor(ctypes.byref(d))\n"
            "print(len([w for w in seen if issubclass(w.category, DeprecationWarning)]), seen[0].message)\n")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    count, _, message = result.stdout.partition(" ")
    assert count == "1" and "cudnnCreatePoolingDescriptor is deprecated" in message
