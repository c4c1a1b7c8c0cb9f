"""The dropout pullback both GPU backends share: they differ only in the library's backward call."""
from __future__ import annotations

from typing import Any, TypeVar

from dnnbind.highlevel.gpu.arrays import DLPACK_CUDA
from dnnbind.highlevel.gpu.call import Call
from dnnbind.highlevel.gpu.pullback import cotangent, like

P = TypeVar("P", bound="DropoutPullbackBase")


class DropoutPullbackBase:
    """dy -> dx for one dropout call; holds the reserve space (the mask), the descriptor and the states.

    A backend subclass sets ``dlpack_devices`` and implements :meth:`_backward` with its library call.
    """

    dlpack_devices: tuple[int, ...] = DLPACK_CUDA

    def __init__(self, cp: Any, y: Any, device: int, p: float, desc: Any = None, tensor: Any = None,
                 reserve: Any = None, states: Any = None) -> None:
        self._cp, self._y, self._device, self.p = cp, y, device, p
        self._desc, self._tensor, self._reserve, self._states = desc, tensor, reserve, states

    @classmethod
    def trivial(cls: type[P], cp: Any, x: Any, device: int, p: float) -> tuple[Any, P] | None:
        """(y, pullback) for p = 0 (a copy) and p = 1 (zeros), which need no library call; else None."""
        if p == 0.0:
            y = x.copy()
        elif p == 1.0:
            y = cp.zeros_like(x)
        else:
            return None
        return y, cls(cp, y, device, p)

    def _backward(self, dy: Any, dx: Any) -> None:
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
            self._backward(dy, dx)
            return dx

    @property
    def mask(self) -> Any:
        """The kept elements (a new boolean CuPy array): where the pullback of ones is non-zero."""
        if self.p == 1.0:
            return self._cp.zeros(self._y.shape, bool)
        return self(self._cp.ones(self._y.shape, self._y.dtype)) != 0
