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
(numpy's); tests compare statistics and the backward's consistency with the forward mask instead.

Residual form (see :mod:`dnnbind.highlevel.residual`): the mask lives in cuDNN's reserve spaces (uint8,
one per chunk: arrays of 2**30 elements or more run in chunks, the states advancing from chunk to chunk),
which are the residuals; a seeded call saves copies of the kept ones. The reserve space is an opaque
mask over a flat block of memory, and the backward must see dy in the same element order as the forward
saw x; since the residuals carry no layout, that order is always C order: x and dy that are not
C-contiguous are copied to C order for the library call, and y and dx come back in x's and dy's own
layout. The backward runs with a dropout descriptor of the same p restored on this stream's unseeded
states (cudnnDropoutBackward reads the mask from the reserve space; it draws nothing). p = 0 and p = 1
need no random numbers: a copy and zeros, with no residuals. ``pullback.mask`` (the ``(result, pullback)``
form) is where the pullback of ones is non-zero (:mod:`dnnbind.highlevel.gpu.dropout_mask`).
"""
from __future__ import annotations

import ctypes
import math
import secrets
from typing import Any

import numpy as np

from dnnbind.highlevel.cudnn._lib import handle, lib
from dnnbind.highlevel.cudnn.descriptors import DropoutDescriptor, TensorDescriptor
from dnnbind.highlevel.gpu.arrays import cupy, current_stream
from dnnbind.highlevel.gpu.cache import PlanCache
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.chunks import chunk_plan
from dnnbind.highlevel.gpu.dropout import DropoutPart, ready_event, wait_until_ready
from dnnbind.highlevel.gpu.dtypes import dtype_name
from dnnbind.highlevel.gpu.pullback import cotangent
from dnnbind.highlevel.gpu.views import is_dense
from dnnbind.highlevel.residual import ArraySpec

STATES: PlanCache["DropoutStates"] = PlanCache("cudnn.dropout_states", maxsize=16)
MASKS: PlanCache["SeededMask"] = PlanCache("cudnn.dropout_masks", maxsize=16)
TENSORS: PlanCache[TensorDescriptor] = PlanCache("cudnn.dropout_tensor", maxsize=128)
BACKWARD: PlanCache["BackwardDescriptor"] = PlanCache("cudnn.dropout_backward", maxsize=64)


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


class BackwardDescriptor:
    """A dropout descriptor of probability p for cudnnDropoutBackward, restored on ``states`` (kept alive
    here: the descriptor points at them)."""

    def __init__(self, h: Any, p: float, states: DropoutStates) -> None:
        self.states = states
        self.desc = DropoutDescriptor()
        lib().cudnnRestoreDropoutDescriptor(self.desc.handle, h, p, states.buffer.data.ptr, states.size,
                                            states.seed)


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


def _tensor(size: int, dtype: str) -> TensorDescriptor:
    """The flat (1, 1, 1, size) descriptor of one chunk."""
    return TENSORS.get((size, dtype), lambda: TensorDescriptor((1, 1, 1, size), dtype))


def reserve_bytes(size: int, dtype: Any) -> int:
    """cudnnDropoutGetReserveSpaceSize for a chunk of ``size`` elements (a host-side query)."""
    out = ctypes.c_size_t()
    lib().cudnnDropoutGetReserveSpaceSize(_tensor(size, dtype_name(dtype)).handle, ctypes.byref(out))
    return out.value


def _draw(cp: Any, c: Any, h: Any, x: Any, y: Any, p: float, states: DropoutStates, buffer: Any) -> list[DropoutPart]:
    """y = dropout(x) with a new mask drawn from ``buffer`` (advancing it), chunk by chunk; the parts keep the
    masks (reserve spaces) and the descriptors a later seeded call needs."""
    desc = DropoutDescriptor()
    c.cudnnRestoreDropoutDescriptor(desc.handle, h, float(p), buffer.data.ptr, states.size, states.seed)
    parts = []
    for chunk in chunk_plan(x.size):
        tensor = _tensor(chunk.size, x.dtype.name)
        reserve = cp.empty(reserve_bytes(chunk.size, x.dtype), np.uint8)
        at = chunk.offset(x.itemsize)
        c.cudnnDropoutForward(h, desc.handle, tensor.handle, x.data.ptr + at, tensor.handle, y.data.ptr + at,
                              reserve.data.ptr, reserve.size)
        parts.append(DropoutPart(chunk, desc, tensor, reserve, buffer))
    return parts


def _in_layout_of(cp: Any, a: Any, template: Any) -> Any:
    """C-order ``a`` in ``template``'s layout when that is a dense one other than C order, else ``a``."""
    if template.flags.c_contiguous or not is_dense(template):
        return a
    out = cp.empty_like(template)
    if out.strides != template.strides:
        return a
    out[...] = a
    return out


