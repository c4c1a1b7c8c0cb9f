"""What each backend supports, as data, and the support matrix ``python -m dnnbind ops`` prints.

Every backend package has a ``support`` module whose :data:`SUPPORTS` maps each op it implements to a
:class:`Support`: the dtypes it runs and the op's features (from the op's spec, ``OpSpec.features``) it
lacks. The matrix reads the specs (:mod:`dnnbind.highlevel.specs`) for the rows and
:data:`dnnbind.highlevel.dispatch.BACKENDS` for the columns, and imports the backends' ``support``
modules, which load no vendor library: no CuPy or GPU is needed to print it.
"""
from __future__ import annotations

import importlib
from typing import Any, NamedTuple

from dnnbind.highlevel.dims.checks import SUPPORTED_DTYPES


class Support(NamedTuple):
    """One op on one backend: the dtypes it runs and the spec's features it lacks (with why); ``blas``:
    its CPU implementation calls numpy's BLAS (whose threads a framework may hold around the call);
    ``unavailable``: why the backend cannot run the op at all (its functions raise NotImplementedError
    saying so), empty when it can."""
    dtypes: tuple[str, ...] = SUPPORTED_DTYPES
    lacks: dict[str, str] = {}
    blas: bool = False
    unavailable: str = ""


def backend_support(backend: str) -> dict[str, Support] | None:
    """The backend's SUPPORTS (op -> Support), or None when it declares none."""
    from dnnbind.highlevel.dispatch import BACKENDS
    try:
        module = importlib.import_module(f"{BACKENDS[backend]}.support")
    except ModuleNotFoundError:
        return None
    return with_chains(module.SUPPORTS)


def with_chains(supports: dict[str, Support]) -> dict[str, Support]:
    """``supports`` with each op that is two ops in a row (a spec's ``chain``) supported as its two ops
    are together: the dtypes both run, the features either lacks, BLAS if either calls it, unavailable
    if either is. A backend declares only the ops it implements itself."""
    from dnnbind.highlevel.specs import SPECS
    out = dict(supports)
    for op, spec in SPECS.items():
        if spec.chain is None:
            continue
        parts = [supports.get(spec.chain.first), supports.get(spec.chain.second)]
        if any(p is None for p in parts):
            out.pop(op, None)
            continue
        first, second = parts
        assert first is not None and second is not None
        out[op] = Support(tuple(d for d in first.dtypes if d in second.dtypes), {**first.lacks, **second.lacks},
                          first.blas or second.blas, first.unavailable or second.unavailable)
    return out


def matrix() -> dict[str, dict[str, Support | None]]:
    """op -> backend -> its Support (None: the backend lacks the op), for every spec and backend."""
    from dnnbind.highlevel.dispatch import BACKENDS
    from dnnbind.highlevel.specs import SPECS
    declared = {backend: backend_support(backend) or {} for backend in BACKENDS}
    unknown = [(backend, op, feature) for backend, ops in declared.items() for op, s in ops.items()
               for feature in s.lacks if op in SPECS and feature not in SPECS[op].features]
    if unknown:
        raise ValueError(f"backend support names features its op's spec does not have: {unknown}")
    return {op: {backend: declared[backend].get(op) for backend in BACKENDS} for op in SPECS}


def render(width: int = 100) -> str:
    """The support matrix as text: per op, per backend, the dtypes and the features it lacks."""
    from dnnbind.highlevel.dispatch import BACKENDS
    from dnnbind.highlevel.specs import SPECS
    table = matrix()
    first = max(16, max(map(len, table)) + 2)        # the op column: the longest name and two spaces
    lines = [(f"{'op':{first}s}" + "".join(f"{b:20s}" for b in BACKENDS)).rstrip(), ""]
    notes: list[str] = []
    for op, row in table.items():
        cells = []
        for backend, support in row.items():
            if support is None or support.unavailable:
                cells.append("-")
                if support is not None:
                    notes.append(f"  {op} on {backend}: not available: {support.unavailable}")
                continue
            dtypes = "all dtypes" if support.dtypes == SUPPORTED_DTYPES else "/".join(
                d.replace("float", "f") for d in support.dtypes)
            cells.append(dtypes + (f", lacks {len(support.lacks)}" if support.lacks else ""))
            notes += [f"  {op} on {backend}: no {feature}: {why}" for feature, why in support.lacks.items()]
        lines.append((f"{op:{first}s}" + "".join(f"{c:20s}" for c in cells)).rstrip())
    lines += ["", "features per op (every backend has them unless listed below):"]
    lines += [_wrap(f"  {op}: {', '.join(spec.features) or '-'}", width) for op, spec in SPECS.items()]
    if notes:
        lines += ["", "what a backend lacks:", *(_wrap(note, width) for note in notes)]
    lines += ["", f"dtypes: {', '.join(SUPPORTED_DTYPES)} ('all dtypes' when a backend runs every one)"]
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(text, width, subsequent_indent="      "))


def main(argv: Any = None) -> int:
    """``python -m dnnbind ops``: print the matrix."""
    print(render(), end="")
    return 0
