"""A spread of calls of every op, as a numpy backend takes them: ``(op, arrays, static)`` with the dims
objects built as the public ops build them. Shared by the reference backend's tests against PyTorch and the
cpu backend's tests against the reference. ``kw`` keeps the user's arguments (for PyTorch's functions)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.dims.rnn import RNNDims, TORCH_GATES
from dnnbind.highlevel.ops import ACTIVATION_DEFAULTS


@dataclass
class Case:
    op: str
    arrays: list[Any]
    static: tuple
    kw: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        shapes = "x".join(str(s) for s in np.shape(self.arrays[0]))
        return f"{self.op}-{shapes}-" + "-".join(f"{k}={v}" for k, v in self.kw.items() if k != "weights")


def _a(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape)


def conv_cases(rng: np.random.Generator, torch_padding: bool = False) -> list[Case]:
    """Convolutions: 1 to 3 spatial dims, stride, padding (ints and, unless ``torch_padding``, (low, high)
    pairs), dilation, groups, flip, with and without a bias."""
    configs = [
        ((2, 3, 9), (4, 3, 3), dict(stride=2, padding=1)),
        ((1, 4, 7, 6), (6, 2, 3, 2), dict(padding=(1, 0), dilation=(2, 1), groups=2)),
        ((2, 3, 6, 7), (5, 3, 1, 1), dict(stride=2)),
        ((2, 4, 6, 6), (4, 1, 3, 3), dict(padding=1, groups=4, flip=True)),
        ((1, 2, 5, 4, 4), (3, 2, 2, 3, 2), dict(stride=(1, 2, 1), padding=1, dilation=(1, 1, 2))),
        ((3, 2, 8, 8), (2, 2, 4, 4), dict(stride=3, padding=2, flip=True)),
    ]
    if not torch_padding:
        configs.append(((2, 2, 7, 5), (3, 2, 3, 3), dict(padding=((2, 0), (1, 3)), stride=(2, 1))))
    cases = []
    for i, (xs, ws, kw) in enumerate(configs):
        b = _a(rng, (ws[0],)) if i % 2 == 0 else None
        dims = ConvDims(xs, ws, dtype=np.float64, **kw)
        cases.append(Case("conv", [_a(rng, xs), _a(rng, ws), b], (dims,), kw))
    return cases


def conv_transpose_cases(rng: np.random.Generator, torch_padding: bool = False) -> list[Case]:
    """Transposed convolutions, output_padding (also >= stride, below the dilation) and groups included."""
    configs = [
        ((2, 3, 5), (3, 2, 3), dict(stride=2, padding=1, output_padding=1)),
        ((1, 4, 4, 3), (4, 3, 3, 2), dict(stride=(2, 3), groups=2, dilation=(1, 2))),
        ((2, 2, 3, 3), (2, 3, 4, 4), dict(stride=2, padding=1, flip=True)),
        ((1, 2, 3, 3), (2, 2, 3, 3), dict(stride=1, dilation=3, output_padding=2)),
        ((1, 2, 2, 3, 2), (2, 1, 2, 2, 2), dict(stride=2, output_padding=(1, 0, 1))),
    ]
    if not torch_padding:
        configs.append(((2, 3, 4, 4), (3, 2, 3, 3), dict(stride=2, padding=((1, 0), (0, 2)))))
    cases = []
    for i, (xs, ws, kw) in enumerate(configs):
        dims = ConvDims.transposed(xs, ws, dtype=np.float64, **kw)
        b = _a(rng, (dims.in_channels,)) if i % 2 == 0 else None
        cases.append(Case("conv_transpose", [_a(rng, xs), _a(rng, ws), b], (dims,), kw))
    return cases


def conv_bias_activation_cases(rng: np.random.Generator, torch_padding: bool = False) -> list[Case]:
    """Convolutions with an activation after them: every mode (its alpha default or given), bias or not."""
    cases = []
    for i, (mode, default) in enumerate(ACTIVATION_DEFAULTS.items()):
        conv = conv_cases(rng, torch_padding)[i % 6]
        alpha = None if default is None or i % 2 else 0.3
        dims = conv.static[0]
        cases.append(Case("conv_bias_activation", conv.arrays, (dims, mode, ACTIVATION_DEFAULTS[mode] if alpha is None
                                                                 else alpha), {**conv.kw, "mode": mode, "alpha": alpha}))
    return cases


def maxpool_cases(rng: np.random.Generator) -> list[Case]:
    """Max pooling with padding, stride, dilation and ceil_mode, indices or not; small integers make ties,
    and a few -inf and NaN elements sit among them."""
    configs = [
        ((2, 3, 9), dict(window=3, stride=2, padding=1)),
        ((1, 2, 7, 6), dict(window=(3, 2), stride=2, padding=(1, 1), ceil_mode=True)),
        ((2, 2, 8, 8), dict(window=3, dilation=2, padding=1)),
        ((1, 3, 5, 5), dict(window=2, stride=1)),
        ((1, 2, 5, 6, 5), dict(window=2, stride=(2, 1, 2), ceil_mode=True, dilation=(1, 2, 1))),
        ((1, 1, 6, 6), dict(window=(6, 6))),
    ]
    cases = []
    for i, (xs, kw) in enumerate(configs):
        x = rng.integers(-2, 3, xs).astype(np.float64)
        if i % 3 == 1:
            x.flat[rng.choice(x.size, 3, replace=False)] = [-np.inf, np.nan, -np.inf]
        if i == 0:
            x[0, 0] = -np.inf                      # windows that are all -inf and padding
        window = kw.pop("window")
        dims = PoolDims(xs, window, dtype=np.float64, **kw)
        kw = dict(window=window, **kw)
        cases.append(Case("maxpool", [x], (dims, i % 2 == 0), kw))
    return cases


def meanpool_cases(rng: np.random.Generator) -> list[Case]:
    """Mean pooling: count_include_pad, ceil_mode, divisor_override."""
    configs = [
        ((2, 3, 9), dict(window=3, stride=2, padding=1), True, None),
        ((2, 3, 9), dict(window=4, stride=3, padding=2, ceil_mode=True), False, None),
        ((1, 2, 7, 6), dict(window=(3, 2), stride=2, padding=1, ceil_mode=True), True, None),
        ((1, 2, 7, 6), dict(window=3, padding=1), False, 5),
        ((1, 2, 5, 4, 6), dict(window=2, stride=(2, 1, 3), padding=(1, 0, 1), ceil_mode=True), True, 3),
        ((1, 2, 4, 5), dict(window=(4, 5)), True, None),
    ]
    cases = []
    for xs, kw, include, override in configs:
        window = kw.pop("window")
        dims = PoolDims(xs, window, dtype=np.float64, **kw)
        cases.append(Case("meanpool", [_a(rng, xs)], (dims, include, override),
                          dict(window=window, count_include_pad=include, divisor_override=override, **kw)))
    return cases


def softmax_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for op, (shape, axis) in itertools.product(("softmax", "logsoftmax"), (((3, 5), 1), ((2, 4, 3), 0),
                                                                            ((2, 3, 4, 5), 3), ((7,), 0))):
        x = _a(rng, shape) * 4
        x.flat[1] = -np.inf                            # exp(-inf) = 0: a valid input
        cases.append(Case(op, [x], (axis,), dict(axis=axis)))
    return cases


def activation_cases(rng: np.random.Generator) -> list[Case]:
    """Every mode at its default alpha and at another, with the kinks (0, -0, the ceiling) among the values."""
    cases = []
    for mode, default in ACTIVATION_DEFAULTS.items():
        for alpha in (default, None if default is None else 1.7):
            x = _a(rng, (3, 4, 5)) * 4
            x.flat[:4] = [0.0, -0.0, 6.0, 1.7]
            cases.append(Case("activation", [x], (mode, alpha), dict(mode=mode, alpha=alpha)))
    return cases


def batchnorm_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for shape, training, running in (((4, 3), True, True), ((2, 3, 4, 5), True, True), ((2, 3, 4, 5), True, False),
                                     ((3, 2, 5), False, True), ((2, 2, 3, 2, 2), True, True)):
        c = shape[1]
        stats = [_a(rng, (c,)), np.abs(_a(rng, (c,))) + 0.5] if running else [None, None]
        cases.append(Case("batchnorm", [_a(rng, shape), _a(rng, (c,)), _a(rng, (c,))] + stats,
                          (training, 0.2, 1e-5), dict(training=training)))
    return cases


def layer_norm_cases(rng: np.random.Generator) -> list[Case]:
    """Layer norm over 1 to 3 trailing dims, unbatched included; weight and bias given or not; eps 0."""
    cases = []
    for shape, n, affine, eps in (((4, 6), 1, (True, True), 1e-5), ((2, 3, 5), 2, (False, False), 1e-5),
                                  ((2, 3, 4, 5), 3, (True, False), 1e-3), ((3, 2, 7), 1, (False, True), 0.0),
                                  ((5,), 1, (True, True), 1e-5)):
        normalized = shape[len(shape) - n:]
        w, b = (_a(rng, normalized) if given else None for given in affine)
        cases.append(Case("layer_norm", [_a(rng, shape) * 3 + 1, w, b], (n, eps),
                          dict(normalized_shape=normalized, eps=eps)))
    return cases


def dropout_cases(rng: np.random.Generator) -> list[Case]:
    return [Case("dropout", [_a(rng, shape)], (p, seed), dict(p=p))
            for shape, p, seed in (((4, 5), 0.3, 1), ((2, 3, 4), 0.0, 2), ((6,), 1.0, 3), ((3, 50), 0.8, 4))]


def rnn_weights(rng: np.random.Generator, mode: str, inp: int, hidden: int, layers: int, dirs: int, bias: bool,
                proj: int = 0) -> list[tuple]:
    """Weights in PyTorch's layout, one entry per layer and direction."""
    g, out = len(TORCH_GATES[mode]), proj or hidden
    entries = []
    for layer in range(layers):
        size = inp if layer == 0 else out * dirs
        for _ in range(dirs):
            entry = [_a(rng, (g * hidden, size)) * 0.5, _a(rng, (g * hidden, out)) * 0.5]
            entry += [_a(rng, (g * hidden,)) * 0.5, _a(rng, (g * hidden,)) * 0.5] if bias else [None, None]
            entries.append(tuple(entry + ([_a(rng, (proj, hidden)) * 0.5] if proj else [])))
    return entries


