"""``python -m dnnbind info``: versions, libraries or why not, never a traceback, fast."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dnnbind
from dnnbind.gen import cudnn, miopen

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _info(*args: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    child_env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p), **env}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "dnnbind", *args], capture_output=True, text=True,
                            env=child_env, timeout=60)
    return result, time.perf_counter() - start


def test_info_explains_a_library_it_cannot_load():
    result, _ = _info("info", DNNBIND_MIOPEN_LIBRARY="/nonexistent")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert f"dnnbind     {dnnbind.__version__}" in out
    assert f"bindings generated from the MIOpen {miopen.HEADER_VERSION} headers" in out
    assert "$DNNBIND_MIOPEN_LIBRARY='/nonexistent' could not be loaded" in out
    assert "Fix: point DNNBIND_MIOPEN_LIBRARY at a loadable library" in out


def test_info_without_any_library_still_succeeds():
    result, _ = _info("info", DNNBIND_MIOPEN_LIBRARY="/nonexistent", DNNBIND_CUDNN_LIBRARY="/nonexistent/libcudnn.so.9")
    assert result.returncode == 0 and "Traceback" not in result.stdout + result.stderr
    assert result.stdout.count("library: not loadable") == 2
    assert "DNNBIND_CUDNN_LIBRARY=/nonexistent/libcudnn.so.9" in result.stdout   # the environment section


def test_info_reports_the_cudnn_library_it_finds():
    result, _ = _info("info")
    version = ".".join(map(str, cudnn.library_version()))
    assert f"bindings generated from the cuDNN {cudnn.HEADER_VERSION} headers" in result.stdout
    assert f"library: {version}, built for CUDA " in result.stdout
    assert cudnn.library_path() in result.stdout


def test_info_names_the_search_and_the_fix_when_nothing_is_found():
    """MIOpen is not on the system loader's path here (its Debian build needs tests/miopen_runner.py)."""
    result, _ = _info("info", ROCM_PATH="/nonexistent")
    if "MIOpen library not found" not in result.stdout:
        pytest.skip("a loadable MIOpen is installed on this machine")
    assert "Tried:" in result.stdout and "Or set DNNBIND_MIOPEN_LIBRARY" in result.stdout


def test_info_lists_cupy_gpus_and_torch_without_importing_torch():
    code = "import sys; from dnnbind.info import report; print(report()); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": SRC})
    out = result.stdout
    assert out.rstrip().endswith("False"), out
    assert "PyTorch     " in out
    if importlib.util.find_spec("cupy") is None:
        assert "GPUs        none (CuPy not installed)" in out
        assert 'CuPy        not installed (GPU users: pip install "dnnbind[cuda12]"' in out


def test_info_is_fast():
    _info("info")                         # warm the file cache
    result, seconds = _info("info")
    assert result.returncode == 0
    assert seconds < 1.5, f"python -m dnnbind info took {seconds:.2f} s"


def test_info_sees_miopen_under_the_debian_loader(miopen_run):
    out = miopen_run("from dnnbind.info import report; print(report())").stdout
    section = out.split("\nMIOpen ", 1)[1].split("\nnumpy ", 1)[0]
    assert re.search(r"library: 3\.\d+\.\d+\n +/\S+/libMIOpen\.so\.1$", section), out


def test_no_command_prints_usage():
    result, _ = _info()
    assert result.returncode == 2 and "info" in result.stdout


def test_info_says_which_backends_are_usable_here_and_why_not():
    result, _ = _info("info")
    backends = result.stdout.split("\nbackends    ", 1)[1].split("\nenvironment ", 1)[0]
    assert "cpu        numpy arrays on the CPU: usable" in backends
    assert "reference  numpy arrays, the plain oracle: usable" in backends
    assert "present" not in backends
    if importlib.util.find_spec("cupy") is None:
        for name in ("cudnn", "miopen"):
            assert re.search(rf"{name} +CuPy arrays on \S+: not usable here: CuPy not installed", backends), backends


def _devices(platform, problem=None):
    from dnnbind.info import Devices
    return Devices(cupy=[], gpus=[], platform=platform, problem=problem)


