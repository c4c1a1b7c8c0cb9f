"""Layer normalization's argument checks (torch.nn.functional.layer_norm's rules)."""
from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np

from dnnbind.highlevel.dims.checks import check_shape

Shape = tuple[int, ...]


def check_normalized_shape(normalized_shape: Any) -> Shape:
    """``normalized_shape`` as a tuple of ints: an int, or a non-empty sequence of non-negative ints."""
    # a list shows as a tuple (framework adapters hand the value on through JSON, which keeps lists only)
    given = tuple(normalized_shape) if isinstance(normalized_shape, list) else normalized_shape
    items = (given,) if isinstance(given, numbers.Integral) and not isinstance(given, bool) else given
    if not isinstance(items, Sequence) or isinstance(items, (str, bytes)):
        raise TypeError(f"normalized_shape={given!r} must be an int or a sequence of ints, "
                        f"not {type(given).__name__}")
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, numbers.Integral):
            raise TypeError(f"normalized_shape={given!r} must hold ints, not {type(item).__name__}")
    shape = tuple(int(item) for item in items)
    if not shape:
        raise ValueError(f"normalized_shape={given!r} must name at least one dimension (torch requires it)")
    if any(s < 0 for s in shape):
        raise ValueError(f"normalized_shape={given!r} must hold non-negative ints")
    return shape


def check_layer_norm(x_shape: Sequence[int], normalized_shape: Any, weight_shape: Sequence[int] | None,
                     bias_shape: Sequence[int] | None) -> int:
    """Check layer norm's shapes and return ``normalized_ndim``, the number of trailing dims of x it
    normalizes over: x must end with ``normalized_shape`` (so a 0-d x is refused), weight and bias
    (None: absent) must have that shape. Any dimension may be 0 (empty in, empty out, as torch)."""
    normalized = check_normalized_shape(normalized_shape)
    x_shape, n = tuple(int(s) for s in x_shape), len(normalized)
    if len(x_shape) < n or x_shape[len(x_shape) - n:] != normalized:
        raise ValueError(f"x has shape {x_shape} but normalized_shape={normalized} must be its trailing "
                         f"dimensions: x of shape (*, {', '.join(map(str, normalized))}) expected")
    if weight_shape is not None:
        check_shape("weight", weight_shape, normalized, "normalized_shape")
    if bias_shape is not None:
        check_shape("bias", bias_shape, normalized, "normalized_shape")
    return n
