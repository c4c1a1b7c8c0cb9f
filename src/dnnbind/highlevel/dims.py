"""Shape logic and argument checking shared by every backend.

Every public op checks its arguments here, once, before any backend runs, so that the numpy reference
backend and the GPU backends agree on what is legal and on the wording of the error. The objects are
frozen and hashable: the GPU backends use :meth:`ConvDims.key` and friends as plan-cache keys.

Nothing in this module touches array data; it sees shapes, dtypes and plain Python values only.
"""
from __future__ import annotations

import functools
import itertools

import numbers
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Sequence

import numpy as np

SUPPORTED_DTYPES = ("float16", "bfloat16", "float32", "float64")
RNN_MODES = ("rnn_relu", "rnn_tanh", "lstm", "gru")
#: rnn mode -> gate order of PyTorch's weights (the public layout; "h" is a plain RNN's single gate)
TORCH_GATES = {"rnn_relu": ("h",), "rnn_tanh": ("h",), "lstm": ("i", "f", "g", "o"), "gru": ("r", "z", "n")}
_GATES = {mode: len(gates) for mode, gates in TORCH_GATES.items()}

Shape = tuple[int, ...]


# ----------------------------------------------------------------------------------------------
# small checks


def check_dtype(name: str, dtype: Any) -> str:
    """Return the canonical name of a supported float dtype; TypeError naming ``name`` otherwise."""
    try:
        known = _NAMES.get(dtype)      # numpy's own float dtypes, by one lookup (dtype.name takes microseconds)
    except TypeError:                  # unhashable
        known = None
    if known is not None:
        return known
    try:
        numpy_form = np.dtype(dtype)
        canonical = numpy_form.name
    except TypeError:
        numpy_form, canonical = None, str(dtype)
    if canonical not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {canonical}; dnnbind supports float16, bfloat16, float32 and float64")
    if numpy_form is not None and not numpy_form.isnative:
        raise TypeError(f"{name} has dtype {numpy_form.str}, {canonical} in non-native byte order, which the kernels "
                        f"cannot read; convert it first, for example {name}.astype({canonical!r})")
    return canonical


#: numpy's float16, float32 and float64 dtype objects -> their names (bfloat16 goes the long way)
_NAMES: dict[Any, str] = {np.dtype(n): n for n in ("float16", "float32", "float64")}


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a supported dtype name; bfloat16's comes from ``ml_dtypes`` (numpy has none)."""
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as exc:
            raise ImportError("bfloat16 needs the ml_dtypes package: pip install ml_dtypes") from exc
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def check_same_dtype(ref_name: str, ref_dtype: Any, **others: Any) -> str:
    """Check that every array in ``others`` (None skipped) has the dtype of ``ref_name``."""
    ref = check_dtype(ref_name, ref_dtype)
    for name, array in others.items():
        if array is None:
            continue
        dtype = check_dtype(name, array.dtype)
        if dtype != ref:
            raise TypeError(f"{name} has dtype {dtype} but {ref_name} has dtype {ref}; "
                            f"convert one of them (for example {name}.astype({ref_name}.dtype))")
    return ref


def check_shape(name: str, shape: Sequence[int], expected: Sequence[int], why: str = "") -> None:
    """ValueError naming ``name`` unless ``shape == expected``."""
    if tuple(shape) != tuple(expected):
        suffix = f" ({why})" if why else ""
        raise ValueError(f"{name} has shape {tuple(shape)} but must have shape {tuple(expected)}{suffix}")


def normalize_axis(axis: Any, ndim: int, name: str = "axis") -> int:
    """Return ``axis`` as a non-negative int for an array of ``ndim`` dimensions."""
    axis = _int(name, axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}={axis} is out of range for an array with {ndim} dimensions")
    return axis % ndim


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} must be an int, not {type(value).__name__}")
    return int(value)


def _float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={value!r} must be a real number, not {type(value).__name__}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name}={value!r} must be finite")
    return value


def check_probability(name: str, value: Any) -> float:
    """A float in [0, 1] (dropout's p; 1 is allowed and drops everything)."""
    p = _float(name, value)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}={value!r} must be in [0, 1]")
    return p


def check_positive_float(name: str, value: Any) -> float:
    v = _float(name, value)
    if v <= 0:
        raise ValueError(f"{name}={value!r} must be positive")
    return v


def check_real(name: str, value: Any) -> float:
    """A finite real number (activation coefficients)."""
    return _float(name, value)


