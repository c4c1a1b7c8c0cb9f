"""``python -m dnnbind info``: what dnnbind finds on this machine, and why when it finds nothing.

Every probe is guarded: a missing or broken library, CuPy without a driver or a GPU-less machine is
reported as text, never as a traceback. PyTorch's version is read from its metadata (importing torch
takes over a second), and neither numpy nor the high-level layer is imported; CuPy is imported only to
list the GPUs.
"""
from __future__ import annotations

import ctypes
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import platform
import sys
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import dnnbind
from dnnbind import compiled

#: (title, generated module, the variable that names the library's path)
_LIBRARIES = (("cuDNN", "dnnbind.gen.cudnn", "DNNBIND_CUDNN_LIBRARY"),
              ("MIOpen", "dnnbind.gen.miopen", "DNNBIND_MIOPEN_LIBRARY"))
_BACKENDS = (("cpu", "numpy arrays on the CPU"), ("reference", "numpy arrays, the plain oracle"),
             ("cudnn", "CuPy arrays on CUDA"),
             ("miopen", "CuPy arrays on ROCm"))
_WIDTH = 12


def _block(label: str, lines: list[str]) -> list[str]:
    """``label`` in a column, then lines (continuations indented under the first)."""
    out = []
    for i, line in enumerate(lines or [""]):
        out.append(f"{label if i == 0 else '':<{_WIDTH}}{line}".rstrip())
    return out


def _guarded(probe: Callable[[], list[str]]) -> list[str]:
    try:
        return probe()
    except Exception as exc:  # info reports problems, it never raises them
        return [f"could not be determined: {type(exc).__name__}: {exc}"]


def _indented(text: object, prefix: str = "  ") -> list[str]:
    return [prefix + line for line in str(text).splitlines()]


