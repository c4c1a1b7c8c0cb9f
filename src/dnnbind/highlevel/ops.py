"""The public ops: check arguments (via :mod:`dims`), pick a backend by array type, run it.

Every op returns ``(result, pullback)``. A pullback (a :class:`~dnnbind.highlevel.pullback.Pullback`,
whose repr and docstring name the op and the cotangents it takes) takes the gradient of the result and
returns the gradients of the array inputs; it may be called any number of times and never changes what the
forward pass saved. What the forward saves is its own: changing x, the parameters or the returned result
after the forward never changes what the pullback returns (every backend keeps a copy where it would
otherwise keep the caller's array). Semantics equal ``torch.nn.functional`` for the same arguments unless a
docstring says otherwise. Arrays are float16, bfloat16, float32 or float64 (float16 and bfloat16 are computed
in float32 on the CPU, bfloat16 through the ``ml_dtypes`` package).

Unbatched input, as torch.nn.functional takes it (see :mod:`dnnbind.highlevel.unbatched` for the
rules): conv and conv_transpose take x (C, *spatial) with one dimension fewer than w; maxpool and meanpool
take x (C, *spatial) when an argument given per spatial dimension (a sequence) says the spatial rank;
rnn takes x (seq, input) with h0, c0 (num_layers * num_directions, size). Results, cotangents and the
gradients of those inputs then have no batch axis either.

Edge cases follow one policy for every op and backend (see :mod:`dnnbind.highlevel.edges`): 0-d arrays
give 0-d results where PyTorch takes them; zero-size arrays give empty results and gradients without
running any backend where PyTorch does so, and a ValueError naming the argument elsewhere. ``None`` for
a required array is a TypeError naming it.

Backends receive validated, normalized arguments only (dims objects, resolved activation
coefficients), with the same function names as :mod:`dnnbind.highlevel.reference`.
"""
from __future__ import annotations

import numbers
from typing import Any, Callable, Sequence

import numpy as np

from dnnbind.highlevel.dims.batchnorm import check_batchnorm
from dnnbind.highlevel.dims.checks import (check_divisor_override, check_dtype, check_positive_float,
                                           check_probability, check_real, check_same_dtype, check_shape,
                                           normalize_axis)
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.dims.rnn import RNNDims, rnn_weight_entries
from dnnbind.highlevel.dispatch import adopts_device_arrays, backend_op
from dnnbind.highlevel.plans import Plan, build, find
from dnnbind.highlevel.pullback import Pullback, named_rnn
from dnnbind.highlevel.residual import ArraySpec
from dnnbind.highlevel.unbatched import (Unbatched, conv_is_unbatched, pool_is_unbatched, problem,
                                         rnn_is_unbatched, with_batch)

#: activation modes -> default alpha (None: the mode takes no alpha)
ACTIVATION_DEFAULTS: dict[str, float | None] = {
    "relu": None,
    "sigmoid": None,
    "tanh": None,
    "identity": None,
    "elu": 1.0,            # alpha * (exp(x) - 1) for x <= 0
    "leaky_relu": 0.01,    # negative slope
    "clipped_relu": 6.0,   # ceiling: min(max(x, 0), alpha), relu6 by default
    "swish": 1.0,          # beta: x * sigmoid(beta * x), SiLU by default
}


def _bias(b: Any, dims: ConvDims) -> None:
    if b is not None:
        check_shape("b", b.shape, dims.bias_shape, "one value per output channel")


def _conv_dims(x: Any, w: Any, b: Any, stride: Any, padding: Any, dilation: Any, groups: Any, flip: Any) -> ConvDims:
    check_same_dtype("x", x.dtype, w=w, b=b)
    dims = ConvDims(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                    flip=flip, dtype=x.dtype)
    _bias(b, dims)
    return dims


