"""Backend choice by array type, and the backend registry.

The only stand-in used here is a tiny object exposing ``__cuda_array_interface__`` (a device array);
giving its class a ``cupy`` module name makes it stand for a CuPy array.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import sys

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel import dispatch

OPS = ["conv", "conv_transpose", "conv_bias_activation", "maxpool", "meanpool", "softmax", "logsoftmax", "activation", "batchnorm",
       "layer_norm", "dropout", "rnn"]


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


def test_numpy_arrays_run_on_the_cpu_backend():
    x = np.zeros((1, 1, 3, 3))
    assert dispatch.select(x=x, w=x, b=None) == "cpu"
    cpu = importlib.import_module("dnnbind.highlevel.cpu")
    assert dispatch.load_backend("cpu") is cpu
    assert dispatch.backend_op("conv", x=x, w=x) is cpu.conv


def test_the_reference_backend_runs_on_request():
    reference = importlib.import_module("dnnbind.highlevel.reference")
    assert dispatch.load_backend("reference") is reference
    assert dispatch.backend_function("reference", "conv") is reference.conv


def test_registry_names_the_backend_modules():
    assert dispatch.BACKENDS == {"cpu": "dnnbind.highlevel.cpu", "reference": "dnnbind.highlevel.reference",
                                 "cudnn": "dnnbind.highlevel.cudnn",
                                 "miopen": "dnnbind.highlevel.miopen"}


@pytest.mark.parametrize("name", ["cpu", "reference"])
def test_numpy_backends_provide_every_op(name):
    backend = dispatch.load_backend(name)
    for name in OPS:
        assert callable(getattr(backend, name)), name


def test_public_names():
    import dnnbind.highlevel as hl
    assert sorted(hl.__all__) == sorted(OPS + ["ConvDims", "PoolDims", "no_grad", "plan", "BoundPlan",
                                               "plan_cache_info", "clear_plan_cache"])
    for name in hl.__all__:
        assert getattr(dnnbind, name) is getattr(hl, name)


def test_a_backend_module_that_does_not_exist(monkeypatch):
    monkeypatch.setitem(dispatch.BACKENDS, "cudnn", "dnnbind.highlevel.no_such_backend")
    with pytest.raises(NotImplementedError, match=r"^the cuDNN backend for cupy arrays is not implemented yet "
                                                  r"\(dnnbind\.highlevel\.no_such_backend\)$"):
        dispatch.load_backend("cudnn")
    with pytest.raises(NotImplementedError, match=r"the cuDNN backend for cupy arrays is not implemented yet"):
        dnnbind.conv(CupyLike(), CupyLike((4, 3, 3, 3)))


def test_a_backend_without_the_op(monkeypatch):
    monkeypatch.setitem(dispatch.BACKENDS, "cudnn", "dnnbind.highlevel.dims")   # a module without ops
    with pytest.raises(NotImplementedError, match=r"^the cuDNN backend for cupy arrays does not implement "
                                                  r"softmax yet \(dnnbind\.highlevel\.dims\)$"):
        dnnbind.softmax(CupyLike())
    monkeypatch.setitem(dispatch.BACKENDS, "miopen", "dnnbind.highlevel.dims")
    with pytest.raises(NotImplementedError, match=r"^the MIOpen backend for cupy arrays on ROCm does not "
                                                  r"implement rnn yet"):
        dispatch.backend_function("miopen", "rnn")


@pytest.mark.parametrize("name, label", [("cudnn", "cuDNN"), ("miopen", "MIOpen")])
def test_gpu_backends_that_are_missing_or_incomplete_say_so(name, label):
    """Whatever state the GPU backends are in, a missing piece is a NotImplementedError naming it."""
    path = dispatch.BACKENDS[name]
    try:
        module = dispatch.load_backend(name)
    except NotImplementedError as exc:
        assert importlib.util.find_spec(path) is None
        assert re.fullmatch(rf"the {label} backend for cupy arrays.* is not implemented yet \({path}\)", str(exc))
        return
    except ImportError as exc:   # the backend exists but needs what this machine lacks (CuPy)
        pytest.skip(f"{path} cannot be imported here: {exc}")
    for op in OPS:
        if not callable(getattr(module, op, None)):
            with pytest.raises(NotImplementedError, match=rf"the {label} backend .*does not implement {op} yet"):
                dispatch.backend_function(name, op)
        else:
            assert dispatch.backend_function(name, op) is getattr(module, op)


def test_cupy_arrays_select_cudnn():
    assert dispatch.array_backend("x", CupyLike()) == "cudnn"
    assert dispatch.select(x=CupyLike(), b=None) == "cudnn"


def test_dispatch_does_not_import_cupy(monkeypatch):
    had = "cupy" in sys.modules
    dispatch.select(x=np.zeros(3))
    dispatch.select(x=CupyLike())
    monkeypatch.setitem(dispatch.BACKENDS, "cudnn", "dnnbind.highlevel.no_such_backend")
    with pytest.raises(NotImplementedError):
        dispatch.backend_op("conv", x=CupyLike())
    assert ("cupy" in sys.modules) == had


def test_mixed_host_and_device_inputs():
    x = np.zeros((2, 3, 4, 4), np.float32)
    for device in (DeviceArray((4, 3, 3, 3)), CupyLike((4, 3, 3, 3))):
        with pytest.raises(TypeError, match=r"mixed host and device inputs: x is a numpy array but w is a device "
                                            r"array \(.*(DeviceArray|CupyLike)\)"):
            dnnbind.conv(x, device)
    with pytest.raises(TypeError, match=r"mixed host and device inputs: b is a numpy array but x is a device"):
        dispatch.select(x=CupyLike(), w=CupyLike(), b=np.zeros(4))


def test_other_device_arrays_are_adopted_through_cupy():
    """Public ops wrap non-CuPy device arrays as CuPy arrays (zero-copy), so they need CuPy itself;
    without it the error says how to install it. dispatch.select alone still refuses them with advice."""
    import importlib.util
    if importlib.util.find_spec("cupy") is None:
        with pytest.raises(ImportError, match=r"the GPU backends of dnnbind need CuPy.*pip install 'dnnbind\[cuda13\]'"):
            dnnbind.softmax(DeviceArray())
    with pytest.raises(TypeError, match=r"x is a device array of type .*DeviceArray; the GPU backends take cupy "
                                        r"arrays: wrap it with cupy.asarray\(x\)"):
        dispatch.select(x=DeviceArray())
    assert dispatch.is_foreign_device_array(DeviceArray())
    assert not dispatch.is_foreign_device_array(CupyLike()) and not dispatch.is_foreign_device_array(np.zeros(1))


def test_mixed_check_comes_before_adoption():
    with pytest.raises(TypeError, match=r"mixed host and device inputs: x is a numpy array but weights\[0\]\[1\]"):
        dnnbind.rnn(np.zeros((2, 1, 3), np.float32), [(np.zeros((4, 3), np.float32), DeviceArray((4, 1)), None, None)],
                    mode="rnn_tanh", hidden_size=1)


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
    assert dispatch.select(x=x, b=None, h0=None) == "cpu"
    with pytest.raises(TypeError, match="no array arguments"):
        dispatch.select(b=None)
