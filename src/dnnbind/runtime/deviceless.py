"""cuDNN's graph API without a GPU: find the two user-space libraries it loads, only when asked.

cuDNN builds operation graphs, engine heuristics and execution plans from a device-properties descriptor
without a device, provided NVIDIA's user-space driver library (``libcuda.so.1``, which loads without a
device) and cuBLASLt (``libcublasLt.so.13``) can be loaded. Without libcuda every finalize fails; without
cuBLASLt the engine heuristics *abort the process* ("Cannot load symbol cublasLtGetVersion"). So a
finalize that needs them checks first (:func:`require`, called by the typed backend descriptors) and
raises :class:`DevicelessError` instead. Nothing here runs at import: :func:`enable` preloads the
libraries (``RTLD_GLOBAL``, so that cuDNN's own ``dlopen`` of the soname finds them) only when called.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Iterable

from dnnbind.runtime.errors import DnnError
from dnnbind.runtime.loader import site_package_dirs

LIBCUDA = "libcuda.so.1"
CUBLASLT = "libcublasLt.so.13"
#: (soname, the variable that names its file, what it is, how a user gets it)
LIBRARIES = {
    LIBCUDA: ("DNNBIND_LIBCUDA", "NVIDIA's user-space driver library",
              "install the NVIDIA driver's user-space part (Debian: libcuda1 from non-free), or point DNNBIND_LIBCUDA "
              "at a libcuda.so.1"),
    CUBLASLT: ("DNNBIND_CUBLASLT", "cuBLASLt", "pip install nvidia-cublas (CUDA 13), or point DNNBIND_CUBLASLT at a "
               "libcublasLt.so.13"),
}
#: where the PyPI wheels put a soname, relative to site-packages (cuDNN's own RUNPATH looks there too)
WHEEL_DIRS = {LIBCUDA: (), CUBLASLT: ("nvidia/cu13/lib", "nvidia/cublas/lib")}
#: the first cuDNN that builds plans from a device-properties descriptor (CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR)
MIN_CUDNN = (9, 8)
_RTLD_NOLOAD = getattr(os, "RTLD_NOLOAD", 4)


class DevicelessError(DnnError, OSError):
    """A library the graph API needs on this machine cannot be loaded; the message says which and how to fix it."""


def loaded(soname: str) -> bool:
    """Whether a library with this soname is loaded in this process already."""
    try:
        ctypes.CDLL(soname, mode=_RTLD_NOLOAD)
        return True
    except OSError:
        return False


def candidates(soname: str) -> list[str]:
    """Where :func:`enable` looks for ``soname``: only its variable's file when that is set, else the wheels'
    folders in site-packages, then the system loader's search."""
    env = LIBRARIES[soname][0]
    if os.environ.get(env):
        return [os.environ[env]]
    found = [os.path.join(d, sub, soname) for d in site_package_dirs() for sub in WHEEL_DIRS[soname]
              if os.path.isfile(os.path.join(d, sub, soname))]
    return found + [soname]


def _load_first(soname: str, tried: list[str]) -> str:
    """Load the first of ``tried`` that loads (RTLD_GLOBAL) and return it; DevicelessError listing why each failed."""
    errors = []
    for candidate in tried:
        try:
            ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
            return candidate
        except OSError as exc:
            errors.append(f"{candidate}: {exc}")
    _, what, fix = LIBRARIES[soname]
    raise DevicelessError(f"{what} ({soname}) cannot be loaded (tried {'; '.join(errors)}). Fix: {fix}")


def enable(libcuda: str | os.PathLike[str] | None = None,
           cublaslt: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Load libcuda and cuBLASLt into this process (``RTLD_GLOBAL``) so that cuDNN finds them; return
    {soname: what was loaded}. A path given here wins over $DNNBIND_LIBCUDA / $DNNBIND_CUBLASLT, the
    nvidia wheels in site-packages and the system loader's search. Raises DevicelessError naming what failed."""
    given = {LIBCUDA: libcuda, CUBLASLT: cublaslt}
    return {soname: _load_first(soname, [os.fspath(path)] if path is not None else candidates(soname))
            for soname, path in given.items()}


def problems(needs: Iterable[str] = (LIBCUDA, CUBLASLT), cudnn_version: tuple[int, ...] | None = None) -> list[str]:
    """Why cuDNN cannot build plans without a device in this process (empty when it can): each needed
    library that is neither loaded nor loadable, and a cuDNN older than 9.8. Loading a library here
    (to see that it loads) keeps it loaded, as cuDNN would load it anyway."""
    found = []
    if cudnn_version is not None and tuple(cudnn_version[:2]) < MIN_CUDNN:
        found.append(f"cuDNN {'.'.join(map(str, cudnn_version))} is too old: building plans from device properties "
                     f"needs cuDNN {'.'.join(map(str, MIN_CUDNN))} or newer")
    for soname in needs:
        if not loaded(soname):
            try:
                _load_first(soname, candidates(soname))
            except DevicelessError as exc:
                found.append(str(exc))
    return found


def require(needs: Iterable[str], what: str) -> None:
    """Raise DevicelessError before ``what`` when a library it needs cannot be loaded (see :func:`problems`)."""
    found = problems(needs)
    if found:
        raise DevicelessError(f"{what} needs {' and '.join(needs)}: " + " ".join(found))


def library_file(soname: str) -> Path | None:
    """The file a loaded soname came from (read from /proc/self/maps), or None."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    stem = soname.split(".so")[0] + ".so"
    for line in lines:
        path = line.split()[-1] if line.split() else ""
        if os.path.basename(path).startswith(stem):
            return Path(path)
    return None