def _conv_transpose_dims(x: Any, w: Any, b: Any, stride: Any, padding: Any, output_padding: Any, dilation: Any,
                         groups: Any, flip: Any) -> ConvDims:
    check_same_dtype("x", x.dtype, w=w, b=b)
    dims = ConvDims.transposed(x.shape, w.shape, stride=stride, padding=padding,
                               output_padding=output_padding, dilation=dilation, groups=groups, flip=flip,
                               dtype=x.dtype)
    if b is not None:
        check_shape("b", b.shape, (dims.in_channels,), "one value per output channel")
    return dims


def _one_sample(x: Any) -> ArraySpec:
    """x as the batch of one it runs as (an unbatched call's checks see this)."""
    return ArraySpec(with_batch(x.shape), x.dtype)


def _run_and_static(op: str, x: Any, unbatched: Callable[[], bool], static: Callable[[Any], tuple],
                    **others: Any) -> tuple[Any, tuple]:
    """(the backend's run, the checked static arguments) of a conv or pooling call; for an unbatched x (as
    ``unbatched()`` decides, once the arrays are known to be arrays) the run adds and drops the batch axis
    and the checks see the batch of one (:mod:`dnnbind.highlevel.unbatched`)."""
    run = backend_op(op, ("x", "w") if others else ("x",), x=x, **others)
    if not unbatched():
        return run, static(x)
    # the backend's run(x, ..., *static) on one sample: x gets the batch axis, and dx (gradient 0) loses it
    return Unbatched(run, inputs=(0,), gradients=(0,)), problem(lambda: static(_one_sample(x)), x.shape)


def conv(x: Any, w: Any, b: Any = None, *, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
         groups: int = 1, flip: bool = False) -> tuple[Any, Pullback]:
    """N-d convolution of x (N, C, *spatial) with w (K, C/groups, *kernel), 1 to 3 spatial dims.

    Cross-correlation like torch.nn.functional.conv{1,2,3}d; ``flip=True`` flips the kernel in every
    spatial dim (true convolution). ``padding``: an int, one int per spatial dim, or one (low, high)
    pair per spatial dim. An x with one dimension fewer than w, (C, *spatial), is one unbatched sample:
    y and dx come back without the batch axis and dy has none. Returns (y, pullback) with pullback(dy)
    -> (dx, dw), or (dx, dw, db) when b is given.
    """
    arguments = (stride, padding, dilation, groups, flip)
    plan = find("conv", (x, w, b), arguments)         # the per-call path: one key, one lookup
    return plan(x, w, b) if plan is not None else _conv_checked(x, w, b, "conv", arguments)


@adopts_device_arrays("x", "w", "b")
def _conv_checked(x: Any, w: Any, b: Any, op: str, arguments: tuple) -> tuple[Any, Pullback]:
    dims = _conv_dims if op == "conv" else _conv_transpose_dims
    return build(op, (x, w, b), arguments,
                 lambda: Plan(op, *_run_and_static(op, x, lambda: conv_is_unbatched(x.shape, w.shape),
                                                   lambda xs: (dims(xs, w, b, *arguments),), w=w, b=b),
                              _conv_gradients(b)))(x, w, b)


def _conv_gradients(b: Any) -> tuple[str, ...]:
    return ("dx", "dw") if b is None else ("dx", "dw", "db")


def conv_transpose(x: Any, w: Any, b: Any = None, *, stride: Any = 1, padding: Any = 0,
                   output_padding: Any = 0, dilation: Any = 1, groups: int = 1,
                   flip: bool = False) -> tuple[Any, Pullback]:
    """Transposed convolution (the data gradient of conv), like torch.nn.functional.conv_transpose{1,2,3}d.

    w has PyTorch's transposed layout (C_in, C_out/groups, *kernel); b has C_out entries. ``padding``
    crops the output (low, high per dim as for conv); ``output_padding`` adds to the high side and must
    be smaller than stride or dilation. x (C_in, *spatial), one dimension fewer than w, is one unbatched
    sample, as for :func:`conv`. Returns (y, pullback) like :func:`conv`.
    """
    arguments = (stride, padding, output_padding, dilation, groups, flip)
    plan = find("conv_transpose", (x, w, b), arguments)
    return plan(x, w, b) if plan is not None else _conv_checked(x, w, b, "conv_transpose", arguments)