@pytest.mark.parametrize("devices, loadable, expected", [
    (_devices(None, "CuPy not installed"), {"cuDNN": True}, "CuPy not installed"),
    (_devices("ROCm/HIP"), {"cuDNN": True}, "CuPy is built for ROCm/HIP, this backend needs CUDA"),
    (_devices("CUDA", "no GPU visible"), {"cuDNN": False}, "the cuDNN library does not load (see cuDNN above)"),
    (_devices("CUDA", "no GPU visible"), {"cuDNN": True}, "no GPU visible"),
    (_devices("CUDA"), {"cuDNN": True}, None),
])
def test_backend_problem_is_the_first_missing_piece(devices, loadable, expected):
    from dnnbind.info import backend_problem
    assert backend_problem("cudnn", devices, loadable, numpy_installed=True) == expected


def test_miopen_backend_needs_rocm_and_its_library():
    from dnnbind.info import backend_problem
    assert backend_problem("miopen", _devices("CUDA"), {"MIOpen": True}, True) == \
        "CuPy is built for CUDA, this backend needs ROCm/HIP"
    assert backend_problem("miopen", _devices("ROCm/HIP"), {"MIOpen": False}, True) == \
        "the MIOpen library does not load (see MIOpen above)"
    assert backend_problem("reference", _devices(None, "CuPy not installed"), {}, False) == "numpy not installed"


def test_loader_errors_name_the_library_once():
    result, _ = _info("info", ROCM_PATH="/nonexistent")
    if "MIOpen library not found" not in result.stdout:
        pytest.skip("a loadable MIOpen is installed on this machine")
    assert "system loader: libMIOpen.so.1: cannot open shared object file" in result.stdout
    assert "libMIOpen.so.1: libMIOpen.so.1" not in result.stdout


def test_info_names_the_compiled_parts_and_the_kernels_instruction_set():
    """The development install builds dnnbind-native; info says which instruction set's kernels run and
    which compiled parts are in use, or that DNNBIND_NATIVE=0 turned them off, without importing numpy."""
    from native_parts import require
    require(True, "")                                      # skips in the DNNBIND_NATIVE=0 pass
    result, _ = _info("info")
    assert re.search(r"kernels +built, running the (x86-64-v4 \(AVX-512\)|x86-64-v3 \(AVX2, FMA\)|baseline) kernels",
                     result.stdout), result.stdout
    for part in ("_kernels", "_values"):
        assert re.search(rf"^ +{part}: .*: in use, \S*{part}", result.stdout, re.M), result.stdout
    off, _ = _info("info", DNNBIND_NATIVE="0")
    assert "kernels     turned off by DNNBIND_NATIVE=0 (dnnbind-native in " in off.stdout


def test_info_says_whether_plans_build_without_a_gpu_and_why_not():
    import deviceless_libs
    env = deviceless_libs.child_env()
    result, _ = _info("info", **env)
    assert ("            deviceless plans: yes (cuDNN builds graph-API plans from device properties here, no device "
            "needed)") in result.stdout
    assert "              libcublasLt.so.13: " in result.stdout and "              libcuda.so.1: " in result.stdout
    result, _ = _info("info", **deviceless_libs.child_env(cublaslt=False))
    out = result.stdout
    assert ("deviceless plans: no (plans from a device-properties file, without a GPU, need cuDNN 9.8+, libcuda.so.1 "
            "and cuBLASLt)") in out, out
    assert "cuBLASLt (libcublasLt.so.13) cannot be loaded (tried /nonexistent/libcublasLt.so.13" in out
    assert "Fix: pip install nvidia-cublas (CUDA 13)" in out
    result, _ = _info("info", DNNBIND_CUDNN_LIBRARY="/nonexistent/libcudnn.so.9")
    assert "deviceless plans: no (the cuDNN library does not load)" in result.stdout


def test_info_says_when_the_compiled_parts_are_not_installed():
    from dnnbind.info import kernel_lines
    import dnnbind.compiled as compiled
    saved = sys.modules.get("dnnbind_native", False)
    sys.modules["dnnbind_native"] = None                   # as if dnnbind-native were not installed
    try:
        assert compiled.package_directory() is None
        assert kernel_lines()[0].startswith("not installed: the pure-Python paths run (pip install ./native")
    finally:
        if saved is False:
            del sys.modules["dnnbind_native"]
        else:
            sys.modules["dnnbind_native"] = saved
