"""GPU test cases for any GPU backend, as data: each runs one public op on device arrays and on the same
numbers as numpy arrays (the reference backend), and compares results and pullback gradients.

Nothing here names a backend: the public ops dispatch by array type, so a backend's GPU test module
(tests/highlevel/miopen/test_gpu.py; the cuDNN backend's can import this module unchanged) picks the
dtypes it supports and passes its array conversion functions to :func:`run_case`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import dnnbind

Tree = Any


@dataclass(frozen=True)
class Case:
    """One op call: ``make(rng, dtype) -> (args, kwargs)`` builds numpy inputs (arrays may nest in lists)."""

    name: str
    op: str
    make: Callable[[np.random.Generator, str], tuple[list, dict]]
    dtypes: tuple[str, ...] = ("float32", "float64")
    tags: frozenset[str] = field(default_factory=frozenset)


def arrays(*shapes: tuple[int, ...], ties: bool = False, fortran: bool = False,
           **kwargs: Any) -> Callable[[np.random.Generator, str], tuple[list, dict]]:
    """Standard-normal inputs of ``shapes`` (None: an absent array) and fixed keyword arguments; ``ties``
    rounds them to integers (pooling windows with equal maxima), ``fortran`` stores them in F order."""
    def make(rng: np.random.Generator, dtype: str) -> tuple[list, dict]:
        out = []
        for s in shapes:
            a = None if s is None else rng.standard_normal(s)
            if a is not None:
                a = np.round(a) if ties else a
                a = np.asfortranarray(a.astype(dtype)) if fortran else a.astype(dtype)
            out.append(a)
        return out, dict(kwargs)
    return make


def batchnorm_inputs(shape: tuple[int, ...], *, running: bool, training: bool, stats_dtype: str | None = None,
                     **kwargs: Any):
    """x, gamma, beta and optionally running statistics (of ``stats_dtype``, by default x's)."""
    def make(rng: np.random.Generator, dtype: str) -> tuple[list, dict]:
        c = shape[1]
        x = (rng.standard_normal(shape) * 2 + 1).astype(dtype)
        gamma, beta = rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype)
        kw = dict(kwargs, training=training)
        if running:
            stats = stats_dtype or dtype
            kw.update(running_mean=rng.standard_normal(c).astype(stats), running_var=rng.random(c).astype(stats) + 0.5)
        return [x, gamma, beta], kw
    return make


def layer_norm_inputs(shape: tuple[int, ...], n: int, *, weight: bool, bias: bool, **kwargs: Any):
    """x with an offset, normalized over its last ``n`` dims, and weight and bias when asked for."""
    def make(rng: np.random.Generator, dtype: str) -> tuple[list, dict]:
        normalized = shape[len(shape) - n:]
        x = (rng.standard_normal(shape) * 2 + 1).astype(dtype)
        kw = dict(kwargs, normalized_shape=normalized)
        kw.update({name: rng.standard_normal(normalized).astype(dtype) for name, given in
                   (("weight", weight), ("bias", bias)) if given})
        return [x], kw
    return make


GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}


def rnn_inputs(mode: str, seq: int, batch: int | None, inp: int, hidden: int, *, layers: int = 1,
               bidirectional: bool = False, bias: bool = True, states: bool = False, lengths: Any = None):
    """x, PyTorch-layout weights (scaled like torch's init), optional h0/c0, and rnn's keywords; ``batch``
    None: one unbatched sequence, x (seq, input) and h0/c0 (layers * directions, hidden)."""
    one = () if batch is None else (batch,)
    def make(rng: np.random.Generator, dtype: str) -> tuple[list, dict]:
        dirs = 2 if bidirectional else 1
        g, scale = GATES[mode] * hidden, 1 / np.sqrt(hidden)
        weights = []
        for i in range(layers * dirs):
            layer_in = inp if i < dirs else hidden * dirs
            entry = [rng.uniform(-scale, scale, (g, layer_in)), rng.uniform(-scale, scale, (g, hidden))]
            entry += [rng.uniform(-scale, scale, g), rng.uniform(-scale, scale, g)] if bias else [None, None]
            weights.append([None if a is None else a.astype(dtype) for a in entry])
        kw: dict[str, Any] = dict(mode=mode, hidden_size=hidden, num_layers=layers, bidirectional=bidirectional,
                                  lengths=lengths)
        if states:
            kw["h0"] = rng.standard_normal((layers * dirs, *one, hidden)).astype(dtype)
            if mode == "lstm":
                kw["c0"] = rng.standard_normal((layers * dirs, *one, hidden)).astype(dtype)
        return [rng.standard_normal((seq, *one, inp)).astype(dtype), weights], kw
    return make


