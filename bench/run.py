"""`make bench`: every CPU benchmark, each printed as ratios against a reference measured in the same run.

The header says which BLAS numpy runs (bench/blas_info.py, through threadpoolctl), and warns loudly where
OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE is set (measure with both unset for the command alone:
``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE make bench``)."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# this checkout's code first, before any installed copy (an editable install may point at another checkout)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import blas_info  # noqa: E402  (bench/blas_info.py)

# bench_kernels before bench_reference, which imports torch (whose threads change the kernels' thread rules)
SUITES = ["bench_bindings", "bench_kernels", "bench_reference", "bench_jax"]


def main() -> int:
    print("\n".join(blas_info.header_lines()))
    missed = []
    for name in SUITES:
        rows = importlib.import_module(name).main()
        missed += [r.name for r in rows if not r.met]
    print("\nall goals met" if not missed else "\ngoals missed: " + "; ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