def maxpool(x: Any, window: Any, *, stride: Any = None, padding: Any = 0, dilation: Any = 1,
            ceil_mode: bool = False, return_indices: bool = False) -> tuple[Any, Pullback]:
    """Max pooling over 1 to 3 spatial dims; stride defaults to the window, padding <= window/2.

    Like torch.nn.functional.max_pool{1,2,3}d: ``dilation`` spreads the window (window position k reads
    k * dilation), ``ceil_mode`` rounds the output size up (the last window must start inside x or its
    low padding). Padding never wins (it acts as -inf). Ties: the gradient goes to the first maximum of
    the window in row-major order, as in PyTorch. Returns (y, pullback) with pullback(dy) -> dx; with
    ``return_indices`` ((y, indices), pullback), indices (int64, y's shape) being torch's: the flat index
    of every window's maximum in its (N, C) plane of x.

    Unbatched x: the spatial rank is the length of the arguments given per spatial dimension (window,
    stride, padding, dilation as a list or tuple); x (C, *spatial) with one dimension more than that is
    one sample, and y, indices, dy and dx then have no batch axis. With ints only the spatial rank is
    x.ndim - 2, as for a batch: x of 3 dimensions with ``window=2`` is a batch of 1-d signals (N, C, L);
    ``window=(2, 2)`` makes it one 2-d sample (C, H, W).
    """
    return _pool("maxpool", x, dict(window=window, stride=stride, padding=padding, dilation=dilation,
                                    ceil_mode=ceil_mode, return_indices=return_indices))


def _pool(op: str, x: Any, kwargs: dict[str, Any]) -> tuple[Any, Pullback]:
    plan = find(op, (x,), tuple(kwargs.values()))
    return plan(x) if plan is not None else _pool_checked(x, op, kwargs)


@adopts_device_arrays("x")
def _pool_checked(x: Any, op: str, kwargs: dict[str, Any]) -> tuple[Any, Pullback]:
    per_dim = {k: kwargs[k] for k in ("window", "stride", "padding", "dilation") if k in kwargs}
    return build(op, (x,), tuple(kwargs.values()),
                 lambda: Plan(op, *_run_and_static(op, x, lambda: pool_is_unbatched(x.shape, **per_dim),
                                                   lambda xs: STATIC[op](xs, **kwargs)),
                              ("dx",), first=op == "maxpool"))(x)


def meanpool(x: Any, window: Any, *, stride: Any = None, padding: Any = 0, count_include_pad: bool = True,
             ceil_mode: bool = False, divisor_override: int | None = None) -> tuple[Any, Pullback]:
    """Average pooling (torch's avg_pool); with ``count_include_pad`` the padding counts in the divisor.

    ``ceil_mode`` rounds the output size up as torch does; the windows it adds divide, as in torch, by
    their part inside x and the padding (``count_include_pad``) or inside x alone, never by the part
    past the padding. ``divisor_override`` (a non-zero int, negative allowed) divides every window's
    sum (padding adding zeros) by itself instead, whatever ``count_include_pad`` says, as torch's
    avg_pool2d/3d(divisor_override=...) do (see :meth:`PoolDims.mean_divisor`).

    Unbatched x, as for :func:`maxpool`: with window, stride or padding given per spatial dimension (a
    list or tuple), x (C, *spatial) with one dimension more than their length is one sample (y, dy and
    dx without the batch axis); with ints only, x is a batch (N, C, *spatial) whatever its rank.
    """
    return _pool("meanpool", x, dict(window=window, stride=stride, padding=padding,
                                     count_include_pad=count_include_pad, ceil_mode=ceil_mode,
                                     divisor_override=divisor_override))


