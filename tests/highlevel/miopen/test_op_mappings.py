"""The MIOpen backend's small mappings, in this process: the pooling index type, activation coefficients,
scaling factors, settings, and a handle's memory of what Find established."""
from __future__ import annotations

import ctypes
import importlib

import pytest

from dnnbind.gen import miopen as lib
from dnnbind.highlevel.miopen._lib import Handle, scaling
from dnnbind.highlevel.miopen.settings import MIOpenSettings

pool_module = importlib.import_module("dnnbind.highlevel.miopen.pool")
activation_module = importlib.import_module("dnnbind.highlevel.miopen.activation")

# ------------------------------------------------------------------------------------ pooling index


@pytest.mark.parametrize("window, x_shape, expected", [
    ((2, 2), (1, 1, 9, 9), ("miopenPoolingWorkspaceIndexMask", "miopenIndexUint8", 1)),
    ((1, 3), (1, 1, 1, 9), ("miopenPoolingWorkspaceIndexMask", "miopenIndexUint8", 1)),      # 1-d as 2-d
    ((2, 127), (1, 1, 9, 200), ("miopenPoolingWorkspaceIndexMask", "miopenIndexUint8", 1)),   # 254 positions
    ((16, 16), (1, 1, 99, 99), ("miopenPoolingWorkspaceIndexMask", "miopenIndexUint16", 2)),   # 256
    ((2, 2, 2), (1, 1, 5, 6, 7), ("miopenPoolingWorkspaceIndexImage", "miopenIndexUint8", 1)),
    ((2, 2, 2), (1, 1, 5, 6, 9), ("miopenPoolingWorkspaceIndexImage", "miopenIndexUint16", 2)),   # 270
    ((2, 2, 2), (1, 1, 64, 64, 64), ("miopenPoolingWorkspaceIndexImage", "miopenIndexUint32", 4)),
])
def test_pooling_index_type_counts_past_the_largest_index(window, x_shape, expected):
    assert pool_module.workspace_index(window, x_shape) == expected
    mode, index_type, _ = expected
    assert hasattr(lib, mode) and hasattr(lib, index_type)


def test_pooling_index_type_boundary_is_miopen_s_rule():
    """MIOpen refuses when index_max <= positions (pooling_ocl.cpp): 254 positions fit uint8, 255 do not."""
    assert pool_module.workspace_index((2, 127), (1, 1, 4, 200))[1] == "miopenIndexUint8"      # 254 positions
    assert pool_module.workspace_index((3, 85), (1, 1, 4, 200))[1] == "miopenIndexUint16"      # 255 positions
    assert pool_module.workspace_index((2, 32767), (1, 1, 9, 40000))[1] == "miopenIndexUint16"  # 65534 positions
    assert pool_module.workspace_index((255, 257), (1, 1, 300, 300))[1] == "miopenIndexUint32"  # 65535 positions


# ------------------------------------------------------------------------------ activation, scaling


@pytest.mark.parametrize("mode, alpha, expected", [
    ("tanh", None, (1.0, 1.0, 0.0)),           # beta * tanh(alpha * x)
    ("leaky_relu", 0.2, (0.2, 0.0, 0.0)),
    ("clipped_relu", 6.0, (6.0, 0.0, 0.0)),
    ("elu", 0.7, (0.7, 0.0, 0.0)),
    ("relu", None, (0.0, 0.0, 0.0)),
    ("sigmoid", None, (0.0, 0.0, 0.0)),
])
def test_activation_coefficients(mode, alpha, expected):
    assert activation_module.coefficients(mode, alpha) == expected
    assert hasattr(lib, activation_module.MIOPEN_MODES[mode])


def test_every_public_activation_has_a_way_to_run():
    from dnnbind.highlevel.gpu import elementwise
    from dnnbind.highlevel.ops import ACTIVATION_DEFAULTS
    for mode in ACTIVATION_DEFAULTS:
        assert (mode in activation_module.MIOPEN_MODES) + (mode in activation_module.KERNEL_MODES) + \
            (mode == "identity") == 1, mode
    assert set(activation_module.KERNEL_MODES) <= set(elementwise.SOURCES)


def test_scaling_factors_are_one_and_zero_in_the_type_miopen_reads():
    for dtype in ("float16", "float32", "float64"):
        alpha, beta = scaling(dtype)
        assert isinstance(alpha, ctypes.c_float) and (alpha.value, beta.value) == (1.0, 0.0)
    alpha, beta = scaling("float64", convolution=True)
    assert isinstance(alpha, ctypes.c_double) and (alpha.value, beta.value) == (1.0, 0.0)
    assert isinstance(scaling("float16", convolution=True)[0], ctypes.c_float)


# ---------------------------------------------------------------------------------------- settings


def test_settings_add_immediate_mode():
    from dnnbind.highlevel.miopen import settings
    s = settings.current()
    assert isinstance(s, MIOpenSettings) and s.immediate is False and s.algo == "heuristic"
    with settings(immediate=True, workspace_limit=123):
        assert settings.current().immediate and settings.current().workspace_limit == 123
    assert settings.current().immediate is False
    with pytest.raises(TypeError, match="immediate=1 must be a bool"):
        MIOpenSettings(immediate=1)
    with pytest.raises(ValueError, match="algo='fast'"):
        MIOpenSettings(algo="fast")


def test_a_handle_forgets_the_oldest_problems_beyond_its_capacity():
    h = Handle("A", capacity=2)
    h.record("p1", 1)
    h.record("p2", 2)
    assert h.found("p1") == 1          # p1 is now the most recent
    h.record("p3", 3)
    assert (h.found("p1"), h.found("p2"), h.found("p3"), len(h)) == (1, None, 3, 2)


# ------------------------------------------------------------------------------------ bfloat16


class _Bfloat16DeviceArray:
    """A stand-in for a device array of bfloat16 (only its dtype is read before the refusal)."""

    def __init__(self):
        import ml_dtypes
        import numpy as np
        self.dtype = np.dtype(ml_dtypes.bfloat16)
        self.shape = (2, 3, 4, 4)
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": "<V2", "data": (0, False), "version": 3}


@pytest.mark.parametrize("op, args", [("activation", ("relu", None)), ("softmax", (1,)), ("logsoftmax", (1,)),
                                      ("dropout", (0.5, None)), ("batchnorm", (None, None)), ("maxpool", (None,)),
                                      ("meanpool", (None, True)), ("rnn", (None, None, None, None))])
def test_ops_without_a_bfloat16_kernel_say_so(op, args):
    backend = importlib.import_module("dnnbind.highlevel.miopen")
    assert backend.BFLOAT16_OPS == ("conv", "conv_transpose", "layer_norm")
    kwargs = dict(running_mean=None, running_var=None, training=True, momentum=0.1, eps=1e-5) \
        if op == "batchnorm" else {}
    with pytest.raises(TypeError, match=rf"the MIOpen backend has no bfloat16 kernel for {op} \(MIOpen supports "
                                        r"bfloat16 in conv, conv_transpose and layer_norm only\); convert x"):
        getattr(backend, op)(_Bfloat16DeviceArray(), *args, **kwargs)