def rnn_cases(rng: np.random.Generator) -> list[Case]:
    """Every mode; layers, directions, biases, lengths, h0 and c0 given or not; LSTM projections."""
    configs = []
    for mode in TORCH_GATES:
        configs += [dict(mode=mode, layers=1, dirs=1, bias=True, lengths=None, state=True),
                    dict(mode=mode, layers=2, dirs=2, bias=True, lengths=[3, 1, 4], state=False),
                    dict(mode=mode, layers=2, dirs=1, bias=False, lengths=[2, 4, 4], state=True)]
    configs += [dict(mode="lstm", layers=2, dirs=2, bias=True, lengths=[4, 2, 3], state=True, proj=2),
                dict(mode="lstm", layers=1, dirs=1, bias=False, lengths=None, state=False, proj=1)]
    cases = []
    T, B, I, H = 4, 3, 3, 3
    for c in configs:
        proj, lstm = c.get("proj", 0), c["mode"] == "lstm"
        weights = rnn_weights(rng, c["mode"], I, H, c["layers"], c["dirs"], c["bias"], proj)
        out = proj or H
        h0 = _a(rng, (c["layers"] * c["dirs"], B, out)) if c["state"] else None
        c0 = _a(rng, (c["layers"] * c["dirs"], B, H)) if c["state"] and lstm else None
        dims = RNNDims((T, B, I), [[None if a is None else a.shape for a in e] for e in weights], mode=c["mode"],
                       hidden_size=H, num_layers=c["layers"], bidirectional=c["dirs"] == 2,
                       h0_shape=None if h0 is None else h0.shape, c0_shape=None if c0 is None else c0.shape,
                       lengths=c["lengths"], dtype=np.float64, proj_size=proj)
        cases.append(Case("rnn", [_a(rng, (T, B, I)), weights, h0, c0], (dims,), dict(c, weights=weights)))
    return cases


