"""Misuse of the generated cuDNN bindings, against the real libcudnn: every case raises a clear Python
error naming the function and parameter before the library sees it, and none crashes the process.

The categories are those of the raw-bindings safety issue: integers out of range (ctypes would wrap
them), another enum's member, NULL where the library writes, arrays shorter than what the library reads
or writes, handles used after destroy, callbacks read back, and misplaced memory kinds. Each case runs in
a child interpreter (tests/misuse.py): a crash is a failing case, not a lost run.
"""
from __future__ import annotations

import pytest

from childproc import run_python
from misuse import assert_outcome, run_cases

SETUP = r'''
import ctypes, warnings
from ctypes import byref, c_int, c_float, c_size_t, create_string_buffer
import numpy as np
from dnnbind.gen import cudnn as c
warnings.simplefilter("ignore", DeprecationWarning)

class FakeDeviceArray:
    """Stands for a CuPy/PyTorch CUDA array on a machine without a GPU."""
    __cuda_array_interface__ = {"data": (0x7F000000, False), "shape": (4,), "typestr": "<f4", "version": 3}

def make(create, kind):
    handle = kind(); create(byref(handle)); return handle

t = make(c.cudnnCreateTensorDescriptor, c.cudnnTensorDescriptor_t)
c.cudnnSetTensor4dDescriptor(t, c.CUDNN_TENSOR_NCHW, c.CUDNN_DATA_FLOAT, 2, 4, 8, 8)
t8 = make(c.cudnnCreateTensorDescriptor, c.cudnnTensorDescriptor_t)
c.cudnnSetTensorNdDescriptor(t8, c.CUDNN_DATA_FLOAT, 8, [1] * 8, [1] * 8)
f = make(c.cudnnCreateFilterDescriptor, c.cudnnFilterDescriptor_t)
c.cudnnSetFilter4dDescriptor(f, c.CUDNN_DATA_FLOAT, c.CUDNN_TENSOR_NCHW, 4, 4, 3, 3)
pool = make(c.cudnnCreatePoolingDescriptor, c.cudnnPoolingDescriptor_t)
pointwise = make(lambda p: c.cudnnBackendCreateDescriptor(c.CUDNN_BACKEND_POINTWISE_DESCRIPTOR, p),
                 c.cudnnBackendDescriptor_t)
cv = make(c.cudnnCreateConvolutionDescriptor, c.cudnnConvolutionDescriptor_t)
c.cudnnSetConvolution2dDescriptor(cv, 1, 1, 1, 1, 1, 1, c.CUDNN_CROSS_CORRELATION, c.CUDNN_DATA_FLOAT)
one = byref(c_float(1.0))

def forward(**overrides):
    args = dict(handle=None, alpha=one, xDesc=t, x=None, wDesc=f, w=None, convDesc=cv, algo=0, workSpace=None,
                workSpaceSizeInBytes=0, beta=one, yDesc=t, y=None)
    args.update(overrides)
    return c.cudnnConvolutionForward(*args.values())

def destroy_twice(create, kind, destroy):
    handle = make(create, kind)
    destroy(handle)
    destroy(handle)

def after_destroy(call):
    handle = make(c.cudnnCreateTensorDescriptor, c.cudnnTensorDescriptor_t)
    c.cudnnDestroyTensorDescriptor(handle)
    call(handle)

def reused_address():
    """A destroyed handle whose memory the next descriptor reuses must not reach the new descriptor."""
    old = make(c.cudnnCreateTensorDescriptor, c.cudnnTensorDescriptor_t)
    c.cudnnDestroyTensorDescriptor(old)
    new = make(c.cudnnCreateTensorDescriptor, c.cudnnTensorDescriptor_t)
    c.cudnnSetTensor4dDescriptor(new, c.CUDNN_TENSOR_NCHW, c.CUDNN_DATA_FLOAT, 1, 2, 3, 4)
    try:
        c.cudnnSetTensor4dDescriptor(old, c.CUDNN_TENSOR_NCHW, c.CUDNN_DATA_FLOAT, 9, 9, 9, 9)
    finally:
        dims = [c_int() for _ in range(9)]
        c.cudnnGetTensor4dDescriptor(new, *[byref(d) for d in dims])
        assert [d.value for d in dims[1:5]] == [1, 2, 3, 4], "the new descriptor was rewritten"

def callback_round_trip():
    seen = []
    callback = c.cudnnCallback_t(lambda *args: seen.append(args))
    c.cudnnSetCallback(0, None, callback)
    mask, udata, fptr = ctypes.c_uint(7), ctypes.c_void_p(), c.cudnnCallback_t()
    c.cudnnGetCallback(byref(mask), byref(udata), byref(fptr))
    c.cudnnSetCallback(0, None, c.cudnnCallback_t())
    assert ctypes.cast(fptr, ctypes.c_void_p).value == ctypes.cast(callback, ctypes.c_void_p).value

def callback_outlives_its_argument():
    """The library calls the callback after cudnnSetCallback returns: a temporary must stay alive."""
    seen = []
    c.cudnnSetCallback(c.CUDNN_SEV_ERROR_EN, None, c.cudnnCallback_t(lambda *args: seen.append(args[0])))
    c.cudnnSetCallback(c.CUDNN_SEV_ERROR_EN, None, lambda *args: seen.append(args[0]))   # a plain function too
    try:
        c.cudnnSetTensor4dDescriptor(t, 0, 0, -1, 1, 1, 1)
    except Exception:
        pass
    c.cudnnSetCallback(0, None, None)
    assert seen, "the callback was not called"

def rnn_data_fill(fill):
    data = make(c.cudnnCreateRNNDataDescriptor, c.cudnnRNNDataDescriptor_t)
    c.cudnnSetRNNDataDescriptor(data, c.CUDNN_DATA_FLOAT, 0, 4, 4, 4, [4] * 4, fill)

def backend_descriptor_values(values):
    graph = make(lambda p: c.cudnnBackendCreateDescriptor(c.CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, p),
                 c.cudnnBackendDescriptor_t)
    count = len(values) if isinstance(values, ctypes.Array) else 1
    c.cudnnBackendSetAttribute(graph, c.CUDNN_ATTR_OPERATIONGRAPH_OPS, c.CUDNN_TYPE_BACKEND_DESCRIPTOR, count, values)

def destroyed_backend_descriptor():
    dead = make(lambda p: c.cudnnBackendCreateDescriptor(c.CUDNN_BACKEND_POINTWISE_DESCRIPTOR, p),
                c.cudnnBackendDescriptor_t)
    alias = c.cudnnBackendDescriptor_t.from_buffer_copy(dead)
    c.cudnnBackendDestroyDescriptor(dead)
    backend_descriptor_values(byref(alias))

def lrn_outputs_are_optional():
    lrn = make(c.cudnnCreateLRNDescriptor, c.cudnnLRNDescriptor_t)
    n = ctypes.c_uint()
    c.cudnnGetLRNDescriptor(lrn, byref(n), None, None, None)       # documented: any output may be NULL
    assert n.value > 0
'''

