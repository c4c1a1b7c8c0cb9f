"""Describing arrays to a library without copying them: axis views, flat blocks, zero extension.

Library-independent helpers of the GPU backends:

* :func:`axis_view` describes an array of any rank, normalised along one axis, as the 4-d tensor
  (outer, C, inner, 1) that the libraries' softmax calls take, using the array's own strides;
* :func:`flat_dense` hands an elementwise call one dense block of memory (any axis order) and an
  output with the same strides;
* :func:`extend` zero-extends an array at the high end of its spatial dims.
"""
from __future__ import annotations

from typing import Any, Sequence

from dnnbind.highlevel.gpu import layout as _layout

Shape = tuple[int, ...]


def _merge(shape: Sequence[int], strides: Sequence[int], axes: range) -> tuple[int, int | None] | None:
    """(size, stride) of ``axes`` merged into one strided dim (stride None when every axis has size 1),
    or None when their memory is not one regular progression."""
    kept = [(shape[i], strides[i]) for i in axes if shape[i] != 1]
    for (_, outer), (n, inner) in zip(kept, kept[1:]):
        if outer != n * inner:
            return None
    size = 1
    for n, _ in kept:
        size *= n
    return size, (kept[-1][1] if kept else None)


def axis_view(shape: Sequence[int], strides: Sequence[int], axis: int) -> tuple[Shape, Shape] | None:
    """(dims, element strides) of the 4-d view (outer, C, inner, 1) of an array, C being ``axis``.

    ``outer`` merges the axes before ``axis`` and ``inner`` those after it; None when either group
    cannot be merged into one strided dim (the caller copies the array first). Dims of size 1 get
    the stride a packed array would give them.
    """
    outer = _merge(shape, strides, range(axis))
    inner = _merge(shape, strides, range(axis + 1, len(shape)))
    if outer is None or inner is None:
        return None
    (n_outer, s_outer), (n_inner, s_inner), c = outer, inner, shape[axis]
    s_inner = 1 if s_inner is None else s_inner
    s_axis = strides[axis] if c != 1 else n_inner * s_inner
    if s_outer is None:
        s_outer = max(c * s_axis, n_inner * s_inner)
    return (n_outer, c, n_inner, 1), (s_outer, s_axis, s_inner, 1)


def is_dense(a: Any) -> bool:
    """Whether ``a`` covers one block of memory from its first element on, without gaps or overlaps."""
    step = a.itemsize
    for stride, n in sorted((s, n) for s, n in zip(a.strides, a.shape) if n != 1):
        if stride != step:
            return False
        step *= n
    return True


def flat_dense(cp: Any, x: Any) -> tuple[Any, Any]:
    """(x, an uninitialised array with x's strides) for an elementwise call that sees one flat block.

    x is copied to C order first unless it already is one dense block that ``empty_like`` reproduces
    (C, Fortran, channels-last and other axis orders).
    """
    if not is_dense(x):
        x = cp.ascontiguousarray(x)
    y = cp.empty_like(x)
    if y.strides != x.strides:
        x = cp.ascontiguousarray(x)
        y = cp.empty_like(x)
    return x, y


def extend(cp: Any, x: Any, shape: Sequence[int], layout: str) -> Any:
    """x zero-extended at the high end to ``shape`` and stored in ``layout`` (x itself, or a copy in
    ``layout``, when the shapes agree). conv_transpose needs it when output_padding >= stride."""
    if tuple(x.shape) == tuple(shape):
        return _layout.in_layout(cp, x, layout)
    out = _layout.zeros(cp, shape, x.dtype, layout)
    out[tuple(slice(0, s) for s in x.shape)] = x
    return out