def library_probe(title: str, module_name: str, env: str) -> tuple[list[str], bool]:
    """The header version a generated module came from and its library (path and version, or why it
    does not load); and whether it loads."""
    module = importlib.import_module(module_name)
    lines = [f"bindings generated from the {title} {module.HEADER_VERSION} headers ({module_name})"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            path = module.library_path()
        except dnnbind.LibraryNotFoundError as exc:
            lines += ["library: not loadable", *_indented(exc)]
            if os.environ.get(env):
                lines.append(f"  Fix: point {env} at a loadable library, or unset it to search the usual places.")
            return lines, False
    lines += [f"library: {_loaded_version(module)}", f"  {path}"]
    lines += [f"warning: {w.message}" for w in caught]
    return lines, True


def _loaded_version(module: ModuleType) -> str:
    """The loaded library's version (and for cuDNN the CUDA it was built for); an old library may lack
    the calls, which is said instead."""
    try:
        text = ".".join(map(str, module.library_version()))
        if hasattr(module, "cudnnGetCudartVersion"):
            cudart = module.cudnnGetCudartVersion()
            text += f", built for CUDA {cudart // 1000}.{cudart % 1000 // 10}"
        return text
    except Exception as exc:  # a symbol missing from an old library
        return f"of unknown version ({exc})"


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class Devices:
    """What CuPy sees: its report line, the GPU lines, the platform CuPy was built for ("CUDA",
    "ROCm/HIP", None when CuPy is missing or does not import) and why no op can run on a GPU (None
    when a device is visible)."""
    cupy: list[str]
    gpus: list[str]
    platform: str | None
    problem: str | None


def probe_devices() -> Devices:
    """CuPy's version and the GPUs it lists (CuPy is imported only when installed)."""
    if importlib.util.find_spec("cupy") is None:
        return Devices(['not installed (GPU users: pip install "dnnbind[cuda12]" or "dnnbind[cuda13]")'],
                       ["none (CuPy not installed)"], None, "CuPy not installed")
    try:
        import cupy  # type: ignore[import-not-found]
    except Exception as exc:  # a CuPy that cannot import (wrong CUDA wheel, ...)
        return Devices([f"installed but fails to import: {type(exc).__name__}: {exc}"],
                       ["none (CuPy does not import)"], None, "CuPy does not import")
    runtime = cupy.cuda.runtime
    platform_name = "ROCm/HIP" if runtime.is_hip else "CUDA"
    try:
        count = runtime.getDeviceCount()
        versions = f"{platform_name} runtime {runtime.runtimeGetVersion()}, driver {runtime.driverGetVersion()}"
    except Exception as exc:  # no driver, no device
        return Devices([cupy.__version__], [f"none ({platform_name}: {exc})"], platform_name,
                       f"no {platform_name} device ({exc})")
    gpus = []
    for i in range(count):
        props = runtime.getDeviceProperties(i)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        gpus.append(f"{i}: {name}, {props['totalGlobalMem'] / 2**30:.0f} GiB, "
                    f"compute capability {props['major']}.{props['minor']}")
    return Devices([f"{cupy.__version__} ({versions})"], gpus or ["none (no device visible)"], platform_name,
                   None if gpus else "no GPU visible")


def torch_lines() -> list[str]:
    version = _version("torch")
    if version is None:
        return ["not installed (optional: pip install torch, then use dnnbind.torch)"]
    return [f"{version} (dnnbind.torch available)"]


#: GPU backend -> (the platform CuPy must be built for, the library it calls)
_GPU_NEEDS = {"cudnn": ("CUDA", "cuDNN"), "miopen": ("ROCm/HIP", "MIOpen")}


def backend_problem(name: str, devices: Devices, loadable: dict[str, bool], numpy_installed: bool) -> str | None:
    """Why backend ``name`` cannot run an op on this machine (the first missing piece, in the order a
    user would fix them), or None when it can."""
    if name not in _GPU_NEEDS:
        return None if numpy_installed else "numpy not installed"
    platform_name, library = _GPU_NEEDS[name]
    if devices.platform is None:
        return devices.problem
    if devices.platform != platform_name:
        return f"CuPy is built for {devices.platform}, this backend needs {platform_name}"
    if not loadable.get(library, False):
        return f"the {library} library does not load (see {library} above)"
    return devices.problem


def backend_lines(devices: Devices | None = None, loadable: dict[str, bool] | None = None) -> list[str]:
    """Each backend: whether it is usable here, and if not the first reason. Backend packages are found,
    not imported (that would cost numpy)."""
    devices = devices or probe_devices()
    loadable = loadable if loadable is not None else {}
    numpy_installed = importlib.util.find_spec("numpy") is not None
    directory = os.path.join(os.path.dirname(dnnbind.__file__), "highlevel")
    lines = []
    for name, what in _BACKENDS:
        spec = importlib.machinery.PathFinder.find_spec(name, [directory])
        if spec is None or spec.origin is None:                 # a package with its __init__.py
            state = "not implemented yet"
        else:
            problem = backend_problem(name, devices, loadable, numpy_installed)
            state = "usable" if problem is None else f"not usable here: {problem}"
        lines.append(f"{name:<10} {what}: {state}")
    return lines


def kernel_lines() -> list[str]:
    """dnnbind's optional compiled parts (the package dnnbind-native, :mod:`dnnbind.compiled`): installed or
    not, turned off or not, which instruction set's C kernels run, and each part's file. Found and asked
    without importing numpy."""
    directory = compiled.package_directory()
    if directory is None:
        return ["not installed: the pure-Python paths run (pip install ./native from a source checkout "
                "builds dnnbind-native, see native/README.md)"]
    if compiled.disabled():
        return [f"turned off by DNNBIND_NATIVE=0 (dnnbind-native in {directory})"]
    kernels = compiled.location("_kernels")
    if kernels is None:
        lines = ["dnnbind-native without its C kernels: the cpu backend runs numpy alone"]
    else:
        isa_name = ctypes.CDLL(kernels).dnnbind_isa_name
        isa_name.restype = ctypes.c_char_p
        lines = [f"built, running the {isa_name().decode()} kernels (dnnbind-native)"]
    for part, what in compiled.PARTS.items():
        path = compiled.location(part)
        in_use = path is not None and (part == "_kernels" or compiled.module(part) is not None)
        lines.append(f"  {part}: {what}: " + (f"in use, {path}" if in_use else "not usable here"))
    return lines


def deviceless_lines(cudnn_loads: bool) -> list[str]:
    """Whether cuDNN can build graph-API plans here without a GPU (cuDNN 9.8+, libcuda.so.1 and cuBLASLt
    loadable), and if not, why. Loads the two libraries to find out (this process ends right after)."""
    from dnnbind.runtime import deviceless
    if not cudnn_loads:
        return ["deviceless plans: no (the cuDNN library does not load)"]
    from dnnbind.gen import cudnn
    version = tuple(cudnn.library_version())
    found = deviceless.problems(cudnn_version=version)
    if found:
        return ["deviceless plans: no (plans from a device-properties file, without a GPU, need cuDNN 9.8+, "
                "libcuda.so.1 and cuBLASLt)", *[f"  {p}" for p in found]]
    return ["deviceless plans: yes (cuDNN builds graph-API plans from device properties here, no device needed)",
            *[f"  {soname}: {deviceless.library_file(soname) or 'loaded'}" for soname in deviceless.LIBRARIES]]


def environment_lines() -> list[str]:
    return [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("DNNBIND_")] or ["(no DNNBIND_* set)"]


def report() -> str:
    """The whole report, as printed by ``python -m dnnbind info``."""
    location = os.path.dirname(os.path.abspath(dnnbind.__file__))
    lines = _block("dnnbind", [f"{dnnbind.__version__} ({location})"])
    lines += _block("Python", [f"{platform.python_version()} ({sys.executable})"])
    loadable: dict[str, bool] = {}
    for title, module_name, env in _LIBRARIES:
        def probe(title: str = title, module_name: str = module_name, env: str = env) -> list[str]:
            found, loadable[title] = library_probe(title, module_name, env)
            if module_name == "dnnbind.gen.cudnn":
                found += _guarded(lambda: deviceless_lines(loadable[title]))
            return found
        lines += _block(title, _guarded(probe))
    lines += _block("numpy", _guarded(lambda: [_version("numpy") or "not installed"]))
    devices = probe_devices()
    lines += _block("CuPy", devices.cupy)
    lines += _block("PyTorch", _guarded(torch_lines))
    lines += _block("GPUs", devices.gpus)
    lines += _block("backends", _guarded(lambda: backend_lines(devices, loadable)))
    lines += _block("kernels", _guarded(kernel_lines))
    lines += _block("environment", environment_lines())
    return "\n".join(lines)


def main() -> int:
    print(report())
    return 0