CASES: list[Case] = [
    # convolution: groups, dilation, stride, asymmetric padding, bias, 1-3 spatial dims, flip
    Case("conv2d", "conv", arrays((2, 4, 9, 8), (6, 2, 3, 2), (6,), stride=(2, 1), padding=((1, 2), (0, 1)),
                                  dilation=(1, 2), groups=2)),
    Case("conv1d", "conv", arrays((2, 3, 11), (4, 3, 3), padding=2)),
    Case("conv3d", "conv", arrays((1, 2, 5, 6, 5), (3, 2, 2, 3, 2), (3,), stride=2, padding=1)),
    Case("conv2d_bias_relu", "conv_bias_activation", arrays((2, 3, 7, 7), (4, 3, 3, 3), (4,), padding=1)),
    Case("conv1d_elu", "conv_bias_activation", arrays((2, 3, 9), (4, 3, 3), stride=2, mode="elu", alpha=0.5)),
    Case("conv2d_flip", "conv", arrays((2, 3, 7, 7), (4, 3, 3, 2), dilation=2, padding=1, flip=True)),
    Case("conv2d_depthwise", "conv", arrays((2, 6, 8, 8), (6, 1, 3, 3), (6,), padding=1, groups=6)),
    Case("conv_transpose2d", "conv_transpose", arrays((2, 4, 4, 5), (4, 3, 3, 3), (6,), stride=2, padding=1,
                                                      output_padding=1, groups=2)),
    Case("conv_transpose1d_flip", "conv_transpose", arrays((2, 3, 6), (3, 2, 4), stride=3, padding=((2, 1),),
                                                           flip=True)),
    Case("conv_transpose3d", "conv_transpose", arrays((1, 2, 3, 3, 4), (2, 2, 2, 2, 2), (2,), stride=2)),
    # pooling
    Case("maxpool2d", "maxpool", arrays((2, 3, 9, 9), window=3, stride=2, padding=1)),
    Case("maxpool1d", "maxpool", arrays((2, 3, 10), window=2)),
    Case("maxpool3d", "maxpool", arrays((1, 2, 6, 5, 6), window=2, stride=(2, 1, 2), padding=(1, 0, 1))),
    Case("maxpool2d_asymmetric", "maxpool", arrays((2, 2, 7, 8), window=(3, 2), padding=((1, 0), (0, 1)))),
    Case("maxpool2d_ties", "maxpool", arrays((2, 3, 8, 8), window=3, stride=1, ties=True)),    # first maximum wins
    Case("meanpool2d", "meanpool", arrays((2, 3, 6, 6), window=3, stride=1, padding=1)),
    Case("meanpool2d_exclude_pad", "meanpool", arrays((2, 3, 7, 6), window=3, stride=2, padding=((1, 0), 1),
                                                      count_include_pad=False)),
    Case("meanpool3d_exclude_pad", "meanpool", arrays((1, 2, 4, 4, 6), window=2, padding=1,
                                                      count_include_pad=False)),
    Case("meanpool1d", "meanpool", arrays((2, 3, 9), window=3, stride=2)),
    Case("maxpool2d_ceil", "maxpool", arrays((2, 3, 8, 9), window=3, stride=2, padding=1, ceil_mode=True)),
    Case("meanpool2d_ceil", "meanpool", arrays((2, 3, 8, 9), window=3, stride=2, padding=1, ceil_mode=True)),
    Case("meanpool3d_ceil_exclude_pad", "meanpool", arrays((1, 2, 5, 6, 7), window=(3, 2, 3), stride=(2, 3, 2),
                                                           padding=(1, 1, 0), ceil_mode=True,
                                                           count_include_pad=False)),
    Case("meanpool2d_ceil_divisor", "meanpool", arrays((2, 3, 8, 9), window=3, stride=2, padding=1, ceil_mode=True,
                                                       divisor_override=-4)),
    Case("meanpool3d_divisor_exclude_pad", "meanpool", arrays((1, 2, 5, 6, 7), window=(3, 2, 3), stride=(2, 3, 2),
                                                              padding=((1, 0), 1, 0), count_include_pad=False,
                                                              divisor_override=5)),
    # dilated max pooling runs on CuPy (dnnbind.highlevel.gpu.window_max)
    Case("maxpool1d_dilated_ceil", "maxpool", arrays((2, 3, 13), window=3, stride=2, padding=1, dilation=3,
                                                     ceil_mode=True)),
    Case("maxpool2d_dilated_ties", "maxpool", arrays((2, 3, 9, 10), window=(3, 2), stride=(2, 1),
                                                     padding=((1, 0), (0, 1)), dilation=(2, 3), ties=True)),
    Case("maxpool3d_dilated", "maxpool", arrays((1, 2, 6, 7, 8), window=2, padding=1, dilation=(1, 2, 3))),
    # softmax along any axis
    Case("softmax_axis1", "softmax", arrays((2, 5, 3, 4), axis=1)),
    Case("softmax_last", "softmax", arrays((3, 5, 4), axis=2)),
    Case("softmax_1d", "softmax", arrays((7,), axis=0)),
    Case("logsoftmax", "logsoftmax", arrays((3, 5))),
    Case("logsoftmax_middle", "logsoftmax", arrays((2, 3, 4, 5), axis=-2)),
    # activations
    *[Case(f"activation_{mode}" + "".join(f"_{v}" for v in kw.values()), "activation",
           arrays((4, 6, 3), mode=mode, **kw)) for mode, kw in [
        ("relu", {}), ("sigmoid", {}), ("tanh", {}), ("identity", {}), ("elu", {"alpha": 0.7}),
        ("leaky_relu", {"alpha": 0.2}), ("clipped_relu", {"alpha": 1.5}), ("swish", {}), ("swish", {"alpha": 2.0}),
    ]],
    Case("activation_elu_fortran", "activation", arrays((4, 6, 3), mode="elu", fortran=True)),
    Case("softmax_fortran", "softmax", arrays((4, 6, 3), axis=1, fortran=True)),
    # batch norm
    Case("batchnorm_training", "batchnorm", batchnorm_inputs((4, 3, 5, 6), running=True, training=True,
                                                              momentum=0.3)),
    Case("batchnorm_2d_input", "batchnorm", batchnorm_inputs((8, 5), running=False, training=True, eps=1e-3)),
    Case("batchnorm_3d_spatial", "batchnorm", batchnorm_inputs((2, 3, 3, 4, 5), running=True, training=True)),
    Case("batchnorm_inference", "batchnorm", batchnorm_inputs((4, 3, 5, 6), running=True, training=False)),
    Case("batchnorm_float64_stats", "batchnorm", batchnorm_inputs((4, 3, 5), running=True, training=True,
                                                                   stats_dtype="float64", momentum=0.2),
         dtypes=("float32",)),
    # layer norm: 1 to 3 normalized dims, weight and bias given or not, one slice (no batch dims)
    Case("layer_norm_affine", "layer_norm", layer_norm_inputs((4, 6, 33), 1, weight=True, bias=True)),
    Case("layer_norm_2d_plain", "layer_norm", layer_norm_inputs((3, 5, 4), 2, weight=False, bias=False)),
    Case("layer_norm_3d_weight", "layer_norm", layer_norm_inputs((2, 3, 4, 5), 3, weight=True, bias=False,
                                                                  eps=1e-3)),
    Case("layer_norm_one_slice_bias", "layer_norm", layer_norm_inputs((40,), 1, weight=False, bias=True)),
    # recurrent networks, PyTorch's weights
    Case("lstm_2layer_bidirectional", "rnn", rnn_inputs("lstm", 6, 3, 4, 5, layers=2, bidirectional=True,
                                                          states=True)),
    Case("gru", "rnn", rnn_inputs("gru", 5, 2, 3, 4, states=True)),
    Case("gru_bidirectional_nobias", "rnn", rnn_inputs("gru", 4, 3, 3, 4, bidirectional=True, bias=False)),
    Case("rnn_tanh_2layer", "rnn", rnn_inputs("rnn_tanh", 5, 2, 3, 4, layers=2)),
    Case("rnn_relu", "rnn", rnn_inputs("rnn_relu", 5, 2, 3, 4, states=True)),
    Case("lstm_lengths", "rnn", rnn_inputs("lstm", 6, 3, 4, 5, bidirectional=True, lengths=[6, 2, 4]),
         tags=frozenset({"lengths"})),
    Case("gru_lengths", "rnn", rnn_inputs("gru", 5, 4, 3, 4, layers=2, lengths=[1, 5, 3, 5], states=True),
         tags=frozenset({"lengths"})),
    # unbatched inputs (one sample, no batch axis), as torch.nn.functional takes them
    Case("conv2d_unbatched", "conv", arrays((4, 9, 8), (6, 2, 3, 2), (6,), stride=(2, 1), padding=1, groups=2)),
    Case("conv_transpose1d_unbatched", "conv_transpose", arrays((3, 6), (3, 2, 4), stride=2, padding=1)),
    Case("maxpool2d_unbatched", "maxpool", arrays((3, 9, 9), window=(3, 3), stride=2, padding=1, ceil_mode=True)),
    Case("meanpool1d_unbatched_divisor", "meanpool", arrays((3, 10), window=(3,), stride=2, padding=1,
                                                            divisor_override=2)),
    Case("lstm_unbatched_bidirectional", "rnn", rnn_inputs("lstm", 6, None, 3, 4, bidirectional=True, states=True)),
    Case("gru_unbatched", "rnn", rnn_inputs("gru", 5, None, 3, 4, layers=2)),
]

