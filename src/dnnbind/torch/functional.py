"""dnnbind's ops on torch tensors; same arguments and semantics as :mod:`dnnbind.highlevel.ops`.

Each runs as a typed ``torch.library`` custom op (:mod:`dnnbind.torch.typed`), differentiable through
``torch.autograd`` and traceable by ``torch.compile`` and ``torch.export``. Unbatched input follows the
high-level ops' rules (:mod:`dnnbind.highlevel.unbatched`): the batch axis is added with ``unsqueeze``
before the op and removed from its results, so autograd and the compilers see plain tensor views.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from dnnbind.highlevel.specs import SPECS
from dnnbind.highlevel.unbatched import conv_is_unbatched, pool_is_unbatched, rnn_is_unbatched
from dnnbind.torch.convert import check_same_dtype, common_device
from dnnbind.torch.eager import call, planned

Tensor = torch.Tensor


def _check(**tensors: Any) -> None:
    """TypeError in torch's terms for a non-tensor, an unsupported dtype or device, or a mix of them."""
    flat: dict[str, Any] = {}
    for name, value in tensors.items():
        if isinstance(value, (list, tuple)):
            for i, entry in enumerate(value):
                for j, a in enumerate(entry if isinstance(entry, (list, tuple)) else (entry,)):
                    flat[f"{name}[{i}][{j}]"] = a
        else:
            flat[name] = value
    if flat.get("x") is None:
        raise TypeError("x must be a torch.Tensor, not None")
    common_device(flat)
    check_same_dtype(flat)


def autocast_dtype(x: Tensor) -> torch.dtype | None:
    """The dtype torch.autocast runs its lower-precision ops in on x's device (None: autocast is off there).
    torch's own conv, conv_transpose and recurrent layers are such ops, so dnnbind's are too."""
    if not torch._C._is_any_autocast_enabled():
        return None
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None


def autocast_float32(x: Tensor) -> Tensor:
    """x as an op torch.autocast runs in float32 takes it (its CPU policy for max_pool3d and avg_pool3d):
    a float16 or bfloat16 x in float32 while autocast is on for x's CPU device, else x as it is."""
    if x.dtype in (torch.float16, torch.bfloat16) and x.device.type == "cpu" and autocast_dtype(x) is not None:
        return x.float()
    return x


def _autocast(x: Tensor, *others: Any, dtype: torch.dtype | None = None) -> tuple[Any, ...]:
    """(x, *others) as torch.autocast's lower-precision ops take them: its floating-point tensors in the
    autocast dtype of x's device, or ``dtype`` when given (as they are when autocast is off); a list entry
    is a list of tensors."""
    if autocast_dtype(x) is None:
        return (x, *others)
    dtype = dtype or autocast_dtype(x)

    def lower(t: Any) -> Any:
        if isinstance(t, (list, tuple)):
            return [lower(u) for u in t]
        return t.to(dtype) if t is not None and t.is_floating_point() and t.dtype != dtype else t
    return tuple(lower(t) for t in (x, *others))


def conv(x: Tensor, w: Tensor, b: Tensor | None = None, *, stride: Any = 1, padding: Any = 0,
         dilation: Any = 1, groups: int = 1, flip: bool = False) -> Tensor:
    """N-d convolution (1 to 3 spatial dims) like ``torch.nn.functional.conv{1,2,3}d``; ``flip=True``:
    true convolution. ``padding`` may also be one (low, high) pair per spatial dim. Under torch.autocast
    x, w and b are cast to its dtype first, as torch casts them for its convolutions."""
    return _convolution("conv", x, w, b, conv_arguments(stride, padding, dilation, groups, flip))


def _convolution(op: str, x: Tensor, w: Tensor, b: Tensor | None, arguments: dict[str, Any]) -> Tensor:
    """A convolution op (conv, conv_transpose, conv_bias_activation) on x, w and b: cast as torch.autocast
    casts a convolution's, planned, or checked and called (x of one dimension fewer than w: one sample)."""
    x, w, b = _autocast(x, w, b)
    done = planned(op, (x, w, b), arguments)
    if done is not None:
        return done[0]
    _check(x=x, w=w, b=b)
    one = conv_is_unbatched(x.shape, w.shape)
    return _unbatch(call(op, _batch(x, one), w, b, **arguments)[0], one)


def conv_bias_activation(x: Tensor, w: Tensor, b: Tensor | None = None, *, stride: Any = 1, padding: Any = 0,
                         dilation: Any = 1, groups: int = 1, flip: bool = False, mode: str = "relu",
                         alpha: float | None = None) -> Tensor:
    """:func:`conv`, then :func:`activation` (``F.relu(F.conv2d(x, w, b, ...))`` for the default mode): one op,
    which the cuDNN backend may run as one fused kernel; under torch.autocast in its dtype, as :func:`conv`."""
    return _convolution("conv_bias_activation", x, w, b,
                        conv_bias_activation_arguments(stride, padding, dilation, groups, flip, mode, alpha))


