"""Second-order rules: how an op's backward is differentiated, built from the op's own forward and backward.

A rule is ``rule(ops, arrays, cotangents, gg) -> (d_cotangents, d_arrays)``: ``arrays`` the forward's
arrays by name (None where not given), ``cotangents`` its results' cotangents in order (None where not
given), ``gg`` the cotangents of the backward's gradients by gradient name (None: none). It returns the
gradients of the backward with respect to its cotangents (a list) and to the forward's arrays (by name,
None: zero). A nested array (rnn's weights) is a list of groups in all three, None for an entry not
given or without a cotangent. ``ops`` is the framework's, and everything it returns is differentiable again:

``ops.transformed``: whether a torch.func transform differentiates; ``ops.part(op, arrays)``: the same for another op on ``arrays`` (a chain's parts, with the call's
arguments that op takes); ``ops.forward(arrays, **arguments)``: the op's forward on these arrays (the call's arguments, updated by
``arguments``), its results as a list; ``ops.backward(cotangents, arrays, needs)``: the op's backward,
one gradient per array name in ``needs`` (a dict: name -> gradient); ``ops.zeros_like(a)``;
``ops.gather(a, indices)``: each (N, C) plane of ``a`` flattened and read at ``indices`` (maxpool's);
``ops.vjp(gradients, arrays, cotangents, gg)``: the gradients of ``gradients(arrays, cotangents) -> {name:
array}`` for the cotangents ``gg`` (by ``d`` + name) with respect to the arrays and the cotangents, as
(d_cotangents, d_arrays);
``ops.arguments``: the call's public arguments; ``ops.backend(a)``: the dnnbind backend computing on a's
device (cpu, cudnn, miopen); elementwise ``exp``, ``sigmoid``, ``tanh``, ``relu``, ``where``, reductions
``sum``, ``mean``, and ``matmul``, ``stack``, ``concat``, ``zeros(shape, like)``, ``constant(values, like)``.
Arrays take the operators (+, -, *, **), indexing and slicing, and ``.T``.
"""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.specs import recurrence


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
    """An op linear in x (meanpool; dropout, its mask fixed by its seed): its backward is the transposed
    map, linear in dy and constant in x; differentiated: d dy = f(ggx), d x = 0."""
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


def from_backward(gradients: Any, nests: bool = False) -> Any:
    """A rule from the op's backward written in differentiable operations, ``gradients(ops, arrays,
    cotangents) -> {array name: gradient}``; differentiated by the framework's own autograd
    (``ops.vjp``). For ops whose backward is closed-form in their forward's result (softmax) or in a
    few reductions (batch norm), or is the vjp of their forward written in differentiable operations
    (rnn). ``nests``: ``gradients`` calls other ops' backwards (a chain's), which the framework's vjp may
    have to take another way (see ``ops.vjp``)."""
    def rule(ops: Any, arrays: dict[str, Any], cotangents: list[Any], gg: dict[str, Any]) -> tuple[list[Any], dict]:
        return ops.vjp(lambda a, c: gradients(ops, a, c), arrays, cotangents, gg, nests=nests)
    rule.gradients = gradients          # type: ignore[attr-defined]
    return rule                         # (gradients: the backward itself, which from_result gives)


def from_result(spec: Any, arguments: dict[str, Any]) -> Any:
    """The backward in differentiable operations of a call whose backward reads its result alone (the
    spec's ``backward_reads``: sigmoid's, tanh's, softmax's), ``gradients(ops, arrays, cotangents)`` with
    ``ops.forward`` giving that result: a framework differentiates it further through the result's own
    history, as torch does its sigmoid_backward, and need not keep x. None for any other call."""
    gradients = getattr(spec.second_order, "gradients", None)
    if gradients is None or tuple(spec.reads(arguments)) != (spec.outputs[0].name,):
        return None
    stands = spec.result_stands_for_x
    if stands is not None and stands(arguments):
        return None                     # (its result stands for x itself: relu's rule reads x)
    return gradients


def _softmax(ops: Any, arrays: dict[str, Any], cotangents: list[Any]) -> dict[str, Any]:
    """softmax's backward: dx = y * (dy - sum(dy * y))."""
    y, dy, axis = ops.forward(arrays)[0], cotangents[0], ops.arguments["axis"]
    return {"x": y * (dy - ops.sum(dy * y, (axis,)))}


def _logsoftmax(ops: Any, arrays: dict[str, Any], cotangents: list[Any]) -> dict[str, Any]:
    """logsoftmax's backward: dx = dy - exp(y) * sum(dy)."""
    y, dy, axis = ops.forward(arrays)[0], cotangents[0], ops.arguments["axis"]
    return {"x": dy - ops.exp(y) * ops.sum(dy, (axis,))}


softmax = from_backward(_softmax)
logsoftmax = from_backward(_logsoftmax)


