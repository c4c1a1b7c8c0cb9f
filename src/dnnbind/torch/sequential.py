"""Sequential: torch.nn.Sequential whose runs of consecutive dnnbind layers are one autograd node each.

The module is torch's own container (the same constructor, indexing, state_dict, repr); only forward
differs. A run of two or more consecutive layers in :data:`FUSABLE` whose calls were all planned by an
earlier call (the first call runs them one by one and leaves the plans) runs through
:mod:`dnnbind.torch.fused`, with the results and gradients of the layers' own calls. Whatever could see
the difference takes the layers one by one: hooks on a layer (forward, pre-forward, backward) or
global module hooks, saved-tensor hooks, a forward replaced on an instance, a subclass of a layer,
torch.func transforms, dispatch modes, tensor subclasses, and tensors off the CPU (the GPU path is not
verified on a device yet). While torch.compile or torch.export traces, such a run (planned or not) is
one ``dnnbind::sequence`` custom op (:mod:`dnnbind.torch.sequence_op`) instead of two per layer.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch._C._autograd import _top_saved_tensors_default_hooks as _saved_tensor_hooks
from torch._C._functorch import is_functorch_wrapped_tensor
from torch.nn.modules import module as _module

from dnnbind.torch import eager, fused, sequence_op
from dnnbind.torch.convolution import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from dnnbind.torch.normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d
from dnnbind.torch.pointwise import (ELU, Hardtanh, LeakyReLU, LogSoftmax, ReLU, ReLU6, Sigmoid, SiLU, Softmax,
                                     Tanh)
from dnnbind.torch.pooling import AvgPool1d, AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d

Tensor = torch.Tensor

#: the layer types a run may hold (exactly these: a subclass may have its own forward)
FUSABLE: frozenset[type] = frozenset({
    Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, BatchNorm1d, BatchNorm2d,
    BatchNorm3d, MaxPool1d, MaxPool2d, MaxPool3d,
    AvgPool1d, AvgPool2d, AvgPool3d, ReLU, Sigmoid, Tanh, ELU, LeakyReLU, ReLU6, Hardtanh, SiLU, Softmax,
    LogSoftmax,
})

_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


class Sequential(nn.Sequential):
    """torch.nn.Sequential; consecutive dnnbind layers run as one autograd node (see the module's doc)."""

    def forward(self, input: Any) -> Any:
        compiling = torch.compiler.is_compiling()
        modules = list(self._modules.values())
        x, i = input, 0
        while i < len(modules):
            end = i
            while end < len(modules) and _fusable_layer(modules[end]):
                end += 1
            if end - i < 2:
                x = modules[i](x)
                i += 1
                continue
            x = _traced_run(modules[i:end], x) if compiling else _run(modules[i:end], x)
            i = end
        return x


def _run(layers: list[nn.Module], x: Any) -> Any:
    """``layers`` on x: as one node when every call is planned (and x qualifies), else one by one."""
    fusions = _fusions(layers, x) if _fusable_input(x) else None
    steps = None if fusions is None else fused.plan_run(fusions, x)
    return _one_by_one(layers, x) if steps is None else fused.run(steps, x)


def _traced_run(layers: list[nn.Module], x: Any) -> Any:
    """``layers`` on x while torch.compile or torch.export traces: one ``dnnbind::sequence`` op
    (:mod:`dnnbind.torch.sequence_op`) when every layer's call is one and no global module hook would
    see the layers, else the layers one by one."""
    fusions = _fusions(layers, x) if isinstance(x, torch.Tensor) and not _global_hooks() else None
    return _one_by_one(layers, x) if fusions is None else sequence_op.run(fusions, x)


def _fusions(layers: list[nn.Module], x: Tensor) -> list[fused.Fusion] | None:
    """Each layer's op call on x's shape, or None when a layer must run its own forward. Every FUSABLE
    layer keeps its input's rank, the one thing of its input a layer's call depends on, so each is asked
    with x's shape."""
    shape = tuple(x.shape)
    fusions = [layer._fusion(shape) for layer in layers]      # type: ignore[operator]
    return None if any(f is None for f in fusions) else fusions


def _one_by_one(layers: list[nn.Module], x: Any) -> Any:
    for layer in layers:
        x = layer(x)
    return x


def _fusable_input(x: Any) -> bool:
    """Whether a run may take x as one node: a plain CPU tensor, no tracer, transform, dispatch mode,
    saved-tensor hook or global module hook active."""
    return (type(x) in eager._PLAIN_TENSORS and not is_functorch_wrapped_tensor(x) and x.device.type == "cpu"
            and not eager._tracing() and _saved_tensor_hooks(False) is None and not _global_hooks())


def _global_hooks() -> bool:
    """Whether a hook registered for every module is there (torch.nn.modules.module.register_module_*)."""
    return any(getattr(_module, name, None) for name in _GLOBAL_HOOKS)


def _fusable_layer(layer: nn.Module) -> bool:
    """Whether ``layer`` may be part of a run: one of FUSABLE exactly, without hooks or an own forward."""
    return (type(layer) in FUSABLE and not layer._forward_hooks and not layer._forward_pre_hooks
            and not layer._backward_hooks and not getattr(layer, "_backward_pre_hooks", None)
            and "forward" not in layer.__dict__)
