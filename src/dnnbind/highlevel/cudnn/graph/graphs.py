"""Operation graphs of the cuDNN backend's graph-API primitives, built from dims objects.

A :class:`GraphSpec` names one primitive (``op``), its problem (a ConvDims, PoolDims or NormDims), the
memory layout and the options that change the graph (the activation of a fused convolution); it is
hashable and is the graph part of every plan key. :func:`build` turns it into typed backend descriptors
(``dnnbind.gen.cudnn_backend``): tensors with fixed unique ids per role, the operations, and the
finalized operation graph. Nothing here needs a device or a handle.

Shapes are logical NCHW shapes (one spatial dim is lifted to two, as for the legacy descriptors);
``layout`` gives the strides. Padding goes in as given: the graph API takes pre- and post-paddings, so
asymmetric padding needs no explicit padded copy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from dnnbind.gen import cudnn as c, cudnn_backend as b
from dnnbind.highlevel.dims.checks import check_dtype
from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.dims.pool import PoolDims
from dnnbind.highlevel.gpu.layout import check_layout, lift, lift_spatial, strides
from dnnbind.highlevel.specs.activation import ACTIVATION_DEFAULTS
from dnnbind.runtime.backend import Descriptor

Shape = tuple[int, ...]

#: dtype name -> (cuDNN data type, compute type)
DATA_TYPES = {
    "float16": (c.CUDNN_DATA_HALF, c.CUDNN_DATA_FLOAT),
    "bfloat16": (c.CUDNN_DATA_BFLOAT16, c.CUDNN_DATA_FLOAT),
    "float32": (c.CUDNN_DATA_FLOAT, c.CUDNN_DATA_FLOAT),
    "float64": (c.CUDNN_DATA_DOUBLE, c.CUDNN_DATA_DOUBLE),
}
#: the fused convolution's activations: name -> (pointwise mode, the PointwiseDescriptor attribute that takes
#: the activation op's alpha, None: the mode takes none); alpha's default is the activation spec's
ACTIVATIONS: dict[str, tuple[Any, str | None]] = {
    "identity": (None, None),
    "relu": (c.CUDNN_POINTWISE_RELU_FWD, None),
    "sigmoid": (c.CUDNN_POINTWISE_SIGMOID_FWD, None),
    "tanh": (c.CUDNN_POINTWISE_TANH_FWD, None),
    "elu": (c.CUDNN_POINTWISE_ELU_FWD, "elu_alpha"),
    "gelu": (c.CUDNN_POINTWISE_GELU_FWD, None),
    "swish": (c.CUDNN_POINTWISE_SWISH_FWD, "swish_beta"),
    "leaky_relu": (c.CUDNN_POINTWISE_RELU_FWD, "relu_lower_clip_slope"),
    "clipped_relu": (c.CUDNN_POINTWISE_RELU_FWD, "relu_upper_clip"),
}
#: pooling modes through resample: name -> (resample mode, padding mode)
POOL_MODES = {
    "max": (c.CUDNN_RESAMPLE_MAXPOOL, c.CUDNN_NEG_INF_PAD),
    "mean": (c.CUDNN_RESAMPLE_AVGPOOL, c.CUDNN_ZERO_PAD),                          # count_include_pad=True
    "mean_exclude_pad": (c.CUDNN_RESAMPLE_AVGPOOL_EXCLUDE_PADDING, c.CUDNN_ZERO_PAD),
}
#: the tensors' unique ids by role (a variant pack names its device pointers by these)
UIDS = {"x": 1, "w": 2, "y": 3, "dx": 4, "dw": 5, "dy": 6, "bias": 7, "scale": 8, "mean": 9, "inv_variance": 10,
        "epsilon": 11, "dscale": 12, "dbias": 13, "index": 14, "conv_out": 101, "biased": 102}


@dataclass(frozen=True)
class NormDims:
    """A layer norm over the last three axes of an (N, C, H, W) problem: x is normalized per sample over
    C*H*W values; scale and bias have shape (1, C, H, W), the statistics (N, 1, 1, 1). A caller with
    another ``normalized_shape`` folds its axes to this form first (leading axes into N, the normalized
    ones into C, H, W)."""

    x_shape: Shape
    dtype: str

    def __post_init__(self) -> None:
        shape = tuple(self.x_shape)
        if len(shape) != 4 or not all(isinstance(s, int) and s >= 1 for s in shape):
            raise ValueError(f"x_shape={self.x_shape!r} must be four positive ints (N, C, H, W)")
        object.__setattr__(self, "x_shape", shape)
        object.__setattr__(self, "dtype", check_dtype("x", self.dtype))

    @property
    def stats_shape(self) -> Shape:
        return (self.x_shape[0], 1, 1, 1)

    @property
    def scale_shape(self) -> Shape:
        return (1,) + self.x_shape[1:]


Problem = ConvDims | PoolDims | NormDims


@dataclass(frozen=True)
class GraphSpec:
    """Everything that defines one graph: the primitive, its problem, the layout and options
    (``activation`` and its ``alpha`` for ``conv_bias_activation``, None: the activation spec's default;
    ``mode`` for pooling: max, mean, mean_exclude_pad)."""

    op: str
    dims: Problem
    layout: str = "NCHW"
    activation: str = "relu"
    mode: str = "max"
    alpha: float | None = None

    def __post_init__(self) -> None:
        if self.op not in BUILDERS:
            raise ValueError(f"op={self.op!r} is no graph primitive; they are {', '.join(BUILDERS)}")
        object.__setattr__(self, "layout", check_layout(self.layout))
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r} must be one of {', '.join(ACTIVATIONS)}")
        if self.alpha is not None and ACTIVATIONS[self.activation][1] is None:
            raise ValueError(f"alpha={self.alpha!r} is not used by activation={self.activation!r}; leave it None")
        if self.mode not in POOL_MODES:
            raise ValueError(f"mode={self.mode!r} must be one of {', '.join(POOL_MODES)}")
        kind = OP_DIMS[self.op]
        if not isinstance(self.dims, kind):
            raise TypeError(f"op={self.op!r} takes a {kind.__name__}, not {type(self.dims).__name__}")

    @property
    def dtype(self) -> str:
        return self.dims.dtype

    @property
    def activation_alpha(self) -> float | None:
        """The fused activation's coefficient: ``alpha``, else the activation spec's default (None: none)."""
        if ACTIVATIONS[self.activation][1] is None:
            return None
        value = ACTIVATION_DEFAULTS[self.activation] if self.alpha is None else self.alpha
        assert value is not None, self.activation     # every mode with a coefficient has a default
        return float(value)

    def key(self) -> tuple:
        """A plain, repr-stable description of the graph (for the persistent cache's key)."""
        options = {"conv_bias_activation": ("activation", self.activation, "alpha", self.activation_alpha)}.get(
            self.op) or \
            (("mode", self.mode) if self.op.startswith("pool") else ())
        return (self.op, type(self.dims).__name__, repr(self.dims), self.layout) + tuple(options)


@dataclass
class Graph:
    """A finalized operation graph and the descriptors it holds (kept alive with it)."""

    spec: GraphSpec
    descriptor: Descriptor
    tensors: dict[str, Descriptor] = field(default_factory=dict)
    ops: list[Descriptor] = field(default_factory=list)

    def uids(self) -> dict[str, int]:
        """{role: unique id} of the non-virtual tensors: what a variant pack must give device pointers for."""
        return {role: UIDS[role] for role, t in self.tensors.items() if not t.get("is_virtual")
                and not t.get("is_by_value")}


class _Builder:
    """Collects tensors and operations for one graph."""

    def __init__(self, spec: GraphSpec) -> None:
        self.spec = spec
        self.data_type, self.compute = DATA_TYPES[spec.dtype]
        self.tensors: dict[str, Descriptor] = {}
        self.ops: list[Descriptor] = []

    def tensor(self, role: str, shape: Shape, *, virtual: bool = False, data_type: Any = None,
               by_value: bool = False) -> Descriptor:
        t = b.TensorDescriptor(unique_id=UIDS[role], dimensions=list(shape),
                               strides=list(strides(shape, self.spec.layout)),
                               data_type=self.compute if virtual else (self.data_type if data_type is None else data_type),
                               byte_alignment=16, is_virtual=virtual, is_by_value=by_value).finalize()
        self.tensors[role] = t
        return t

    def op(self, descriptor: Descriptor) -> Descriptor:
        self.ops.append(descriptor.finalize())
        return descriptor

    def graph(self) -> Graph:
        descriptor = b.OperationGraphDescriptor(ops=self.ops).finalize()
        return Graph(self.spec, descriptor, self.tensors, self.ops)


# ------------------------------------------------------------------------------------------------ convolution

def _conv_descriptor(dims: ConvDims, compute: Any) -> Descriptor:
    n = max(dims.spatial_rank, 2)
    return b.ConvolutionDescriptor(
        comp_type=compute, conv_mode=c.CUDNN_CONVOLUTION if dims.flip else c.CUDNN_CROSS_CORRELATION,
        spatial_dims=n, dilations=list(lift_spatial(dims.dilation, 1)),
        filter_strides=list(lift_spatial(dims.stride, 1)), pre_paddings=list(lift_spatial(dims.pad_low, 0)),
        post_paddings=list(lift_spatial(dims.pad_high, 0))).finalize()


def _conv_tensors(g: _Builder, dims: ConvDims, x: str, w: str, y: str) -> tuple:
    return (g.tensor(x, lift(dims.x_shape)), g.tensor(w, lift(dims.w_shape)), g.tensor(y, lift(dims.y_shape)))


def conv_forward(g: _Builder, dims: ConvDims) -> None:
    """y = conv(x, w) (CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)."""
    x, w, y = _conv_tensors(g, dims, "x", "w", "y")
    g.op(b.OperationConvolutionForwardDescriptor(conv_desc=_conv_descriptor(dims, g.compute), x=x, w=w, y=y,
                                                 alpha=[1.0], beta=[0.0]))


def conv_backward_data(g: _Builder, dims: ConvDims) -> None:
    """dx from dy and w (conv_transpose's forward too)."""
    dx, w, dy = _conv_tensors(g, dims, "dx", "w", "dy")
    g.op(b.OperationConvolutionBackwardDataDescriptor(conv_desc=_conv_descriptor(dims, g.compute), dx=dx, w=w,
                                                      dy=dy, alpha=[1.0], beta=[0.0]))


def conv_backward_filter(g: _Builder, dims: ConvDims) -> None:
    """dw from x and dy."""
    x, dw, dy = _conv_tensors(g, dims, "x", "dw", "dy")
    g.op(b.OperationConvolutionBackwardFilterDescriptor(conv_desc=_conv_descriptor(dims, g.compute), x=x, dw=dw,
                                                        dy=dy, alpha=[1.0], beta=[0.0]))


def _pointwise(g: _Builder, mode: Any, x: Descriptor, y: Descriptor, b_: Descriptor | None = None,
               extra: dict[str, float] | None = None) -> None:
    pw = b.PointwiseDescriptor(mode=mode, math_prec=g.compute, **(extra or {})).finalize()
    values: dict[str, Any] = dict(pw_descriptor=pw, xdesc=x, ydesc=y)
    if b_ is not None:
        values["bdesc"] = b_
    g.op(b.OperationPointwiseDescriptor(**values))


def conv_bias_activation(g: _Builder, dims: ConvDims) -> None:
    """y = activation(conv(x, w) + bias): PyTorch's ``relu(conv2d(x, w, b))`` as one fused graph (the
    convolution's and the sum's results are virtual tensors in the compute type)."""
    y_shape = lift(dims.y_shape)
    x, w = g.tensor("x", lift(dims.x_shape)), g.tensor("w", lift(dims.w_shape))
    conv_out = g.tensor("conv_out", y_shape, virtual=True)
    g.op(b.OperationConvolutionForwardDescriptor(conv_desc=_conv_descriptor(dims, g.compute), x=x, w=w,
                                                 y=conv_out, alpha=[1.0], beta=[0.0]))
    bias = g.tensor("bias", (1, y_shape[1]) + (1,) * (len(y_shape) - 2))
    mode, attribute = ACTIVATIONS[g.spec.activation]
    alpha = g.spec.activation_alpha
    extra = {} if attribute is None or alpha is None else {attribute: alpha}
    if mode is None:
        _pointwise(g, c.CUDNN_POINTWISE_ADD, conv_out, g.tensor("y", y_shape), bias)
        return
    biased = g.tensor("biased", y_shape, virtual=True)
    _pointwise(g, c.CUDNN_POINTWISE_ADD, conv_out, biased, bias)
    _pointwise(g, mode, biased, g.tensor("y", y_shape), extra=extra)


# ------------------------------------------------------------------------------------------------ layer norm

def _norm_tensors(g: _Builder, dims: NormDims) -> tuple:
    return (g.tensor("scale", dims.scale_shape), g.tensor("mean", dims.stats_shape, data_type=c.CUDNN_DATA_FLOAT),
            g.tensor("inv_variance", dims.stats_shape, data_type=c.CUDNN_DATA_FLOAT),
            g.tensor("epsilon", (1, 1, 1, 1), data_type=c.CUDNN_DATA_FLOAT, by_value=True))


def layer_norm_forward(g: _Builder, dims: NormDims) -> None:
    """y = (x - mean) * inv_variance * scale + bias, saving mean and inv_variance (training phase)."""
    x = g.tensor("x", dims.x_shape)
    scale, mean, inv_var, eps = _norm_tensors(g, dims)
    g.op(b.OperationNormForwardDescriptor(mode=c.CUDNN_LAYER_NORM, phase=c.CUDNN_NORM_FWD_TRAINING, xdesc=x,
                                          mean_desc=mean, inv_variance_desc=inv_var, scale_desc=scale,
                                          bias_desc=g.tensor("bias", dims.scale_shape), epsilon_desc=eps,
                                          ydesc=g.tensor("y", dims.x_shape)))


def layer_norm_backward(g: _Builder, dims: NormDims) -> None:
    """dx, dscale, dbias from dy, x and the forward's saved statistics."""
    x, dy = g.tensor("x", dims.x_shape), g.tensor("dy", dims.x_shape)
    scale, mean, inv_var, eps = _norm_tensors(g, dims)
    g.op(b.OperationNormBackwardDescriptor(mode=c.CUDNN_LAYER_NORM, xdesc=x, mean_desc=mean,
                                           inv_variance_desc=inv_var, dydesc=dy, scale_desc=scale,
                                           epsilon_desc=eps, dscale_desc=g.tensor("dscale", dims.scale_shape),
                                           dbias_desc=g.tensor("dbias", dims.scale_shape),
                                           dxdesc=g.tensor("dx", dims.x_shape)))


# ------------------------------------------------------------------------------------------------ pooling

def _resample(g: _Builder, dims: PoolDims) -> Descriptor:
    if dims.dilated:
        raise ValueError(f"pooling through resample has no dilation (dilation={dims.dilation})")
    mode, padding = POOL_MODES[g.spec.mode]
    return b.ResampleDescriptor(mode=mode, comp_type=g.compute, nan_propagation=c.CUDNN_PROPAGATE_NAN,
                                padding_mode=padding, spatial_dims=max(dims.spatial_rank, 2),
                                window_dims=list(lift_spatial(dims.window, 1)),
                                strides=list(lift_spatial(dims.stride, 1)),
                                pre_paddings=list(lift_spatial(dims.pad_low, 0)),
                                post_paddings=list(lift_spatial(dims.pad_high, 0))).finalize()


def _pool_y_shape(dims: PoolDims) -> Shape:
    return lift(dims.x_shape[:2] + tuple(dims.out_size))


def takes_index(spec: GraphSpec) -> bool:
    """Whether the pooling graph of ``spec`` has the index tensor: max pooling in NHWC (see
    :func:`pool_forward`)."""
    return spec.op.startswith("pool") and spec.mode == "max" and spec.layout == "NHWC"


def _index(g: _Builder, dims: PoolDims) -> Descriptor:
    """Max pooling's argmax within each window (int8, shaped like y)."""
    return g.tensor("index", _pool_y_shape(dims), data_type=c.CUDNN_DATA_INT8)


def pool_forward(g: _Builder, dims: PoolDims) -> None:
    """y = pool(x) (CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR). Max pooling in NHWC also writes the
    index, which its backward routes dy by (cuDNN 9.28 plans NHWC max-pooling backward only that way,
    and NCHW only through x and y: no NCHW engine takes the index)."""
    values: dict[str, Any] = dict(desc=_resample(g, dims), xdesc=g.tensor("x", lift(dims.x_shape)),
                                  ydesc=g.tensor("y", _pool_y_shape(dims)), alpha=1.0, beta=0.0)
    if takes_index(g.spec):
        values["idxdesc"] = _index(g, dims)
    g.op(b.OperationResampleFwdDescriptor(**values))


def pool_backward(g: _Builder, dims: PoolDims) -> None:
    """dx from dy (CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR); max pooling also takes the forward's
    index (NHWC) or x and y (NCHW), see :func:`pool_forward`."""
    values: dict[str, Any] = dict(desc=_resample(g, dims), dxdesc=g.tensor("dx", lift(dims.x_shape)),
                                  dydesc=g.tensor("dy", _pool_y_shape(dims)), alpha=1.0, beta=0.0)
    if takes_index(g.spec):
        values["idxdesc"] = _index(g, dims)
    elif g.spec.mode == "max":
        values.update(xdesc=g.tensor("x", lift(dims.x_shape)), ydesc=g.tensor("y", _pool_y_shape(dims)))
    g.op(b.OperationResampleBwdDescriptor(**values))


BUILDERS: dict[str, Callable[[_Builder, Any], None]] = {
    "conv_forward": conv_forward, "conv_backward_data": conv_backward_data,
    "conv_backward_filter": conv_backward_filter, "conv_bias_activation": conv_bias_activation,
    "layer_norm_forward": layer_norm_forward, "layer_norm_backward": layer_norm_backward,
    "pool_forward": pool_forward, "pool_backward": pool_backward,
}
OP_DIMS = {op: ConvDims if op.startswith("conv") else NormDims if op.startswith("layer") else PoolDims
           for op in BUILDERS}


def build(spec: GraphSpec) -> Graph:
    """The finalized operation graph of ``spec`` (CudnnError from the library when it refuses the graph)."""
    g = _Builder(spec)
    BUILDERS[spec.op](g, spec.dims)
    return g.graph()