def dropout_forward(x: Any, p: float, seed: Any = None) -> tuple[Any, tuple]:
    """Zero each element with probability p and scale the rest by 1/(1 - p) (see :func:`dnnbind.dropout`);
    saves cuDNN's reserve spaces (the mask), none for p = 0 or 1."""
    cp = cupy()
    c = lib()
    with Call("dropout", {"p": p, "seed": seed}, x=x) as call:
        user_x = call["x"]
        if p == 0.0:
            return user_x.copy(), ()
        if p == 1.0:
            return cp.zeros_like(user_x), ()
        x = cp.ascontiguousarray(user_x)
        y = cp.empty(x.shape, x.dtype)
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
            saved = tuple(part.reserve.copy() for part in mask.parts)     # the cache's stay untouched
        else:
            saved = tuple(part.reserve for part in _draw(cp, c, h, x, y, p,
                                                          *_states(cp, h, call.device, stream, seed)))
        return _in_layout_of(cp, y, user_x), saved


def dropout_backward(residuals: tuple, cotangents: tuple, p: float, seed: Any = None) -> Any:
    """dx = dy * mask / (1 - p) through cudnnDropoutBackward with the saved reserve spaces; dy must have the
    forward result's dtype (the ``(result, pullback)`` form converts it)."""
    cp = cupy()
    (dy,) = cotangents
    device = residuals[0].device.id if residuals else None
    with Call("dropout pullback", {"p": p}, device=device, dy=dy) as back:
        user_dy = back["dy"]
        dy = cotangent("dy", user_dy, user_dy.shape, user_dy.dtype, None, back.device)
        if p == 0.0:
            return dy.copy()
        if p == 1.0:
            return cp.zeros_like(dy)
        chunks = chunk_plan(dy.size)
        _check_reserves(residuals, chunks, dy)
        dy = cp.ascontiguousarray(dy)
        dx = cp.empty(dy.shape, dy.dtype)
        stream = current_stream()
        h = handle(back.device, stream)
        desc = BACKWARD.get((back.device, stream, float(p)),
                            lambda: BackwardDescriptor(h, float(p), _states(cp, h, back.device, stream, None)[0]))
        c = lib()
        for chunk, reserve in zip(chunks, residuals):
            t, at = _tensor(chunk.size, dy.dtype.name).handle, chunk.offset(dy.itemsize)
            c.cudnnDropoutBackward(h, desc.desc.handle, t, dy.data.ptr + at, t, dx.data.ptr + at, reserve.data.ptr,
                                   reserve.size)
        return _in_layout_of(cp, dx, user_dy)


def _check_reserves(residuals: tuple, chunks: list, dy: Any) -> None:
    """ValueError unless the saved reserve spaces are those of a forward of dy's size and dtype."""
    wanted = [reserve_bytes(chunk.size, dy.dtype) for chunk in chunks]
    got = [int(r.size) for r in residuals]
    if got != wanted:
        raise ValueError(f"the saved reserve spaces ({got} bytes) are not those of a dropout of {dy.size} "
                         f"{dy.dtype} elements ({wanted} bytes): dy must have the forward result's size and dtype")


def dropout_residuals(x: Any, p: float, seed: Any = None) -> tuple[ArraySpec, ...]:
    """One uint8 reserve space per chunk of x's flat block (cudnnDropoutGetReserveSpaceSize, asked on the
    host); nothing for p = 0 or 1."""
    if p in (0.0, 1.0):
        return ()
    size = math.prod(tuple(x.shape))
    return tuple(ArraySpec((reserve_bytes(chunk.size, x.dtype),), np.dtype(np.uint8)) for chunk in chunk_plan(size))
