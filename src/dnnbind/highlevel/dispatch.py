"""Choose a backend from the types of an op's array arguments.

numpy arrays run on the reference backend; CuPy arrays run on cuDNN (CUDA) or MIOpen (ROCm). Backends
are modules named in :data:`BACKENDS` and imported on first use, so a new backend plugs in by adding
its package (for example ``dnnbind/highlevel/cudnn/``) with the reference backend's function names;
an op it does not provide yet raises NotImplementedError naming the backend and the op.
CuPy is never imported here: a CuPy array can only exist once CuPy has been imported.
"""
from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any, Callable

import numpy as np

#: backend name -> module path (imported lazily)
BACKENDS: dict[str, str] = {
    "reference": "dnnbind.highlevel.reference",
    "cudnn": "dnnbind.highlevel.cudnn",
    "miopen": "dnnbind.highlevel.miopen",
}

_DESCRIPTIONS = {
    "reference": "the numpy reference backend",
    "cudnn": "the cuDNN backend for cupy arrays",
    "miopen": "the MIOpen backend for cupy arrays on ROCm",
}


def _describe(name: str) -> str:
    return _DESCRIPTIONS.get(name, f"the {name} backend")


def load_backend(name: str) -> ModuleType:
    """Import backend ``name``; NotImplementedError if its module does not exist yet."""
    path = BACKENDS[name]
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as exc:
        if exc.name is not None and path.startswith(exc.name):
            raise NotImplementedError(f"{_describe(name)} is not implemented yet ({path})") from None
        raise


def backend_function(backend: str, op: str) -> Callable[..., Any]:
    """Backend ``backend``'s implementation of ``op``.

    NotImplementedError names the backend when its module, or this op in it, does not exist yet.
    """
    fn = getattr(load_backend(backend), op, None)
    if not callable(fn):
        raise NotImplementedError(f"{_describe(backend)} does not implement {op} yet ({BACKENDS[backend]})")
    return fn


def backend_op(op: str, **arrays: Any) -> Callable[..., Any]:
    """The implementation of ``op`` on the backend these named arrays select (see :func:`select`)."""
    return backend_function(select(**arrays), op)


def _type_name(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__


def _root_module(value: Any) -> str:
    return type(value).__module__.partition(".")[0]


def _cupy_is_hip() -> bool:
    cupy = sys.modules.get("cupy")
    # A cupy array exists only once cupy is imported; a stand-in object without cupy counts as CUDA.
    return bool(cupy.cuda.runtime.is_hip) if cupy is not None else False


def array_backend(name: str, value: Any) -> str:
    """Backend name for one array argument; TypeError naming ``name`` for unsupported types."""
    if isinstance(value, np.ndarray):
        return "reference"
    root = _root_module(value)
    if root == "torch":
        raise TypeError(f"{name} is a {_type_name(value)}; dnnbind.highlevel takes numpy or cupy arrays: use "
                        f"np.asarray({name}) for CPU tensors, or the dnnbind.torch wrappers")
    if hasattr(value, "__cuda_array_interface__"):
        if root == "cupy":
            return "miopen" if _cupy_is_hip() else "cudnn"
        return "device"
    raise TypeError(f"{name} must be a numpy or cupy array, not {_type_name(value)}; "
                    f"convert it with np.asarray({name})")


def select(**arrays: Any) -> str:
    """The backend name for an op called with these named arrays (None values are ignored).

    Raises TypeError for unsupported types and for a mix of host and device arrays.
    """
    chosen: tuple[str, str] | None = None
    for name, value in arrays.items():
        if value is None:
            continue
        backend = array_backend(name, value)
        if chosen is None:
            chosen = (name, backend)
            continue
        first_name, first = chosen
        if (first == "reference") != (backend == "reference"):
            host, device = (first_name, name) if first == "reference" else (name, first_name)
            raise TypeError(f"mixed host and device inputs: {host} is a numpy array but {device} is a device "
                            f"array ({_type_name(arrays[device])}); move them to one device "
                            f"(cupy.asarray / cupy.asnumpy)")
        if backend == "device":
            chosen = (name, backend)
    if chosen is None:
        raise TypeError("no array arguments given")
    name, backend = chosen
    if backend == "device":
        raise TypeError(f"{name} is a device array of type {_type_name(arrays[name])}; the GPU backends take "
                        f"cupy arrays: wrap it with cupy.asarray({name}) (no copy)")
    return backend
