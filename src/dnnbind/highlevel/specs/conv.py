"""conv and conv_transpose (a transposed convolution is a convolution's data gradient, ConvDims.transposed),
and conv_bias_activation: a convolution whose result goes through an activation (cuDNN fuses the two)."""
from __future__ import annotations

from typing import Any

from dnnbind.highlevel.dims.checks import check_dtype, check_same_dtype, check_shape
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.specs.activation import ACTIVATION_DEFAULTS, BACKWARD_READS, activation_alpha
from dnnbind.highlevel.specs.base import ArrayArg, Autocast, Chain, EmptyCall, Layout, OpSpec, Output, Param, Unbatching
from dnnbind.highlevel.specs.second_order import bilinear, chain
from dnnbind.highlevel.unbatched import conv_is_unbatched

ARRAYS = (ArrayArg("x", gradient="dx", batched=True), ArrayArg("w", gradient="dw"),
          ArrayArg("b", optional=True, gradient="db", dropped_when_none=True))
OUTPUTS = (Output("y", "dy"),)
#: an x with one dimension fewer than w is one sample
UNBATCHED = Unbatching(lambda arrays, arguments: conv_is_unbatched(arrays["x"].shape, arrays["w"].shape))
#: torch.autocast casts a convolution's inputs to its dtype
AUTOCAST = Autocast()


def _check_conv(x: Any, w: Any, b: Any, *, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
                flip: bool = False) -> tuple:
    check_same_dtype("x", x.dtype, w=w, b=b)
    dims = ConvDims(x.shape, w.shape, stride=stride, padding=padding, dilation=dilation, groups=groups,
                    flip=flip, dtype=x.dtype)
    if b is not None:
        check_shape("b", b.shape, dims.bias_shape, "one value per output channel")
    return (dims,)


def _check_conv_transpose(x: Any, w: Any, b: Any, *, stride: Any = 1, padding: Any = 0, output_padding: Any = 0,
                          dilation: Any = 1, groups: int = 1, flip: bool = False) -> tuple:
    check_same_dtype("x", x.dtype, w=w, b=b)
    dims = ConvDims.transposed(x.shape, w.shape, stride=stride, padding=padding, output_padding=output_padding,
                               dilation=dilation, groups=groups, flip=flip, dtype=x.dtype)
    if b is not None:
        check_shape("b", b.shape, (dims.in_channels,), "one value per output channel")
    return (dims,)


def _gradients(x: Any, w: Any, b: Any) -> Any:
    return lambda zeros: (zeros(x.shape), zeros(w.shape)) + (() if b is None else (zeros(b.shape),))


def _empty_conv(args: tuple) -> EmptyCall:
    x, w, b, dims = args[:4]
    return EmptyCall([dims.y_shape], _gradients(x, w, b))


def _empty_conv_transpose(args: tuple) -> EmptyCall:
    x, w, b, dims = args[:4]
    return EmptyCall([dims.x_shape], _gradients(x, w, b))


def _regroup(zeros: list[Any], static: tuple) -> Any:
    return zeros[0], zeros[1], zeros[2] if len(zeros) > 2 else None


#: channels last where x or w is, as torch's convolutions (its CPU 3-d ones for float32 alone, the dtype
#: they run through oneDNN's channels-last kernels; the others return C order)
CONV_LAYOUT = Layout(channels_last_from=("x", "w"), volume_dtypes=("float32",))

_FEATURES = ("stride", "dilation", "groups", "asymmetric padding", "flip")

CONV = OpSpec(
    name="conv",
    doc="""N-d convolution of x (N, C, *spatial) with w (K, C/groups, *kernel), 1 to 3 spatial dims.

    Cross-correlation like torch.nn.functional.conv{1,2,3}d; ``flip=True`` flips the kernel in every
    spatial dim (true convolution). ``padding``: an int, one int per spatial dim, or one (low, high)
    pair per spatial dim. An x with one dimension fewer than w, (C, *spatial), is one unbatched sample:
    y and dx come back without the batch axis and dy has none. Returns (y, pullback) with pullback(dy)
    -> (dx, dw), or (dx, dw, db) when b is given.
    """,
    params=(Param("x"), Param("w"), Param("b", None), Param("stride", 1, True, kind="per_dim"),
            Param("padding", 0, True, kind="padding"), Param("dilation", 1, True, kind="per_dim"),
            Param("groups", 1, True, "int"), Param("flip", False, True, "bool")),
    arrays=ARRAYS, static=("dims",), outputs=OUTPUTS, check=_check_conv, empty=_empty_conv, regroup=_regroup,
    skippable=True, unbatched=UNBATCHED, features=_FEATURES, samples_independent=True,
    second_order=bilinear, composed_from="convolution", autocast=AUTOCAST, backward_reads=("x", "w"),
    results_layout=CONV_LAYOUT,
    tensor_doc="""N-d convolution (1 to 3 spatial dims) like ``torch.nn.functional.conv{1,2,3}d``; ``flip=True``:
    true convolution. ``padding`` may also be one (low, high) pair per spatial dim. Under torch.autocast
    x, w and b are cast to its dtype first, as torch casts them for its convolutions.""",
)

