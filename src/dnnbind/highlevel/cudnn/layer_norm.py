"""Layer normalization on the cuDNN backend: not available. cuDNN's legacy API, which this backend uses,
has no layer normalization (cuDNN offers it through its graph API only, which this backend does not
run yet), so every entry point of the residual form raises NotImplementedError saying so. Importing
this module loads nothing (the support matrix reads :data:`WHY`)."""
from __future__ import annotations

from typing import Any, NoReturn

#: why the backend cannot run a layer norm (the support matrix's note)
WHY = "cuDNN's legacy API, which this backend uses, has no layer normalization (its graph API path will add it)"
REASON = ("layer_norm is not available on the cuDNN backend (its legacy API has no layer normalization; "
          "the graph API path will add it)")


def supports(*args: Any, **kwargs: Any) -> str:
    """Why this backend cannot run a layer norm: always :data:`REASON`."""
    return REASON


def layer_norm_forward(x: Any, weight: Any, bias: Any, normalized_ndim: int, eps: float,
                       **options: Any) -> NoReturn:
    raise NotImplementedError(REASON)


def layer_norm_backward(residuals: tuple, cotangents: tuple, normalized_ndim: int, eps: float,
                        **options: Any) -> NoReturn:
    raise NotImplementedError(REASON)


def layer_norm_residuals(x: Any, weight: Any, bias: Any, normalized_ndim: int, eps: float,
                         **options: Any) -> NoReturn:
    raise NotImplementedError(REASON)
