"""Inverted dropout on cuDNN: cudnnDropoutForward / cudnnDropoutBackward.

cuDNN draws its mask from random-number-generator states that it initialises from a seed
(cudnnSetDropoutDescriptor, a kernel launch) and advances on every forward call. The backend keeps
initialised states per (device, seed) in a bounded cache:

* ``seed`` given (an int): the same seed gives the same mask, call after call. The first call for a
  (device, seed, p, size, dtype) draws the mask from a copy of the seed's pristine states and keeps it
  (bounded cache ``MASKS``); later calls apply the kept mask with cudnnDropoutBackward (dy = x gives
  x * mask / (1 - p), the forward's result) and copy no states. Users on other streams wait for the
  event recorded after the mask was drawn (see :mod:`dnnbind.highlevel.gpu.dropout`);
* ``seed=None``: one set of states per device and stream, seeded from the OS's entropy and advancing
  with each call (used by one stream only, so the calls that advance it are ordered);
* a ``numpy.random.Generator``: draws a 63-bit seed from it (advancing it) and initialises states for
  that call only.

The masks come from cuDNN's generator, so for the same seed they DIFFER from the reference backend's
(numpy's); tests compare statistics and the pullback's consistency with the forward mask instead.
The mask lives in cuDNN's reserve space, which the pullback holds; ``pullback.mask`` recovers it as a
boolean array. p = 0 and p = 1 need no random numbers: a copy, and zeros. Arrays of 2**30 elements or
more run in chunks, one reserve space each (the states advance from chunk to chunk).
"""
from __future__ import annotations

import ctypes
import secrets
from typing import Any

import numpy as np

from dnnbind.highlevel.cudnn._lib import handle, lib
from dnnbind.highlevel.cudnn.descriptors import DropoutDescriptor, TensorDescriptor
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.chunks import chunk_plan
from dnnbind.highlevel.gpu.dropout import DropoutPart, DropoutPullbackBase, ready_event, wait_until_ready
from dnnbind.highlevel.gpu.views import flat_dense

STATES: PlanCache["DropoutStates"] = PlanCache("cudnn.dropout_states", maxsize=16)
MASKS: PlanCache["SeededMask"] = PlanCache("cudnn.dropout_masks", maxsize=16)
TENSORS: PlanCache[TensorDescriptor] = PlanCache("cudnn.dropout_tensor", maxsize=128)


class DropoutStates:
    """cuDNN's RNG states for one (device, seed), initialised on the current stream; ``ready`` is an event
    recorded after the initialisation, for users on other streams to wait for."""

    def __init__(self, cp: Any, h: Any, seed: int) -> None:
        c = lib()
        size = ctypes.c_size_t()
        c.cudnnDropoutGetStatesSize(h, ctypes.byref(size))
        self.size = size.value
        self.seed = seed
        self.buffer = cp.empty(self.size, np.uint8)
        with DropoutDescriptor() as desc:
            c.cudnnSetDropoutDescriptor(desc.handle, h, 0.5, self.buffer.data.ptr, self.size, seed)
        self.ready = ready_event(cp)


def _int_seed(seed: Any) -> tuple[int, bool]:
    """(seed as an int, whether its states are cached)."""
    if seed is None:
        return secrets.randbits(63), True
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**63 - 1)), False
    return int(seed) & (2**64 - 1), True      # cuDNN's seed is an unsigned 64-bit int


def _states(cp: Any, h: Any, device: int, stream: int, seed: Any) -> tuple[DropoutStates, Any]:
    """(states, the buffer this call lets cuDNN advance), ordered on the current stream ``stream``."""
    if seed is None:
        # one advancing buffer per device and stream: every call that advances it runs on that stream
        states = STATES.get((device, stream, None), lambda: DropoutStates(cp, h, _int_seed(None)[0]))
        return states, states.buffer
    value, cached = _int_seed(seed)
    if not cached:
        states = DropoutStates(cp, h, value)
        return states, states.buffer
    states = STATES.get((device, value), lambda: DropoutStates(cp, h, value))
    wait_until_ready(cp, states.ready)          # initialised on whichever stream first asked for it
    return states, states.buffer.copy()         # the pristine states stay untouched


