"""What both GPU backends' convolution primitives share (:mod:`dnnbind.highlevel.conv_composed`): one call's
arrays in the layout the library computes in, explicit padding, zero extension, results in the caller's layout,
and the residuals' shapes."""
from __future__ import annotations

from typing import Any, Callable

from dnnbind.highlevel.dims.conv import ConvDims
from dnnbind.highlevel.gpu import layout as _layout
from dnnbind.highlevel.gpu.arrays import current_stream
from dnnbind.highlevel.gpu.geometry import ConvGeometry, pad, padded_shape
from dnnbind.highlevel.gpu.views import extend
from dnnbind.highlevel.residual import ArraySpec


class GpuConvCall:
    """One call's plan (with its ``geometry``) and library handle (``handles(device, stream)``: the backend's
    per-thread handles); arrays computed in layout ``run``, results in ``lay``. A backend's subclass adds its
    library calls (forward, data and filter gradients, bias)."""

    def __init__(self, cp: Any, dims: ConvDims, lay: str, run: str, plan: Any, handles: Callable[..., Any],
                 device: int) -> None:
        self.cp, self.dims, self.lay, self.run, self.plan = cp, dims, lay, run, plan
        self.handle = handles(device, current_stream())
        self.x = self.w = self.b = self.dy = None
        self.saved: tuple = ()

    def input(self, x: Any) -> Any:
        """x explicitly padded (asymmetric padding's extra part), as the library reads it."""
        g = self.plan.geometry
        return pad(self.cp, x, g.extra_low, g.extra_high, self.run)

    def extend(self, x: Any) -> Any:
        """A transposed convolution's x zero-extended to the convolution's output shape."""
        return extend(self.cp, x, self.dims.y_shape, self.run)

    def result(self, a: Any) -> Any:
        """An output (or gradient) stored densely in the caller's layout."""
        return a if a.ndim < 3 else _layout.in_layout(self.cp, a, self.lay)


class GpuConvPrimitives:
    """The residuals' description both GPU backends share: x explicitly padded, arrays in x's dtype."""

    def saved_input_shape(self, dims: ConvDims) -> tuple[int, ...]:
        """x explicitly padded (asymmetric padding's extra part); no library call."""
        g = ConvGeometry.of(dims)
        return padded_shape(dims.x_shape, g.extra_low, g.extra_high)

    def residual(self, shape: tuple[int, ...], dtype: Any, same_as: tuple | None) -> ArraySpec:
        """Declares no source: what a GPU backend keeps is its own copy, in its compute layout."""
        return ArraySpec(shape, dtype)
