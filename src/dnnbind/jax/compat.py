"""Which jax/jaxlib dnnbind.jax runs with: jaxlib's FFI API against the one dnnbind.gen.xla_ffi was
generated for, checked when dnnbind.jax is imported."""
from __future__ import annotations

import re
from pathlib import Path

from dnnbind.gen import xla_ffi as X


def installed_api_version() -> tuple[int, int] | None:
    """(major, minor) of the FFI C API in the installed jaxlib's header (None when it ships no header)."""
    import jax.ffi
    header = Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    if not header.is_file():
        return None
    text = header.read_text()
    found = [re.search(rf"^#define XLA_FFI_API_{part}\s+(\d+)", text, re.M) for part in ("MAJOR", "MINOR")]
    if not all(found):
        return None
    return int(found[0].group(1)), int(found[1].group(1))         # type: ignore[union-attr]


def problem(installed: tuple[int, int] | None, jaxlib_version: str) -> str | None:
    """Why dnnbind.jax cannot run with this jaxlib, or None. Only the API version the bindings were generated
    for runs: a minor version may change a struct's layout (0.2 -> 0.3 inserted a field into
    XLA_FFI_State_Get_Args, as ``python -m generator diff xla_ffi --old 0.8.1`` shows)."""
    ours = (X.XLA_FFI_API_MAJOR, X.XLA_FFI_API_MINOR)
    if installed is None or installed == ours:
        return None
    return (f"jaxlib {jaxlib_version} has XLA FFI API {installed[0]}.{installed[1]}, but dnnbind.jax was generated "
            f"for FFI API {ours[0]}.{ours[1]} (jaxlib {X.SOURCES['jaxlib']}): install the jax extra's range, "
            f"pip install \"dnnbind[jax]\", or regenerate dnnbind.gen.xla_ffi from this jaxlib's header")


def check_jaxlib() -> None:
    """ImportError naming both versions when the installed jaxlib's FFI API is not one dnnbind.jax speaks.
    (Each call checks again against the calling XLA's API table.)"""
    try:
        import jaxlib
    except ImportError as exc:
        raise ImportError('dnnbind.jax needs jax and jaxlib: pip install "dnnbind[jax]"') from exc
    message = problem(installed_api_version(), getattr(jaxlib, "__version__", "?"))
    if message:
        raise ImportError(message)
