"""One invocation of an op or a pullback on a GPU backend.

``with Call("conv", params, x=x, w=w) as call:`` adapts the arrays to CuPy (no copies), checks that
they share one device, makes that device current for the duration, and re-raises library errors
with the op's description (see :mod:`dnnbind.highlevel.gpu.errors`). Pullbacks pass ``device=`` (the
forward's) and their cotangents.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from dnnbind.highlevel.gpu.arrays import DLPACK_CUDA, as_device_array, common_device, on_device
from dnnbind.highlevel.gpu.errors import op_errors

Params = Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None


class Call:
    """Arrays as CuPy arrays on one device, that device current, library errors described."""

    __slots__ = ("arrays", "device", "_device", "_errors")

    def __init__(self, op: str, params: Params = None, *, device: int | None = None,
                 dlpack_devices: tuple[int, ...] = DLPACK_CUDA, **arrays: Any) -> None:
        self.arrays = {name: as_device_array(name, a, dlpack_devices) for name, a in arrays.items()
                       if a is not None}
        if device is None:
            device = common_device(self.arrays)
        else:
            for name, a in self.arrays.items():
                if a.device.id != device:
                    raise ValueError(f"{name} is on device {a.device.id} but the forward pass ran on "
                                     f"device {device}")
        self.device = device
        self._device = on_device(device)
        self._errors = op_errors(op, self.arrays, params)

    def __getitem__(self, name: str) -> Any:
        """The adapted array ``name`` (None when it was not given)."""
        return self.arrays.get(name)

    def __enter__(self) -> "Call":
        self._device.__enter__()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self._device.__exit__(kind, exc, tb)
        self._errors.__exit__(kind, exc, tb)
