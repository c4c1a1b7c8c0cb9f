"""What every GPU pullback does with its arguments, and the rules it keeps.

A pullback takes the gradient of the forward result (a *cotangent*): it is adapted like the op's
inputs (CuPy, ``__cuda_array_interface__``, DLPack), checked against the result's shape, converted to
the result's dtype (as the reference backend does) and brought into the memory layout the library
call needs. Pullbacks only read what the forward pass saved and allocate fresh outputs on every call,
so calling one twice gives the same result and never changes the saved state.
"""
from __future__ import annotations

from typing import Any, Sequence

from dnnbind.highlevel.dims.checks import check_dtype, check_shape
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import DLPACK_CUDA, as_device_array, cupy


def cotangent(name: str, value: Any, shape: Sequence[int], dtype: Any, layout: str | None = None,
              device: int | None = None, dlpack_devices: tuple[int, ...] = DLPACK_CUDA) -> Any:
    """``value`` as a CuPy array of ``shape`` and ``dtype`` on ``device``, stored in ``layout``
    ("NCHW"/"NHWC"; None: C-contiguous or as given for elementwise ops, see :func:`like`)."""
    cp = cupy()
    a = as_device_array(name, value, dlpack_devices)
    check_dtype(name, a.dtype)
    check_shape(name, a.shape, tuple(shape), "the shape of the forward result")
    if device is not None and a.device.id != device:
        raise ValueError(f"{name} is on device {a.device.id} but the forward pass ran on device {device}")
    if layout is not None:
        return _layout.in_layout(cp, a, layout, dtype)
    return a if a.dtype == dtype else a.astype(dtype)


def like(cp: Any, a: Any, template: Any) -> Any:
    """``a`` with exactly ``template``'s strides (a copy when they differ): elementwise library calls
    treat both as one flat block of memory."""
    if a.strides == template.strides:
        return a
    out = cp.empty_like(template)
    out[...] = a
    return out
