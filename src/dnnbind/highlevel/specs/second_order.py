"""Second-order rules: how an op's backward is differentiated, built from the op's own forward and backward.

A rule is ``rule(ops, arrays, cotangents, gg) -> (d_cotangents, d_arrays)``: ``arrays`` the forward's
arrays by name (None where not given), ``cotangents`` its results' cotangents in order (None where not
given), ``gg`` the cotangents of the backward's gradients by array name (None: none). It returns the
gradients of the backward with respect to its cotangents (a list) and to the forward's arrays (by name,
None: zero). ``ops`` is the framework's, and everything it returns is differentiable again:

``ops.forward(arrays, **arguments)``: the op's forward on these arrays (the call's arguments, updated by
``arguments``), its results as a list; ``ops.backward(cotangents, arrays, needs)``: the op's backward,
one gradient per array name in ``needs`` (a dict: name -> gradient); ``ops.zeros_like(a)``;
``ops.gather(a, indices)``: each (N, C) plane of ``a`` flattened and read at ``indices`` (maxpool's).
"""
from __future__ import annotations

from typing import Any


def _add(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else a + b


def bilinear(ops: Any, arrays: dict[str, Any], cotangents: list[Any], gg: dict[str, Any]) -> tuple[list[Any], dict]:
    """An op bilinear in x and w plus a bias b (conv, conv_transpose): y = f(x, w) + b. Its backward is
    dx = f_x(dy, w), dw = f_w(x, dy), db = sum(dy); differentiated: d dy = f(ggx, w) + f(x, ggw) + ggb,
    d x = f_x(dy, ggw), d w = f_w(ggx, dy)."""
    x, w, b = arrays["x"], arrays["w"], arrays.get("b")
    ggx, ggw, ggb = gg.get("dx"), gg.get("dw"), gg.get("db")
    dy = cotangents[0]
    d_dy = None
    if ggx is not None or ggb is not None:
        d_dy = ops.forward({"x": ops.zeros_like(x) if ggx is None else ggx, "w": w, "b": ggb})[0]
    if ggw is not None:
        d_dy = _add(d_dy, ops.forward({"x": x, "w": ggw, "b": None})[0])
    d_x = d_w = None
    if ggw is not None:
        d_x = ops.backward([dy], {"x": x, "w": ggw, "b": None}, ("x",))["x"]
    if ggx is not None:
        d_w = ops.backward([dy], {"x": ggx, "w": w, "b": None}, ("w",))["w"]
    return [d_dy], {"x": d_x, "w": d_w, "b": None}


def linear(ops: Any, arrays: dict[str, Any], cotangents: list[Any], gg: dict[str, Any]) -> tuple[list[Any], dict]:
    """An op linear in x (meanpool): its backward is the transposed map, linear in dy and constant in x;
    differentiated: d dy = f(ggx), d x = 0."""
    ggx = gg.get("dx")
    return [None if ggx is None else ops.forward({**arrays, "x": ggx})[0]], {"x": None}


def selection(ops: Any, arrays: dict[str, Any], cotangents: list[Any], gg: dict[str, Any]) -> tuple[list[Any], dict]:
    """An op that selects entries of x (maxpool): its backward scatters dy to the winners, so
    differentiated: d dy = ggx read at the winners (the forward's gather), d x = 0."""
    ggx = gg.get("dx")
    if ggx is None:
        return [None] * len(cotangents), {"x": None}
    indices = ops.forward(arrays, return_indices=True)[1]
    return [ops.gather(ggx, indices)] + [None] * (len(cotangents) - 1), {"x": None}
