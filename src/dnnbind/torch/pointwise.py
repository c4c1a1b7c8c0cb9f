"""Shape-keeping layers: activations, Softmax, LogSoftmax and Dropout as torch.nn's classes whose
forward runs dnnbind's ops.

Each activation maps to one mode of the activation op, exactly (ReLU6 and Hardtanh(0, v) are the
clipped relu, SiLU is swish with beta 1). ``inplace=True`` is accepted and computed out of place: the
result is the same, the input is left unchanged.
"""
from __future__ import annotations

import warnings
import torch
from torch import nn

from dnnbind.torch import functional as F
from dnnbind.torch.errors import torch_argument_names
from dnnbind.torch.layer_inputs import not_supported

Tensor = torch.Tensor
_NAMES = {"x": "input"}


def _activation(input: Tensor, mode: str, alpha: float | None = None, argument: str = "alpha") -> Tensor:
    """The activation op, its errors naming ``argument`` (the layer's own name for the coefficient)."""
    with torch_argument_names({**_NAMES, "alpha": argument}):
        return F.activation(input, mode, alpha=alpha)


class ReLU(nn.ReLU):
    """torch.nn.ReLU computed by dnnbind."""

    def forward(self, input: Tensor) -> Tensor:
        return _activation(input, "relu")


class Sigmoid(nn.Sigmoid):
    """torch.nn.Sigmoid computed by dnnbind."""

    def forward(self, input: Tensor) -> Tensor:
        return _activation(input, "sigmoid")


class Tanh(nn.Tanh):
    """torch.nn.Tanh computed by dnnbind."""

    def forward(self, input: Tensor) -> Tensor:
        return _activation(input, "tanh")


class ELU(nn.ELU):
    """torch.nn.ELU computed by dnnbind."""

    def forward(self, input: Tensor) -> Tensor:
        return _activation(input, "elu", self.alpha)


class LeakyReLU(nn.LeakyReLU):
    """torch.nn.LeakyReLU computed by dnnbind."""

    def forward(self, input: Tensor) -> Tensor:
        return _activation(input, "leaky_relu", self.negative_slope, "negative_slope")


class SiLU(nn.SiLU):
    """torch.nn.SiLU computed by dnnbind (swish with beta 1)."""

    def forward(self, input: Tensor) -> Tensor:
        return _activation(input, "swish", 1.0)


class Hardtanh(nn.Hardtanh):
    """torch.nn.Hardtanh computed by dnnbind as the clipped relu: min_val must be 0."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False,
                 min_value: float | None = None, max_value: float | None = None) -> None:
        super().__init__(min_val, max_val, inplace, min_value, max_value)
        self._check_range()

    def _check_range(self) -> None:
        if self.min_val != 0:
            raise not_supported(type(self).__name__, "min_val", self.min_val,
                                "dnnbind's activation op clips to [0, max_val] only (clipped_relu)")

    def forward(self, input: Tensor) -> Tensor:
        self._check_range()
        return _activation(input, "clipped_relu", self.max_val, "max_val")


class ReLU6(nn.ReLU6):
    """torch.nn.ReLU6 computed by dnnbind (the clipped relu with ceiling 6)."""

    def forward(self, input: Tensor) -> Tensor:
        return _activation(input, "clipped_relu", 6.0)


def _softmax_dim(layer: str, dim: int | None, ndim: int) -> int:
    """torch's rule for the deprecated implicit dim: 0 for 0-, 1- and 3-d input, else 1 (with its warning)."""
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {layer.lower()} has been deprecated. Change the call to "
                  f"include dim=X as an argument.", stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


class Softmax(nn.Softmax):
    """torch.nn.Softmax computed by dnnbind."""

    def forward(self, input: Tensor) -> Tensor:
        with torch_argument_names({**_NAMES, "axis": "dim"}):
            return F.softmax(input, axis=_softmax_dim("Softmax", self.dim, input.dim()))


class LogSoftmax(nn.LogSoftmax):
    """torch.nn.LogSoftmax computed by dnnbind."""

    def forward(self, input: Tensor) -> Tensor:
        with torch_argument_names({**_NAMES, "axis": "dim"}):
            return F.logsoftmax(input, axis=_softmax_dim("LogSoftmax", self.dim, input.dim()))


class Dropout(nn.Dropout):
    """torch.nn.Dropout computed by dnnbind: inverted dropout in training, the identity in eval mode.
    The mask is drawn from torch's default generator (``torch.manual_seed`` makes it reproducible)."""

    def forward(self, input: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return input
        with torch_argument_names(_NAMES):
            return F.dropout(input, self.p)
