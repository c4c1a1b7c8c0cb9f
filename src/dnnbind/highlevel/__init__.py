"""High-level ops on numpy (reference backend) or CuPy (cuDNN / MIOpen) arrays.

Every op returns ``(result, pullback)``; each is declared once, in its spec (:mod:`dnnbind.highlevel.specs`),
and made into the public function by :mod:`dnnbind.highlevel.ops`. The shape logic shared by all
backends is :mod:`dnnbind.highlevel.dims`; repeated calls run their plans (:mod:`dnnbind.highlevel.plans`).
The names below resolve on first use, so that reading the op names imports nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dnnbind.highlevel.specs import OP_NAMES

if TYPE_CHECKING:       # what the lazy names resolve to, for type checkers
    from dnnbind.highlevel.dims import ConvDims, PoolDims
    from dnnbind.highlevel.grad_mode import no_grad
    from dnnbind.highlevel.ops import BoundPlan, plan
    from dnnbind.highlevel.plans import clear_plan_cache, plan_cache_info
    from dnnbind.highlevel.public import *  # noqa: F403

#: what the high-level layer exports besides the ops -> the module that defines it
EXTRAS = {"ConvDims": "dims", "PoolDims": "dims", "no_grad": "grad_mode", "plan": "ops", "BoundPlan": "ops",
          "plan_cache_info": "plans", "clear_plan_cache": "plans"}
__all__ = [*OP_NAMES, *EXTRAS]


def __getattr__(name: str) -> Any:
    """The ops (from :mod:`.public`) and the extras, imported on first use."""
    if name in OP_NAMES or name in EXTRAS:
        import importlib
        value = getattr(importlib.import_module(f"{__name__}.{EXTRAS.get(name, 'public')}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