CASES = {
    # 1. integers out of range, another enum's member
    "int n = 2**32 + 2": "c.cudnnSetTensor4dDescriptor(t, 0, 0, 2**32 + 2, 4, 8, 8)",
    "int below INT_MIN": "c.cudnnSetTensor4dDescriptor(t, 0, 0, 2, -2**31 - 1, 8, 8)",
    "dimA element 2**32 + 1": "c.cudnnSetTensorNdDescriptor(t, 0, 4, [2**32 + 1, 2, 3, 4], [24, 12, 4, 1])",
    "numpy dims element out of int range": "c.cudnnSetTensorNdDescriptor(t, 0, 2, [3, 4], (np.int64(2**40), 1))",
    "group count 2**31": "c.cudnnSetConvolutionGroupCount(cv, 2**31)",
    "enum value 2**32 + 1": "c.cudnnSetTensor4dDescriptor(t, 0, 2**32 + 1, 2, 4, 8, 8)",
    "another enum's member": "c.cudnnSetTensor4dDescriptor(t, 0, c.CUDNN_POOLING_MAX_DETERMINISTIC, 2, 4, 8, 8)",
    "elementCount 2**64 + 4": "c.cudnnBackendSetAttribute(None, 0, c.CUDNN_TYPE_INT64, 2**64 + 4, np.zeros(4, np.int64))",
    "device address 2**64 + 16": "forward(x=2**64 + 16)",
    "size_t max_size -1": "c.cudnnGetLastErrorString(create_string_buffer(4), -1)",
    "negative workspace size": "forward(workSpaceSizeInBytes=-8)",
    "float for int": "c.cudnnSetConvolutionGroupCount(cv, 2.5)",
    "str for enum": "c.cudnnSetTensor4dDescriptor(t, 0, 'float', 2, 4, 8, 8)",
    # 2. NULL where the library writes
    "size out None": "c.cudnnGetTensorSizeInBytes(t, None)",
    "group count out None": "c.cudnnGetConvolutionGroupCount(cv, None)",
    "output dims None": "c.cudnnGetConvolution2dForwardOutputDim(cv, t, f, None, None, None, None)",
    "backend descriptor out None": "c.cudnnBackendCreateDescriptor(0, None)",
    "handle out None": "c.cudnnCreate(None)",
    "tensor 4d outs None": "c.cudnnGetTensor4dDescriptor(t, *([None] * 9))",
    "workspace size out None": "c.cudnnGetConvolutionForwardWorkspaceSize(None, t, f, cv, t, 0, None)",
    "documented optional outputs": "lrn_outputs_are_optional()",
    # 3. arrays shorter than what the library reads or writes
    "GetTensorNd into 1-element numpy": "c.cudnnGetTensorNdDescriptor(t8, 8, byref(c_int()), byref(c_int()), "
                                        "np.zeros(1, np.int32), np.zeros(1, np.int32))",
    "GetTensorNd into 1-element ctypes": "c.cudnnGetTensorNdDescriptor(t8, 8, byref(c_int()), byref(c_int()), "
                                         "(c_int * 1)(), (c_int * 8)())",
    "SetTensorNd from 3 of 4": "c.cudnnSetTensorNdDescriptor(t, 0, 4, [2, 4, 8], [256, 64, 8])",
    "Nd output dims into 1 element": "c.cudnnGetConvolutionNdForwardOutputDim(cv, t, f, 5, np.zeros(1, np.int32))",
    "Nd output dims: 1 asked, 2 written": "c.cudnnGetConvolutionNdForwardOutputDim(cv, t, f, 1, np.zeros(1, np.int32))",
    "error string into 4 bytes": "c.cudnnGetLastErrorString(create_string_buffer(4), 4096)",
    "attribute values short": "c.cudnnBackendSetAttribute(pointwise, 0, c.CUDNN_TYPE_INT64, 4, "
                              "np.zeros(2, np.int64))",
    "attribute type without a size": "c.cudnnBackendSetAttribute(pointwise, 0, 999, 1, np.zeros(2, np.int64))",
    # values of another number type than the attribute type names (their bytes would be read as it)
    "attribute int64 values as float64": "c.cudnnBackendSetAttribute(pointwise, 0, c.CUDNN_TYPE_INT64, 4, "
                                         "np.ones(4, np.float64))",
    "attribute int64 values as ctypes int32": "c.cudnnBackendSetAttribute(pointwise, 0, c.CUDNN_TYPE_INT64, 2, "
                                              "(c_int * 4)())",
    "attribute double read into int64": "c.cudnnBackendGetAttribute(pointwise, 0, c.CUDNN_TYPE_DOUBLE, 1, "
                                        "byref(ctypes.c_int64()), np.zeros(1, np.int64))",
    "attribute enum values as int64": "c.cudnnBackendSetAttribute(pointwise, 0, c.CUDNN_TYPE_DATA_TYPE, 1, "
                                      "np.zeros(1, np.int64))",
    "attribute char values as uint8": "c.cudnnBackendSetAttribute(pointwise, 0, c.CUDNN_TYPE_CHAR, 3, "
                                      "np.frombuffer(b'abc', np.uint8))",
    "pooling window short": "c.cudnnSetPoolingNdDescriptor(pool, 0, 0, 3, [2, 2], [0, 0, 0], [1, 1, 1])",
    "algorithm results short": "c.cudnnFindConvolutionForwardAlgorithm(None, t, f, cv, t, 8, byref(c_int()), "
                               "(c.cudnnConvolutionFwdAlgoPerf_t * 1)())",
    "scaling factor of 2 bytes": "forward(alpha=byref(ctypes.c_int16(1)))",
    "bare pointer for 8 elements": "c.cudnnGetTensorNdDescriptor(t8, 8, byref(c_int()), byref(c_int()), "
                                   "ctypes.pointer(c_int()), (c_int * 8)())",
    # 4. handle lifetimes
    "tensor destroyed twice": "destroy_twice(c.cudnnCreateTensorDescriptor, c.cudnnTensorDescriptor_t, "
                              "c.cudnnDestroyTensorDescriptor)",
    "filter destroyed twice": "destroy_twice(c.cudnnCreateFilterDescriptor, c.cudnnFilterDescriptor_t, "
                              "c.cudnnDestroyFilterDescriptor)",
    "convolution destroyed twice": "destroy_twice(c.cudnnCreateConvolutionDescriptor, "
                                   "c.cudnnConvolutionDescriptor_t, c.cudnnDestroyConvolutionDescriptor)",
    "pooling destroyed twice": "destroy_twice(c.cudnnCreatePoolingDescriptor, c.cudnnPoolingDescriptor_t, "
                               "c.cudnnDestroyPoolingDescriptor)",
    "activation destroyed twice": "destroy_twice(c.cudnnCreateActivationDescriptor, "
                                  "c.cudnnActivationDescriptor_t, c.cudnnDestroyActivationDescriptor)",
    "backend destroyed twice": "destroy_twice(lambda p: c.cudnnBackendCreateDescriptor("
                               "c.CUDNN_BACKEND_POINTWISE_DESCRIPTOR, p), c.cudnnBackendDescriptor_t, "
                               "c.cudnnBackendDestroyDescriptor)",
    "destroy None": "c.cudnnDestroyTensorDescriptor(None)",
    "set after destroy": "after_destroy(lambda h: c.cudnnSetTensor4dDescriptor(h, 0, 0, 1, 1, 1, 1))",
    "read after destroy": "after_destroy(lambda h: c.cudnnGetTensorSizeInBytes(h, byref(c_size_t())))",
    "destroyed address reused": "reused_address()",
    # 5. a pointer to a callback typedef
    "byref offset past an output": "c.cudnnGetTensorSizeInBytes(t, byref(c_size_t(), 1 << 40))",
    "byref offset past an input": "c.cudnnSetTensorNdDescriptor(t, 0, 4, byref((c_int * 4)(2, 4, 8, 8), 1 << 40), "
                                  "[256, 64, 8, 1])",
    "byref offset leaves too few": "c.cudnnSetTensorNdDescriptor(t, 0, 4, byref((c_int * 4)(2, 4, 8, 8), 4), "
                                   "[256, 64, 8, 1])",
    "byref offset inside": "c.cudnnSetTensorNdDescriptor(t, 0, 4, byref((c_int * 6)(0, 0, 2, 4, 8, 8), 8), "
                           "[256, 64, 8, 1])",
    "numpy object array as host memory": "rnn_data_fill(np.array([None, None], dtype=object))",
    "numpy scalar as host memory": "rnn_data_fill(np.float32(7.0))",
    "2000 dimensions": "c.cudnnSetTensorNdDescriptorEx(t, 0, 0, 2000, [1] * 2000)",
    "negative dimension count": "c.cudnnGetTensorNdDescriptor(t, -1, byref(c_int()), byref(c_int()), None, None)",
    "numpy array for an int": "c.cudnnSetTensor4dDescriptor(t, 0, 0, np.array([2, 3]), 1, 1, 1)",
    "numpy array for a descriptor": "c.cudnnSetTensor4dDescriptor(np.zeros(3), 0, 0, 2, 1, 1, 1)",
    "numpy array destroyed": "c.cudnnDestroyTensorDescriptor(np.zeros(3))",
    "numpy array for callbacks": "c.cudnnGetCallback(byref(ctypes.c_uint()), byref(ctypes.c_void_p()), "
                                 "np.zeros(2, np.int32))",
    "fused ops Get into an int address": "c.cudnnGetFusedOpsVariantParamPackAttribute(make(lambda p: "
                                         "c.cudnnCreateFusedOpsVariantParamPack(p, 0), "
                                         "c.cudnnFusedOpsVariantParamPack_t), 0, 1 << 31)",
    "backend descriptor as an int": "backend_descriptor_values(byref(ctypes.c_int64(12345)))",
    "backend descriptor NULL": "backend_descriptor_values((c.cudnnBackendDescriptor_t * 2)(pointwise))",
    "backend descriptor destroyed": "destroyed_backend_descriptor()",
    "callback read back": "callback_round_trip()",
    "callback temporary": "callback_outlives_its_argument()",
    "callback byref": "c.cudnnSetCallback(c.CUDNN_SEV_ERROR_EN, None, byref(c_int()))",
    "callback address": "c.cudnnSetCallback(c.CUDNN_SEV_ERROR_EN, None, 0x1000)",
    # memory kinds (held before; kept as a regression guard)
    "numpy as device": "forward(x=np.zeros(4, np.float32))",
    "device as host": "forward(alpha=FakeDeviceArray())",
    "size_t out given c_int": "c.cudnnGetTensorSizeInBytes(t, byref(c_int()))",
    "filter as tensor": "c.cudnnSetTensor4dDescriptor(f, 0, 0, 1, 1, 1, 1)",
}