# The ops' keyword arguments as their eager plans key them (values and order), from the specs: for the
# functions below and for the layers that dnnbind.torch.nn.Sequential runs as one node (fused.py)
conv_arguments = SPECS["conv"].arguments_function
conv_transpose_arguments = SPECS["conv_transpose"].arguments_function
conv_bias_activation_arguments = SPECS["conv_bias_activation"].arguments_function
maxpool_arguments = SPECS["maxpool"].arguments_function
meanpool_arguments = SPECS["meanpool"].arguments_function
batchnorm_arguments = SPECS["batchnorm"].arguments_function
activation_arguments = SPECS["activation"].arguments_function
softmax_arguments = SPECS["softmax"].arguments_function
layer_norm_arguments = SPECS["layer_norm"].arguments_function


def _batch(x: Tensor, one: bool, axis: int = 0) -> Tensor:
    """x with a batch axis of 1 when it is one unbatched sample."""
    return x.unsqueeze(axis) if one else x


def _unbatch(y: Any, one: bool, axis: int = 0) -> Any:
    """A result without the batch axis :func:`_batch` added (None stays None)."""
    return y.squeeze(axis) if one and y is not None else y


def conv_transpose(x: Tensor, w: Tensor, b: Tensor | None = None, *, stride: Any = 1, padding: Any = 0,
                   output_padding: Any = 0, dilation: Any = 1, groups: int = 1, flip: bool = False) -> Tensor:
    """Transposed convolution like ``torch.nn.functional.conv_transpose{1,2,3}d`` (w is (C_in, C_out/groups, ...));
    under torch.autocast in its dtype, as :func:`conv`."""
    return _convolution("conv_transpose", x, w, b,
                        conv_transpose_arguments(stride, padding, output_padding, dilation, groups, flip))


