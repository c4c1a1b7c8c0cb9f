"""dnnbind: NVIDIA cuDNN and AMD MIOpen for Python.

Two layers: generated ctypes bindings (``dnnbind.gen.cudnn``, ``dnnbind.gen.miopen``) and a thin
high-level layer (``dnnbind.highlevel``) whose ops return ``(result, pullback)``.

Importing this package is cheap: it loads no vendor library and imports neither numpy nor the
high-level layer until one of their names is first used.
"""
from __future__ import annotations

from dnnbind.runtime.errors import CudnnError, DnnError, LibraryNotFoundError, MiopenError

TYPE_CHECKING = False   # importing typing costs milliseconds; type checkers take this as typing's
if TYPE_CHECKING:       # what the lazy names below resolve to, for type checkers and IDEs
    from typing import Any

    from dnnbind.highlevel.dims import ConvDims, PoolDims
    from dnnbind.highlevel.grad_mode import no_grad
    from dnnbind.highlevel.ops import BoundPlan, plan
    from dnnbind.highlevel.plans import clear_plan_cache, plan_cache_info
    from dnnbind.highlevel.public import (activation, batchnorm, conv, conv_bias_activation, conv_transpose, dropout,
                                          layer_norm, logsoftmax, maxpool, meanpool, rnn, softmax)
    from dnnbind.runtime.trace import trace

__version__ = "0.1.0"

from dnnbind.highlevel import EXTRAS as _EXTRAS         # (names only: nothing is imported for them yet)
from dnnbind.highlevel.specs import OP_NAMES as _OP_NAMES

_HIGHLEVEL_NAMES = frozenset({*_OP_NAMES, *_EXTRAS})

__all__ = ["CudnnError", "DnnError", "LibraryNotFoundError", "MiopenError", "__version__", "trace",
           *sorted(_HIGHLEVEL_NAMES)]


def __getattr__(name: str) -> Any:
    """Resolve the public ops lazily so that ``import dnnbind.gen.cudnn`` stays fast."""
    if name in _HIGHLEVEL_NAMES:
        from dnnbind import highlevel
        value = getattr(highlevel, name)
        globals()[name] = value   # later lookups are plain module attributes (per-call overhead)
        return value
    if name == "trace":
        from dnnbind.runtime.trace import trace
        return trace
    raise AttributeError(f"module 'dnnbind' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too, so that ``dir(dnnbind)`` and tab completion show the ops."""
    return sorted({n for n in globals() if n not in ("TYPE_CHECKING", "annotations")} | set(__all__))