def _axis_op(name: str, x: Any, axis: Any) -> tuple[Any, Pullback]:
    plan = find(name, (x,), (axis,))
    return plan(x) if plan is not None else _axis_checked(x, name, axis)


@adopts_device_arrays("x")
def _axis_checked(x: Any, name: str, axis: Any) -> tuple[Any, Pullback]:
    return build(name, (x,), (axis,),
                 lambda: Plan(name, backend_op(name, x=x), _axis_static(x, axis=axis), ("dx",)))(x)


def softmax(x: Any, *, axis: int = 1) -> tuple[Any, Pullback]:
    """Softmax along ``axis`` (any axis, negative allowed). Returns (y, pullback) with pullback(dy) -> dx."""
    return _axis_op("softmax", x, axis)


def logsoftmax(x: Any, *, axis: int = 1) -> tuple[Any, Pullback]:
    """Log-softmax along ``axis`` (any axis, negative allowed). Returns (y, pullback) with pullback(dy) -> dx."""
    return _axis_op("logsoftmax", x, axis)


def activation_alpha(mode: Any, alpha: Any) -> float | None:
    """Check ``mode`` and return the coefficient the backend gets (its default when alpha is None)."""
    if mode not in ACTIVATION_DEFAULTS:
        raise ValueError(f"mode={mode!r} must be one of {', '.join(ACTIVATION_DEFAULTS)}")
    default = ACTIVATION_DEFAULTS[mode]
    if default is None:
        if alpha is not None:
            raise ValueError(f"alpha={alpha!r} is not used by mode={mode!r}; leave it None")
        return None
    return default if alpha is None else check_real("alpha", alpha)


def activation(x: Any, mode: str, *, alpha: float | None = None) -> tuple[Any, Pullback]:
    """Pointwise activation; see :data:`ACTIVATION_DEFAULTS` for each mode's alpha and its default.

    relu, sigmoid, tanh, identity take no alpha; elu alpha=1.0; leaky_relu slope 0.01; clipped_relu
    ceiling 6.0 (relu6); swish beta 1.0 (x * sigmoid(beta * x), SiLU). Derivatives at kinks follow
    PyTorch (relu'(0) = 0, leaky_relu'(0) = slope, clipped_relu' = 0 at 0 and at the ceiling).
    """
    plan = find("activation", (x,), (mode, alpha))
    return plan(x) if plan is not None else _activation_checked(x, mode, alpha)


@adopts_device_arrays("x")
def _activation_checked(x: Any, mode: Any, alpha: Any) -> tuple[Any, Pullback]:
    return build("activation", (x,), (mode, alpha),
                 lambda: Plan(f"activation({mode!r})", backend_op("activation", x=x),
                              _activation_static(x, mode=mode, alpha=alpha), ("dx",)))(x)


