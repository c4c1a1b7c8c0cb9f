"""The cuDNN backend imports and plans without CuPy, and says clearly that an op needs CuPy."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import dnnbind
from childproc import run_python
from dnnbind.highlevel import dispatch

HAVE_CUPY = importlib.util.find_spec("cupy") is not None
OPS = ["conv", "conv_transpose", "maxpool", "meanpool", "softmax", "logsoftmax", "activation", "batchnorm",
       "dropout"]


class CudaArray:
    """A device array of some library: the one stand-in these tests use (only __cuda_array_interface__)."""

    def __init__(self, shape=(2, 3, 8, 8)):
        self.shape = shape
        self.dtype = np.dtype(np.float32)
        self.ndim = len(shape)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": "<f4", "data": (0, False), "version": 3}


class CupyArray(CudaArray):
    """The same, with CuPy's module name, so that dispatch sends it to the cuDNN backend."""


CupyArray.__module__ = "cupy._core.core"


def test_import_needs_neither_cupy_nor_the_library():
    result = run_python("""
        import sys
        import dnnbind.highlevel.cudnn as backend
        from dnnbind.gen import cudnn
        print("cupy" in sys.modules, cudnn._lib.loaded, sorted(backend.cache_info()))
    """)
    assert result.returncode == 0, result.stderr
    cupy_loaded, library_loaded, caches = result.stdout.split(" ", 2)
    assert cupy_loaded == "False" and library_loaded == "False"
    assert "cudnn.conv" in caches and "cudnn.pool" in caches


def test_every_op_has_the_reference_signature():
    import inspect
    backend = dispatch.load_backend("cudnn")
    reference = dispatch.load_backend("reference")
    for name in OPS:
        ours = list(inspect.signature(getattr(backend, name)).parameters)
        theirs = [p for p in inspect.signature(getattr(reference, name)).parameters if p != "threaded"]
        assert ours[:len(theirs)] == theirs, name
    if not callable(getattr(backend, "rnn", None)):      # RNNs arrive separately
        with pytest.raises(NotImplementedError, match=r"the cuDNN backend for cupy arrays does not implement rnn"):
            dispatch.backend_function("cudnn", "rnn")


@pytest.mark.skipif(HAVE_CUPY, reason="CuPy is installed here")
def test_public_ops_on_device_arrays_without_cupy_say_how_to_install_it():
    with pytest.raises(ImportError, match=r"the GPU backends of dnnbind need CuPy, which is not installed .*"
                                          r"pip install 'dnnbind\[cuda13\]'") as info:
        dnnbind.conv(CupyArray(), CupyArray((4, 3, 3, 3)), padding=1)
    assert info.value.name == "cupy"
    with pytest.raises(ImportError, match="need CuPy"):
        dnnbind.softmax(CupyArray())
    backend = dispatch.load_backend("cudnn")
    with pytest.raises(ImportError, match="need CuPy"):
        backend.activation(CudaArray(), "relu", None)
