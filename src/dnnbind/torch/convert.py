"""Tensors to arrays and back without copies.

CPU tensors become numpy arrays sharing their memory (the cpu backend); CUDA tensors become CuPy
arrays through DLPack (the cuDNN / MIOpen backends), with CuPy running on torch's current stream.
Results come back the same way: ``torch.from_numpy`` and ``torch.from_dlpack``. bfloat16 tensors, which
numpy and DLPack in older CuPy releases do not know, cross as int16 views of the same memory and are
viewed as ``ml_dtypes.bfloat16`` (numpy, and CuPy releases with bfloat16) on the other side.
"""
from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any, Iterator, Mapping

import numpy as np
import torch

from dnnbind.highlevel.cpu._threads import one_blas_thread

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _bfloat16() -> Any:
    """numpy's bfloat16 dtype (from ml_dtypes); ImportError saying how to install it when it is missing."""
    try:
        import ml_dtypes
    except ImportError as exc:
        raise ImportError("bfloat16 tensors need the ml_dtypes package: pip install ml_dtypes") from exc
    return np.dtype(ml_dtypes.bfloat16)


def check_tensor(name: str, value: Any) -> None:
    """TypeError naming ``name`` unless ``value`` is a float16/bfloat16/32/64 tensor on the CPU, a CUDA
    device or the meta device (which computes shapes only: the ops' fake kernels run)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, not {type(value).__name__}")
    if value.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {value.dtype}; dnnbind supports torch.float16, torch.bfloat16, "
                        f"torch.float32 and torch.float64")
    if value.device.type not in ("cpu", "cuda", "meta"):
        raise TypeError(f"{name} is on device {value.device}; dnnbind takes CPU, CUDA and meta tensors")


def common_device(tensors: Mapping[str, torch.Tensor | None]) -> torch.device:
    """The one device of the named tensors (None skipped); TypeError when they are on different devices."""
    first: tuple[str, torch.device] | None = None
    for name, t in tensors.items():
        if t is None:
            continue
        check_tensor(name, t)
        if first is None:
            first = (name, t.device)
        elif t.device != first[1]:
            raise TypeError(f"{name} is on {t.device} but {first[0]} is on {first[1]}; move them to one "
                            f"device (for example {name}.to({first[0]}.device))")
    if first is None:
        raise TypeError("no tensor arguments given")
    return first[1]


def check_same_dtype(tensors: Mapping[str, torch.Tensor | None]) -> None:
    """TypeError naming the first tensor whose dtype differs from the first one's (None skipped)."""
    first: tuple[str, torch.dtype] | None = None
    for name, t in tensors.items():
        if t is None:
            continue
        if first is None:
            first = (name, t.dtype)
        elif t.dtype != first[1]:
            raise TypeError(f"{name} has dtype {t.dtype} but {first[0]} has dtype {first[1]}; convert one of "
                            f"them (for example {name}.to({first[0]}.dtype))")


def cupy() -> ModuleType:
    """The cupy module; ImportError saying how to install it when it is missing."""
    try:
        import cupy as cp  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ImportError('CUDA tensors need CuPy: pip install "dnnbind[cuda12]" (or [cuda13])') from exc
    return cp


def device_scope(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """Make CuPy use ``device`` and torch's current stream on it; on the CPU, run numpy's BLAS on one
    thread (:func:`~dnnbind.highlevel.cpu._threads.one_blas_thread`): torch's OpenMP threads
    spin-wait between torch's ops and a multi-threaded BLAS loses to them."""
    kind = device.type
    if kind == "cpu":
        return one_blas_thread()
    if kind != "cuda":
        return _NOTHING
    return _cuda_scope(device)


_NOTHING = contextlib.nullcontext()


@contextlib.contextmanager
def _cuda_scope(device: torch.device) -> Iterator[None]:
    cp = cupy()
    index = torch.cuda.current_device() if device.index is None else device.index
    stream = torch.cuda.current_stream(index)
    with cp.cuda.Device(index), cp.cuda.ExternalStream(stream.cuda_stream, index):
        yield


def to_array(t: torch.Tensor, *, inplace: bool = False, name: str = "tensor") -> Any:
    """A C-contiguous numpy (CPU) or CuPy (CUDA) array on ``t``'s memory; a copy only when ``t`` is not
    contiguous. ``inplace=True`` (the op writes into it) refuses non-contiguous tensors instead."""
    if t.dtype in _SHARED_AS_IS and t.is_cpu and not t.is_neg():      # the usual case, on every op call
        a = t.numpy(force=True)       # (force: detached inside, without a tensor object for it)
        if a.flags.c_contiguous:
            return a
        if not inplace:               # (autograd's gradient of a sum: stride 0) copied by numpy, see below
            return np.ascontiguousarray(a)
    t = t.detach()
    cpu = t.device.type == "cpu"
    if cpu:
        a = (t.view(torch.int16).numpy().view(_bfloat16()) if t.dtype == torch.bfloat16
             else t.resolve_neg().numpy())
        contiguous = a.flags.c_contiguous
    else:
        contiguous = t.is_contiguous()
    if not contiguous and inplace:
        raise ValueError(f"{name} must be contiguous: the op updates it in place")
    if cpu:
        # a non-contiguous tensor is copied by numpy, single-threaded: a torch copy would wake torch's
        # OpenMP threads, whose spinning afterwards takes the cores numpy's BLAS is about to use
        return a if contiguous else np.ascontiguousarray(a)
    if not contiguous:
        t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return cupy().from_dlpack(t.view(torch.int16)).view(_bfloat16())
    return cupy().from_dlpack(t)


#: tensor dtypes numpy views as they are (bfloat16 crosses as int16)
_SHARED_AS_IS = frozenset({torch.float16, torch.float32, torch.float64})


def to_tensor(a: Any) -> torch.Tensor:
    """A tensor on the memory of a numpy or CuPy array (numpy arrays torch cannot share are copied); an
    empty one C-ordered, as torch makes them (numpy's have all-zero strides)."""
    if type(a) is np.ndarray and a.dtype.kind == "f" and a.flags.writeable and a.flags.c_contiguous and a.size:
        return torch.from_numpy(a)                                    # the usual case, on every op call
    dtype = getattr(a, "dtype", None)
    bfloat16 = dtype is not None and dtype.kind == "V" and dtype.name == "bfloat16"   # .name is slow: kind first
    if bfloat16:
        a = a.view(np.int16)
    if isinstance(a, (np.ndarray, np.generic)):
        a = np.asarray(a)
        # torch shares writable memory with non-negative strides only (a C-contiguous array's are)
        if not a.flags.writeable or not (a.flags.c_contiguous or all(s >= 0 for s in a.strides)):
            a = a.copy()
        t = torch.from_numpy(a)
    else:
        t = torch.from_dlpack(a)
    if t.numel() == 0:
        t = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return t.view(torch.bfloat16) if bfloat16 else t
