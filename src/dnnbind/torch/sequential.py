"""Sequential: torch.nn.Sequential whose runs of consecutive dnnbind layers are one autograd node each.

The module is torch's own container (the same constructor, indexing, state_dict, repr); only forward
differs. A run of two or more consecutive layers in :data:`FUSABLE` (with settings their class lets
fuse: a batch norm without affine parameters, for one, splits the run) whose calls were all planned by an
earlier call (the first call runs them one by one and leaves the plans) runs through
:mod:`dnnbind.torch.fused`, with the results and gradients of the layers' own calls. Whatever could see
the difference takes the layers one by one: hooks on a layer (forward, pre-forward, backward) or
global module hooks, saved-tensor hooks, anomaly mode, a forward replaced on an instance, a subclass of a layer,
torch.func transforms, dispatch modes, tensor subclasses, inputs and filters not in C order (channels
last, whose results follow their layout: :mod:`dnnbind.torch.layout`), and tensors off the CPU (the GPU
path is not verified on a device yet). While torch.compile or torch.export traces, the layers run one by one: the
graph holds each layer's typed op (:mod:`dnnbind.torch.typed`).

A planned run is remembered per input shape with a snapshot of its layers (:func:`_state`): a later
call whose layers are the same objects, unchanged, takes the steps again without asking each layer
for its call (a training loop's case); any change to a layer's settings, parameters or buffers (a
value set again, a list setting edited in place, a tensor replaced, its shape or dtype changed) plans
the run again.
"""
from __future__ import annotations

import operator
import weakref
from typing import Any, NamedTuple

import torch
from torch import nn
from torch._C._autograd import _top_saved_tensors_default_hooks as _saved_tensor_hooks
from torch._C._functorch import is_functorch_wrapped_tensor
from torch.fx import Proxy
from torch.nn.modules import module as _module

from dnnbind.torch import eager, fused, typed_sequence
from dnnbind.torch import functional as F
from dnnbind.torch.convolution import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from dnnbind.torch.normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d
from dnnbind.torch.pointwise import (ELU, Hardtanh, LeakyReLU, LogSoftmax, ReLU, ReLU6, Sigmoid, SiLU, Softmax,
                                     Tanh, in_place)
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
        if isinstance(input, Proxy):          # torch.fx traces it: each layer one node (dnnbind.torch.tracers)
            return nn.Sequential.forward(self, input)
        compiling = torch.compiler.is_compiling()
        modules = list(self._modules.values())
        x, i = input, 0
        while i < len(modules):
            end = i
            # (a layer made with inplace=True does not start a run: it writes into the run's input)
            while end < len(modules) and _fusable_layer(modules[end]) and not (end == i and in_place(modules[i])):
                end += 1
            if end - i < 2:
                x = modules[i](x)
                i += 1
                continue
            x = _traced_run(modules[i:end], x) if compiling else _run(self, i, modules[i:end], x)
            i = end
        return x


def _traced_run(layers: list[nn.Module], x: Any) -> Any:
    """``layers`` on x while torch.compile traces: one typed op for the run (:mod:`dnnbind.torch.typed_sequence`),
    whose kernels run the layers' backend calls as a fused run does, and whose result's running statistics
    are copied back as each batch norm layer's call does; one by one where a layer must run its own forward,
    a global module hook or a torch.func transform must see each layer, or torch.export traces (its
    programs keep one typed op per layer)."""
    if torch.compiler.is_exporting() or eager._functorch_transforms() or _global_hooks():
        return _one_by_one(layers, x)
    fusions = _fusions(layers, x)
    if fusions is None:
        return _one_by_one(layers, x)
    fused.count_batches(fusions)
    return typed_sequence.call(fusions, x)


def _run(model: Sequential, start: int, layers: list[nn.Module], x: Any) -> Any:
    """``layers`` (model's, from index ``start``) on x: as one node when every call is planned (and x
    qualifies), else one by one. A run planned before on an input like x, whose layers are the same and
    unchanged since (see :class:`_Planned`), takes its steps again without asking each layer."""
    if not _fusable_input(x):
        return _one_by_one(layers, x)
    key = (start, x.shape, x.dtype, x.device, type(x))
    runs = _PLANNED.get(model)
    known = None if runs is None else runs.get(key)
    if known is not None and known.holds(layers):
        return fused.run(known.run, x)
    fusions = _fusions(layers, x)
    planned = None if fusions is None else fused.plan_run(fusions, x)
    if planned is None:
        return _one_by_one(layers, x)
    runs = _PLANNED.setdefault(model, {})
    if len(runs) >= _PLANNED_PER_MODEL:
        runs.clear()
    runs[key] = _Planned(tuple(layers), tuple(map(_state, layers)), planned)
    return fused.run(planned, x)


class _Planned(NamedTuple):
    """A planned run and what it was planned from: its layers and each one's :func:`_state`."""

    layers: tuple[nn.Module, ...]
    states: tuple[tuple, ...]
    run: fused.Run

    def holds(self, layers: list[nn.Module]) -> bool:
        """Whether ``layers`` are this run's, each as it was: then its run is what planning gives."""
        return (len(layers) == len(self.layers) and all(map(operator.is_, layers, self.layers))
                and all(map(_same_state, layers, self.states)))


