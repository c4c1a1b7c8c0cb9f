"""The public ops, one function per spec (:func:`dnnbind.highlevel.ops.public_function`); ``public.pyi``
(generated from the same specs) gives type checkers their signatures."""
from __future__ import annotations

from dnnbind.highlevel.ops import public_function
from dnnbind.highlevel.specs import SPECS

globals().update({name: public_function(spec) for name, spec in SPECS.items()})

__all__ = list(SPECS)
