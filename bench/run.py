"""`make bench`: every CPU benchmark, each printed as ratios against a reference measured in the same run."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# this checkout's code first, before any installed copy (an editable install may point at another checkout)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

SUITES = ["bench_bindings", "bench_reference", "bench_jax"]


def main() -> int:
    missed = []
    for name in SUITES:
        rows = importlib.import_module(name).main()
        missed += [r.name for r in rows if not r.met]
    print("\nall goals met" if not missed else "\ngoals missed: " + "; ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
