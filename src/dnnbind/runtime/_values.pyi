"""Type stub of the optional C extension built from csrc/values.c (see checks.py)."""
from typing import Any

def values_ok(spec: tuple, *values: Any) -> bool: ...
