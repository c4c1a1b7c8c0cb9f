"""What the GPU dropout backends share: the pullback over chunks, and ordering of RNG states.

Both backends run dropout on the flat block of x in chunks (:mod:`dnnbind.highlevel.gpu.chunks`), each
with its own reserve space (the mask); they differ only in the library's backward call.

RNG states are device memory that a library kernel initialises on one stream and later calls read (and
cuDNN's advance) on possibly another. Every use is ordered: a state buffer that advances is used by one
stream only (its cache key holds the stream), and states shared across streams carry a CUDA event
recorded after their initialisation, which a user on another stream waits for before reading them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

from dnnbind.highlevel.gpu.arrays import DLPACK_CUDA
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.chunks import Chunk
from dnnbind.highlevel.gpu.pullback import cotangent, like

P = TypeVar("P", bound="DropoutPullbackBase")


def ready_event(cp: Any) -> Any:
    """A CUDA event recorded now on the current stream (after the work that made something ready)."""
    event = cp.cuda.Event(disable_timing=True)
    event.record()
    return event


def wait_until_ready(cp: Any, event: Any) -> None:
    """Make the current stream wait (on the device, not the host) for ``event``."""
    cp.cuda.get_current_stream().wait_event(event)


@dataclass(frozen=True)
class DropoutPart:
    """One chunk of one dropout call: the library's descriptors for it and its reserve space (the mask)."""

    chunk: Chunk
    desc: Any           # the dropout descriptor the forward ran with
    tensor: Any         # the backend's flat tensor descriptor of the chunk
    reserve: Any        # CuPy uint8 array
    states: Any = None  # kept alive as long as the pullback


class DropoutPullbackBase:
    """dy -> dx for one dropout call; holds the parts (reserve spaces, descriptors, states) of its chunks.

    A backend subclass sets ``dlpack_devices`` and implements :meth:`_backward` with its library call.
    """

    dlpack_devices: tuple[int, ...] = DLPACK_CUDA

    def __init__(self, cp: Any, y: Any, device: int, p: float, parts: Sequence[DropoutPart] = ()) -> None:
        self._cp, self._y, self._device, self.p = cp, y, device, p
        self._parts = tuple(parts)

    @classmethod
    def trivial(cls: type[P], cp: Any, x: Any, device: int, p: float) -> tuple[Any, P] | None:
        """(y, pullback) for p = 0 (a copy) and p = 1 (zeros), which need no library call; else None."""
        if p == 0.0:
            y = x.copy()
        elif p == 1.0:
            y = cp.zeros_like(x)
        else:
            return None
        return y, cls(cp, y, device, p)     # the pullback reads only y's shape, dtype and strides

    def _backward(self, dy: Any, dx: Any, part: DropoutPart) -> None:
        """dx <- the library's dropout backward of dy over ``part``'s chunk of the flat blocks."""
        raise NotImplementedError

    def __call__(self, dy: Any) -> Any:
        cp, y = self._cp, self._y
        with Call("dropout pullback", {"p": self.p}, device=self._device, dlpack_devices=self.dlpack_devices,
                  dy=dy) as back:
            dy = cotangent("dy", back["dy"], y.shape, y.dtype, None, self._device, self.dlpack_devices)
            if self.p == 0.0:
                return dy.copy()
            if self.p == 1.0:
                return cp.zeros_like(y)
            dy = like(cp, dy, y)
            dx = cp.empty_like(y)
            for part in self._parts:
                self._backward(dy, dx, part)
            return dx

    @property
    def mask(self) -> Any:
        """The kept elements (a new boolean CuPy array): where the pullback of ones is non-zero."""
        if self.p == 1.0:
            return self._cp.zeros(self._y.shape, bool)
        return self(self._cp.ones(self._y.shape, self._y.dtype)) != 0