EXPECTED = {   # case -> (exception class, text the message must contain); None: must succeed
    "int n = 2**32 + 2": ("DnnRangeError", "cudnnSetTensor4dDescriptor: parameter 'n' is 4294967298, outside the "
                                           "range of int (-2147483648 to 2147483647)"),
    "int below INT_MIN": ("DnnRangeError", "parameter 'c' is -2147483649, outside the range of int"),
    "dimA element 2**32 + 1": ("DnnRangeError", "parameter 'dimA' element [0] is 4294967297, outside the range "
                                                "of int"),
    "numpy dims element out of int range": ("DnnRangeError", "parameter 'strideA' element [0] is 1099511627776"),
    "group count 2**31": ("DnnRangeError", "parameter 'groupCount' is 2147483648"),
    "enum value 2**32 + 1": ("DnnRangeError", "parameter 'dataType' is 4294967297"),
    "another enum's member": ("DnnArgumentError", "parameter 'dataType' needs a cudnnDataType_t, got "
                                                  "cudnnPoolingMode_t.CUDNN_POOLING_MAX_DETERMINISTIC"),
    "elementCount 2**64 + 4": ("DnnRangeError", "parameter 'elementCount' is 18446744073709551620, outside the "
                                                "range of int64"),
    "device address 2**64 + 16": ("DnnRangeError", "parameter 'x' is 18446744073709551632, which does not fit"),
    "size_t max_size -1": ("DnnRangeError", "cudnnGetLastErrorString: parameter 'max_size' needs a non-negative"),
    "negative workspace size": ("DnnRangeError", "parameter 'workSpaceSizeInBytes' needs a non-negative byte "
                                                 "count, got -8"),
    "float for int": ("DnnArgumentError", "parameter 'groupCount' needs an int, got float"),
    "str for enum": ("DnnArgumentError", "parameter 'dataType' needs an int or a cudnnDataType_t member, got str"),
    "size out None": ("DnnArgumentError", "cudnnGetTensorSizeInBytes: parameter 'size' is an output the library "
                                          "writes (size_t*): None (NULL) is not allowed here"),
    "group count out None": ("DnnArgumentError", "parameter 'groupCount' is an output"),
    "output dims None": ("DnnArgumentError", "parameter 'n' is an output"),
    "backend descriptor out None": ("DnnArgumentError", "parameter 'descriptor' is an output the library writes "
                                                        "(cudnnBackendDescriptor_t*)"),
    "handle out None": ("DnnArgumentError", "cudnnCreate: parameter 'handle' is an output"),
    "tensor 4d outs None": ("DnnArgumentError", "parameter 'dataType' is an output"),
    "workspace size out None": ("DnnArgumentError", "parameter 'sizeInBytes' is an output"),
    "documented optional outputs": None,
    "GetTensorNd into 1-element numpy": ("DnnArgumentError", "cudnnGetTensorNdDescriptor: parameter 'dimA' needs "
                                                             "at least 8 int elements, got a numpy.ndarray holding 1"),
    "GetTensorNd into 1-element ctypes": ("DnnArgumentError", "parameter 'dimA' needs at least 8 int elements"),
    "SetTensorNd from 3 of 4": ("DnnArgumentError", "parameter 'dimA' needs at least 4 int elements, got a list "
                                                    "holding 3"),
    "Nd output dims into 1 element": ("DnnArgumentError", "parameter 'tensorOuputDimA' needs at least 5"),
    "Nd output dims: 1 asked, 2 written": ("DnnArgumentError", "parameter 'tensorOuputDimA' needs at least 2 int "
                                                               "elements, got a numpy.ndarray holding 1"),
    "error string into 4 bytes": ("DnnArgumentError", "parameter 'message' needs at least 4096 char elements"),
    "attribute values short": ("DnnArgumentError", "parameter 'arrayOfElements' needs at least 32 bytes, got a "
                                                   "numpy.ndarray of 16 bytes"),
    "attribute int64 values as float64": ("DnnArgumentError", "cudnnBackendSetAttribute: parameter 'arrayOfElements' "
                                          "holds int64 values for CUDNN_TYPE_INT64: pass an array of int64, got "
                                          "numpy.ndarray"),
    "attribute int64 values as ctypes int32": ("DnnArgumentError", "holds int64 values for CUDNN_TYPE_INT64: pass an "
                                               "array of int64, got"),
    "attribute double read into int64": ("DnnArgumentError", "cudnnBackendGetAttribute: parameter 'arrayOfElements' "
                                         "holds double values for CUDNN_TYPE_DOUBLE"),
    # bytes as uint8 pass the element check: cuDNN answers (attribute 0 takes no characters)
    "attribute char values as uint8": ("CudnnError", "cudnnBackendSetAttribute failed: CUDNN_STATUS_BAD_PARAM"),
    "attribute enum values as int64": ("DnnArgumentError", "holds cudnnDataType_t values for CUDNN_TYPE_DATA_TYPE: "
                                       "pass an array of cudnnDataType_t"),
    "attribute type without a size": ("DnnArgumentError", "cudnnBackendSetAttribute: parameter 'attributeType' is "
                                                          "999, which names no type the bindings know the size of"),
    "pooling window short": ("DnnArgumentError", "parameter 'windowDimA' needs at least 3 int elements"),
    "algorithm results short": ("DnnArgumentError", "parameter 'perfResults' needs at least 8 "
                                                    "cudnnConvolutionFwdAlgoPerf_t elements"),
    "scaling factor of 2 bytes": ("DnnArgumentError", "parameter 'alpha' needs at least 4 bytes"),
    "bare pointer for 8 elements": ("DnnArgumentError", "a bare ctypes pointer does not say how many it holds"),
    "tensor destroyed twice": ("DnnArgumentError", "cudnnDestroyTensorDescriptor: parameter 'tensorDesc' is a NULL"),
    "filter destroyed twice": ("DnnArgumentError", "cudnnDestroyFilterDescriptor: parameter 'filterDesc' is a NULL"),
    "convolution destroyed twice": ("DnnArgumentError", "parameter 'convDesc' is a NULL"),
    "pooling destroyed twice": ("DnnArgumentError", "parameter 'poolingDesc' is a NULL"),
    "activation destroyed twice": ("DnnArgumentError", "parameter 'activationDesc' is a NULL"),
    "backend destroyed twice": ("DnnArgumentError", "cudnnBackendDestroyDescriptor: parameter 'descriptor' is a NULL"),
    "destroy None": ("DnnArgumentError", "parameter 'tensorDesc' is None: the handle was destroyed already"),
    "set after destroy": ("DnnArgumentError", "cudnnSetTensor4dDescriptor: parameter 'tensorDesc' is NULL; it "
                                              "needs a created handle"),
    "read after destroy": ("DnnArgumentError", "cudnnGetTensorSizeInBytes: parameter 'tensorDesc' is NULL"),
    "destroyed address reused": ("DnnArgumentError", "cudnnSetTensor4dDescriptor: parameter 'tensorDesc' is NULL"),
    "byref offset past an output": ("DnnArgumentError", "cudnnGetTensorSizeInBytes: parameter 'size' is a byref "
                                                        "with offset 1099511627776 into an object of 8 bytes"),
    "byref offset past an input": ("DnnArgumentError", "parameter 'dimA' is a byref with offset 1099511627776"),
    "byref offset leaves too few": ("DnnArgumentError", "parameter 'dimA' needs at least 4 int elements, got a "
                                                        "CArgObject holding 3"),
    "byref offset inside": None,
    "numpy object array as host memory": ("DnnArgumentError", "cudnnSetRNNDataDescriptor: parameter "
                                              "'paddingFill' needs an array of plain values, got a numpy.ndarray "
                                              "of dtype object"),
    "numpy scalar as host memory": ("DnnArgumentError", "parameter 'paddingFill' needs a numpy array or a ctypes "
                                                        "object, got a numpy.float32 scalar"),
    "2000 dimensions": ("DnnRangeError", "cudnnSetTensorNdDescriptorEx: parameter 'nbDims' is 2000, more than "
                                         "CUDNN_DIM_MAX (8)"),
    "negative dimension count": ("DnnRangeError", "cudnnGetTensorNdDescriptor: parameter 'dimA' has a negative "
                                                  "element count (-1)"),
    "numpy array for an int": ("DnnArgumentError", "cudnnSetTensor4dDescriptor: parameter 'n' needs an int, got "
                                                   "numpy.ndarray"),
    "numpy array for a descriptor": ("DnnArgumentError", "cudnnSetTensor4dDescriptor: parameter 'tensorDesc' needs "
                                                         "a handle, got numpy.ndarray"),
    "numpy array destroyed": ("DnnArgumentError", "cudnnDestroyTensorDescriptor: parameter 'tensorDesc' expected "
                                                  "LP_cudnnTensorStruct instance instead of numpy.ndarray"),
    "numpy array for callbacks": ("DnnArgumentError", "cudnnGetCallback: parameter 'fptr' needs cudnnCallback_t "
                                                      "values, which no numpy dtype holds"),
    "fused ops Get into an int address": ("DnnArgumentError", "cudnnGetFusedOpsVariantParamPackAttribute: parameter "
                                                              "'ptr'"),
    "backend descriptor as an int": ("DnnArgumentError", "cudnnBackendSetAttribute: parameter 'arrayOfElements' "
                                                         "holds cudnnBackendDescriptor_t values here"),
    "backend descriptor NULL": ("DnnArgumentError", "parameter 'arrayOfElements' element [1] is NULL; every element "
                                                    "must be a created cudnnBackendDescriptor_t"),
    "backend descriptor destroyed": ("DnnArgumentError", "parameter 'arrayOfElements' element [0] was destroyed"),
    "callback read back": None,
    "callback temporary": None,
    "callback byref": ("DnnArgumentError", "cudnnSetCallback: parameter 'fptr' needs a callback (an instance of "
                                           "its CFUNCTYPE type, a Python function to wrap in one, or None), got "
                                           "CArgObject"),
    "callback address": ("DnnArgumentError", "cudnnSetCallback: parameter 'fptr' needs a callback"),
    "numpy as device": ("DnnArgumentError", "parameter 'x' needs device memory, got numpy.ndarray (host memory)"),
    "device as host": ("DnnArgumentError", "parameter 'alpha' cannot take the host address of a "
                                           "__main__.FakeDeviceArray"),
    "size_t out given c_int": ("DnnArgumentError", "cudnnGetTensorSizeInBytes: parameter 'size'"),
    "filter as tensor": ("DnnArgumentError", "parameter 'tensorDesc' expected LP_cudnnTensorStruct instance "
                                             "instead of LP_cudnnFilterStruct"),
}


@pytest.fixture(scope="module")
def outcomes() -> dict[str, list]:
    return run_cases(run_python, SETUP, CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_misuse_is_refused_clearly_and_never_crashes(outcomes: dict[str, list], case: str) -> None:
    assert_outcome(case, outcomes[case], EXPECTED[case])
