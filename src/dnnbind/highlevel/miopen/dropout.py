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
(numpy's). The mask lives in the reserve space (one byte per element), which the pullback holds;
``pullback.mask`` recovers it as a boolean array. p = 0 and p = 1 need no random numbers: a copy, and
zeros. Arrays of 2**30 elements or more run in chunks, one reserve space each; since MIOpen's states do
not advance, chunk i uses the states of seed + i * 0x9E3779B97F4A7C15 (mod 2**64), so chunks do not
repeat each other's mask.
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
from dnnbind.highlevel.gpu.dropout import DropoutPart, DropoutPullbackBase, ready_event, wait_until_ready
from dnnbind.highlevel.gpu.views import flat_dense
from dnnbind.highlevel.miopen._lib import Handle, handle, lib
from dnnbind.highlevel.miopen.descriptors import DropoutDescriptor, TensorDescriptor

STATES: PlanCache["DropoutStates"] = PlanCache("miopen.dropout_states", maxsize=16)
TENSORS: PlanCache["DropoutTensor"] = PlanCache("miopen.dropout_tensor", maxsize=128)


class DropoutTensor:
    """The flat (1, 1, 1, size) descriptor of one problem and its reserve-space size (host queries)."""

    def __init__(self, size: int, dtype: str) -> None:
        self.desc = TensorDescriptor((1, 1, 1, size), dtype)
        nbytes = ctypes.c_size_t()
        lib.miopenDropoutGetReserveSpaceSize(self.desc.handle, ctypes.byref(nbytes))
        self.reserve_size = nbytes.value


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


class DropoutPullback(DropoutPullbackBase):
    """dy -> dx through miopenDropoutBackward with the forward's reserve space."""

    dlpack_devices = DLPACK_ROCM

    def _backward(self, dy: Any, dx: Any, part: DropoutPart) -> None:
        t, at = part.tensor.desc.handle, part.chunk.offset(dy.itemsize)
        lib.miopenDropoutBackward(handle(self._device, current_stream()).ptr, part.desc.handle, t, t,
                                  dy.data.ptr + at, t, dx.data.ptr + at, part.reserve.data.ptr, part.reserve.size)


def dropout(x: Any, p: float, seed: Any = None) -> tuple[Any, DropoutPullback]:
    """Zero each element with probability p and scale the rest by 1/(1 - p) (see :func:`dnnbind.dropout`)."""
    cp = cupy()
    with Call("dropout", {"p": p, "seed": seed}, dlpack_devices=DLPACK_ROCM, x=x) as call:
        x = call["x"]
        trivial = DropoutPullback.trivial(cp, x, call.device, p)
        if trivial is not None:
            return trivial
        x, y = flat_dense(cp, x)
        h = handle(call.device, current_stream())
        parts = []
        for index, chunk in enumerate(chunk_plan(x.size)):
            tensor = TENSORS.get((chunk.size, x.dtype.name), lambda: DropoutTensor(chunk.size, x.dtype.name))
            states = _states(cp, h, call.device, seed, index)
            desc = DropoutDescriptor()
            lib.miopenRestoreDropoutDescriptor(desc.handle, h.ptr, float(p), states.buffer.data.ptr, states.size,
                                               states.seed, False, False, lib.MIOPEN_RNG_PSEUDO_XORWOW)
            reserve = cp.empty(tensor.reserve_size, np.uint8)
            t, at = tensor.desc.handle, chunk.offset(x.itemsize)
            lib.miopenDropoutForward(h.ptr, desc.handle, t, t, x.data.ptr + at, t, y.data.ptr + at, reserve.data.ptr,
                                     reserve.size)
            parts.append(DropoutPart(chunk, desc, tensor, reserve, states))
    return y, DropoutPullback(cp, y, call.device, p, parts)