CONV_TRANSPOSE = OpSpec(
    name="conv_transpose",
    doc="""Transposed convolution (the data gradient of conv), like torch.nn.functional.conv_transpose{1,2,3}d.

    w has PyTorch's transposed layout (C_in, C_out/groups, *kernel); b has C_out entries. ``padding``
    crops the output (low, high per dim as for conv); ``output_padding`` adds to the high side and must
    be smaller than stride or dilation. x (C_in, *spatial), one dimension fewer than w, is one unbatched
    sample, as for :func:`conv`. Returns (y, pullback) like :func:`conv`.
    """,
    params=(Param("x"), Param("w"), Param("b", None), Param("stride", 1, True, kind="per_dim"),
            Param("padding", 0, True, kind="padding"), Param("output_padding", 0, True, kind="per_dim"),
            Param("dilation", 1, True, kind="per_dim"), Param("groups", 1, True, "int"),
            Param("flip", False, True, "bool")),
    arrays=ARRAYS, static=("dims",), outputs=OUTPUTS, check=_check_conv_transpose, empty=_empty_conv_transpose,
    regroup=_regroup, skippable=True, unbatched=UNBATCHED,
    features=_FEATURES + ("output_padding",), samples_independent=True,
    second_order=bilinear, composed_from="convolution", autocast=AUTOCAST, backward_reads=("x", "w"),
    results_layout=CONV_LAYOUT,
    tensor_doc="""Transposed convolution like ``torch.nn.functional.conv_transpose{1,2,3}d`` (w is (C_in, C_out/groups, ...));
    under torch.autocast in its dtype, as :func:`conv`.""",
)


def _check_conv_bias_activation(x: Any, w: Any, b: Any, *, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                                groups: int = 1, flip: bool = False, mode: str = "relu",
                                alpha: float | None = None) -> tuple:
    (dims,) = _check_conv(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups, flip=flip)
    return dims, mode, activation_alpha(mode, alpha, check_dtype("x", x.dtype))


CONV_BIAS_ACTIVATION = OpSpec(
    name="conv_bias_activation",
    doc="""A convolution with bias, then an activation: ``activation(conv(x, w, b, ...), mode, alpha=alpha)``.

    The arguments are :func:`conv`'s, then :func:`activation`'s ``mode`` (relu by default) and ``alpha``;
    PyTorch writes it ``F.relu(F.conv2d(x, w, b, ...))``. The cuDNN backend runs it as one fused graph
    (convolution, bias and activation in one kernel) when nothing is saved for a backward and its graph
    path is on; every backend otherwise runs the two ops one after the other, with the same results.
    Returns (y, pullback) like :func:`conv`.
    """,
    params=(Param("x"), Param("w"), Param("b", None), Param("stride", 1, True, kind="per_dim"),
            Param("padding", 0, True, kind="padding"), Param("dilation", 1, True, kind="per_dim"),
            Param("groups", 1, True, "int"), Param("flip", False, True, "bool"),
            Param("mode", "relu", True, "str"), Param("alpha", None, True, "float | None")),
    arrays=ARRAYS, static=("dims", "mode", "alpha"), outputs=OUTPUTS, check=_check_conv_bias_activation,
    empty=_empty_conv, regroup=_regroup, skippable=True, unbatched=UNBATCHED,
    features=_FEATURES + tuple(ACTIVATION_DEFAULTS), samples_independent=True,
    title=lambda arguments: f"conv_bias_activation({arguments['mode']!r})",
    chain=Chain("conv", "activation", split=lambda static: (static[:1], static[1:]),
                between=lambda static: static[0].y_shape),
    second_order=chain("conv", "activation"), autocast=AUTOCAST, results_layout=CONV_LAYOUT,
    # the convolution's x and w, and the activation's result where its mode reads that (its input is the
    # convolution's result, which no caller holds)
    backward_reads=lambda arguments: ("x", "w", *[n for n in BACKWARD_READS.get(arguments["mode"], ())
                                                  if n == "y"]),
    tensor_doc=""":func:`conv`, then :func:`activation` (``F.relu(F.conv2d(x, w, b, ...))`` for the default mode): one op,
    which the cuDNN backend may run as one fused kernel; under torch.autocast in its dtype, as :func:`conv`.""",
)
