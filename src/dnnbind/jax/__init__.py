"""dnnbind's ops for JAX: every op as a JAX function that works under ``jit``, ``grad``, ``vmap`` and
``jax.checkpoint``, through XLA's FFI (one target per op and direction; see :mod:`dnnbind.jax.targets`).

Each function takes the public op's arguments (:mod:`dnnbind.highlevel.ops`) and returns its result
without the pullback: gradients come from the op's own backward through a ``jax.custom_vjp``. Batch
norm returns ``(y, running_mean, running_var)`` (the updated statistics as new arrays) when it is given
running statistics; dropout needs an explicit ``seed`` (an int, a 0-d integer array or a jax.random key).

Importing this module needs jax (``pip install "dnnbind[jax]"``) and checks that jaxlib's FFI API is the
one :mod:`dnnbind.gen.xla_ffi` was generated for; ``import dnnbind`` alone never imports jax.
"""
from __future__ import annotations

import inspect
from typing import Any

from dnnbind.jax.compat import check_jaxlib

check_jaxlib()

from dnnbind.jax.call import apply  # noqa: E402
from dnnbind.jax.table import TABLE  # noqa: E402
from dnnbind.jax.targets import register_targets  # noqa: E402

__all__ = ["apply", "register_targets", *TABLE]


def _make(op: str) -> Any:
    from dnnbind.jax.table import row

    def run(*args: Any, **kwargs: Any) -> Any:
        return apply(op, *args, **kwargs)
    # the public op's arguments; the result is the op's own (no pullback)
    signature = row(op).signature.replace(return_annotation=inspect.Signature.empty)
    run.__name__ = run.__qualname__ = op
    run.__doc__ = (f"dnnbind's {op} on JAX arrays (the public op's arguments, its result without a pullback): "
                   f"see :func:`dnnbind.{op}` and :mod:`dnnbind.jax`.")
    run.__signature__ = signature                  # type: ignore[attr-defined]
    return run


globals().update({op: _make(op) for op in TABLE})
