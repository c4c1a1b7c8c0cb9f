"""Misuse of the generated MIOpen bindings, against the real libMIOpen 3.4 under Debian's loader: the same
categories as the cuDNN suite (tests/gen/test_cudnn_misuse.py), each case isolated so a crash fails it."""
from __future__ import annotations

import pytest

from misuse import assert_outcome, run_cases

SETUP = r'''
import ctypes
from ctypes import byref, c_int, c_size_t, c_float
import numpy as np
from dnnbind.gen import miopen as m

def make(create, kind):
    handle = kind(); create(byref(handle)); return handle

x = make(m.miopenCreateTensorDescriptor, m.miopenTensorDescriptor_t)
m.miopenSet4dTensorDescriptor(x, m.miopenFloat, 2, 8, 32, 30)
conv = make(m.miopenCreateConvolutionDescriptor, m.miopenConvolutionDescriptor_t)
m.miopenInitConvolutionNdDescriptor(conv, 2, [1, 1], [1, 1], [1, 1], m.miopenConvolution)

def destroy_twice(create, kind, destroy):
    handle = make(create, kind)
    destroy(handle)
    destroy(handle)

def after_destroy(call):
    handle = make(m.miopenCreateTensorDescriptor, m.miopenTensorDescriptor_t)
    m.miopenDestroyTensorDescriptor(handle)
    call(handle)

def dims_read_back():
    dtype, dims, strides = c_int(), np.zeros(4, np.int32), np.zeros(4, np.int32)
    m.miopenGetTensorDescriptor(x, byref(dtype), dims, strides)
    assert dims.tolist() == [2, 8, 32, 30], dims

def unset_then_set():
    """Read back once set; the pooling index type (a one-field setter) neither needs it set nor sets it."""
    pool = make(m.miopenCreatePoolingDescriptor, m.miopenPoolingDescriptor_t)
    m.miopenSetPoolingIndexType(pool, m.miopenIndexUint32)
    try:
        m.miopenGet2dPoolingDescriptor(pool, *[byref(c_int()) for _ in range(7)])
        raise AssertionError("an unset pooling descriptor was read")
    except TypeError:
        pass
    m.miopenSet2dPoolingDescriptor(pool, m.miopenPoolingMax, 2, 2, 0, 0, 2, 2)
    window = c_int()
    m.miopenGet2dPoolingDescriptor(pool, byref(c_int()), byref(window), *[byref(c_int()) for _ in range(5)])
    assert window.value == 2
    m.miopenDestroyPoolingDescriptor(pool)

def version_outputs_are_optional():
    major = c_size_t()
    m.miopenGetVersion(byref(major), None, None)        # documented: NULL pointers are ignored
    assert major.value == 3
'''

CASES = {
    "int n = 2**32 + 2": "m.miopenSet4dTensorDescriptor(x, m.miopenFloat, 2**32 + 2, 8, 32, 30)",
    "dims element 2**31": "m.miopenSetTensorDescriptor(x, m.miopenFloat, 2, [2**31, 1], None)",
    "enum value -2**31 - 1": "m.miopenSet4dTensorDescriptor(x, -2**31 - 1, 2, 8, 32, 30)",
    "another enum's member": "m.miopenSet4dTensorDescriptor(x, m.miopenPoolingMax, 2, 8, 32, 30)",
    "group count 2**31": "m.miopenSetConvolutionGroupCount(conv, 2**31)",
    "size out None": "m.miopenGetTensorNumBytes(x, None)",
    "group count out None": "m.miopenGetConvolutionGroupCount(conv, None)",
    "create out None": "m.miopenCreateTensorDescriptor(None)",
    "documented optional outputs": "version_outputs_are_optional()",
    "packed strides None": "m.miopenSetTensorDescriptor(x, m.miopenFloat, 4, [2, 8, 32, 30], None)",
    "GetTensorDescriptor into 1 element": "m.miopenGetTensorDescriptor(x, byref(c_int()), np.zeros(1, np.int32), "
                                          "np.zeros(4, np.int32))",
    "GetTensorDescriptor exact": "dims_read_back()",
    "SetTensorDescriptor from 3 of 4": "m.miopenSetTensorDescriptor(x, m.miopenFloat, 4, [2, 8, 32], None)",
    "conv Nd pads short": "m.miopenInitConvolutionNdDescriptor(conv, 3, [1, 1], [1, 1, 1], [1, 1, 1], 0)",
    "Nd output dims into 1 element": "m.miopenGetConvolutionNdForwardOutputDim(conv, x, x, byref(c_int()), "
                                     "np.zeros(1, np.int32))",
    "tensor destroyed twice": "destroy_twice(m.miopenCreateTensorDescriptor, m.miopenTensorDescriptor_t, "
                              "m.miopenDestroyTensorDescriptor)",
    "convolution destroyed twice": "destroy_twice(m.miopenCreateConvolutionDescriptor, "
                                   "m.miopenConvolutionDescriptor_t, m.miopenDestroyConvolutionDescriptor)",
    "pooling destroyed twice": "destroy_twice(m.miopenCreatePoolingDescriptor, m.miopenPoolingDescriptor_t, "
                               "m.miopenDestroyPoolingDescriptor)",
    "set after destroy": "after_destroy(lambda h: m.miopenSet4dTensorDescriptor(h, m.miopenFloat, 1, 1, 1, 1))",
    "allocator byref": "m.miopenSetAllocator(None, byref(c_float(0)), None, None)",
    "negative spatial dimensions": "m.miopenInitConvolutionNdDescriptor(conv, -1, [], [], [], 0)",
    "unset tensor read": "m.miopenGet4dTensorDescriptor(make(m.miopenCreateTensorDescriptor, "
                         "m.miopenTensorDescriptor_t), *[byref(c_int()) for _ in range(9)])",
    "unset activation read": "m.miopenGetActivationDescriptor(make(m.miopenCreateActivationDescriptor, "
                             "m.miopenActivationDescriptor_t), byref(c_int()), *[byref(ctypes.c_double()) "
                             "for _ in range(3)])",
    "unset LRN read": "m.miopenGetLRNDescriptor(make(m.miopenCreateLRNDescriptor, m.miopenLRNDescriptor_t), "
                      "byref(c_int()), byref(ctypes.c_uint()), *[byref(ctypes.c_double()) for _ in range(3)])",
    "unset tensor as input": "m.miopenGetConvolutionNdForwardOutputDim(conv, make(m.miopenCreateTensorDescriptor, "
                             "m.miopenTensorDescriptor_t), x, byref(c_int()), np.zeros(4, np.int32))",
    "unset then set": "unset_then_set()",
    "unset sequence read": "m.miopenGetRNNDataSeqTensorDescriptor(make(m.miopenCreateSeqTensorDescriptor, "
                           "m.miopenSeqTensorDescriptor_t), *[byref(c_int()) for _ in range(5)], 0, None, None)",
    "numpy as device": "m.miopenConvolutionForward(None, byref(c_float(1)), x, np.zeros(4, np.float32), x, None, "
                       "conv, 0, byref(c_float(0)), x, None, None, 0)",
}

