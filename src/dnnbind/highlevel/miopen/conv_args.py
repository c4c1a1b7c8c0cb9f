"""How MIOpen's convolution calls take their tensors: pure tables and functions, no library calls.

Each direction has two inputs and an output, named as in MIOpen's header::

    forward            inputs x, w    output y
    backward data      inputs dy, w   output dx
    backward weights   inputs dy, x   output dw

MIOpen's calls of one direction do not agree on the order of the two inputs: forward's workspace
query and immediate-mode calls take (w, x) while its Find and run take (x, w). :data:`ORDER` records
the order per direction and call kind, checked against the generated module's parameter names in
the tests; :func:`ordered` applies it. Descriptor-only calls (workspace, solutions) take the two
input descriptors in that order; data calls take (descriptor, pointer) pairs in that order.

MIOpen computes cross-correlation only; ``flip=True`` (true convolution) runs on the kernel flipped
in every spatial dim (:func:`flip_spatial`), for the forward and the data gradient, and the weight
gradient comes back flipped.
"""
from __future__ import annotations

from typing import Any

FORWARD, BACKWARD_DATA, BACKWARD_WEIGHTS = "forward", "backward_data", "backward_weights"
DIRECTIONS = (FORWARD, BACKWARD_DATA, BACKWARD_WEIGHTS)

#: call kinds: the workspace query, Find, the run after Find, and immediate mode's
#: GetSolutionCount / GetSolution / GetSolutionWorkspaceSize / CompileSolution ("solution") and run
CALLS = ("workspace", "find", "run", "solution", "immediate")

#: direction -> (its two inputs, its output)
TENSORS: dict[str, tuple[tuple[str, str], str]] = {
    FORWARD: (("x", "w"), "y"),
    BACKWARD_DATA: (("dy", "w"), "dx"),
    BACKWARD_WEIGHTS: (("dy", "x"), "dw"),
}

#: direction -> call kind -> the order in which that call takes the two inputs
ORDER: dict[str, dict[str, tuple[str, str]]] = {
    FORWARD: {"workspace": ("w", "x"), "find": ("x", "w"), "run": ("x", "w"), "solution": ("w", "x"),
              "immediate": ("w", "x")},
    BACKWARD_DATA: {call: ("dy", "w") for call in CALLS},
    BACKWARD_WEIGHTS: {call: ("dy", "x") for call in CALLS},
}

#: direction -> the field of miopenConvAlgoPerf_t's union that Find fills
PERF_FIELD = {FORWARD: "fwd_algo", BACKWARD_DATA: "bwd_data_algo", BACKWARD_WEIGHTS: "bwd_weights_algo"}


def output_name(direction: str) -> str:
    return TENSORS[direction][1]


def ordered(direction: str, call: str, inputs: dict[str, Any]) -> tuple[Any, Any]:
    """The two inputs of ``direction`` (by name) in the order ``call`` takes them.

    ``inputs`` must hold exactly the direction's two input names; KeyError/ValueError otherwise.
    """
    names = TENSORS[direction][0]
    if set(inputs) != set(names):
        raise ValueError(f"{direction} takes inputs {names}, got {tuple(inputs)}")
    first, second = ORDER[direction][call]
    return inputs[first], inputs[second]


def descriptor_args(direction: str, call: str, descs: dict[str, Any], conv: Any, out: Any) -> tuple:
    """(in1, in2, conv, out) descriptors for a descriptor-only call (workspace query, solutions)."""
    return (*ordered(direction, call, descs), conv, out)


def data_args(direction: str, call: str, tensors: dict[str, tuple[Any, Any]]) -> tuple:
    """(desc1, ptr1, desc2, ptr2) for a call on data (Find, run, immediate run)."""
    (d1, p1), (d2, p2) = ordered(direction, call, tensors)
    return d1, p1, d2, p2


def flip_index(ndim: int) -> tuple[slice, ...]:
    """Index that reverses every spatial axis (2 and up) of an (N, C, *spatial) array."""
    return (slice(None), slice(None)) + (slice(None, None, -1),) * (ndim - 2)


def flip_spatial(a: Any) -> Any:
    """A view of weights ``a`` (K, C, *kernel) with every kernel axis reversed (numpy or CuPy)."""
    return a[flip_index(a.ndim)]

