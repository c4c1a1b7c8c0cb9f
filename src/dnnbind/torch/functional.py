"""dnnbind's ops on torch tensors; same arguments and semantics as :mod:`dnnbind.highlevel.ops`.

One function per op spec, made from it (:func:`dnnbind.torch.spec_functions.torch_function`): the spec's
parameters, defaults and ``tensor_doc``, its unbatched rule, autocast policy and outputs.
``functional.pyi`` (generated from the same specs) gives type checkers their signatures.

Each runs as a typed ``torch.library`` custom op (:mod:`dnnbind.torch.typed`), differentiable through
``torch.autograd`` and traceable by ``torch.compile`` and ``torch.export``. Unbatched input follows the
high-level ops' rules (:mod:`dnnbind.highlevel.unbatched`): the batch axis is added with ``unsqueeze``
before the op and removed from its results, so autograd and the compilers see plain tensor views.
"""
from __future__ import annotations

from dnnbind.highlevel.specs import SPECS
from dnnbind.torch.spec_functions import autocast_dtype, torch_function

globals().update({name: torch_function(spec) for name, spec in SPECS.items()})

__all__ = [*SPECS, "autocast_dtype"]