def _batchnorm(ops: Any, arrays: dict[str, Any], cotangents: list[Any]) -> dict[str, Any]:
    """batch norm's backward from its formula, over every axis but the channels (1): with the batch's
    statistics when training, the running ones otherwise."""
    x, gamma, dy = arrays["x"], arrays["gamma"], cotangents[0]
    axes = tuple(a for a in range(len(x.shape)) if a != 1)
    if ops.arguments["training"]:
        mean = ops.mean(x, axes)
        var = ops.mean((x - mean) * (x - mean), axes)
    else:
        mean, var = ops.channels(arrays["running_mean"], x), ops.channels(arrays["running_var"], x)
    invstd = (var + ops.arguments["eps"]) ** -0.5
    xhat = (x - mean) * invstd
    scale = ops.channels(gamma, x) * invstd
    if ops.arguments["training"]:
        dx = scale * (dy - ops.mean(dy, axes) - xhat * ops.mean(dy * xhat, axes))
    else:
        dx = scale * dy
    return {"x": dx, "gamma": ops.sum(dy * xhat, axes, keepdims=False), "beta": ops.sum(dy, axes, keepdims=False)}


batchnorm = from_backward(_batchnorm)


def _layer_norm(ops: Any, arrays: dict[str, Any], cotangents: list[Any]) -> dict[str, Any]:
    """layer norm's backward from its formula: statistics over the trailing ``normalized_shape`` axes,
    weight and bias (when given) shaped like them; their gradients sum over the other (leading) axes."""
    x, weight, dy = arrays["x"], arrays.get("weight"), cotangents[0]
    shape = ops.arguments["normalized_shape"]
    count = 1 if isinstance(shape, int) else len(shape)
    rank = len(x.shape)
    axes, leading = tuple(range(rank - count, rank)), tuple(range(rank - count))
    mean = ops.mean(x, axes)
    centred = x - mean
    invstd = (ops.mean(centred * centred, axes) + ops.arguments["eps"]) ** -0.5
    xhat = centred * invstd
    g = dy if weight is None else dy * weight
    found = {"x": invstd * (g - ops.mean(g, axes) - xhat * ops.mean(g * xhat, axes))}

    def over_leading(a: Any) -> Any:
        return ops.sum(a, leading, keepdims=False) if leading else a
    if weight is not None:
        found["weight"] = over_leading(dy * xhat)
    if arrays.get("bias") is not None:
        found["bias"] = over_leading(dy)
    return found


layer_norm = from_backward(_layer_norm)


def activation(derivatives: dict[str, Any], defaults: dict[str, Any]) -> Any:
    """The activations' rule: ``derivatives[mode](ops, x, y, dy, alpha) -> dx``, each mode's backward
    in differentiable operations (alpha: the call's, or the mode's default)."""
    def gradients(ops: Any, arrays: dict[str, Any], cotangents: list[Any]) -> dict[str, Any]:
        mode, alpha = ops.arguments["mode"], ops.arguments["alpha"]
        alpha = defaults[mode] if alpha is None else alpha
        x = arrays["x"]
        return {"x": derivatives[mode](ops, x, ops.forward(arrays)[0], cotangents[0], alpha)}
    return from_backward(gradients)


def chain(first: str, second: str) -> Any:
    """The rule of an op that is ``first`` then ``second`` (a spec's chain, with one-input ``second``):
    its backward is the first op's backward of the second's backward, both differentiable by their own
    rules, differentiated by the framework's autograd."""
    def gradients(ops: Any, arrays: dict[str, Any], cotangents: list[Any]) -> dict[str, Any]:
        if getattr(ops, "transformed", False):
            raise RuntimeError(f"dnnbind.{ops.op}: a second derivative under torch.func transforms is not "
                               f"supported (its rule nests {first}'s and {second}'s backwards); take it with "
                               f"torch.autograd.grad(..., create_graph=True)")
        inner = ops.part(first, arrays)
        between = inner.forward(arrays)[0]
        outer = ops.part(second, {"x": between})
        d_between = outer.backward([cotangents[0]], {"x": between}, ("x",))["x"]
        return inner.backward([d_between], arrays, tuple(n for n, a in arrays.items() if a is not None))
    return from_backward(gradients, nests=True)


def _rnn(ops: Any, arrays: dict[str, Any], cotangents: list[Any]) -> dict[str, Any]:
    """rnn's backward: the vjp of its forward written in differentiable operations (the recurrence,
    :mod:`.recurrence`), for the cotangents of y, hy and cy given."""
    given = {f"d{name}": c for name, c in zip(("y", "hy", "cy"), cotangents)}
    return ops.vjp(lambda a, _: recurrence.forward(ops, a), arrays, [], given)[1]


def rnn(ops: Any, arrays: dict[str, Any], cotangents: list[Any], gg: dict[str, Any]) -> tuple[list[Any], dict]:
    """rnn's rule (its backward differentiated through the recurrence), refused where a vendor library
    (cuDNN, MIOpen) computes the op, as torch refuses a double backward through its cuDNN RNN."""
    backend = ops.backend(arrays["x"])
    if backend != "cpu":
        raise RuntimeError(f"dnnbind.rnn: double backward is not supported on the {backend} backend (device arrays), "
                           f"as torch does not support it for its cuDNN RNNs; to take a gradient of a gradient, "
                           f"run the RNN's forward on CPU arrays")
    return _rnn_rule(ops, arrays, cotangents, gg)


_rnn_rule = from_backward(_rnn)