def all_cases(seed: int = 0, torch_padding: bool = False) -> list[Case]:
    rng = np.random.default_rng(seed)
    return (conv_cases(rng, torch_padding) + conv_transpose_cases(rng, torch_padding)
            + conv_bias_activation_cases(rng, torch_padding) + maxpool_cases(rng)
            + meanpool_cases(rng) + softmax_cases(rng) + activation_cases(rng) + batchnorm_cases(rng)
            + layer_norm_cases(rng) + dropout_cases(rng) + rnn_cases(rng))


def is_float(a: np.ndarray) -> bool:
    """Whether ``a`` holds floats (bfloat16 included, numpy's kind "V")."""
    return a.dtype.kind == "f" or a.dtype.name == "bfloat16"


def cast(tree: Any, dtype: Any) -> Any:
    """Every float array of a nest of lists/tuples in ``dtype``."""
    if isinstance(tree, np.ndarray):
        return tree.astype(dtype) if is_float(tree) else tree
    if isinstance(tree, (list, tuple)):
        return type(tree)(cast(a, dtype) for a in tree)
    return tree


def copies(tree: Any) -> Any:
    """A deep copy of the arrays of a nest (batch norm updates its running statistics in place)."""
    if isinstance(tree, np.ndarray):
        return tree.copy()
    if isinstance(tree, (list, tuple)):
        return type(tree)(copies(a) for a in tree)
    return tree


def flat(tree: Any) -> list[Any]:
    """The arrays of a nest of tuples/lists, in order (None left out)."""
    if isinstance(tree, (list, tuple)):
        return [a for item in tree for a in flat(item)]
    return [] if tree is None else [tree]


def cotangents_for(result: Any, rng: np.random.Generator) -> tuple:
    """Random cotangents for every float output (maxpool's indices take none)."""
    outs = result if isinstance(result, tuple) else (result,)
    return tuple(None if o is None or not is_float(o) else rng.standard_normal(o.shape).astype(o.dtype)
                 for o in outs)
