"""The op specs: every op declared once (see :mod:`.base`), one module per op family.

:data:`OP_NAMES` names the ops in the order the public API shows them (readable without numpy, for
``dir(dnnbind)``); :data:`SPECS` (from :mod:`.registry`) maps each to its :class:`~.base.OpSpec`.
Adding an op means adding its spec module and name here, its primitives in each backend, and its
tests; the public function, its residual form, edge policy, plan, support-matrix row and framework
adapters follow from the spec.
"""
from __future__ import annotations

from typing import Any

OP_NAMES = ("conv", "conv_transpose", "conv_bias_activation", "maxpool", "meanpool", "softmax", "logsoftmax", "activation", "batchnorm",
            "layer_norm", "dropout", "rnn")

_LAZY = {"SPECS": "registry", "OpSpec": "base", "ArrayArg": "base", "EmptyCall": "base", "Output": "base",
         "Param": "base", "Unbatching": "base", "REQUIRED": "base", "Chain": "base", "Autocast": "base"}


def __getattr__(name: str) -> Any:
    """SPECS and the spec classes, imported on first use (they need numpy; OP_NAMES does not)."""
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["OP_NAMES", *_LAZY]
