"""Shape-keeping layers: activations, Softmax, LogSoftmax and Dropout as torch.nn's classes whose
forward runs dnnbind's ops.

Each activation maps to one mode of the activation op, exactly (ReLU6 and Hardtanh(0, v) are the
clipped relu, SiLU is swish with beta 1). ``inplace=True`` (activations, Dropout) writes the result into
the input and returns the input, as torch's layers do (autograd then sees the same in-place change); the
op itself runs out of place, so the layer costs a copy more than without it, two in training where the
op's gradient reads x itself (SiLU, ELU: see :func:`written_back`).
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import torch
from torch import nn

from dnnbind.torch import functional as F
from dnnbind.torch.eager import overwriting, plain_eager
from dnnbind.torch.errors import torch_argument_names
from dnnbind.torch.fused import Fusion
from dnnbind.torch.layer_inputs import fusion, not_supported
from dnnbind.torch.tracers import untraced
from dnnbind.torch.typed import kept_copy

Tensor = torch.Tensor
_NAMES = {"x": "input"}


def in_place(layer: Any) -> bool:
    """Whether ``layer`` was made with ``inplace=True``."""
    return bool(getattr(layer, "inplace", False))


def written_back(layer: Any, input: Tensor, function: Callable[..., Tensor], *args: Any, **kwargs: Any) -> Tensor:
    """``function(input, *args, **kwargs)`` (one of :mod:`dnnbind.torch.functional`'s), or for a layer made
    with ``inplace=True`` the input with that result written into it: the op runs
    :func:`~dnnbind.torch.eager.overwriting` x where the result stands for x in its backward (its spec's
    ``result_stands_for_x``), else on a copy of x where a gradient may be asked for (a gradient of the
    gradient reads x's own values; torch's ``silu_`` keeps a copy of x too)."""
    if not in_place(layer):
        return function(input, *args, **kwargs)
    recorded = torch.is_grad_enabled() and input.requires_grad
    spec = getattr(function, "__dnnbind_spec__")
    stands_for_x = spec.result_stands_for_x
    copied = recorded and not (stands_for_x and stands_for_x(spec.arguments_function(*args, **kwargs)))
    if torch.compiler.is_compiling():
        # the registered op saves the tensor it is given (where its result does not stand for x), which
        # the write must not change: a copy that torch.compile's passes keep (typed.kept_copy; a clone they
        # fold into x, whose write, where x is a graph input, then fails the backward's version check).
        # (Dynamo traces no context variable: overwriting's effect without it)
        return input.copy_(function(kept_copy(input) if copied else input, *args, **kwargs))
    if copied:
        result = function(input.clone(), *args, **kwargs)
    else:
        with overwriting():
            result = function(input, *args, **kwargs)
    if recorded and not input._is_view() and plain_eager(input, ()):
        return _written_back(spec.name).apply(input, result)
    # (no graph to record; a view, whose base's other elements keep their gradient through copy_'s
    # CopySlices; torch.func's wrapped tensors)
    return input.copy_(result)


@functools.cache
def _written_back(op: str) -> Any:
    """:class:`_WrittenBack` named for the op (``dnnbind_activation_inplace``), as autograd's errors and
    grad_fn name it."""
    return type(f"dnnbind_{op}_inplace", (_WrittenBack,), {"__doc__": _WrittenBack.__doc__})


class _WrittenBack(torch.autograd.Function):
    """input with result written into it, whose gradient autograd hands the result alone, as to torch's own
    in-place functions' result: ``input.copy_(result)`` would also hand input's former value zeros of its
    own (C-ordered: added to the op's gradient of input, they would decide its layout)."""

    @staticmethod
    @untraced
    def forward(ctx: Any, input: Tensor, result: Tensor) -> Tensor:  # type: ignore[override]
        ctx.mark_dirty(input)               # (which counts input's one change: .data's copy_ counts none)
        ctx.dtype = result.dtype
        input.data.copy_(result)
        return input

    @staticmethod
    @untraced
    def backward(ctx: Any, grad: Tensor) -> tuple[None, Tensor]:  # type: ignore[override]
        return None, grad.to(ctx.dtype)


class _Activation:
    """forward shared by the activation layers: one mode of the activation op (``_mode``), its errors
    naming ``_ARGUMENT``, the layer's own name for the coefficient."""

    _ARGUMENT = "alpha"

    def _mode(self) -> tuple[str, float | None]:
        """(the activation op's mode, its alpha) for this layer."""
        raise NotImplementedError

    def forward(self, input: Tensor) -> Tensor:
        mode, alpha = self._mode()
        with torch_argument_names({**_NAMES, "alpha": self._ARGUMENT}):
            return written_back(self, input, F.activation, mode, alpha=alpha)

    def _fusion(self, shape: tuple[int, ...]) -> Fusion | None:
        """This layer's op for :class:`~dnnbind.torch.sequential.Sequential`."""
        return fusion(F.activation, (), *self._mode())


class ReLU(_Activation, nn.ReLU):
    """torch.nn.ReLU computed by dnnbind."""

    def _mode(self) -> tuple[str, float | None]:
        return "relu", None


class Sigmoid(_Activation, nn.Sigmoid):
    """torch.nn.Sigmoid computed by dnnbind."""

    def _mode(self) -> tuple[str, float | None]:
        return "sigmoid", None


class Tanh(_Activation, nn.Tanh):
    """torch.nn.Tanh computed by dnnbind."""

    def _mode(self) -> tuple[str, float | None]:
        return "tanh", None


class ELU(_Activation, nn.ELU):
    """torch.nn.ELU computed by dnnbind."""

    def _mode(self) -> tuple[str, float | None]:
        return "elu", self.alpha


class LeakyReLU(_Activation, nn.LeakyReLU):
    """torch.nn.LeakyReLU computed by dnnbind."""

    _ARGUMENT = "negative_slope"

    def _mode(self) -> tuple[str, float | None]:
        return "leaky_relu", self.negative_slope


class SiLU(_Activation, nn.SiLU):
    """torch.nn.SiLU computed by dnnbind (swish with beta 1)."""

    def _mode(self) -> tuple[str, float | None]:
        return "swish", 1.0


class Hardtanh(_Activation, nn.Hardtanh):
    """torch.nn.Hardtanh computed by dnnbind as the clipped relu: min_val must be 0."""

    _ARGUMENT = "max_val"

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False,
                 min_value: float | None = None, max_value: float | None = None) -> None:
        super().__init__(min_val, max_val, inplace, min_value, max_value)
        self._check_range()

    def _check_range(self) -> None:
        if self.min_val != 0:
            raise not_supported(type(self).__name__, "min_val", self.min_val,
                                "dnnbind's activation op clips to [0, max_val] only (clipped_relu)")

    def _mode(self) -> tuple[str, float | None]:
        self._check_range()
        return "clipped_relu", self.max_val


class ReLU6(Hardtanh, nn.ReLU6):
    """torch.nn.ReLU6 computed by dnnbind: a Hardtanh (as torch's is) from 0 to 6, its clip range read
    at each call as torch's reads min_val and max_val."""

    def __init__(self, inplace: bool = False) -> None:
        nn.ReLU6.__init__(self, inplace)


def _softmax_dim(function: str, dim: int | None, ndim: int) -> int:
    """torch's rule for the deprecated implicit dim: 0 for 0-, 1- and 3-d input, else 1 (with its warning,
    naming torch's function, except while torch.compile traces: dynamo cannot trace warnings.warn, and
    fullgraph must hold)."""
    if dim is not None:
        return dim
    if not torch.compiler.is_compiling():
        warnings.warn(f"Implicit dimension choice for {function} has been deprecated. Change the call to "
                      f"include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class _Softmax:
    """forward shared by Softmax (``_function`` softmax) and LogSoftmax (logsoftmax)."""

    _function = staticmethod(F.softmax)
    _torch_function = nn.functional.softmax.__name__        # (which torch's warning names)

    def forward(self, input: Tensor) -> Tensor:
        layer: Any = self
        with torch_argument_names({**_NAMES, "axis": "dim"}):
            return self._function(input, axis=_softmax_dim(self._torch_function, layer.dim, input.dim()))

    def _fuses(self) -> bool:
        """Whether its settings let the layer join a Sequential's run (not the implicit dim, whose warning
        the layer's own forward gives)."""
        return self.dim is not None  # type: ignore[attr-defined]

    def _fusion(self, shape: tuple[int, ...]) -> Fusion | None:
        """This layer's op for :class:`~dnnbind.torch.sequential.Sequential` (None: settings :meth:`_fuses`
        refuses)."""
        layer: Any = self
        if not self._fuses():
            return None
        return fusion(self._function, (), layer.dim)


class Softmax(_Softmax, nn.Softmax):
    """torch.nn.Softmax computed by dnnbind."""


class LogSoftmax(_Softmax, nn.LogSoftmax):
    """torch.nn.LogSoftmax computed by dnnbind."""

    _function = staticmethod(F.logsoftmax)
    _torch_function = nn.functional.log_softmax.__name__


class Dropout(nn.Dropout):
    """torch.nn.Dropout computed by dnnbind: inverted dropout in training, the identity in eval mode.
    The mask is drawn from torch's default generator (``torch.manual_seed`` makes it reproducible)."""

    def forward(self, input: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return input
        with torch_argument_names(_NAMES):
            return written_back(self, input, F.dropout, self.p)
