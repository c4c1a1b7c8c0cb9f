"""Memory layouts of NCHW-shaped arrays: channels first (NCHW) or channels last (NHWC).

The public ops always see the logical NCHW shape (N, C, *spatial). Where the data are stored channels
last (an (N, H, W, C) array viewed as ``x.transpose(0, 3, 1, 2)``, or PyTorch's channels_last tensors
through DLPack), the GPU backends describe the same memory to the library with NHWC strides instead
of copying it, and return results in that layout too.
"""
from __future__ import annotations

from typing import Any, Sequence

Shape = tuple[int, ...]
LAYOUTS = ("NCHW", "NHWC")


def check_layout(layout: Any) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} must be 'NCHW' or 'NHWC'")
    return layout


def to_last(ndim: int) -> tuple[int, ...]:
    """Axis order that moves axis 1 (channels) last: (0, 2, ..., ndim-1, 1)."""
    return (0,) + tuple(range(2, ndim)) + (1,)


def to_first(ndim: int) -> tuple[int, ...]:
    """Inverse of :func:`to_last`: an (N, *spatial, C) array -> its NCHW-shaped view."""
    return (0, ndim - 1) + tuple(range(1, ndim - 1))


def strides(shape: Sequence[int], layout: str) -> Shape:
    """Element strides of a dense array of NCHW-shaped ``shape`` stored in ``layout``."""
    shape = tuple(shape)
    order = range(len(shape)) if layout == "NCHW" else to_last(len(shape))
    out = [0] * len(shape)
    step = 1
    for axis in reversed(tuple(order)):
        out[axis] = step
        step *= shape[axis]
    return tuple(out)


def lift(shape: Sequence[int]) -> Shape:
    """(N, C) -> (N, C, 1, 1) and (N, C, L) -> (N, C, 1, L): the 4-d view the libraries need."""
    shape = tuple(shape)
    if len(shape) == 2:
        return shape + (1, 1)
    if len(shape) == 3:
        return shape[:2] + (1,) + shape[2:]
    return shape


def lift_spatial(values: Sequence[int], fill: int) -> Shape:
    """One-spatial-dim parameters (stride, padding, ...) lifted like :func:`lift`."""
    values = tuple(values)
    return (fill,) + values if len(values) == 1 else values


def has_layout(a: Any, layout: str) -> bool:
    """Whether array ``a`` (NCHW-shaped) is stored densely in ``layout``."""
    if layout == "NCHW" or a.ndim < 3:
        return bool(a.flags.c_contiguous) if layout == "NCHW" else False
    return bool(a.transpose(to_last(a.ndim)).flags.c_contiguous)


def layout_of(a: Any) -> str | None:
    """"NCHW" or "NHWC" for a dense array in that layout (NCHW when both fit), else None."""
    if a.flags.c_contiguous:
        return "NCHW"
    if a.ndim >= 3 and has_layout(a, "NHWC"):
        return "NHWC"
    return None


def empty(cp: Any, shape: Sequence[int], dtype: Any, layout: str) -> Any:
    """An uninitialised CuPy array of NCHW-shaped ``shape`` stored in ``layout``."""
    shape = tuple(shape)
    if layout == "NCHW":
        return cp.empty(shape, dtype)
    physical = tuple(shape[i] for i in to_last(len(shape)))
    return cp.empty(physical, dtype).transpose(to_first(len(shape)))


def zeros(cp: Any, shape: Sequence[int], dtype: Any, layout: str) -> Any:
    out = empty(cp, shape, dtype, layout)
    out.fill(0)
    return out


def in_layout(cp: Any, a: Any, layout: str, dtype: Any = None) -> Any:
    """``a`` itself when it is stored in ``layout`` (and has ``dtype``), else a copy that is."""
    dtype = a.dtype if dtype is None else dtype
    if a.dtype == dtype and has_layout(a, layout):
        return a
    out = empty(cp, a.shape, dtype, layout)
    out[...] = a
    return out
