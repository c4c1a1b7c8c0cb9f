"""numpy's BLAS as threadpoolctl reports it, for the benchmarks' headers: which library, version and
kernels (OpenBLAS's ``architecture``, the core it chose for this processor) ran, on how many threads.

A product's speed depends on those kernels: ``OPENBLAS_CORETYPE`` (with ``OPENBLAS_L2_SIZE``) makes
OpenBLAS run the kernels of another core, e.g. Haswell's AVX2 ones on an AVX-512 processor (half the
multiply-adds per cycle). Comparisons against numpy's BLAS are made with both unset for the benchmark
command alone (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE make bench``); the benchmarks refuse
nothing, but :func:`header_lines` warns loudly where either is set.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

#: The variables that change which kernels numpy's OpenBLAS runs.
OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


@dataclass(frozen=True)
class Blas:
    """One BLAS library loaded in this process, as threadpoolctl describes it."""
    library: str             # the file's name prefix, e.g. libscipy_openblas
    internal_api: str        # openblas, mkl, blis, ...
    version: str
    architecture: str        # the kernels it runs here (OpenBLAS's corename, e.g. SkylakeX); "?" if unknown
    threads: int
    filepath: str

    def describe(self) -> str:
        return (f"{self.internal_api} {self.version} ({self.library}), kernels {self.architecture}, "
                f"threads {self.threads}")


def numpy_blas() -> Blas | None:
    """numpy's own BLAS (the one loaded from numpy's package, else the first BLAS loaded), or None where
    threadpoolctl is not installed (the dev extra pins it) or finds no BLAS."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    found = [info for info in threadpool_info() if info.get("user_api") == "blas"]
    if not found:
        return None
    info = next((i for i in found if _in_numpy(i.get("filepath", ""))), found[0])
    return Blas(str(info.get("prefix", "?")), str(info.get("internal_api", "?")), str(info.get("version") or "?"),
                str(info.get("architecture") or "?"), int(info.get("num_threads", 0)), str(info.get("filepath", "")))


def _in_numpy(filepath: str) -> bool:
    """Whether a library file is numpy's own: under numpy's package or beside it (numpy.libs, numpy/.libs)."""
    site = Path(np.__file__).resolve().parent.parent
    try:
        return Path(filepath).resolve().relative_to(site).parts[0].startswith("numpy")
    except (ValueError, IndexError):
        return False


def kernels() -> str:
    """The name of the kernels numpy's BLAS runs here (what each benchmark row reports), or "unknown"."""
    blas = numpy_blas()
    return blas.architecture if blas is not None else "unknown"


def overrides(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables of :data:`OVERRIDES` that are set, with their values."""
    return {name: environ[name] for name in OVERRIDES if name in environ}


def header_lines(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The benchmarks' header: numpy's BLAS, and a loud warning where :data:`OVERRIDES` are set."""
    blas = numpy_blas()
    lines = [f"numpy {np.__version__}, BLAS: " + (blas.describe() if blas is not None else
                                                   "unknown (threadpoolctl is not installed: pip install -e '.[dev]')")]
    lines.append(", ".join(f"{name}={environ.get(name, '(unset)')}" for name in OVERRIDES))
    setting = overrides(environ)
    if setting:
        bar = "!" * 100
        lines += [bar,
                  "WARNING: " + " and ".join(f"{k}={v}" for k, v in setting.items()) + " set: numpy's OpenBLAS runs "
                  "the kernels named, not its own choice for this processor,",
                  "WARNING: so every figure against numpy's BLAS is a figure for that configuration. Measure with "
                  "both unset for the command alone:",
                  "WARNING:     env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE make bench",
                  bar]
    return lines