def check_divisor_override(value: Any) -> int | None:
    """None, or a non-zero int (negative allowed): mean pooling's ``divisor_override``, checked as
    torch.nn.functional.avg_pool2d checks it (a bool or a float is a TypeError there too; 0 fails there
    with "divisor must be not zero")."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"divisor_override={value!r} must be None or a non-zero int, not {type(value).__name__}")
    if value == 0:
        raise ValueError("divisor_override=0 must be a non-zero int (None: divide by the count of elements averaged)")
    return int(value)


def window_slices(dims: Any, position: Sequence[int]) -> tuple[slice, ...]:
    """Index into a padded (N, C, *spatial) array of the elements that window or kernel ``position`` reads
    for every output (position k of a dim reads k * dilation), for ConvDims and PoolDims alike (both have
    ``dilation``, ``stride`` and ``out_size``)."""
    return (slice(None), slice(None)) + tuple(
        slice(k * d, k * d + s * (o - 1) + 1, s) for k, d, s, o in zip(position, dims.dilation, dims.stride,
                                                                       dims.out_size))


def interior_slices(dims: Any) -> tuple[slice, ...]:
    """Index of x inside its padded (N, C, *spatial) array, for ConvDims and PoolDims alike."""
    return (slice(None), slice(None)) + tuple(slice(a, a + s) for a, s in zip(dims.pad_low, dims.x_shape[2:]))


def _per_dim(name: str, value: Any, n: int, *, minimum: int) -> Shape:
    """An int, or one int per spatial dimension, each >= minimum."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name}={value!r} must be an int or {n} ints (one per spatial dimension)")
        out = tuple(_int(name, v) for v in value)
    else:
        out = (_int(name, value),) * n
    if any(v < minimum for v in out):
        what = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{name}={value!r} must be {what}")
    return out


def _padding(name: str, value: Any, n: int) -> tuple[Shape, Shape]:
    """An int, one int per spatial dim, or one (low, high) pair per spatial dim -> (low, high)."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name}={value!r} must be an int, {n} ints or {n} (low, high) pairs "
                             f"(one per spatial dimension)")
        low, high = [], []
        for item in value:
            if isinstance(item, (list, tuple)):
                if len(item) != 2:
                    raise ValueError(f"{name}={value!r}: each entry must be an int or a (low, high) pair")
                low.append(_int(name, item[0]))
                high.append(_int(name, item[1]))
            else:
                low.append(_int(name, item))
                high.append(_int(name, item))
        lo, hi = tuple(low), tuple(high)
    else:
        lo = hi = (_int(name, value),) * n
    if any(v < 0 for v in lo + hi):
        raise ValueError(f"{name}={value!r} must be non-negative")
    return lo, hi


def _check_array_shape(name: str, shape: Sequence[int], ranks: Sequence[int], layout: str,
                       empty_axes: Sequence[int] = (), empty_why: str = "") -> Shape:
    """The shape as ints, checked for its rank; a zero-size dimension is allowed on ``empty_axes`` only
    (the zero-size policy: where PyTorch gives an empty result, so does dnnbind, see :mod:`edges`)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) not in ranks:
        raise ValueError(f"{name} has shape {shape} ({len(shape)} dimensions) but must have "
                         f"{ranks[0]} to {ranks[-1]} dimensions {layout}")
    bad = [axis for axis, s in enumerate(shape) if s == 0 and axis not in empty_axes]
    if bad:
        allowed = f"; only {empty_why} may be 0" if empty_why else ""
        raise ValueError(f"{name} has shape {shape}: a zero-size dimension {bad[0]} is not supported{allowed}")
    return shape


def _conv_shapes(x_shape: Sequence[int], w_shape: Sequence[int], groups: Any,
                 w_layout: str) -> tuple[Shape, Shape, int, int]:
    """The checks conv and conv_transpose share: ranks of x and w, and groups dividing x's channels."""
    x = _check_array_shape("x", x_shape, (3, 4, 5), "(N, C, 1 to 3 spatial dimensions)", (0,), "the batch N")
    w = tuple(int(s) for s in w_shape)
    if len(w) != len(x):
        raise ValueError(f"w has shape {w} ({len(w)} dimensions) but x has shape {x}; w must be {w_layout} with "
                         f"{len(x) - 2} spatial dimensions like x")
    _check_array_shape("w", w, (len(x),), "")
    groups = _int("groups", groups)
    if groups < 1:
        raise ValueError(f"groups={groups} must be positive")
    if x[1] % groups:
        raise ValueError(f"groups={groups} does not divide the {x[1]} input channels of x")
    return x, w, len(x) - 2, groups


#: bytes one kernel or window offset costs as a Python tuple in a list (the reference backend loops over them)
OFFSET_BYTES = 120


