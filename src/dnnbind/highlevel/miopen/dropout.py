"""Inverted dropout on MIOpen: miopenDropoutForward / miopenDropoutBackward.

MIOpen draws its mask from XORWOW random-number-generator states that miopenSetDropoutDescriptor
initialises from a seed (a kernel launch). MIOpen does not advance them (its ``state_evo`` flag is a
placeholder, "currently not enabled"): the same states give the same mask every time. So:

* ``seed`` given (an int): the seed's states are initialised once per device, kept in a bounded
  cache and reused through miopenRestoreDropoutDescriptor: the same seed, the same mask (a call on
  another stream than the initialisation's waits for it: see :mod:`dnnbind.highlevel.gpu.dropout`);
* ``seed=None``: fresh states from a seed drawn from the OS's entropy, for this call only;
* a ``numpy.random.Generator``: a 63-bit seed drawn from it (advancing it), states for this call only.

The masks come from MIOpen's generator, so for the same seed they DIFFER from the reference backend's
(numpy's). The mask lives in the reserve space, one byte per element, 0 or 1: the forward hands MIOpen
a boolean array of x's shape and strides as the reserve space, and that array is the residual, as on
the reference backend (``pullback.mask``). p = 0 and p = 1 need no random numbers: a copy, and zeros
(the mask all True, all False). Arrays of 2**30 elements or more run in chunks, each with its part of
the mask as reserve space; since MIOpen's states do not advance, chunk i uses the states of
seed + i * 0x9E3779B97F4A7C15 (mod 2**64), so chunks do not repeat each other's mask.

miopenDropoutBackward reads the mask from the reserve space, not the states; it still takes a
descriptor with states of full size (MIOpen checks their size, and its kernel loads them without using
them). The backward uses the cached states of the call's seed when that is an int, else those of seed
0: it never draws from a Generator again.
"""
from __future__ import annotations

import ctypes
import secrets
from typing import Any

import numpy as np

from dnnbind.highlevel.gpu.arrays import DLPACK_ROCM, cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.chunks import chunk_plan
from dnnbind.highlevel.gpu.dropout import ready_event, wait_until_ready
from dnnbind.highlevel.gpu.pullback import cotangent, like
from dnnbind.highlevel.gpu.views import flat_dense
from dnnbind.highlevel.miopen._lib import Handle, handle, lib
from dnnbind.highlevel.miopen.descriptors import DropoutDescriptor, TensorDescriptor
from dnnbind.highlevel.residual import ArraySpec

STATES: PlanCache["DropoutStates"] = PlanCache("miopen.dropout_states", maxsize=16)
TENSORS: PlanCache["DropoutTensor"] = PlanCache("miopen.dropout_tensor", maxsize=128)


class DropoutTensor:
    """The flat (1, 1, 1, size) descriptor of one problem and its reserve-space size (host queries)."""

    def __init__(self, size: int, dtype: str) -> None:
        self.desc = TensorDescriptor((1, 1, 1, size), dtype)
        nbytes = ctypes.c_size_t()
        lib.miopenDropoutGetReserveSpaceSize(self.desc.handle, ctypes.byref(nbytes))
        self.reserve_size = nbytes.value


def tensor_for(size: int, dtype: str) -> DropoutTensor:
    """The cached :class:`DropoutTensor`; RuntimeError unless its reserve space is one byte per element
    (the boolean mask the forward saves)."""
    tensor = TENSORS.get((size, dtype), lambda: DropoutTensor(size, dtype))
    if tensor.reserve_size != size:
        raise RuntimeError(f"MIOpen wants {tensor.reserve_size} bytes of reserve space for {size} elements; dnnbind "
                           f"saves the mask as one byte per element and does not know this MIOpen's layout")
    return tensor


class DropoutStates:
    """MIOpen's RNG states for one seed, initialised on ``h``'s stream (miopenSetDropoutDescriptor)."""

    def __init__(self, cp: Any, h: Handle, seed: int) -> None:
        size = ctypes.c_size_t()
        lib.miopenDropoutGetStatesSize(h.ptr, ctypes.byref(size))
        self.size = size.value
        self.seed = seed
        self.buffer = cp.empty(self.size, np.uint8)
        with DropoutDescriptor() as desc:
            lib.miopenSetDropoutDescriptor(desc.handle, h.ptr, 0.5, self.buffer.data.ptr, self.size, seed, False,
                                           False, lib.MIOPEN_RNG_PSEUDO_XORWOW)
        self.ready = ready_event(cp)      # for users on other streams


def int_seed(seed: Any) -> tuple[int, bool]:
    """(the seed as MIOpen's unsigned 64-bit int, whether its states may be cached)."""
    if seed is None:
        return secrets.randbits(63), False
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**63 - 1)), False
    return int(seed) & (2**64 - 1), True