class SeededMask:
    """The mask a seed gives one (p, size, dtype): the chunks' reserve spaces, never written again, and the
    event recorded after they were drawn."""

    def __init__(self, parts: list[DropoutPart], ready: Any) -> None:
        self.parts = parts
        self.ready = ready


class DropoutPullback(DropoutPullbackBase):
    """dy -> dx through cudnnDropoutBackward with the forward's reserve space, chunk by chunk."""

    def _backward(self, dy: Any, dx: Any, part: DropoutPart) -> None:
        t, at = part.tensor.handle, part.chunk.offset(dy.itemsize)
        lib().cudnnDropoutBackward(handle(self._device, current_stream()), part.desc.handle, t, dy.data.ptr + at, t,
                                   dx.data.ptr + at, part.reserve.data.ptr, part.reserve.size)


def _draw(cp: Any, c: Any, h: Any, x: Any, y: Any, p: float, states: DropoutStates, buffer: Any) -> list[DropoutPart]:
    """y = dropout(x) with a new mask drawn from ``buffer`` (advancing it), chunk by chunk; the parts keep the
    masks (reserve spaces) and the descriptors the pullback needs."""
    desc = DropoutDescriptor()
    c.cudnnRestoreDropoutDescriptor(desc.handle, h, float(p), buffer.data.ptr, states.size, states.seed)
    parts = []
    for chunk in chunk_plan(x.size):
        tensor = TENSORS.get((chunk.size, x.dtype.name), lambda: TensorDescriptor((1, 1, 1, chunk.size), x.dtype.name))
        size = ctypes.c_size_t()
        c.cudnnDropoutGetReserveSpaceSize(tensor.handle, ctypes.byref(size))
        reserve = cp.empty(size.value, np.uint8)
        at = chunk.offset(x.itemsize)
        c.cudnnDropoutForward(h, desc.handle, tensor.handle, x.data.ptr + at, tensor.handle, y.data.ptr + at,
                              reserve.data.ptr, reserve.size)
        parts.append(DropoutPart(chunk, desc, tensor, reserve, buffer))
    return parts


def dropout(x: Any, p: float, seed: Any = None) -> tuple[Any, DropoutPullback]:
    """Zero each element with probability p and scale the rest by 1/(1 - p) (see :func:`dnnbind.dropout`)."""
    cp = cupy()
    c = lib()
    with Call("dropout", {"p": p, "seed": seed}, x=x) as call:
        x = call["x"]
        trivial = DropoutPullback.trivial(cp, x, call.device, p)
        if trivial is not None:
            return trivial
        x, y = flat_dense(cp, x)
        stream = current_stream()
        h = handle(call.device, stream)
        if seed is not None and not isinstance(seed, np.random.Generator):
            key = (call.device, _int_seed(seed)[0], float(p), x.size, x.dtype.name)
            drawn_here: list[bool] = []

            def draw_and_keep() -> SeededMask:
                kept = _draw(cp, c, h, x, y, p, *_states(cp, h, call.device, stream, seed))
                drawn_here.append(True)                 # this call's y is computed
                return SeededMask(kept, ready_event(cp))
            mask = MASKS.get(key, draw_and_keep)
            if not drawn_here:                          # drawn before, maybe on another stream: apply it
                wait_until_ready(cp, mask.ready)
                for part in mask.parts:
                    t, at = part.tensor.handle, part.chunk.offset(x.itemsize)
                    c.cudnnDropoutBackward(h, part.desc.handle, t, x.data.ptr + at, t, y.data.ptr + at,
                                           part.reserve.data.ptr, part.reserve.size)
            parts = mask.parts
        else:
            parts = _draw(cp, c, h, x, y, p, *_states(cp, h, call.device, stream, seed))
    return y, DropoutPullback(cp, y, call.device, p, parts)