def _prod(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _spatial_out(size: Shape, lo: Shape, hi: Shape, extent: Shape, stride: Shape) -> Shape:
    return tuple((s + a + b - e) // st + 1 for s, a, b, e, st in zip(size, lo, hi, extent, stride))


def _pool_out(size: int, lo: int, hi: int, extent: int, stride: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size in one dim; with ``ceil_mode`` rounded up, as long as the last
    window starts inside x or its low padding."""
    span = size + lo + hi - extent
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + lo:
        out -= 1
    return out


# ----------------------------------------------------------------------------------------------
# convolution


class _Problem:
    """What ConvDims, PoolDims and RNNDims share: identity by :meth:`key` (the kind and every field),
    which keys the plan and layout caches. The key and its hash are computed once per object, and
    equal objects share the key tuple of the first of them made (:data:`_FIRST`), so that comparing
    two of them is one identity check. A cache lookup that meets an equal but other object (a plan built again after the plan
    cache was cleared, a torch layer's plan beside a public call's) compares them; a dataclass's
    generated ``__eq__`` read every field again in Python there, about 1 us a lookup and six lookups
    a convolution call."""

    _KIND: ClassVar[str] = ""

    def key(self) -> tuple:
        """Hashable identity of the problem, for plan caches."""
        cached = self.__dict__.get("_key")
        if cached is None:
            cached = (self._KIND,) + tuple(getattr(self, f.name) for f in fields(self))  # type: ignore[arg-type]
            first = _first(cached, self)
            cached = self.__dict__["_key"] = cached if first is self else first.key()
        return cached

    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = self.__dict__["_hash"] = hash(self.key())
        return cached

    def __getstate__(self) -> dict[str, Any]:
        """The fields without the cached key and hash: a string's hash differs from process to process,
        so a problem pickled in one must hash anew in another."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_key", "_hash")}

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not type(self):
            return NotImplemented
        mine, theirs = self.key(), other.key()  # type: ignore[attr-defined]
        return mine is theirs or mine == theirs


def _first(key: tuple, problem: _Problem) -> _Problem:
    """The first problem made with ``key`` (``problem`` when it is the first)."""
    if len(_FIRST) >= _FIRST_MAX:
        _FIRST.clear()
    return _FIRST.setdefault(key, problem)


#: the first problem made per key (bounded: cleared when full; equal keys then compare item by item)
_FIRST: dict[tuple, _Problem] = {}
_FIRST_MAX = 4096


def interned(static: tuple) -> tuple:
    """``static`` (an op's static arguments) with each problem replaced by the first equal one made:
    the plans of equal problems (a plan built again, the torch adapter's beside the public op's) then
    hold one object, and the caches keyed by it find it by identity."""
    if not any(isinstance(a, _Problem) for a in static):
        return static
    return tuple(_first(a.key(), a) if isinstance(a, _Problem) else a for a in static)


@dataclass(frozen=True, init=False, eq=False)
class ConvDims(_Problem):
    """Geometry of one N-d convolution (cross-correlation, or true convolution with ``flip``).

    Built from the shapes of x (N, C, *spatial) and w (K, C/groups, *kernel) and the user's stride,
    padding, dilation and groups; every field is normalized to one value per spatial dimension.
    The constructor raises ValueError/TypeError naming the offending argument.

    A transposed convolution is described by :meth:`transposed`: the ConvDims of the *forward*
    convolution whose input has conv_transpose's output shape; conv_transpose is that convolution's
    data gradient. ``output_padding`` is non-zero only there.
    """

    _KIND = "conv"

    x_shape: Shape
    w_shape: Shape
    stride: Shape
    dilation: Shape
    pad_low: Shape
    pad_high: Shape
    groups: int
    flip: bool
    dtype: str
    output_padding: Shape

    def __init__(self, x_shape: Sequence[int], w_shape: Sequence[int], *, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, flip: bool = False,
                 dtype: Any = "float32", output_padding: Any = 0) -> None:
        x_shape, w_shape, n, groups = _conv_shapes(x_shape, w_shape, groups,
                                                   "(out_channels, in_channels/groups, *kernel)")
        if w_shape[0] % groups:
            raise ValueError(f"groups={groups} does not divide the {w_shape[0]} output channels of w "
                             f"(w.shape[0])")
        if w_shape[1] * groups != x_shape[1]:
            raise ValueError(f"x has {x_shape[1]} channels but w.shape[1] * groups = {w_shape[1]} * {groups} "
                             f"= {w_shape[1] * groups}")
        if not isinstance(flip, (bool, np.bool_)):
            raise TypeError(f"flip={flip!r} must be a bool")
        stride = _per_dim("stride", stride, n, minimum=1)
        dilation = _per_dim("dilation", dilation, n, minimum=1)
        lo, hi = _padding("padding", padding, n)
        op = _per_dim("output_padding", output_padding, n, minimum=0)
        dtype = check_dtype("x", dtype)
        extent = tuple(d * (k - 1) + 1 for d, k in zip(dilation, w_shape[2:]))
        padded = tuple(s + a + b for s, a, b in zip(x_shape[2:], lo, hi))
        if any(p < e for p, e in zip(padded, extent)):
            raise ValueError(f"the output would be empty: x's spatial size {x_shape[2:]} padded to {padded} is "
                             f"smaller than the kernel {w_shape[2:]} dilated to {extent} "
                             f"(padding, dilation or w too large)")
        for name, value in (("x_shape", x_shape), ("w_shape", w_shape), ("stride", stride),
                            ("dilation", dilation), ("pad_low", lo), ("pad_high", hi), ("groups", groups),
                            ("flip", bool(flip)), ("dtype", dtype), ("output_padding", op)):
            object.__setattr__(self, name, value)

    @classmethod
    def transposed(cls, x_shape: Sequence[int], w_shape: Sequence[int], *, stride: Any = 1, padding: Any = 0,
                   output_padding: Any = 0, dilation: Any = 1, groups: int = 1, flip: bool = False,
                   dtype: Any = "float32") -> "ConvDims":
        """Dims for ``conv_transpose(x, w)`` with w in PyTorch's layout (C_in, C_out/groups, *kernel).

        Output size per dim: (in - 1)*stride - pad_low - pad_high + dilation*(k - 1) + output_padding + 1,
        where output_padding must be smaller than stride or dilation (PyTorch's rule).
        """
        x_shape, w_shape, n, groups = _conv_shapes(x_shape, w_shape, groups,
                                                   "(in_channels, out_channels/groups, *kernel)")
        if x_shape[1] != w_shape[0]:
            raise ValueError(f"x has {x_shape[1]} channels but w.shape[0] = {w_shape[0]}; conv_transpose "
                             f"takes w as (in_channels, out_channels/groups, *kernel)")
        st = _per_dim("stride", stride, n, minimum=1)
        dil = _per_dim("dilation", dilation, n, minimum=1)
        lo, hi = _padding("padding", padding, n)
        op = _per_dim("output_padding", output_padding, n, minimum=0)
        if any(o >= s and o >= d for o, s, d in zip(op, st, dil)):
            raise ValueError(f"output_padding={output_padding!r} must be smaller than either stride={stride!r} "
                             f"or dilation={dilation!r} in every dimension")
        out = tuple((i - 1) * s - a - b + d * (k - 1) + o + 1
                    for i, s, a, b, d, k, o in zip(x_shape[2:], st, lo, hi, dil, w_shape[2:], op))
        if any(o < 1 for o in out):
            raise ValueError(f"the output would be empty: conv_transpose of spatial size {x_shape[2:]} "
                             f"gives {out} (padding={padding!r} too large)")
        y_shape = (x_shape[0], w_shape[1] * groups) + out
        return cls(y_shape, w_shape, stride=st, padding=tuple(zip(lo, hi)), dilation=dil, groups=groups,
                   flip=flip, dtype=dtype, output_padding=op)

    # -- derived geometry -----------------------------------------------------------------------

    @property
    def spatial_rank(self) -> int:
        return len(self.x_shape) - 2

    @property
    def batch(self) -> int:
        return self.x_shape[0]

    @property
    def in_channels(self) -> int:
        return self.x_shape[1]

    @property
    def out_channels(self) -> int:
        return self.w_shape[0]

    @functools.cached_property
    def kernel_size(self) -> Shape:
        return self.w_shape[2:]

    @functools.cached_property
    def dilated_kernel(self) -> Shape:
        """Spatial extent covered by one dilated kernel."""
        return tuple(d * (k - 1) + 1 for d, k in zip(self.dilation, self.kernel_size))

    @functools.cached_property
    def padded_size(self) -> Shape:
        """Spatial size of x after padding."""
        return tuple(s + a + b for s, a, b in zip(self.x_shape[2:], self.pad_low, self.pad_high))

    @functools.cached_property
    def out_size(self) -> Shape:
        return _spatial_out(self.x_shape[2:], self.pad_low, self.pad_high, self.dilated_kernel, self.stride)

    @functools.cached_property
    def y_shape(self) -> Shape:
        """Shape of the convolution's output (N, K, *out_size)."""
        return (self.x_shape[0], self.w_shape[0]) + self.out_size

    @functools.cached_property
    def transpose_input_shape(self) -> Shape:
        """Shape conv_transpose takes as x when these dims come from :meth:`transposed`.

        Equal to ``y_shape`` unless output_padding >= stride (allowed when smaller than dilation): then
        the forward convolution sees output_padding // stride more positions than conv_transpose's input.
        """
        extra = tuple(o // s for o, s in zip(self.output_padding, self.stride))
        return self.y_shape[:2] + tuple(y - e for y, e in zip(self.out_size, extra))

    @property
    def bias_shape(self) -> Shape:
        return (self.w_shape[0],)

    def working_bytes(self, itemsize: int) -> int:
        """A lower bound of the memory one call needs on the CPU, in bytes, known before allocating:
        the padded input, the output, the filter, one sample's im2col columns and the list of kernel
        offsets. The reference backend checks it first, so a huge problem fails at once."""
        return self._working_elements * itemsize + _prod(self.kernel_size) * OFFSET_BYTES

    @functools.cached_property
    def _working_elements(self) -> int:
        n, c = self.x_shape[:2]
        return (n * c * _prod(self.padded_size) + _prod(self.y_shape) + _prod(self.w_shape)
                + c * _prod(self.kernel_size) * _prod(self.out_size))

    @property
    def symmetric_padding(self) -> bool:
        return self.pad_low == self.pad_high


# ----------------------------------------------------------------------------------------------
# pooling


@dataclass(frozen=True, init=False, eq=False)
class PoolDims(_Problem):
    """Geometry of one N-d pooling: window, stride (defaults to window), dilation and padding per dim.

    Padding may be at most half the window in every dim (PyTorch's rule: half the window itself, also
    with dilation). ``ceil_mode`` (PyTorch's) rounds the output size up, but the last window must start
    inside x or its low padding; the extra windows run past the padded input, which PoolDims expresses
    as extra high-side padding (``ceil_extra``, not limited to half the window). ``pad_high`` is the
    whole high-side padding (the user's plus ``ceil_extra``): a backend pads by ``pad_low`` and
    ``pad_high`` and pools without rounding. :meth:`mean_divisor` says what a mean divides by.
    """

    _KIND = "pool"

    x_shape: Shape
    window: Shape
    stride: Shape
    dilation: Shape
    pad_low: Shape
    pad_high: Shape
    ceil_mode: bool
    ceil_extra: Shape
    dtype: str

    def __init__(self, x_shape: Sequence[int], window: Any, *, stride: Any = None, padding: Any = 0,
                 dilation: Any = 1, ceil_mode: bool = False, dtype: Any = "float32") -> None:
        x_shape = _check_array_shape("x", x_shape, (3, 4, 5), "(N, C, 1 to 3 spatial dimensions)", (0,),
                                     "the batch N")
        n = len(x_shape) - 2
        window = _per_dim("window", window, n, minimum=1)
        stride = window if stride is None else _per_dim("stride", stride, n, minimum=1)
        dilation = _per_dim("dilation", dilation, n, minimum=1)
        if not isinstance(ceil_mode, (bool, np.bool_)):
            raise TypeError(f"ceil_mode={ceil_mode!r} must be a bool")
        ceil_mode = bool(ceil_mode)
        lo, hi = _padding("padding", padding, n)
        if any(2 * p > k for p, k in zip(lo + hi, window + window)):
            raise ValueError(f"padding={padding!r} must be at most half the window {window} in every dimension")
        dtype = check_dtype("x", dtype)
        extent = tuple(d * (k - 1) + 1 for k, d in zip(window, dilation))
        out = tuple(_pool_out(*a, ceil_mode) for a in zip(x_shape[2:], lo, hi, extent, stride))
        if any(o < 1 for o in out):
            padded = tuple(s + a + b for s, a, b in zip(x_shape[2:], lo, hi))
            dilated = f" dilated to {extent}" if extent != window else ""
            raise ValueError(f"the output would be empty: x's spatial size {x_shape[2:]} padded to {padded} "
                             f"is smaller than window={window}{dilated}")
        extra = tuple(max(0, (o - 1) * st + e - (s + a + b))
                      for o, st, e, s, a, b in zip(out, stride, extent, x_shape[2:], lo, hi))
        hi = tuple(b + e for b, e in zip(hi, extra))
        for name, value in (("x_shape", x_shape), ("window", window), ("stride", stride), ("dilation", dilation),
                            ("pad_low", lo), ("pad_high", hi), ("ceil_mode", ceil_mode), ("ceil_extra", extra),
                            ("dtype", dtype)):
            object.__setattr__(self, name, value)
        assert self.out_size == out, (self.out_size, out)

    @property
    def extent(self) -> Shape:
        """The dilated window: how far each window reaches, per spatial dim."""
        return tuple(d * (k - 1) + 1 for k, d in zip(self.window, self.dilation))

    @property
    def dilated(self) -> bool:
        return any(d != 1 for d, k in zip(self.dilation, self.window) if k > 1)

    @property
    def user_pad_high(self) -> Shape:
        """The high-side padding the user asked for (``pad_high`` less ``ceil_extra``)."""
        return tuple(b - e for b, e in zip(self.pad_high, self.ceil_extra))

    @functools.cached_property
    def window_positions(self) -> tuple[tuple[int, ...], ...]:
        """Every position in the window, row-major: the order in which ties are decided (first wins) and
        the code a max pool saves for its winner."""
        return tuple(itertools.product(*(range(k) for k in self.window)))

    def window_index(self, position: tuple[int, ...]) -> tuple[slice, ...]:
        """Index into the padded input of the elements window ``position`` reads (position k of a dim reads
        k * dilation), one per output."""
        return window_slices(self, position)

    @functools.cached_property
    def interior(self) -> tuple[slice, ...]:
        """Index of x inside the padded input."""
        return interior_slices(self)

    @property
    def winner_dtype(self) -> np.dtype:
        """The smallest unsigned type that counts the window's positions (a max pool's saved winners)."""
        return np.min_scalar_type(len(self.window_positions))

    def mean_counts(self, count_include_pad: bool) -> tuple[tuple[int, ...], ...]:
        """Per spatial dim, the divisor's factor for each output position (the divisor of an N-d window is
        the product over dims), as PyTorch's avg_pool computes it: with ``count_include_pad`` the window
        clipped to x plus the user's padding (not ``ceil_extra``), else clipped to x alone. The one rule
        of the reference backend and the GPU backends' rescale (:mod:`dnnbind.highlevel.gpu.rescale`)."""
        counts = []
        for size, k, st, lo, hi, o in zip(self.x_shape[2:], self.window, self.stride, self.pad_low,
                                           self.user_pad_high, self.out_size):
            first, last = (-lo, size + hi) if count_include_pad else (0, size)
            counts.append(tuple(min(i * st - lo + k, last) - max(i * st - lo, first) for i in range(o)))
        return tuple(counts)

    def mean_divisor(self, count_include_pad: bool,
                     divisor_override: int | None = None) -> tuple[tuple[tuple[int, ...], ...], int]:
        """What each output of a mean divides its window's sum by (padding adds zeros to the sum), as
        ``(per_dim, constant)``: output (i, j, ...) divides by ``constant * per_dim[0][i] * per_dim[1][j] *
        ...``. Without ``divisor_override``: (:meth:`mean_counts`, 1); with it, every output divides by the
        override alone, whatever ``count_include_pad`` says (torch's rule), so the counts are all 1. The one
        rule of the reference backend's ``_divisor`` and the GPU backends' rescale
        (:mod:`dnnbind.highlevel.gpu.rescale`); the override is checked by :func:`check_divisor_override`."""
        if divisor_override is None:
            return self.mean_counts(count_include_pad), 1
        return tuple((1,) * o for o in self.out_size), int(divisor_override)

    @property
    def spatial_rank(self) -> int:
        return len(self.x_shape) - 2

    @functools.cached_property
    def padded_size(self) -> Shape:
        return tuple(s + a + b for s, a, b in zip(self.x_shape[2:], self.pad_low, self.pad_high))

    @functools.cached_property
    def out_size(self) -> Shape:
        return _spatial_out(self.x_shape[2:], self.pad_low, self.pad_high, self.extent, self.stride)

    @functools.cached_property
    def y_shape(self) -> Shape:
        return self.x_shape[:2] + self.out_size

    def working_bytes(self, itemsize: int) -> int:
        """A lower bound of the memory one call needs on the CPU, in bytes, known before allocating:
        the padded input, the output and its bookkeeping (the max-pool argmax) and the list of window
        offsets. The reference backend checks it first, so a huge problem fails at once."""
        return self._working_elements * itemsize + _prod(self.window) * OFFSET_BYTES

    @functools.cached_property
    def _working_elements(self) -> int:
        return _prod(self.x_shape[:2]) * _prod(self.padded_size) + 2 * _prod(self.y_shape)



# ----------------------------------------------------------------------------------------------
# batch norm


def check_batchnorm(x_shape: Sequence[int], gamma_shape: Sequence[int], beta_shape: Sequence[int],
                    running_mean_shape: Sequence[int] | None, running_var_shape: Sequence[int] | None,
                    training: bool) -> int:
    """Check batch-norm shapes (per channel over axis 1) and return the channel count."""
    x_shape = _check_array_shape("x", x_shape, (2, 3, 4, 5), "(N, C) or (N, C, 1 to 3 spatial dimensions)",
                                 tuple(range(len(x_shape))))
    channels = x_shape[1]
    check_shape("gamma", gamma_shape, (channels,), "one value per channel of x")
    check_shape("beta", beta_shape, (channels,), "one value per channel of x")
    if (running_mean_shape is None) != (running_var_shape is None):
        raise ValueError("running_mean and running_var must be given together (or both be None)")
    if running_mean_shape is not None and running_var_shape is not None:
        check_shape("running_mean", running_mean_shape, (channels,), "one value per channel of x")
        check_shape("running_var", running_var_shape, (channels,), "one value per channel of x")
    elif not training:
        raise ValueError("training=False needs running_mean and running_var (inference uses the running stats)")
    if training:
        count = int(np.prod(x_shape)) // channels if channels else 0
        if count == 1:
            raise ValueError(f"x has shape {x_shape}: training needs more than one value per channel")
    return channels


# ----------------------------------------------------------------------------------------------
# recurrent networks


def rnn_weight_entries(weights: Any) -> tuple[tuple[Any, Any, Any, Any], ...]:
    """Check that ``weights`` is a sequence of (w_ih, w_hh, b_ih, b_hh) or, for an LSTM with a projection,
    (w_ih, w_hh, b_ih, b_hh, w_hr) (torch's parameter order), and return it as tuples.

    Both biases may be None (a network without biases, torch's ``bias=False``); w_hr may not. Every
    entry has the same length.
    """
    if not isinstance(weights, (list, tuple)):
        raise TypeError(f"weights must be a list of (w_ih, w_hh, b_ih, b_hh) tuples, not {type(weights).__name__}")
    entries: list[tuple[Any, ...]] = []
    for i, entry in enumerate(weights):
        if not isinstance(entry, (list, tuple)) or len(entry) not in (4, 5):
            raise TypeError(f"weights[{i}] must be a (w_ih, w_hh, b_ih, b_hh) tuple (with w_hr as a 5th array "
                            f"for an LSTM with proj_size), got {type(entry).__name__}"
                            + (f" of length {len(entry)}" if isinstance(entry, (list, tuple)) else ""))
        if entry[0] is None or entry[1] is None:
            raise TypeError(f"weights[{i}]: w_ih and w_hh must be arrays, not None")
        if (entry[2] is None) != (entry[3] is None):
            raise ValueError(f"weights[{i}]: b_ih and b_hh must both be arrays or both be None")
        if len(entry) == 5 and entry[4] is None:
            raise TypeError(f"weights[{i}]: w_hr (the 5th entry) must be an array, not None; leave it out "
                            f"without a projection")
        if entries and len(entry) != len(entries[0]):
            raise ValueError(f"weights[{i}] has {len(entry)} arrays but weights[0] has {len(entries[0])}: every "
                             f"entry has w_hr (proj_size > 0) or none does")
        entries.append(tuple(entry))
    return tuple(entries)


@dataclass(frozen=True, init=False, eq=False)
class RNNDims(_Problem):
    """Geometry of a multi-layer, optionally bidirectional RNN in PyTorch's weight layout.

    Weights are indexed ``layer * num_directions + direction``; each entry is (w_ih, w_hh, b_ih, b_hh)
    with w_ih (gates*hidden, layer_input), w_hh (gates*hidden, out), biases (gates*hidden,), and for an
    LSTM with ``proj_size`` > 0 a 5th array w_hr (proj_size, hidden) (torch's projection: h_t =
    W_hr (o_t * tanh(c_t))). ``out`` (:attr:`out_size`) is proj_size if set, else hidden_size: the
    size of h and of each direction's output; the cell c keeps hidden_size. ``lengths`` (optional, one
    per sequence, any order) describes padded variable-length batches.
    """

    _KIND = "rnn"

    mode: str
    seq_len: int
    batch: int
    input_size: int
    hidden_size: int
    num_layers: int
    num_directions: int
    has_bias: bool
    lengths: tuple[int, ...] | None
    dtype: str
    proj_size: int

    def __init__(self, x_shape: Sequence[int], weight_shapes: Sequence[Sequence[Sequence[int] | None]], *,
                 mode: str = "lstm", hidden_size: int, num_layers: int = 1, bidirectional: bool = False,
                 h0_shape: Sequence[int] | None = None, c0_shape: Sequence[int] | None = None,
                 lengths: Any = None, dtype: Any = "float32", proj_size: int = 0) -> None:
        if mode not in RNN_MODES:
            raise ValueError(f"mode={mode!r} must be one of {', '.join(RNN_MODES)}")
        x_shape = _check_array_shape("x", x_shape, (3,), "(seq, batch, input)", (1,), "the batch")
        hidden = _int("hidden_size", hidden_size)
        if hidden < 1:
            raise ValueError(f"hidden_size={hidden} must be positive")
        layers = _int("num_layers", num_layers)
        if layers < 1:
            raise ValueError(f"num_layers={layers} must be positive")
        if not isinstance(bidirectional, (bool, np.bool_)):
            raise TypeError(f"bidirectional={bidirectional!r} must be a bool")
        dirs = 2 if bidirectional else 1
        seq, batch, inp = x_shape
        proj = _int("proj_size", proj_size)
        if proj < 0:
            raise ValueError(f"proj_size={proj} must be 0 (no projection) or positive")
        if proj and mode != "lstm":
            raise ValueError(f"proj_size={proj} is only supported for mode='lstm', not mode={mode!r}")
        if proj >= hidden:
            raise ValueError(f"proj_size={proj} must be smaller than hidden_size={hidden}")
        out = proj or hidden
        n_arrays = 5 if proj else 4
        if len(weight_shapes) != layers * dirs:
            raise ValueError(f"weights has {len(weight_shapes)} entries but num_layers={layers} and "
                             f"bidirectional={bool(bidirectional)} need {layers * dirs} "
                             f"(one per layer and direction)")
        gh = _GATES[mode] * hidden
        has_bias = weight_shapes[0][2] is not None
        for i, shapes in enumerate(weight_shapes):
            if len(shapes) != n_arrays:
                raise ValueError(f"weights[{i}] has {len(shapes)} arrays but proj_size={proj} takes {n_arrays}: "
                                 + ("(w_ih, w_hh, b_ih, b_hh, w_hr)" if proj else
                                    "(w_ih, w_hh, b_ih, b_hh); w_hr only with proj_size > 0"))
            layer_in = inp if i < dirs else out * dirs
            expected = ((gh, layer_in), (gh, out), (gh,), (gh,), (proj, hidden))
            if (shapes[2] is not None) != has_bias:
                raise ValueError(f"weights[{i}]: every entry must have biases, or none (weights[0] "
                                 f"{'has' if has_bias else 'has none'})")
            for j, (label, shape, want) in enumerate(zip(("w_ih", "w_hh", "b_ih", "b_hh", "w_hr"), shapes, expected)):
                if shape is not None:
                    check_shape(f"weights[{i}][{j}] ({label})", shape, want,
                                f"mode={mode!r}, hidden_size={hidden}" + (f", proj_size={proj}" if proj else "")
                                + f", layer {i // dirs} input size {layer_in}")
        h_shape = (layers * dirs, batch, out)
        if h0_shape is not None:
            check_shape("h0", h0_shape, h_shape, "(num_layers * num_directions, batch, "
                        + ("proj_size)" if proj else "hidden_size)"))
        if c0_shape is not None:
            if mode != "lstm":
                raise ValueError(f"c0 is only used by mode='lstm', not mode={mode!r}")
            check_shape("c0", c0_shape, (layers * dirs, batch, hidden),
                        "(num_layers * num_directions, batch, hidden_size)")
        if lengths is not None:
            try:
                values = [v for v in lengths]
            except TypeError:
                raise TypeError(f"lengths must be a sequence of ints, not {type(lengths).__name__}") from None
            if len(values) != batch:
                raise ValueError(f"lengths has {len(values)} entries but x has a batch of {batch}")
            lengths = tuple(_int(f"lengths[{i}]", v) for i, v in enumerate(values))
            for i, v in enumerate(lengths):
                if not 1 <= v <= seq:
                    raise ValueError(f"lengths[{i}]={v} must be between 1 and the sequence length {seq}")
        for name, value in (("mode", mode), ("seq_len", seq), ("batch", batch), ("input_size", inp),
                            ("hidden_size", hidden), ("num_layers", layers), ("num_directions", dirs),
                            ("has_bias", has_bias), ("lengths", lengths), ("dtype", check_dtype("x", dtype)),
                            ("proj_size", proj)):
            object.__setattr__(self, name, value)

    @property
    def gates(self) -> int:
        """Gates per cell: 4 for LSTM (i, f, g, o), 3 for GRU (r, z, n), 1 for plain RNNs."""
        return _GATES[self.mode]

    @property
    def out_size(self) -> int:
        """Size of h and of each direction's output: proj_size with a projection, else hidden_size."""
        return self.proj_size or self.hidden_size

    @property
    def y_shape(self) -> Shape:
        return (self.seq_len, self.batch, self.out_size * self.num_directions)

    @property
    def h_shape(self) -> Shape:
        return (self.num_layers * self.num_directions, self.batch, self.out_size)

    @property
    def c_shape(self) -> Shape:
        """The LSTM cell state's shape (hidden_size wide, also with a projection)."""
        return (self.num_layers * self.num_directions, self.batch, self.hidden_size)

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.out_size * self.num_directions