#: tolerances (rtol = atol) for results and for gradients, per dtype
TOLERANCE = {"float16": (2e-2, 5e-2), "float32": (2e-4, 2e-3), "float64": (1e-9, 1e-8)}


def tree_map(fn: Callable[[Any], Any], tree: Tree) -> Tree:
    """``fn`` applied to every array in nested lists/tuples/dicts (None and scalars kept)."""
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_map(fn, t) for t in tree)
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    return fn(tree) if hasattr(tree, "shape") else tree


def leaves(tree: Tree) -> list[Any]:
    """The arrays in nested lists/tuples/dicts."""
    if isinstance(tree, (list, tuple)):
        return [a for t in tree for a in leaves(t)]
    if isinstance(tree, dict):
        return leaves(list(tree.values()))
    return [tree] if hasattr(tree, "shape") else []


def assert_close(ours: Tree, ref: Tree, tol: float, what: str) -> None:
    """Same nesting, Nones and shapes; values within ``tol`` (relative and absolute)."""
    if isinstance(ref, (list, tuple)):
        assert isinstance(ours, (list, tuple)) and len(ours) == len(ref), what
        for i, (a, b) in enumerate(zip(ours, ref)):
            assert_close(a, b, tol, f"{what}[{i}]")
    elif ref is None:
        assert ours is None, what
    else:
        assert ours is not None and ours.shape == ref.shape, (what, getattr(ours, "shape", ours), ref.shape)
        np.testing.assert_allclose(ours, ref, rtol=tol, atol=tol, err_msg=what)


