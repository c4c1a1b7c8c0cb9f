"""``from dnnbind.torch import nn``: torch.nn, with the layers dnnbind computes in place of torch's.

A model definition written against ``torch.nn`` switches to dnnbind by changing one import::

    from torch import nn            # torch computes every layer
    from dnnbind.torch import nn    # dnnbind computes the layers in PROVIDED, torch the rest

Every name torch.nn has is here (``nn.Module``, ``nn.Linear``, ``nn.functional``, ``nn.init`` ... are
torch's own objects); the names in :data:`PROVIDED` are subclasses of torch's classes of the same name
with the same arguments, defaults, parameters, buffers, repr and state_dict, whose forward runs
dnnbind's ops. ``nn.Sequential`` (:data:`CONTAINERS`) is torch's container whose forward runs consecutive
dnnbind layers as one autograd node (:mod:`dnnbind.torch.sequential`). ``nn.functional`` stays torch's
(dnnbind's functions are :mod:`dnnbind.torch`'s).
"""
from __future__ import annotations

from typing import Any

from torch import nn as _torch_nn

from dnnbind.torch.convolution import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
                                       ConvTranspose3d)
from dnnbind.torch.normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d, LayerNorm
from dnnbind.torch.pointwise import (ELU, Dropout, Hardtanh, LeakyReLU, LogSoftmax, ReLU, ReLU6, Sigmoid, SiLU,
                                     Softmax, Tanh)
from dnnbind.torch.pooling import AvgPool1d, AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d
from dnnbind.torch.recurrent import GRU, LSTM, RNN
from dnnbind.torch.sequential import Sequential
from dnnbind.torch import tracers as _tracers

#: the torch.nn layers dnnbind computes; every other name is torch.nn's own
PROVIDED: tuple[str, ...] = (
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "Dropout", "Softmax", "LogSoftmax",
    "ReLU", "Sigmoid", "Tanh", "ELU", "LeakyReLU", "ReLU6", "Hardtanh", "SiLU",
    "RNN", "LSTM", "GRU",
)

#: torch.nn containers dnnbind replaces: Sequential runs consecutive dnnbind layers as one autograd node
CONTAINERS: tuple[str, ...] = ("Sequential",)

__all__ = sorted({name for name in dir(_torch_nn) if not name.startswith("_")} | set(PROVIDED) | set(CONTAINERS))


def __getattr__(name: str) -> Any:
    """torch.nn's own object for every name dnnbind does not provide."""
    try:
        return getattr(_torch_nn, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (neither has torch.nn)") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


_LAYERS = (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, MaxPool1d, MaxPool2d,
           MaxPool3d, AvgPool1d, AvgPool2d, AvgPool3d, BatchNorm1d, BatchNorm2d, BatchNorm3d, LayerNorm, Dropout,
           Softmax, LogSoftmax, ReLU, Sigmoid, Tanh, ELU, LeakyReLU, ReLU6, Hardtanh, SiLU, RNN, LSTM, GRU)
assert tuple(layer.__name__ for layer in _LAYERS) == PROVIDED

# torch.fx records each layer as one node and torch.jit.script refuses it by name (dnnbind.torch.tracers)
_layer: Any
for _layer in _LAYERS:
    _layer.forward = _tracers.leaf_forward(_layer.forward)
for _layer in (*_LAYERS, Sequential):
    _layer.__prepare_scriptable__ = _tracers.refuse_script
del _layer