EXPECTED = {
    "int n = 2**32 + 2": ("DnnRangeError", "miopenSet4dTensorDescriptor: parameter 'n' is 4294967298, outside the "
                                           "range of int"),
    "dims element 2**31": ("DnnRangeError", "parameter 'dimsA' element [0] is 2147483648"),
    "enum value -2**31 - 1": ("DnnRangeError", "parameter 'dataType' is -2147483649"),
    "another enum's member": ("DnnArgumentError", "parameter 'dataType' needs a miopenDataType_t, got "
                                                  "miopenPoolingMode_t.miopenPoolingMax"),
    "group count 2**31": ("DnnRangeError", "parameter 'groupCount' is 2147483648"),
    "size out None": ("DnnArgumentError", "miopenGetTensorNumBytes: parameter 'numBytes' is an output"),
    "group count out None": ("DnnArgumentError", "parameter 'groupCount' is an output"),
    "create out None": ("DnnArgumentError", "parameter 'tensorDesc' is an output"),
    "documented optional outputs": None,
    "packed strides None": None,
    "GetTensorDescriptor into 1 element": ("DnnArgumentError", "miopenGetTensorDescriptor: parameter 'dimsA' needs "
                                                               "at least 4 int elements, got a numpy.ndarray holding 1"),
    "GetTensorDescriptor exact": None,
    "SetTensorDescriptor from 3 of 4": ("DnnArgumentError", "parameter 'dimsA' needs at least 4 int elements"),
    "conv Nd pads short": ("DnnArgumentError", "parameter 'padA' needs at least 3 int elements"),
    "Nd output dims into 1 element": ("DnnArgumentError", "parameter 'outputTensorDimA' needs at least 4"),
    "tensor destroyed twice": ("DnnArgumentError", "miopenDestroyTensorDescriptor: parameter 'tensorDesc' is a NULL"),
    "convolution destroyed twice": ("DnnArgumentError", "parameter 'convDesc' is a NULL"),
    "pooling destroyed twice": ("DnnArgumentError", "parameter 'poolDesc' is a NULL"),
    "set after destroy": ("DnnArgumentError", "miopenSet4dTensorDescriptor: parameter 'tensorDesc' is NULL; it "
                                              "needs a created handle"),
    "allocator byref": ("DnnArgumentError", "miopenSetAllocator: parameter 'allocator' needs a callback"),
    "unset tensor read": ("DnnArgumentError", "miopenGet4dTensorDescriptor: parameter 'tensorDesc' was created "
                                              "but never set; set it first"),
    "unset activation read": ("DnnArgumentError", "miopenGetActivationDescriptor: parameter 'activDesc' was "
                                                  "created but never set"),
    "unset LRN read": ("DnnArgumentError", "miopenGetLRNDescriptor: parameter 'lrnDesc' was created but never set"),
    "unset tensor as input": ("DnnArgumentError", "miopenGetConvolutionNdForwardOutputDim: parameter "
                                                  "'inputTensorDesc' was created but never set"),
    "unset then set": None,
    "unset sequence read": ("DnnArgumentError", "miopenGetRNNDataSeqTensorDescriptor: parameter 'seqTensorDesc' was "
                                                "created but never set"),
    "negative spatial dimensions": ("DnnRangeError", "miopenInitConvolutionNdDescriptor: parameter 'padA' has a "
                                                     "negative element count (-1)"),
    "numpy as device": ("DnnArgumentError", "parameter 'x' needs device memory, got numpy.ndarray"),
}


@pytest.fixture(scope="module")
def outcomes(miopen_run) -> dict[str, list]:
    return run_cases(lambda code: miopen_run(code, check=False), SETUP, CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_misuse_is_refused_clearly_and_never_crashes(outcomes: dict[str, list], case: str) -> None:
    assert_outcome(case, outcomes[case], EXPECTED[case])