def _cotangents(rng: np.random.Generator, result: Tree, dtype: str) -> list:
    outputs = list(result) if isinstance(result, tuple) else [result]
    return [None if o is None else rng.standard_normal(o.shape).astype(dtype) for o in outputs]


def run_case(case: Case, dtype: str, to_device: Callable[[Any], Any], to_host: Callable[[Any], Any],
             seed: int = 0, tolerance: tuple[float, float] | None = None) -> None:
    """Run ``case`` on host and device arrays; assert equal results, gradients and in-place updates, that
    device results are device arrays, and that calling the pullback twice gives the same gradients.
    ``tolerance``: (results, gradients), by default :data:`TOLERANCE` of the dtype."""
    rng = np.random.default_rng(seed)
    args, kwargs = case.make(rng, dtype)
    dev_args, dev_kwargs = tree_map(to_device, args), tree_map(to_device, kwargs)
    op = getattr(dnnbind, case.op)
    ref, ref_back = op(*args, **kwargs)
    ours, back = op(*dev_args, **dev_kwargs)
    device_type = type(to_device(np.zeros(1, dtype)))
    assert all(isinstance(a, device_type) for a in leaves(ours)), [type(a) for a in leaves(ours)]
    tol, grad_tol = tolerance or TOLERANCE[dtype]
    assert_close(tree_map(to_host, ours), ref, tol, f"{case.name} result")
    for name, value in kwargs.items():                # arrays an op updates in place (running statistics)
        if hasattr(value, "shape"):
            assert_close(to_host(dev_kwargs[name]), value, tol, f"{case.name} {name} after the call")
    cotangents = _cotangents(rng, ref, dtype)
    ref_grads = ref_back(*cotangents)
    grads = back(*tree_map(to_device, cotangents))
    host_grads = tree_map(to_host, grads)
    assert_close(host_grads, ref_grads, grad_tol, f"{case.name} gradients")
    assert_close(tree_map(to_host, back(*tree_map(to_device, cotangents))), host_grads, 0.0,
                 f"{case.name} second pullback call")
