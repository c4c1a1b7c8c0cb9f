"""Choose a backend from the types of an op's array arguments.

numpy arrays run on the cpu backend (the reference backend, the plain oracle, on request: call
:mod:`dnnbind.highlevel.reference` or ``backend_function("reference", op)``); CuPy arrays run on cuDNN
(CUDA) or MIOpen (ROCm). Backends
are modules named in :data:`BACKENDS` and imported on first use, so a new backend plugs in by adding
its package (for example ``dnnbind/highlevel/cudnn/``) with the cpu backend's function names;
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
    "cpu": "dnnbind.highlevel.cpu",
    "reference": "dnnbind.highlevel.reference",
    "cudnn": "dnnbind.highlevel.cudnn",
    "miopen": "dnnbind.highlevel.miopen",
}

_DESCRIPTIONS = {
    "cpu": "the cpu backend for numpy arrays",
    "reference": "the numpy reference backend (the oracle)",
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


#: (backend module path, op) -> function, filled on first use: dispatch is then one dictionary lookup
_functions: dict[tuple[str, str], Callable[..., Any]] = {}


def backend_function(backend: str, op: str) -> Callable[..., Any]:
    """Backend ``backend``'s implementation of ``op``.

    NotImplementedError names the backend when its module, or this op in it, does not exist yet.
    """
    key = (BACKENDS[backend], op)
    fn = _functions.get(key)
    if fn is None:
        fn = getattr(load_backend(backend), op, None)
        if not callable(fn):
            raise NotImplementedError(f"{_describe(backend)} does not implement {op} yet ({BACKENDS[backend]})")
        _functions[key] = fn
    return fn


def backend_op(op: str, required: tuple[str, ...] = ("x",), **arrays: Any) -> Callable[..., Any]:
    """The implementation of ``op`` on the backend these named arrays select (see :func:`select`).

    The arrays named in ``required`` must not be None (TypeError naming the first that is); the others
    are optional. Calls whose arrays are all plain numpy arrays, or all CuPy arrays (None aside), take a
    fast path that looks only at their type.
    """
    for name in required:
        if arrays.get(name) is None:
            raise TypeError(f"{name} must be a numpy or cupy array, not None")
    kind: type | None = None
    for value in arrays.values():
        if value is None:
            continue
        if kind is None:
            kind = type(value)
        elif type(value) is not kind:
            break
    else:
        if kind is np.ndarray:
            return backend_function("cpu", op)
        learnt = _cupy_types.get(kind) if kind is not None else None
        if learnt is not None:
            return backend_function(learnt, op)
    backend = select(**arrays)
    if kind is not None and backend != "cpu" and _root_module_of(kind) == "cupy" \
            and all(v is None or type(v) is kind for v in arrays.values()):
        _cupy_types[kind] = backend      # CuPy's array type always selects the same backend in a process
    return backend_function(backend, op)


#: CuPy array type -> its backend, learnt from the first call that used only that type
_cupy_types: dict[type, str] = {}


def _root_module_of(kind: type) -> str:
    return kind.__module__.partition(".")[0]


def _type_name(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__


def _root_module(value: Any) -> str:
    return _root_module_of(type(value))


def _cupy_is_hip() -> bool:
    cupy = sys.modules.get("cupy")
    # A cupy array exists only once cupy is imported; a stand-in object without cupy counts as CUDA.
    return bool(cupy.cuda.runtime.is_hip) if cupy is not None else False


def is_foreign_device_array(value: Any) -> bool:
    """A device array that is not CuPy's: a PyTorch CUDA tensor, a Numba array, anything with
    ``__cuda_array_interface__``. The public ops adopt these as CuPy arrays without copying."""
    if value is None or isinstance(value, np.ndarray):
        return False
    root = _root_module(value)
    if root == "cupy":
        return False
    if root == "torch":
        return bool(getattr(value, "is_cuda", False))
    return hasattr(value, "__cuda_array_interface__")


def _adopt(name: str, value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_adopt(f"{name}[{i}]", v) for i, v in enumerate(value))
    if not is_foreign_device_array(value):
        return value
    if getattr(value, "requires_grad", False):
        raise TypeError(f"{name} is a PyTorch tensor that requires grad: use dnnbind.torch for autograd, or "
                        f"pass {name}.detach()")
    from dnnbind.highlevel.gpu.arrays import as_device_array
    return as_device_array(name, value)


def adopted(spec: Any, arrays: tuple) -> tuple:
    """An op's arrays (in its spec's order) with device arrays other than CuPy's -- PyTorch CUDA tensors,
    other ``__cuda_array_interface__`` / DLPack arrays -- wrapped as CuPy arrays without copying (results
    are CuPy arrays on the same device); a mix of host and device arrays is a TypeError first. Numpy and
    CuPy arrays pass with a look at their types only."""
    if _all_host(arrays):
        return arrays
    names = spec.array_names
    _chosen(**_flatten(dict(zip(names, arrays))))
    return tuple(_adopt(name, value) for name, value in zip(names, arrays))


#: argument types that are never device arrays: the adoption wrapper skips them without a look
_HOST_TYPES = frozenset({np.ndarray, int, float, bool, str, type(None)})


def _all_host(values: Any) -> bool:
    """Whether none of ``values`` is (or holds) a device array other than CuPy's."""
    for v in values:
        kind = type(v)
        if kind in _HOST_TYPES:
            continue
        if is_foreign_device_array(v) or (kind in (list, tuple) and _has_foreign(v)):
            return False
    return True


def _flatten(arrays: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in arrays.items():
        if isinstance(value, (list, tuple)):
            flat.update(_flatten({f"{name}[{i}]": v for i, v in enumerate(value)}))
        else:
            flat[name] = value
    return flat


def _has_foreign(values: Any) -> bool:
    return any(_has_foreign(v) if type(v) in (list, tuple) else is_foreign_device_array(v) for v in values)


def array_backend(name: str, value: Any) -> str:
    """Backend name for one array argument; TypeError naming ``name`` for unsupported types."""
    if isinstance(value, np.ndarray):
        return "cpu"
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


def _chosen(**arrays: Any) -> tuple[str, str]:
    """(argument name, backend) deciding the backend; TypeError for unsupported types and for a mix of
    host and device arrays. A foreign device array (not CuPy) wins over CuPy ones and reports "device"."""
    chosen: tuple[str, str] | None = None
    for name, value in arrays.items():
        if value is None:
            continue
        backend = array_backend(name, value) if not is_foreign_device_array(value) else "device"
        if chosen is None:
            chosen = (name, backend)
            continue
        first_name, first = chosen
        if (first == "cpu") != (backend == "cpu"):
            host, device = (first_name, name) if first == "cpu" else (name, first_name)
            raise TypeError(f"mixed host and device inputs: {host} is a numpy array but {device} is a device "
                            f"array ({_type_name(arrays[device])}); move them to one device "
                            f"(cupy.asarray / cupy.asnumpy)")
        if backend == "device":
            chosen = (name, backend)
    if chosen is None:
        raise TypeError("no array arguments given")
    return chosen


def select(**arrays: Any) -> str:
    """The backend name for an op called with these named arrays (None values are ignored).

    Raises TypeError for unsupported types and for a mix of host and device arrays. Device arrays other
    than CuPy's reach here only when an op was called without :func:`adopted`.
    """
    name, backend = _chosen(**arrays)
    if backend == "device":
        raise TypeError(f"{name} is a device array of type {_type_name(arrays[name])}; the GPU backends take "
                        f"cupy arrays: wrap it with cupy.asarray({name}) (no copy)")
    return backend
