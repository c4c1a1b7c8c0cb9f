"""Backend choice by array type, and the backend registry.

The only stand-in used here is a tiny object exposing ``__cuda_array_interface__`` (a device array);
giving its class a ``cupy`` module name makes it stand for a CuPy array.
"""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel import dispatch

OPS = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation", "batchnorm",
       "dropout", "rnn"]


class DeviceArray:
    """Stands for a device array of some library other than CuPy (Numba, PyTorch CUDA, ...)."""

    def __init__(self, shape=(2, 3, 4, 4)):
        self.shape = shape
        self.dtype = np.dtype(np.float32)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": "<f4", "data": (0, False), "version": 3}


class CupyLike(DeviceArray):
    """Stands for a cupy.ndarray (CuPy itself is not needed to tell the type apart)."""


CupyLike.__module__ = "cupy._core.core"


def test_numpy_arrays_run_on_the_reference_backend():
    x = np.zeros((1, 1, 3, 3))
    backend = dispatch.backend_for(x=x, w=x, b=None)
    assert backend is importlib.import_module("dnnbind.highlevel.reference")


def test_registry_names_the_backend_modules():
    assert dispatch.BACKENDS == {"reference": "dnnbind.highlevel.reference", "cudnn": "dnnbind.highlevel.cudnn",
                                 "miopen": "dnnbind.highlevel.miopen"}


def test_reference_backend_provides_every_op():
    backend = dispatch.load_backend("reference")
    for name in OPS:
        assert callable(getattr(backend, name)), name


def test_public_names():
    import dnnbind.highlevel as hl
    assert sorted(hl.__all__) == sorted(OPS + ["ConvDims", "PoolDims"])
    for name in hl.__all__:
        assert getattr(dnnbind, name) is getattr(hl, name)


@pytest.mark.parametrize("name, label", [("cudnn", "cuDNN"), ("miopen", "MIOpen")])
def test_missing_gpu_backends_say_so(name, label):
    with pytest.raises(NotImplementedError,
                       match=rf"the {label} backend for cupy arrays.* is not implemented yet "
                             rf"\(dnnbind\.highlevel\.{name}\)"):
        dispatch.load_backend(name)


def test_cupy_arrays_go_to_the_cudnn_backend_which_does_not_exist_yet():
    a = CupyLike()
    assert dispatch.array_backend("x", a) == "cudnn"
    with pytest.raises(NotImplementedError, match=r"cuDNN backend for cupy arrays is not implemented yet "
                                                  r"\(dnnbind\.highlevel\.cudnn\)"):
        dnnbind.conv(a, CupyLike((4, 3, 3, 3)))
    with pytest.raises(NotImplementedError, match=r"cuDNN backend"):
        dnnbind.softmax(a)


def test_dispatch_does_not_import_cupy():
    had = "cupy" in sys.modules
    dispatch.backend_for(x=np.zeros(3))
    with pytest.raises(NotImplementedError):
        dispatch.backend_for(x=CupyLike())
    assert ("cupy" in sys.modules) == had


def test_mixed_host_and_device_inputs():
    x = np.zeros((2, 3, 4, 4), np.float32)
    for device in (DeviceArray((4, 3, 3, 3)), CupyLike((4, 3, 3, 3))):
        with pytest.raises(TypeError, match=r"mixed host and device inputs: x is a numpy array but w is a device "
                                            r"array \(.*(DeviceArray|CupyLike)\)"):
            dnnbind.conv(x, device)
    with pytest.raises(TypeError, match=r"mixed host and device inputs: b is a numpy array but x is a device"):
        dispatch.backend_for(x=CupyLike(), w=CupyLike(), b=np.zeros(4))


def test_other_device_arrays_are_refused_with_advice():
    with pytest.raises(TypeError, match=r"x is a device array of type .*DeviceArray; the GPU backends take cupy "
                                        r"arrays: wrap it with cupy.asarray\(x\)"):
        dnnbind.softmax(DeviceArray())


@pytest.mark.parametrize("value, type_name", [([1.0, 2.0], "list"), (3.0, "float"), ("x", "str")])
def test_unsupported_types_are_named(value, type_name):
    with pytest.raises(TypeError, match=rf"x must be a numpy or cupy array, not {type_name}; convert it with "
                                        rf"np.asarray\(x\)"):
        dnnbind.softmax(value)


def test_the_argument_is_named():
    x = np.zeros((1, 2, 4, 4))
    with pytest.raises(TypeError, match=r"^w must be a numpy or cupy array, not tuple"):
        dnnbind.conv(x, (1, 2))
    with pytest.raises(TypeError, match=r"^gamma must be a numpy or cupy array, not list"):
        dnnbind.batchnorm(x, [1.0, 1.0], np.zeros(2))
    w = np.zeros((4, 3))
    with pytest.raises(TypeError, match=r"^weights\[0\]\[1\] must be a numpy or cupy array, not list"):
        dnnbind.rnn(np.zeros((2, 1, 3)), [(w, [[0.0]], np.zeros(4), np.zeros(4))], mode="rnn_tanh", hidden_size=1)


def test_torch_tensors_get_advice():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"x is a torch.Tensor; dnnbind.highlevel takes numpy or cupy arrays: "
                                        r"use np.asarray\(x\) for CPU tensors, or the dnnbind.torch wrappers"):
        dnnbind.softmax(torch.zeros(3))


def test_none_arguments_are_ignored():
    x = np.zeros((1, 1, 3, 3))
    assert dispatch.backend_for(x=x, b=None, h0=None) is dispatch.load_backend("reference")
    with pytest.raises(TypeError, match="no array arguments"):
        dispatch.backend_for(b=None)