def maxpool(x: Tensor, window: Any, *, stride: Any = None, padding: Any = 0, dilation: Any = 1,
            ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """Max pooling like ``torch.nn.functional.max_pool{1,2,3}d`` (stride defaults to the window); with
    ``return_indices`` (y, indices), indices int64 and without gradient, as torch's."""
    arguments = maxpool_arguments(window, stride, padding, dilation, ceil_mode, return_indices)
    outputs: Sequence[Tensor] | None = planned("maxpool", (x,), arguments)
    if outputs is None:
        _check(x=x)
        one = pool_is_unbatched(x.shape, window=window, stride=stride, padding=padding, dilation=dilation)
        outputs = [_unbatch(o, one) for o in call("maxpool", _batch(x, one), **arguments)]
    return (outputs[0], outputs[1]) if return_indices else outputs[0]


def meanpool(x: Tensor, window: Any, *, stride: Any = None, padding: Any = 0,
             count_include_pad: bool = True, ceil_mode: bool = False, divisor_override: int | None = None) -> Tensor:
    """Average pooling like ``torch.nn.functional.avg_pool{1,2,3}d``; ``divisor_override`` (a non-zero int)
    divides every window's sum by itself, as avg_pool2d/3d's does (here also in 1-d)."""
    arguments = meanpool_arguments(window, stride, padding, count_include_pad, ceil_mode, divisor_override)
    done = planned("meanpool", (x,), arguments)
    if done is not None:
        return done[0]
    _check(x=x)
    one = pool_is_unbatched(x.shape, window=window, stride=stride, padding=padding)
    return _unbatch(call("meanpool", _batch(x, one), **arguments)[0], one)


def softmax(x: Tensor, *, axis: int = 1) -> Tensor:
    """Softmax along ``axis`` (``torch.softmax(x, dim=axis)``)."""
    return _pointwise("softmax", x, softmax_arguments(axis))


def logsoftmax(x: Tensor, *, axis: int = 1) -> Tensor:
    """Log-softmax along ``axis`` (``torch.log_softmax(x, dim=axis)``)."""
    return _pointwise("logsoftmax", x, softmax_arguments(axis))


def activation(x: Tensor, mode: str, *, alpha: float | None = None) -> Tensor:
    """Pointwise activation: relu, sigmoid, tanh, elu, leaky_relu, clipped_relu, swish or identity."""
    return _pointwise("activation", x, activation_arguments(mode, alpha))


def _pointwise(op: str, x: Tensor, arguments: dict[str, Any]) -> Tensor:
    """An op on x alone whose result is its only output: planned, or checked and called."""
    done = planned(op, (x,), arguments)
    if done is not None:
        return done[0]
    _check(x=x)
    return call(op, x, **arguments)[0]


def batchnorm(x: Tensor, gamma: Tensor, beta: Tensor, *, running_mean: Tensor | None = None,
              running_var: Tensor | None = None, training: bool = True, momentum: float = 0.1,
              eps: float = 1e-5) -> Tensor:
    """Batch normalisation over axis 1 like ``torch.nn.functional.batch_norm``; the running statistics
    are updated in place when training (the op returns the new values; they are copied back here, which
    torch.compile and torch.export trace as buffer updates)."""
    arguments = batchnorm_arguments(training, momentum, eps)
    done = planned("batchnorm", (x, gamma, beta, running_mean, running_var), arguments)
    if done is not None:            # an eager call: the running statistics were updated in place
        return done[0]
    _check(x=x, gamma=gamma, beta=beta)
    common_device({"x": x, "running_mean": running_mean, "running_var": running_var})
    outputs = call("batchnorm", x, gamma, beta, running_mean, running_var, **arguments)
    if training:
        # (an eager call updated them in place and returns them as they are)
        copies = [(stat, new) for stat, new in zip([s for s in (running_mean, running_var) if s is not None],
                                                   outputs[1:]) if new is not stat]
        if copies:
            with torch.no_grad():
                for stat, new in copies:
                    stat.copy_(new)
    return outputs[0]


def layer_norm(x: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None, *,
               eps: float = 1e-5) -> Tensor:
    """Layer normalization over the trailing dims ``normalized_shape`` like ``torch.nn.functional.layer_norm``;
    weight and bias optional."""
    if isinstance(normalized_shape, torch.Size):        # a plain tuple keys and encodes as the others do
        normalized_shape = tuple(normalized_shape)
    arguments = layer_norm_arguments(normalized_shape, eps)
    done = planned("layer_norm", (x, weight, bias), arguments)
    if done is not None:
        return done[0]
    _check(x=x, weight=weight, bias=bias)
    return call("layer_norm", x, weight, bias, **arguments)[0]


def dropout(x: Tensor, p: float, *, seed: int | None = None) -> Tensor:
    """Inverted dropout with probability ``p``. Without a seed one is drawn from torch's default
    generator, so ``torch.manual_seed`` makes it reproducible."""
    _check(x=x)
    if seed is None:
        seed_tensor = torch.randint(0, 2**62, (), dtype=torch.int64)
    else:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise TypeError(f"seed={seed!r} must be None or a non-negative int")
        seed_tensor = torch.tensor(seed, dtype=torch.int64)
    return call("dropout", x, seed_tensor, p=p)[0]


def rnn(x: Tensor, weights: Sequence[Sequence[Tensor | None]], *, mode: str = "lstm", hidden_size: int,
        num_layers: int = 1, bidirectional: bool = False, h0: Tensor | None = None, c0: Tensor | None = None,
        lengths: Any = None, proj_size: int = 0) -> tuple[Tensor, Tensor, Tensor | None]:
    """Multi-layer RNN over x (seq, batch, input), or one sequence x (seq, input) with h0/c0 (layers *
    directions, size), with torch.nn.LSTM/GRU/RNN's weights and semantics.

    ``weights[layer * num_directions + direction] = (w_ih, w_hh, b_ih, b_hh)``, with w_hr
    (torch's ``weight_hr_l{k}``) as a 5th tensor for an LSTM with ``proj_size`` > 0; ``lengths`` gives
    packed-sequence semantics. Returns (y, hy, cy), cy None unless ``mode="lstm"``. Under torch.autocast
    in its dtype, as :func:`conv`.
    """
    # torch's CPU GRU is no autocast op: it runs in the input's dtype (its LSTM and RNN run in autocast's)
    x, h0, c0, weights = _autocast(x, h0, c0, weights,
                                   dtype=x.dtype if mode == "gru" and x.device.type == "cpu" else None)
    _check(x=x, h0=h0, c0=c0, weights=weights)
    if isinstance(lengths, torch.Tensor):
        lengths = lengths.tolist()
    one = rnn_is_unbatched(x.shape, h0, c0)        # one sequence: the batch axis is axis 1 of x, h0 and c0
    outputs = call("rnn", _batch(x, one, 1), [list(entry) for entry in weights], _batch_state(h0, one),
                   _batch_state(c0, one), mode=mode, hidden_size=hidden_size, num_layers=num_layers,
                   bidirectional=bidirectional, lengths=lengths, proj_size=proj_size)
    return (_unbatch(outputs[0], one, 1), _unbatch(outputs[1], one, 1),
            _unbatch(outputs[2], one, 1) if len(outputs) > 2 else None)


def _batch_state(state: Tensor | None, one: bool) -> Tensor | None:
    return None if state is None else _batch(state, one, 1)
