"""What every drop-in layer checks before it calls an op: batched or unbatched input, and arguments
that torch.nn has but dnnbind's ops cannot compute exactly yet."""
from __future__ import annotations

from typing import Any, Callable

import torch

from dnnbind.torch.errors import TorchValueError
from dnnbind.torch.fused import Fusion


def batched(layer: str, input: torch.Tensor, spatial: int) -> tuple[torch.Tensor, bool]:
    """(input with a batch axis, whether one was added): torch.nn's layers take (C, *spatial) as one sample;
    any other rank is refused with a ValueError that is also torch's RuntimeError."""
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"{layer}: input must be a torch.Tensor, not {type(input).__name__}")
    if input.dim() == spatial + 1:
        return input.unsqueeze(0), True
    if input.dim() != spatial + 2:
        raise TorchValueError(f"{layer}: expected {spatial + 1}D (unbatched) or {spatial + 2}D (batched) input, got "
                         f"input of shape {tuple(input.shape)}")
    return input, False


def per_dim(layer: Any, argument: str, value: Any) -> Any:
    """A per-dimension setting of ``layer`` as the op takes it: an int, or a tuple of one value per spatial
    dimension of the layer (``layer._spatial``; a 1-tuple stands for all, as in torch); a ValueError that
    is also torch's RuntimeError for any other length (the op would take the length for the spatial rank)."""
    if not isinstance(value, (list, tuple)):
        return value
    spatial = layer._spatial
    if len(value) == 1:
        return tuple(value) * spatial
    if len(value) != spatial:
        raise TorchValueError(f"{type(layer).__name__}: {argument} must be a single int or a tuple of {spatial} ints, "
                         f"got {value!r}")
    return tuple(value)


def unbatch(y: torch.Tensor, unbatched: bool) -> torch.Tensor:
    """Drop the batch axis :func:`batched` added."""
    return y.squeeze(0) if unbatched else y


def fusion(function: Callable[..., Any], tensors: tuple[torch.Tensor | None, ...], *args: Any,
           counted: torch.Tensor | None = None, **kwargs: Any) -> Fusion:
    """A layer's call of ``function`` (one of :mod:`dnnbind.torch.functional`'s) with its op's arrays
    after x (``tensors``) and arguments (``args``, ``kwargs``), as a fused run of
    :class:`~dnnbind.torch.sequential.Sequential` needs it: the op is the function's spec's, the arguments
    as its spec's arguments function gives them (as the eager plans key them)."""
    spec = getattr(function, "__dnnbind_spec__")
    return Fusion(spec.name, tensors, spec.arguments_function(*args, **kwargs), counted)


def not_supported(layer: str, argument: str, value: Any, why: str = "") -> NotImplementedError:
    """The error for a torch.nn argument value dnnbind's ops cannot compute exactly (yet)."""
    reason = f" ({why})" if why else ""
    return NotImplementedError(f"{layer}: {argument}={value!r} is not supported by dnnbind yet{reason}; it needs "
                               f"the high-level op to support it (torch.nn.{layer} computes it meanwhile)")