#: the seed step between chunks (2**64 / golden ratio): chunk i of a call uses seed + i * CHUNK_SEED_STEP
CHUNK_SEED_STEP = 0x9E3779B97F4A7C15


def chunk_seed(seed: int, index: int) -> int:
    """The seed of chunk ``index`` of a call with ``seed`` (chunk 0 keeps the seed itself)."""
    return (seed + index * CHUNK_SEED_STEP) & (2**64 - 1)


def _states(cp: Any, h: Handle, device: int, seed: Any, index: int = 0) -> DropoutStates:
    value, cached = int_seed(seed)
    value = chunk_seed(value, index)
    if cached:
        states = STATES.get((device, value), lambda: DropoutStates(cp, h, value))
        wait_until_ready(cp, states.ready)     # initialised on whichever stream first asked for it
        return states
    return DropoutStates(cp, h, value)


def _backward_states(cp: Any, h: Handle, device: int, seed: Any, index: int) -> DropoutStates:
    """States for miopenDropoutBackward, whose values it does not use (see the module docstring)."""
    if seed is None or isinstance(seed, np.random.Generator):
        return _states(cp, h, device, 0)
    return _states(cp, h, device, seed, index)


def _descriptor(h: Handle, p: float, states: DropoutStates) -> DropoutDescriptor:
    desc = DropoutDescriptor()
    lib.miopenRestoreDropoutDescriptor(desc.handle, h.ptr, float(p), states.buffer.data.ptr, states.size,
                                       states.seed, False, False, lib.MIOPEN_RNG_PSEUDO_XORWOW)
    return desc


def dropout_forward(x: Any, p: float, seed: Any = None) -> tuple[Any, tuple[Any]]:
    """Zero each element with probability p and scale the rest by 1/(1 - p) (see :func:`dnnbind.dropout`);
    saves the mask (bool, x's shape)."""
    cp = cupy()
    with Call("dropout", {"p": p, "seed": seed}, dlpack_devices=DLPACK_ROCM, x=x) as call:
        x = call["x"]
        if p == 0.0:
            return x.copy(), (cp.ones(x.shape, bool),)
        if p == 1.0:
            return cp.zeros_like(x), (cp.zeros(x.shape, bool),)
        x, y = flat_dense(cp, x)
        mask = cp.empty_like(x, dtype=bool)          # x's strides: byte i is the flag of x's i-th element
        h = handle(call.device, current_stream())
        for index, chunk in enumerate(chunk_plan(x.size)):
            tensor = tensor_for(chunk.size, x.dtype.name)
            desc = _descriptor(h, p, _states(cp, h, call.device, seed, index))
            t, at = tensor.desc.handle, chunk.offset(x.itemsize)
            lib.miopenDropoutForward(h.ptr, desc.handle, t, t, x.data.ptr + at, t, y.data.ptr + at,
                                     mask.data.ptr + chunk.start, tensor.reserve_size)
    return y, (mask,)


def dropout_backward(saved: tuple, cotangents: tuple, p: float, seed: Any = None) -> Any:
    """dx = dy * mask / (1 - p) through miopenDropoutBackward, in dy's dtype (the result's, for the
    pullback form)."""
    (mask,), (dy,) = saved, cotangents
    cp = cupy()
    device = mask.device.id
    with Call("dropout backward", {"p": p}, device=device, dlpack_devices=DLPACK_ROCM, dy=dy) as back:
        dy = back["dy"]
        dy = cotangent("dy", dy, mask.shape, dy.dtype, None, device, DLPACK_ROCM)
        if p == 0.0:
            return dy.copy()
        if p == 1.0:
            return cp.zeros_like(dy)
        dx = cp.empty_like(mask, dtype=dy.dtype)     # the mask's strides, so the flat blocks line up
        dy = like(cp, dy, dx)
        h = handle(device, current_stream())
        for index, chunk in enumerate(chunk_plan(dx.size)):
            tensor = tensor_for(chunk.size, dx.dtype.name)
            desc = _descriptor(h, p, _backward_states(cp, h, device, seed, index))
            t, at = tensor.desc.handle, chunk.offset(dx.itemsize)
            lib.miopenDropoutBackward(h.ptr, desc.handle, t, t, dy.data.ptr + at, t, dx.data.ptr + at,
                                      mask.data.ptr + chunk.start, tensor.reserve_size)
        return dx


def dropout_residuals(x: ArraySpec, p: float, seed: Any = None) -> tuple[ArraySpec]:
    """The mask: bool, x's shape (the reserve space MIOpen fills); no library call."""
    return (ArraySpec(tuple(x.shape), np.dtype(bool)),)
