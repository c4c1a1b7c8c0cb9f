"""``python -m dnnbind info``: what dnnbind finds on this machine, and why when it finds nothing.

Every probe is guarded: a missing or broken library, CuPy without a driver or a GPU-less machine is
reported as text, never as a traceback. PyTorch's version is read from its metadata (importing torch
takes over a second), and neither numpy nor the high-level layer is imported; CuPy is imported only to
list the GPUs.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import platform
import sys
import warnings
from types import ModuleType
from typing import Callable

import dnnbind

#: (title, generated module, the variable that names the library's path)
_LIBRARIES = (("cuDNN", "dnnbind.gen.cudnn", "DNNBIND_CUDNN_LIBRARY"),
              ("MIOpen", "dnnbind.gen.miopen", "DNNBIND_MIOPEN_LIBRARY"))
_BACKENDS = (("reference", "numpy arrays on the CPU"), ("cudnn", "CuPy arrays on CUDA"),
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


def library_lines(title: str, module_name: str, env: str) -> list[str]:
    """The header version a generated module came from, and its library: path and version or why not."""
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
            return lines
    lines += [f"library: {_loaded_version(module)}", f"  {path}"]
    lines += [f"warning: {w.message}" for w in caught]
    return lines


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


def cupy_and_gpus() -> tuple[list[str], list[str]]:
    """(CuPy's line, the GPU lines) — GPUs are listed through CuPy."""
    if importlib.util.find_spec("cupy") is None:
        return (['not installed (GPU users: pip install "dnnbind[cuda12]" or "dnnbind[cuda13]")'],
                ["none (CuPy not installed)"])
    try:
        import cupy  # type: ignore[import-not-found]
    except Exception as exc:  # a CuPy that cannot import (wrong CUDA wheel, ...)
        return [f"installed but fails to import: {type(exc).__name__}: {exc}"], ["none (CuPy does not import)"]
    runtime = cupy.cuda.runtime
    platform_name = "ROCm/HIP" if runtime.is_hip else "CUDA"
    try:
        count = runtime.getDeviceCount()
        versions = f"{platform_name} runtime {runtime.runtimeGetVersion()}, driver {runtime.driverGetVersion()}"
    except Exception as exc:  # no driver, no device
        return [cupy.__version__], [f"none ({platform_name}: {exc})"]
    gpus = []
    for i in range(count):
        props = runtime.getDeviceProperties(i)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        gpus.append(f"{i}: {name}, {props['totalGlobalMem'] / 2**30:.0f} GiB, "
                    f"compute capability {props['major']}.{props['minor']}")
    return [f"{cupy.__version__} ({versions})"], gpus or ["none (no device visible)"]


def torch_lines() -> list[str]:
    version = _version("torch")
    if version is None:
        return ["not installed (optional: pip install torch, then use dnnbind.torch)"]
    return [f"{version} (dnnbind.torch available)"]


def backend_lines() -> list[str]:
    """Which backend packages exist under dnnbind/highlevel/ (found, not imported: that would cost numpy)."""
    directory = os.path.join(os.path.dirname(dnnbind.__file__), "highlevel")
    lines = []
    for name, what in _BACKENDS:
        spec = importlib.machinery.PathFinder.find_spec(name, [directory])
        present = spec is not None and spec.origin is not None     # a package with its __init__.py
        lines.append(f"{name:<10} {what}: {'present' if present else 'not implemented yet'}")
    return lines


def environment_lines() -> list[str]:
    return [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("DNNBIND_")] or ["(no DNNBIND_* set)"]


def report() -> str:
    """The whole report, as printed by ``python -m dnnbind info``."""
    location = os.path.dirname(os.path.abspath(dnnbind.__file__))
    lines = _block("dnnbind", [f"{dnnbind.__version__} ({location})"])
    lines += _block("Python", [f"{platform.python_version()} ({sys.executable})"])
    for title, module_name, env in _LIBRARIES:
        lines += _block(title, _guarded(lambda: library_lines(title, module_name, env)))
    lines += _block("numpy", _guarded(lambda: [_version("numpy") or "not installed"]))
    cupy_lines, gpu_lines = cupy_and_gpus()
    lines += _block("CuPy", cupy_lines)
    lines += _block("PyTorch", _guarded(torch_lines))
    lines += _block("GPUs", gpu_lines)
    lines += _block("backends", _guarded(backend_lines))
    lines += _block("environment", environment_lines())
    return "\n".join(lines)


def main() -> int:
    print(report())
    return 0
