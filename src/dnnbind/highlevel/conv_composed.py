"""conv and conv_transpose in residual form, composed once from a backend's convolution primitives.

A backend implements the convolution itself, in the manner of NNlib's ``conv!``/``∇conv_data!``/
``∇conv_filter!``, on validated :class:`ConvDims` and the filter as applied; :func:`conv_ops` builds the
six functions of :mod:`dnnbind.highlevel.residual` from them (``conv_forward/backward/residuals`` and the
same for ``conv_transpose``). A transposed convolution is the data gradient of the convolution its dims
describe (:meth:`ConvDims.transposed`), its gradients that convolution's forward and filter gradient, so
no backend carries code for it.

What a backend provides (:class:`ConvPrimitives`) is an object with

* ``forward_call(op, dims, options, x, w, b)`` / ``backward_call(op, dims, options, saved, dy, dy_shape)``:
  context managers giving one call's primitives (:class:`ConvCall`), bound to its dims, its options
  and whatever the backend chose for it (a plan, a handle, a memory layout, a code path); ``op`` names
  the op for error messages;
* ``saved_input_shape(dims)`` and ``residual(shape, dtype, same_as)``: what conv saves of x and the
  :class:`ArraySpec` a saved array of that shape gets (the reference saves float64); ``same_as`` names
  the array it is the value of where it is one (x kept as given, w not flipped), for the backend to
  declare (:attr:`ArraySpec.same_as`) where it saves that array as given, C-ordered;
* optionally ``OPTIONS``, the backend's keywords (others raise TypeError; none by default), and
  ``wrap_forward(fn)``, ``wrap_backward(fn)``, ``wrap_residuals(fn)``: decorators applied to
  the composed functions (the cpu backend's half-precision and memory checks).

A call's primitives: ``input`` (x as the convolution reads it: padded, converted), ``extend``
(conv_transpose's x zero-extended to the convolution's output shape), ``filter`` (w as applied: flipped
for ``dims.flip``, in the compute layout), ``forward``, ``data_grad``, ``filter_grad`` (of the filter as
applied), ``weight_grad`` (w's gradient from it), ``add_bias``/``bias_grad`` (``transposed``: the
channels are x's), ``result`` (an output in the caller's layout and dtype) and ``keep`` (an array the
backward reads, the forward's own). Three optional fused primitives, used when present:
``forward_keeping(x, wf, keep, b)`` -> (y plus b where given, x as saved, the forward's own, or None), the
forward that copies x while reading it; ``forward_and_filter_grad(xi, dy, wf, need_y, need_dw)`` -> (y,
dw), both in one sweep; ``filter_and_bias_grad(xi, dy, wf)`` -> (the filter gradient, db), both from one
pass over dy.

Residuals: (x as the convolution read it, the filter as applied) for conv; (x extended, the filter as
applied) for conv_transpose, in the backend's :meth:`ConvCall.keep` form. db is always computed unless
``needs`` says otherwise.
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable, ContextManager, Protocol

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.grad_mode import saving
from dnnbind.highlevel.residual import ALL_NEEDED, ArraySpec
from dnnbind.highlevel.specs import OP_NAMES, SPECS

#: the ops :func:`conv_ops` builds from a backend's convolution primitives (their specs say so)
COMPOSED = tuple(op for op in OP_NAMES if SPECS[op].composed_from == "convolution")


class ConvCall(Protocol):
    """One call's convolution primitives (see the module docstring); ``x, w, b`` (a forward's arrays,
    converted), ``saved`` and ``dy`` (a backward's, converted and checked) are attributes."""

    x: Any
    w: Any
    b: Any
    saved: tuple
    dy: Any

    def input(self, x: Any) -> Any: ...
    def extend(self, x: Any) -> Any: ...
    def filter(self, w: Any) -> Any: ...
    def forward(self, xi: Any, wf: Any) -> Any: ...
    def data_grad(self, dy: Any, wf: Any) -> Any: ...
    def filter_grad(self, xi: Any, dy: Any, wf: Any) -> Any: ...
    def weight_grad(self, dwf: Any) -> Any: ...
    def add_bias(self, y: Any, b: Any, transposed: bool) -> Any: ...
    def bias_grad(self, dy: Any, transposed: bool) -> Any: ...
    def result(self, a: Any) -> Any: ...
    def keep(self, a: Any, source: Any, filter: bool = False) -> Any: ...


class ConvPrimitives(Protocol):
    """What a backend says about its convolution (see the module docstring)."""

    def forward_call(self, op: str, dims: ConvDims, options: dict[str, Any],
                     x: Any, w: Any, b: Any) -> ContextManager[ConvCall]: ...
    def backward_call(self, op: str, dims: ConvDims, options: dict[str, Any], saved: tuple, dy: Any,
                      dy_shape: tuple[int, ...]) -> ContextManager[ConvCall]: ...
    def saved_input_shape(self, dims: ConvDims) -> tuple[int, ...]: ...
    def residual(self, shape: tuple[int, ...], dtype: Any, same_as: tuple | None) -> ArraySpec: ...


def _crop(a: Any, shape: tuple[int, ...]) -> Any:
    """The low corner of ``a`` of ``shape`` (conv_transpose's dx when output_padding >= stride)."""
    return a if tuple(a.shape) == tuple(shape) else a[tuple(slice(0, s) for s in shape)]


def _residuals(call: ConvCall, xs: Any, wf: Any, keep: bool) -> tuple:
    """The forward's residuals: its own copies of the saved input and filter; none unless ``keep`` (none
    under no_grad())."""
    return (call.keep(xs, call.x), call.keep(wf, call.w, filter=True)) if keep else ()


def _saved_specs(prims: ConvPrimitives, x: Any, kept: tuple[int, ...], dims: ConvDims) -> tuple[ArraySpec, ArraySpec]:
    """The residuals' specs: x as kept (``kept``: its shape; x itself where it is x's), the filter as
    applied (w itself unless flipped)."""
    return (prims.residual(kept, x.dtype, ("x",) if tuple(kept) == tuple(x.shape) else None),
            prims.residual(dims.w_shape, x.dtype, None if dims.flip else ("w",)))


def conv_ops(prims: ConvPrimitives) -> types.SimpleNamespace:
    """The residual form of conv and conv_transpose on ``prims``: a namespace with the six functions,
    named as :func:`dnnbind.highlevel.residual.install_forms` looks them up."""

    allowed = tuple(getattr(prims, "OPTIONS", ()))

    def check(name: str, options: dict[str, Any]) -> None:
        """Refuse a keyword that is not one of the backend's options, as a Python function would."""
        unknown = options.keys() - allowed
        if unknown:
            raise TypeError(f"{name}() got an unexpected keyword argument {min(unknown)!r}")

    def conv_forward(x: Any, w: Any, b: Any, dims: ConvDims, **options: Any) -> tuple[Any, tuple]:
        """y = conv(x, w) + b (cross-correlation; true convolution when ``dims.flip``); saves x as the
        convolution read it and the filter as applied."""
        if options:
            check("conv_forward", options)
        keep = saving()
        with prims.forward_call("conv", dims, options, x, w, b) as call:
            wf = call.filter(call.w)
            fused = getattr(call, "forward_keeping", None)
            if fused is not None:                # x as saved comes back as the forward's own, b added
                y, xs = fused(call.x, wf, keep, call.b)
                residuals = (xs, call.keep(wf, call.w, filter=True)) if keep else ()
            else:
                xs = call.input(call.x)
                y = call.forward(xs, wf)
                residuals = _residuals(call, xs, wf, keep)
                if call.b is not None:
                    y = call.add_bias(y, call.b, False)
            return call.result(y), residuals

    def conv_backward(residuals: tuple, cotangents: tuple, dims: ConvDims, *,
                      needs: tuple[bool, bool, bool] = ALL_NEEDED, **options: Any) -> tuple[Any, Any, Any]:
        """(dx, dw, db): the data gradient, the filter gradient and the bias gradient; those ``needs``
        marks False are None, not computed."""
        if options:
            check("conv_backward", options)
        (dy,) = cotangents
        with prims.backward_call("conv", dims, options, residuals, dy, dims.y_shape) as call:
            (xs, wf), dy = call.saved, call.dy
            dx = call.result(call.data_grad(dy, wf)) if needs[0] else None
            both = getattr(call, "filter_and_bias_grad", None) if needs[1] and needs[2] else None
            if both is not None:                 # one pass over dy for both
                dwf, db = both(xs, dy, wf)
                return dx, call.result(call.weight_grad(dwf)), call.result(db)
            dw = call.result(call.weight_grad(call.filter_grad(xs, dy, wf))) if needs[1] else None
            db = call.result(call.bias_grad(dy, False)) if needs[2] else None
            return dx, dw, db

    def conv_residuals(x: Any, w: Any, b: Any, dims: ConvDims, **options: Any) -> tuple[ArraySpec, ArraySpec]:
        """What conv_forward saves, computed without running it."""
        if options:
            check("conv_residuals", options)
        return _saved_specs(prims, x, prims.saved_input_shape(dims), dims)

    def conv_transpose_forward(x: Any, w: Any, b: Any, dims: ConvDims, **options: Any) -> tuple[Any, tuple]:
        """Transposed convolution: the data gradient of the convolution ``dims`` describes (dims.x_shape
        is this op's output shape, x that convolution's output gradient); saves x extended to that
        convolution's output shape and the filter as applied."""
        if options:
            check("conv_transpose_forward", options)
        with prims.forward_call("conv_transpose", dims, options, x, w, b) as call:
            xe, wf = call.extend(call.x), call.filter(call.w)
            y = call.data_grad(xe, wf)
            if call.b is not None:
                y = call.add_bias(y, call.b, True)
            return call.result(y), _residuals(call, xe, wf, saving())

    def conv_transpose_backward(residuals: tuple, cotangents: tuple, dims: ConvDims, *,
                                needs: tuple[bool, bool, bool] = ALL_NEEDED,
                                **options: Any) -> tuple[Any, Any, Any]:
        """(dx, dw, db): the convolution's forward of dy, its filter gradient with dy as the input and the
        saved x as the output gradient, and the bias gradient; those ``needs`` marks False are None."""
        if options:
            check("conv_transpose_backward", options)
        (dy,) = cotangents
        with prims.backward_call("conv_transpose", dims, options, residuals, dy, dims.x_shape) as call:
            (xe, wf), dy = call.saved, call.dy
            need_dx, need_dw = needs[0], needs[1]
            dxe = dwf = None
            if need_dx or need_dw:
                di = call.input(dy)
                fused = getattr(call, "forward_and_filter_grad", None)
                if fused is not None:
                    dxe, dwf = fused(di, xe, wf, need_dx, need_dw)
                else:
                    dxe = call.forward(di, wf) if need_dx else None
                    dwf = call.filter_grad(di, xe, wf) if need_dw else None
            dx = None if dxe is None else call.result(_crop(dxe, dims.transpose_input_shape))
            dw = None if dwf is None else call.result(call.weight_grad(dwf))
            db = call.result(call.bias_grad(dy, True)) if needs[2] else None
            return dx, dw, db

    def conv_transpose_residuals(x: Any, w: Any, b: Any, dims: ConvDims,
                                 **options: Any) -> tuple[ArraySpec, ArraySpec]:
        """What conv_transpose_forward saves, computed without running it."""
        if options:
            check("conv_transpose_residuals", options)
        return _saved_specs(prims, x, dims.y_shape, dims)

    def signed(fn: Callable[..., Any]) -> Callable[..., Any]:
        """fn, its signature naming the backend's options (keyword-only, None by default) for ``**options``."""
        signature = inspect.signature(fn)
        params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name in allowed]
        fn.__signature__ = signature.replace(parameters=params)          # type: ignore[attr-defined]
        return fn

    wrappers = {part: getattr(prims, f"wrap_{part}", None) for part in ("forward", "backward", "residuals")}
    functions: dict[str, Callable[..., Any]] = {}
    for fn in (conv_forward, conv_backward, conv_residuals, conv_transpose_forward, conv_transpose_backward,
               conv_transpose_residuals):
        wrap = wrappers[fn.__name__.rsplit("_", 1)[1]]
        functions[fn.__name__] = signed(fn) if wrap is None else wrap(signed(fn))
    return types.SimpleNamespace(**functions)
