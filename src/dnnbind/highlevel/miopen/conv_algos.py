"""MIOpen convolution algorithms: Find, immediate mode, and running a choice.

Find (the default). ``miopenFindConvolution*Algorithm`` times the applicable algorithms on the data and
must have run for a problem on a handle before ``miopenConvolution*`` may run it there. It is offered
the most scratch memory any algorithm wants (``miopenConvolution*GetWorkSpaceSize``, MIOpen's own
maximum), capped by the workspace limit and halved while the memory pool cannot provide it; it writes
the output. Its results, fastest first, are :class:`Choice` s whose ``workspace`` is what MIOpen says
that algorithm needs.

Immediate mode. ``GetSolutionCount`` / ``GetSolution`` rank the solutions without running anything;
``CompileSolution`` must run once per solution and handle before ``*Immediate`` runs it; the workspace
of a solution is asked for again before every run (``GetSolutionWorkspaceSize``).

Every call takes its tensors in the order :mod:`conv_args` records.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Callable

from dnnbind.highlevel.gpu.workspace import address, allocate, is_out_of_memory
from dnnbind.highlevel.miopen import conv_args
from dnnbind.highlevel.miopen._lib import lib

#: how many perf results Find may return (MIOpen has five algorithm families per direction)
FIND_RESULTS = 8


@dataclass(frozen=True)
class Direction:
    """The generated MIOpen functions of one convolution direction."""

    name: str
    workspace: Callable[..., Any]            # miopenConvolution*GetWorkSpaceSize
    find: Callable[..., Any]                 # miopenFindConvolution*Algorithm
    run: Callable[..., Any]                  # miopenConvolution{Forward,BackwardData,BackwardWeights}
    solution_count: Callable[..., Any]
    solutions: Callable[..., Any]
    solution_workspace: Callable[..., Any]
    compile_solution: Callable[..., Any]
    immediate: Callable[..., Any]


_PREFIX = {conv_args.FORWARD: "Forward", conv_args.BACKWARD_DATA: "BackwardData",
           conv_args.BACKWARD_WEIGHTS: "BackwardWeights"}


def direction(name: str) -> Direction:
    """The :class:`Direction` of FORWARD, BACKWARD_DATA or BACKWARD_WEIGHTS."""
    p = _PREFIX[name]
    return Direction(name, getattr(lib, f"miopenConvolution{p}GetWorkSpaceSize"),
                     getattr(lib, f"miopenFindConvolution{p}Algorithm"), getattr(lib, f"miopenConvolution{p}"),
                     getattr(lib, f"miopenConvolution{p}GetSolutionCount"),
                     getattr(lib, f"miopenConvolution{p}GetSolution"),
                     getattr(lib, f"miopenConvolution{p}GetSolutionWorkspaceSize"),
                     getattr(lib, f"miopenConvolution{p}CompileSolution"),
                     getattr(lib, f"miopenConvolution{p}Immediate"))


@dataclass(frozen=True)
class Choice:
    """One way to run a direction: a Find algorithm, or an immediate-mode solution id."""

    algo: int
    workspace: int       # bytes MIOpen reported for it
    immediate: bool


@dataclass(frozen=True)
class Problem:
    """One direction of one convolution as the library sees it: descriptors and device pointers.

    ``inputs`` maps the direction's input names (see :data:`conv_args.TENSORS`) to
    (descriptor, pointer); ``out`` is the output's (descriptor, pointer); ``conv`` the convolution
    descriptor.
    """

    direction: str
    inputs: dict[str, tuple[Any, int]]
    out: tuple[Any, int]
    conv: Any

    def descriptors(self, call: str) -> tuple:
        descs = {name: desc for name, (desc, _) in self.inputs.items()}
        return conv_args.descriptor_args(self.direction, call, descs, self.conv, self.out[0])

    def data(self, call: str) -> tuple:
        return conv_args.data_args(self.direction, call, self.inputs)


def _scratch(wanted: int) -> tuple[Any, int]:
    """(memory, bytes): ``wanted`` bytes from the pool, halved while the pool cannot provide them."""
    while True:
        try:
            return allocate(wanted), wanted
        except Exception as exc:
            if not is_out_of_memory(exc) or wanted == 0:
                raise
            wanted //= 2


def find(d: Direction, handle: Any, p: Problem, *, exhaustive: bool, limit: int) -> list[Choice]:
    """Run Find for ``p`` on ``handle`` (writes the output); the usable results, fastest first."""
    size = ctypes.c_size_t()
    d.workspace(handle, *p.descriptors("workspace"), ctypes.byref(size))
    memory, offered = _scratch(min(size.value, limit))
    perfs = (lib.miopenConvAlgoPerf_t * FIND_RESULTS)()
    returned = ctypes.c_int()
    d.find(handle, *p.data("find"), p.conv, *p.out, FIND_RESULTS, ctypes.byref(returned), perfs, address(memory),
           offered, exhaustive)
    del memory
    field = conv_args.PERF_FIELD[d.name]
    out: list[Choice] = []
    for perf in perfs[:returned.value]:
        choice = Choice(int(getattr(perf, field)), int(perf.memory), False)
        if choice.workspace <= limit and choice not in out:
            out.append(choice)
    return out


def solutions(d: Direction, handle: Any, p: Problem, *, limit: int) -> list[Choice]:
    """Immediate mode's solutions for ``p`` in MIOpen's order (fastest expected first) within ``limit``."""
    descs = p.descriptors("solution")
    count = ctypes.c_size_t()
    d.solution_count(handle, *descs, ctypes.byref(count))
    if count.value == 0:
        return []
    found = (lib.miopenConvSolution_t * count.value)()
    returned = ctypes.c_size_t()
    d.solutions(handle, *descs, count.value, ctypes.byref(returned), found)
    return [Choice(int(s.solution_id), int(s.workspace_size), True) for s in found[:returned.value]
            if s.workspace_size <= limit]


def compile_solution(d: Direction, handle: Any, p: Problem, choice: Choice) -> None:
    """miopenConvolution*CompileSolution: needed once per solution and handle before it runs."""
    d.compile_solution(handle, *p.descriptors("solution"), choice.algo)


def execute(d: Direction, handle: Any, p: Problem, choice: Choice, scaling: tuple[Any, Any], limit: int) -> None:
    """Run ``choice`` for ``p``: its workspace (asked for again in immediate mode) from the pool, within
    ``limit`` (WorkspaceTooLarge otherwise), then the library call; alpha = 1, beta = 0."""
    size = choice.workspace
    if choice.immediate:
        query = ctypes.c_size_t()
        d.solution_workspace(handle, *p.descriptors("solution"), choice.algo, ctypes.byref(query))
        size = query.value
    memory = allocate(size, limit)
    if choice.immediate:
        d.immediate(handle, *p.data("immediate"), p.conv, *p.out, address(memory), size, choice.algo)
    else:
        alpha, beta = scaling
        d.run(handle, alpha, *p.data("run"), p.conv, choice.algo, beta, *p.out, address(memory), size)