def batchnorm(x: Any, gamma: Any, beta: Any, *, running_mean: Any = None, running_var: Any = None,
              training: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> tuple[Any, Pullback]:
    """Batch normalisation per channel (axis 1) of x (N, C) or (N, C, *spatial).

    training=True: batch statistics; running_mean/running_var, when given, are updated IN PLACE with
    ``momentum`` and the unbiased batch variance. training=False: the running statistics are used (and
    required). gamma and beta have x's dtype; the running statistics may have any float dtype.
    Returns (y, pullback) with pullback(dy) -> (dx, dgamma, dbeta).
    """
    arrays, arguments = (x, gamma, beta, running_mean, running_var), (training, momentum, eps)
    plan = find("batchnorm", arrays, arguments)
    if plan is None:
        return _batchnorm_checked(x, gamma, beta, running_mean, running_var, arguments)
    if training and running_mean is not None:     # whether they are writable is no part of the key
        check_writable(running_mean=running_mean, running_var=running_var)
    return plan(*arrays)


@adopts_device_arrays("x", "gamma", "beta", "running_mean", "running_var")
def _batchnorm_checked(x: Any, gamma: Any, beta: Any, running_mean: Any, running_var: Any,
                       arguments: tuple) -> tuple[Any, Pullback]:
    training, momentum, eps = arguments
    arrays = (x, gamma, beta, running_mean, running_var)

    def make() -> Plan:
        run = backend_op("batchnorm", ("x", "gamma", "beta"), x=x, gamma=gamma, beta=beta,
                         running_mean=running_mean, running_var=running_var)
        return Plan("batchnorm", run, _batchnorm_static(*arrays, training=training, momentum=momentum, eps=eps),
                    ("dx", "dgamma", "dbeta"))

    plan = build("batchnorm", arrays, arguments, make)
    if plan.static[0] and running_mean is not None:
        check_writable(running_mean=running_mean, running_var=running_var)
    return plan(*arrays)


def check_writable(**arrays: Any) -> None:
    """ValueError naming the first array that cannot be updated in place (a read-only numpy array)."""
    for name, array in arrays.items():
        if not getattr(getattr(array, "flags", None), "writeable", True):
            others = [n for n in arrays if n != name]
            raise ValueError(f"{name} is read-only, but training updates it in place"
                             + (f" (with {', '.join(others)})" if others else "")
                             + f"; pass a writable array such as {name}.copy()")


def _check_seed(seed: Any) -> Any:
    if seed is None or isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed={seed!r} must be None, a non-negative int or a numpy.random.Generator")
    if seed < 0:
        raise ValueError(f"seed={seed!r} must be non-negative")
    return int(seed)


def dropout(x: Any, p: float, *, seed: Any = None) -> tuple[Any, Pullback]:
    """Inverted dropout: zero each element with probability p, scale the rest by 1/(1 - p).

    p is in [0, 1]; p = 1 gives zeros (as in PyTorch). ``seed`` (an int or a numpy Generator) makes the
    mask reproducible; None draws fresh entropy. Returns (y, pullback) with pullback(dy) -> dx; the
    pullback keeps the mask (``pullback.mask``, read-only, on the reference backend).
    """
    plan = find("dropout", (x,), (p, seed))
    return plan(x) if plan is not None else _dropout_checked(x, p, seed)


@adopts_device_arrays("x")
def _dropout_checked(x: Any, p: Any, seed: Any) -> tuple[Any, Pullback]:
    return build("dropout", (x,), (p, seed),
                 lambda: Plan("dropout", backend_op("dropout", x=x), _dropout_static(x, p=p, seed=seed), ("dx",)))(x)


@adopts_device_arrays("x", "weights", "h0", "c0")
def rnn(x: Any, weights: Sequence[Sequence[Any]], *, mode: str = "lstm", hidden_size: int, num_layers: int = 1,
        bidirectional: bool = False, h0: Any = None, c0: Any = None,
        lengths: Any = None, proj_size: int = 0) -> tuple[tuple[Any, Any, Any], Pullback]:
    """Multi-layer RNN over x (seq, batch, input), with PyTorch's weight layout and semantics.

    mode: rnn_relu, rnn_tanh, lstm (gates i, f, g, o) or gru (gates r, z, n; n = tanh(W_in x + b_in +
    r * (W_hn h + b_hn))). ``weights[layer * num_directions + direction] = (w_ih, w_hh, b_ih, b_hh)``
    exactly as torch.nn.LSTM/GRU/RNN hold them (biases may both be None). ``lengths`` (one per
    sequence, any order) gives packed-sequence semantics: y is zero past each sequence's end and hy/cy
    are taken at its last valid step (the reverse direction starts there). ``proj_size`` > 0 (LSTM
    only, below hidden_size) adds torch's projection h_t = W_hr (o_t * tanh(c_t)): each entry is then
    (w_ih, w_hh, b_ih, b_hh, w_hr), w_hr (proj_size, hidden), and h, y have proj_size features per
    direction where they had hidden_size (c keeps hidden_size); the MIOpen backend has no projection.

    Unbatched, as torch.nn.LSTM/GRU/RNN take it: x (seq, input) is one sequence, h0 and c0 (when given)
    are then (num_layers * num_directions, hidden), and y, hy, cy, their cotangents and dx, dh0, dc0 have
    no batch axis either.

    Returns ((y, hy, cy), pullback): y (seq, batch, num_directions * hidden), hy and cy
    (num_layers * num_directions, batch, hidden), cy None unless LSTM. pullback(dy, dhy=None, dcy=None)
    -> (dx, dh0, dc0, dweights): dh0 always an array (the gradient for the zero state when h0 was
    None), dc0 None unless LSTM, dweights shaped like weights.
    """
    entries = rnn_weight_entries(weights)
    weight_arrays = {f"weights[{i}][{j}]": a for i, entry in enumerate(entries) for j, a in enumerate(entry)}
    run = backend_op("rnn", x=x, h0=h0, c0=c0, **weight_arrays)
    if not rnn_is_unbatched(x.shape, h0, c0):
        (dims,) = _rnn_static(x, entries, h0, c0, mode=mode, hidden_size=hidden_size, num_layers=num_layers,
                              bidirectional=bidirectional, lengths=lengths, proj_size=proj_size)
    else:                    # one sequence: the batch axis (1) goes in after seq, and in h0/c0 after the layers
        (dims,) = problem(lambda: _rnn_static(
            ArraySpec(with_batch(x.shape, 1), x.dtype), entries, _state_spec(h0), _state_spec(c0), mode=mode,
            hidden_size=hidden_size, num_layers=num_layers, bidirectional=bidirectional, lengths=lengths,
            proj_size=proj_size), x.shape)
        run = Unbatched(run, inputs=(0, 2, 3), gradients=(0, 1, 2), axis=1)
    return named_rnn(run(x, [list(entry) for entry in entries], h0, c0, dims), dims.mode)


def _state_spec(state: Any) -> ArraySpec | None:
    """An unbatched h0 or c0 as the batch of one it runs as."""
    return None if state is None else ArraySpec(with_batch(state.shape, 1), state.dtype)


# ---------------------------------------------------------------------------------------------------
# the residual form's static arguments, for frameworks (dnnbind.torch's custom ops): the same checks as
# the public ops above, on arrays or on ArraySpecs (shape and dtype only)


def _conv_static(x: Any, w: Any, b: Any, *, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 flip: bool = False) -> tuple:
    return (_conv_dims(x, w, b, stride, padding, dilation, groups, flip),)


def _conv_transpose_static(x: Any, w: Any, b: Any, *, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                           dilation: Any = 1, groups: int = 1, flip: bool = False) -> tuple:
    return (_conv_transpose_dims(x, w, b, stride, padding, output_padding, dilation, groups, flip),)


def _maxpool_static(x: Any, *, window: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                    ceil_mode: bool = False, return_indices: bool = False) -> tuple:
    if not isinstance(return_indices, (bool, np.bool_)):
        raise TypeError(f"return_indices={return_indices!r} must be a bool")
    return (PoolDims(x.shape, window, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                     dtype=x.dtype), bool(return_indices))


def _meanpool_static(x: Any, *, window: Any, stride: Any = None, padding: Any = 0,
                     count_include_pad: bool = True, ceil_mode: bool = False,
                     divisor_override: int | None = None) -> tuple:
    if not isinstance(count_include_pad, (bool, np.bool_)):
        raise TypeError(f"count_include_pad={count_include_pad!r} must be a bool")
    divisor_override = check_divisor_override(divisor_override)
    return (PoolDims(x.shape, window, stride=stride, padding=padding, ceil_mode=ceil_mode, dtype=x.dtype),
            bool(count_include_pad), divisor_override)


def _axis_static(x: Any, *, axis: int = 1) -> tuple:
    check_dtype("x", x.dtype)
    ndim = len(x.shape)
    if ndim == 0 and isinstance(axis, numbers.Integral) and axis not in (0, -1):
        raise ValueError(f"axis={axis!r} is out of range for a 0-d array x (it takes axis 0 or -1, as in PyTorch)")
    return (normalize_axis(axis, max(ndim, 1)),)


def _activation_static(x: Any, *, mode: str, alpha: float | None = None) -> tuple:
    check_dtype("x", x.dtype)
    return mode, activation_alpha(mode, alpha)


def _batchnorm_static(x: Any, gamma: Any, beta: Any, running_mean: Any = None, running_var: Any = None, *,
                      training: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> tuple:
    check_same_dtype("x", x.dtype, gamma=gamma, beta=beta)
    for name, stat in (("running_mean", running_mean), ("running_var", running_var)):
        if stat is not None:
            check_dtype(name, stat.dtype)
    if not isinstance(training, (bool, np.bool_)):
        raise TypeError(f"training={training!r} must be a bool")
    check_batchnorm(x.shape, gamma.shape, beta.shape, None if running_mean is None else running_mean.shape,
                    None if running_var is None else running_var.shape, bool(training))
    # as torch: any finite momentum (the update is an affine mix either way); eps > 0 in training and
    # eps >= 0 in inference (cuDNN's CUDNN_BN_MIN_EPSILON is 0; a zero variance then gives inf, as in torch)
    momentum = check_real("momentum", momentum)
    if training:
        return True, momentum, check_positive_float("eps", eps)
    eps_value = check_real("eps", eps)
    if eps_value < 0:
        raise ValueError(f"eps={eps!r} must not be negative")
    return False, momentum, eps_value


def _dropout_static(x: Any, *, p: float, seed: Any = None) -> tuple:
    check_dtype("x", x.dtype)
    return check_probability("p", p), _check_seed(seed)


def _rnn_static(x: Any, weights: Any, h0: Any = None, c0: Any = None, *, mode: str = "lstm", hidden_size: int,
                num_layers: int = 1, bidirectional: bool = False, lengths: Any = None, proj_size: int = 0) -> tuple:
    entries = rnn_weight_entries(weights)
    check_same_dtype("x", x.dtype, h0=h0, c0=c0,
                     **{f"weights[{i}][{j}]": a for i, entry in enumerate(entries) for j, a in enumerate(entry)})
    return (RNNDims(x.shape, [tuple(None if a is None else a.shape for a in entry) for entry in entries],
                    mode=mode, hidden_size=hidden_size, num_layers=num_layers, bidirectional=bidirectional,
                    h0_shape=None if h0 is None else h0.shape, c0_shape=None if c0 is None else c0.shape,
                    lengths=lengths, dtype=x.dtype, proj_size=proj_size),)


#: op -> its residual form's static arguments from the arrays (FORMS order, arrays or ArraySpecs) and the
#: public op's keyword arguments, with the public op's checks
STATIC: dict[str, Callable[..., tuple]] = {
    "conv": _conv_static, "conv_transpose": _conv_transpose_static, "maxpool": _maxpool_static,
    "meanpool": _meanpool_static, "softmax": _axis_static, "logsoftmax": _axis_static,
    "activation": _activation_static, "batchnorm": _batchnorm_static, "dropout": _dropout_static,
    "rnn": _rnn_static,
}


def residual_static(op: str, *arrays: Any, **kwargs: Any) -> tuple:
    """The static arguments of ``op``'s residual form (see :mod:`dnnbind.highlevel.residual`) for arrays
    (or ArraySpecs) in FORMS order and the public op's keyword arguments; errors as the public op gives."""
    return STATIC[op](*arrays, **kwargs)
