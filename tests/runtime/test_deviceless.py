"""dnnbind.runtime.deviceless: a missing libcuda or cuBLASLt is a clear Python error, never cuDNN's abort.

Without cuBLASLt, cuDNN 9.28's engine heuristics abort the process ("Invalid handle. Cannot load symbol
cublasLtGetVersion"); without libcuda every backend finalize fails with SUBLIBRARY_LOADING_FAILED. Each case runs
in a child process whose DNNBIND_LIBCUDA / DNNBIND_CUBLASLT name the fetched file or a missing one.
"""
from __future__ import annotations

import ctypes
import os

import pytest

import deviceless_libs
from childproc import run_python
from dnnbind.runtime import deviceless

GRAPH = """
from pathlib import Path
import dnnbind
from dnnbind.gen import cudnn as c, cudnn_backend as b
from dnnbind.runtime import deviceless
import sys
sys.path.insert(0, {tests!r})
from deviceless_plan import nhwc
x = b.TensorDescriptor(unique_id=1, **nhwc(1, 8, 8, 8)).finalize()
w = b.TensorDescriptor(unique_id=2, **nhwc(8, 8, 3, 3)).finalize()
y = b.TensorDescriptor(unique_id=3, **nhwc(1, 8, 8, 8)).finalize()
conv = b.ConvolutionDescriptor(comp_type=c.CUDNN_DATA_FLOAT, conv_mode=c.CUDNN_CROSS_CORRELATION, spatial_dims=2,
                               dilations=[1, 1], filter_strides=[1, 1], pre_paddings=[1, 1], post_paddings=[1, 1]).finalize()
op = b.OperationConvolutionForwardDescriptor(conv_desc=conv, x=x, w=w, y=y, alpha=[1.0], beta=[0.0]).finalize()
graph = b.OperationGraphDescriptor(ops=[op]).finalize()
device = b.DevicePropDescriptor(json_representation=Path({device!r}).read_text()).finalize()
"""
HEURISTICS = "b.EngineHeurDescriptor(operation_graph=graph, mode=c.CUDNN_HEUR_MODE_A, deviceprop=device).finalize()"
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE = os.path.join(TESTS, "data", "deviceprop", "sm90_h100_sxm5_80gb.json")


def _graph(**env: str) -> str:
    return GRAPH.format(tests=os.path.join(TESTS, "gen"), device=DEVICE)


def test_heuristics_without_cublaslt_raise_before_the_call():
    code = "import ctypes, os\nctypes.CDLL(os.environ['DNNBIND_LIBCUDA'], mode=ctypes.RTLD_GLOBAL)\n" + _graph() + """
try:
    heuristics = """ + HEURISTICS + """
except deviceless.DevicelessError as exc:
    print("refused:", exc)
else:
    print("finalized")
"""
    result = run_python(code, env=deviceless_libs.child_env(cublaslt=False))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Cannot load symbol" not in result.stdout + result.stderr
    out = result.stdout
    assert "refused: a EngineHeurDescriptor needs libcuda.so.1 and libcublasLt.so.13" in out, out
    assert "cuBLASLt (libcublasLt.so.13) cannot be loaded (tried /nonexistent/libcublasLt.so.13" in out
    assert "Fix: pip install nvidia-cublas" in out


def test_heuristics_with_both_libraries_finalize():
    code = "from dnnbind.runtime import deviceless\ndeviceless.enable()\n" + _graph() + """
heuristics = """ + HEURISTICS + """
print("configs:", len(heuristics.get("results")))
"""
    result = run_python(code, env=deviceless_libs.child_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout.split("configs:")[1]) > 0


def test_finalize_without_libcuda_names_it():
    if deviceless.loaded(deviceless.LIBCUDA) or _system_has(deviceless.LIBCUDA):
        pytest.skip("this machine has a libcuda.so.1 on the loader's path (a driver is installed), so it cannot be absent")
    code = """
import ctypes, os
ctypes.CDLL(os.environ['DNNBIND_CUBLASLT'], mode=ctypes.RTLD_GLOBAL)
from dnnbind.gen import cudnn as c, cudnn_backend as b
from dnnbind.runtime import deviceless
t = b.TensorDescriptor(dimensions=[1, 1], strides=[1, 1], unique_id=1, data_type=c.CUDNN_DATA_FLOAT, byte_alignment=4)
try:
    t.finalize()
except deviceless.DevicelessError as exc:
    print("refused:", exc, "| caused by:", exc.__cause__ or exc.__context__)
"""
    result = run_python(code, env=deviceless_libs.child_env(libcuda=False))
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "refused: finalizing a TensorDescriptor needs libcuda.so.1: NVIDIA's user-space driver library" in out, out
    assert "Fix: install the NVIDIA driver's user-space part" in out
    assert "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED" in out


def _system_has(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
        return True
    except OSError:
        return False


def test_enable_names_a_missing_file():
    with pytest.raises(deviceless.DevicelessError, match=r"libcuda.so.1\) cannot be loaded \(tried /nonexistent/x.so"):
        deviceless.enable(libcuda="/nonexistent/x.so")


def test_a_too_old_cudnn_is_reported():
    found = deviceless.problems(needs=(), cudnn_version=(9, 1, 0))
    assert found == ["cuDNN 9.1.0 is too old: building plans from device properties needs cuDNN 9.8 or newer"]
    assert deviceless.problems(needs=(), cudnn_version=(9, 8, 0)) == []


def test_the_variable_is_the_only_place_looked_at_when_set(monkeypatch):
    monkeypatch.setenv("DNNBIND_CUBLASLT", "/somewhere/libcublasLt.so.13")
    assert deviceless.candidates(deviceless.CUBLASLT) == ["/somewhere/libcublasLt.so.13"]
    monkeypatch.delenv("DNNBIND_CUBLASLT")
    assert deviceless.candidates(deviceless.CUBLASLT)[-1] == "libcublasLt.so.13"
