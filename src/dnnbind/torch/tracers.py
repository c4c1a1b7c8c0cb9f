"""What torch's tracers see of dnnbind's layers: torch.fx records each as one ``call_module`` node, as it
records torch.nn's own layers, torch.jit.script refuses them by name, and Dynamo never compiles the code
that computes on arrays as a frame of its own.

``torch.fx.symbolic_trace`` treats the classes of the ``torch.nn`` namespace as leaf modules and traces
through every other module's forward with proxies, which dnnbind's checks refuse: :func:`leaf_forward`
makes a layer's forward record the layer itself instead. TorchScript cannot compile a forward that calls
Python, so :func:`refuse_script` (a layer's ``__prepare_scriptable__``, which torch.jit.script calls on
every module it is given) says so and names what traces them (torch.jit.trace records the typed ops).

Where a compiled function runs code eagerly (after a graph break, or a frame Dynamo gave up on, as under a
``torch.func`` transform it cannot trace), Dynamo still tries to compile every Python frame called from
there, also those that torch's C++ calls into: an op's kernel, an autograd.Function's forward and
backward, a registered gradient formula. Traced, a kernel's numpy code would become torch operations
and the C kernels' writes into its arrays would be lost (wrong numbers, or a crash). :func:`untraced`
marks such an entry point, so that it and everything it calls runs as written.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import torch
from torch.fx import Proxy

F = TypeVar("F", bound=Callable[..., Any])


def leaf_forward(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` of a layer, recording the layer as one ``call_module`` node when torch.fx traces it
    (its input a Proxy)."""
    @functools.wraps(forward)
    def recorded(self: torch.nn.Module, input: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(input, Proxy):
            tracer: Any = input.tracer            # (a torch.fx.Tracer, which knows the module's path)
            path = tracer.path_of_module(self)
            if not path:                          # the traced root itself: no node can call it
                raise RuntimeError(f"torch.fx cannot trace a dnnbind.torch {type(self).__name__} on its own (its "
                                   f"forward runs Python); trace a module that holds it, where it is one node")
            return tracer.create_proxy("call_module", path, (input, *args), kwargs)
        return forward(self, input, *args, **kwargs)
    return recorded


def untraced(fn: F) -> F:
    """``fn``, which Dynamo never compiles, nor anything it calls (``torch.compiler.disable(recursive=True)``):
    for the entry points that torch's C++ calls (kernels, autograd.Function methods, gradient formulas),
    whose frames only the dispatcher or autograd ever starts and which Dynamo's graphs hold as ops, never
    inline. (About 0.6 us a call.)"""
    disabled: F = torch.compiler.disable(fn, recursive=True)
    return disabled


def refuse_script(self: torch.nn.Module) -> torch.nn.Module:
    """RuntimeError naming the layer: torch.jit.script cannot compile it."""
    raise RuntimeError(f"{type(self).__name__} (dnnbind.torch) cannot be compiled by torch.jit.script: its forward "
                       f"runs Python. Use torch.compile or torch.export, or torch.jit.trace (which records "
                       f"dnnbind's typed ops; not the recurrent layers)")