def _state(layer: nn.Module) -> tuple:
    """Everything a layer's call is planned from, kept for comparison by identity: its attributes'
    names and values (settings, training, its parameter and buffer dicts), the contents of the settings
    that are lists (``pool.kernel_size[0] = 1`` edits one in place), its parameters' and buffers'
    tensors, and their shapes, dtypes, devices and whether they are C-ordered (``.data`` may be replaced
    in place: ``model.to(memory_format=torch.channels_last)``). A setting set
    again to an equal value, or any other change, makes the run plan again."""
    tensors = [*layer._parameters.values(), *layer._buffers.values()]
    values = list(layer.__dict__.values())
    return list(layer.__dict__), values, _list_contents(values), tensors, _metas(tensors)


def _list_contents(values: list[Any]) -> list[tuple]:
    return [tuple(v) for v in values if type(v) is list]


def _same_state(layer: nn.Module, state: tuple) -> bool:
    keys, values, contents, tensors, metas = state
    attributes = layer.__dict__
    if (len(attributes) != len(keys) or not all(map(operator.is_, attributes, keys))
            or not all(map(operator.is_, attributes.values(), values))
            or (contents and _list_contents(values) != contents)):
        return False
    now = [*layer._parameters.values(), *layer._buffers.values()]
    return len(now) == len(tensors) and all(map(operator.is_, now, tensors)) and _metas(now) == metas


def _metas(tensors: list[Tensor | None]) -> list[tuple | None]:
    return [None if t is None else (t.shape, t.dtype, t.device, t.is_contiguous()) for t in tensors]


#: per Sequential, its planned runs by (the first layer's index, x's shape, dtype, device and type)
_PLANNED: weakref.WeakKeyDictionary[nn.Module, dict[tuple, _Planned]] = weakref.WeakKeyDictionary()
_PLANNED_PER_MODEL = 8


def _fusions(layers: list[nn.Module], x: Tensor) -> list[fused.Fusion] | None:
    """Each layer's op call on x's shape, or None when a layer must run its own forward. Every FUSABLE
    layer keeps its input's rank, the one thing of its input a layer's call depends on, so each is asked
    with x's shape."""
    # (the parameter dicts read directly: layer.parameters() would be guarded against being overridden, per
    # layer and class, on every call of a compiled model)
    # each layer on its own: mixed precision (autocast, parameters in another dtype), and channels last
    # (or other strides), which each layer's results follow, as torch's
    if F.autocast_dtype(x) is not None or not x.is_contiguous() or any(
            p is not None and (p.dtype != x.dtype or not p.is_contiguous())
            for layer in layers for p in layer._parameters.values()):
        return None
    shape = tuple(x.shape)
    fusions = [layer._fusion(shape) for layer in layers]      # type: ignore[operator]
    return None if any(f is None for f in fusions) else fusions


def _one_by_one(layers: list[nn.Module], x: Any) -> Any:
    for layer in layers:
        x = layer(x)
    return x


def _fusable_input(x: Any) -> bool:
    """Whether a run may take x as one node: a plain C-ordered CPU tensor (the layers' results follow
    a channels-last input's layout, dnnbind.torch.layout), no transform, dispatch mode, saved-tensor
    hook, global module hook, autocast or anomaly mode active (its report names the layer whose backward
    returned a NaN: one node per layer; nor a compiler tracing: the caller asked)."""
    return (type(x) in eager._PLAIN_TENSORS and x.is_cpu and x.is_contiguous()
            and not is_functorch_wrapped_tensor(x) and not eager._dispatch_modes() and not eager._functorch_transforms()
            and _saved_tensor_hooks(False) is None and not _global_hooks()
            and not torch._C._is_any_autocast_enabled() and not torch.is_anomaly_enabled())


def _global_hooks() -> bool:
    """Whether a hook registered for every module is there (torch.nn.modules.module.register_module_*)."""
    return any(getattr(_module, name, None) for name in _GLOBAL_HOOKS)


@torch.compiler.assume_constant_result
def _fusable_type(cls: type) -> bool:
    """Whether ``cls`` is one of FUSABLE: a constant while torch.compile traces (a traced membership test
    is a guard on each of the set's classes, checked on every call of the compiled model)."""
    return cls in FUSABLE


def _fusable_layer(layer: nn.Module) -> bool:
    """Whether ``layer`` may be part of a run: one of FUSABLE exactly, without hooks or an own forward,
    with settings its class lets fuse (its ``_fuses``, where it has one): a layer that may not splits the
    run around it, so the layers before and after it still run fused."""
    fuses = getattr(type(layer), "_fuses", None)
    return (_fusable_type(type(layer)) and not layer._forward_hooks and not layer._forward_pre_hooks
            and not layer._backward_hooks and not getattr(layer, "_backward_pre_hooks", None)
            and "forward" not in layer.__dict__ and (fuses is None or fuses(layer)))
