"""The FFI targets: per op a forward and a backward handler that run a dnnbind backend on XLA's buffers.

On the CPU the buffers are numpy views over XLA's memory (no copy in; the backend's results are copied
into XLA's result buffers once) and the numpy backend runs. On CUDA the same bodies get device buffers,
adopted as CuPy arrays on XLA's stream, and the cuDNN backend runs (this half has not run on a GPU yet).

Forward target ``dnnbind_NAME_forward``: arguments are the op's arrays (depth first, missing ones left
out), then the per-call static values (:mod:`dnnbind.jax.table`); results are the op's outputs, the
updated copies of the arrays it updates in place (aliased to those inputs), then the residuals but those
the backend declares the values of the op's arrays or results (``__lent``): the forward borrows the arrays
(:func:`dnnbind.highlevel.grad_mode.borrowing`), and those are passed to the backward instead.
Backward target ``dnnbind_NAME_backward``: arguments are the residuals, the cotangents of the float
outputs, then the per-call static values; results are the gradients of the differentiable arrays given.
Attributes: the public op's keyword arguments (:mod:`dnnbind.jax.attrs`), the arrays' nesting, and for
the backward the forward arrays' shapes and dtypes and the residual count.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, Sequence

import numpy as np

from dnnbind.highlevel.dims.checks import numpy_dtype
from dnnbind.highlevel.dispatch import BACKENDS, backend_function
from dnnbind.highlevel.grad_mode import saving_residuals
from dnnbind.highlevel.specs import SPECS
from dnnbind.highlevel.ops import residual_static
from dnnbind.highlevel.residual import ArraySpec, without
from dnnbind.jax import attrs as A
from dnnbind.jax import frame as F
from dnnbind.jax.table import Row, row

#: the attributes dnnbind.jax adds beside the op's keyword arguments
SHAPES, DTYPES, RESIDUALS, GIVEN, RANKS, NEEDS = "__shapes", "__dtypes", "__residuals", "__given", "__ranks", "__needs"
#: the places among the forward's residuals of those it declares the values of its arrays or results
#: (ArraySpec.same_as): not among the forward target's results (the JAX arrays themselves stand for them)
LENT = "__lent"
#: set on the forward call of an inference (no gradient asked for): the target saves and returns no residuals
INFERENCE = "__inference"

#: XLA platform -> the dnnbind backend its handlers run
PLATFORMS = {"cpu": "cpu" if "cpu" in BACKENDS else "reference", "CUDA": "cudnn"}


def target_name(op: str, phase: str) -> str:
    return f"dnnbind_{op}_{phase}"


def gradient_paths(r: Row, arrays: Sequence[Any]) -> list[tuple[int, ...] | None]:
    """Per array leaf (depth first): where its gradient is among the backward's results (an index, then
    indices into a nested result: rnn's dweights), None for a leaf without one."""
    paths: list[tuple[int, ...] | None] = []

    def walk(value: Any, path: tuple[int, ...] | None) -> None:
        if A.is_node(value):
            for i, v in enumerate(value):
                walk(v, None if path is None else (*path, i))
        elif value is not None:
            paths.append(path)

    for name, value, diff in zip(r.arrays, arrays, r.differentiable):
        walk(value, (r.gradients.index(f"d{name}"),) if diff else None)
    return paths


def _pick(grads: Any, path: tuple[int, ...]) -> Any:
    for i in path:
        grads = None if grads is None else grads[i]
    return grads


def encode_shapes(leaves: Sequence[Any]) -> dict[str, Any]:
    """The backward's attributes describing the forward's array leaves: ranks and sizes, dtype names."""
    flat: list[int] = []
    for leaf in leaves:
        flat += [len(leaf.shape), *leaf.shape]
    return {SHAPES: np.asarray(flat, np.int64), DTYPES: ",".join(np.dtype(leaf.dtype).name for leaf in leaves)}


def _decode_shapes(attrs: dict[str, Any]) -> list[ArraySpec]:
    flat, names = [int(v) for v in attrs[SHAPES]], attrs[DTYPES].split(",") if attrs[DTYPES] else []
    specs, i = [], 0
    for name in names:
        rank = flat[i]
        specs.append(ArraySpec(tuple(flat[i + 1:i + 1 + rank]), numpy_dtype(name)))
        i += 1 + rank
    return specs


def fold(frame: F.Frame) -> tuple[F.Frame, int]:
    """The frame with jax.vmap's batch axes (the leading axes beyond the ranks the call was traced with,
    ``__ranks``) folded into each buffer's next axis, and the batch size (1 when not batched)."""
    ranks = [int(r) for r in frame.attrs.get(RANKS, ())]
    extra = max((len(b.shape) - r for b, r in zip(frame.args, ranks)), default=0)
    if extra <= 0:
        return frame, 1
    size = int(np.prod(frame.args[0].shape[:extra], dtype=np.int64))

    def merge(b: F.Buffer) -> F.Buffer:
        return b._replace(shape=(int(np.prod(b.shape[:extra + 1], dtype=np.int64)), *b.shape[extra + 1:]))
    return frame._replace(args=[merge(b) for b in frame.args], rets=[merge(b) for b in frame.rets]), size


class Memory:
    """How one platform's handlers see buffers: host views on the CPU, CuPy arrays on CUDA."""

    def __init__(self, platform: str) -> None:
        self.platform = platform

    def array(self, frame: F.Frame, buffer: F.Buffer, writable: bool) -> Any:
        if self.platform == "cpu":
            return F.host_view(buffer, writable)
        from dnnbind.jax.device import device_array
        return device_array(buffer)

    def scalar(self, frame: F.Frame, buffer: F.Buffer) -> int:
        value = self.array(frame, buffer, False)
        return int(value.item() if hasattr(value, "item") else value)

    def store(self, target: Any, value: Any) -> None:
        if target.size:
            target[...] = value

    def scope(self, frame: F.Frame) -> Any:
        if self.platform == "cpu":
            return _NOTHING
        from dnnbind.jax.device import stream_scope
        return stream_scope(F.stream(frame.api, frame.context))


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NOTHING = _Nothing()


def _static_of(r: Row, frame: F.Frame, memory: Memory, arrays: list[Any], first_traced: int) -> tuple:
    """The residual form's static arguments of this call: the public op's keyword arguments from the
    attributes and the per-call values from their 0-d buffers, through the public op's checks."""
    kwargs = A.decode({k: v for k, v in frame.attrs.items() if not k.startswith("__")})
    for i, name in enumerate(r.traced):
        kwargs[name] = memory.scalar(frame, frame.args[first_traced + i])
    return residual_static(r.op, *arrays, **kwargs)


def forward_body(op: str, platform: str) -> Callable[[F.Frame], None]:
    r, memory = row(op), Memory(platform)
    forward = backend_function(PLATFORMS[platform], f"{op}_forward")

    def body(frame: F.Frame) -> None:
        frame = fold(frame)[0]
        structure = frame.attrs[A.TREE]
        count = structure.count("1")
        leaves = [memory.array(frame, b, False) for b in frame.args[:count]]
        arrays = A.fill(structure, leaves)
        rets = [memory.array(frame, b, True) for b in frame.rets]
        static = _static_of(r, frame, memory, arrays, count)
        outputs = sum(s is not None for s in SPECS[op].empty((*arrays, *static)).outputs)
        # the arrays updated in place: their result buffers (aliased to the inputs), filled with the input
        updated: list[Any] = []
        for name in r.updated:
            index = r.arrays.index(name)
            if arrays[index] is not None:
                target = rets[outputs + len(updated)]
                memory.store(target, arrays[index])
                arrays[index] = target
                updated.append(target)
        keep = INFERENCE not in frame.attrs
        with memory.scope(frame), saving_residuals(keep, borrowed=True):
            result, residuals = forward(*arrays, *static)
        if keep and LENT in frame.attrs:
            residuals = tuple(without(residuals, [int(i) for i in frame.attrs[LENT]]))
        results = result if isinstance(result, tuple) else (result,)
        given = [v for v in results if v is not None]
        for target, value in zip(rets, [*given, *updated, *residuals]):
            if value is not target:
                memory.store(target, value)
    return body


def backward_body(op: str, platform: str) -> Callable[[F.Frame], None]:
    r, memory = row(op), Memory(platform)
    backward = backend_function(PLATFORMS[platform], f"{op}_backward")

    def body(frame: F.Frame) -> None:
        frame, size = fold(frame)
        leaves = [s._replace(shape=(size * s.shape[0], *s.shape[1:])) if size > 1 and s.shape else s
                  for s in _decode_shapes(frame.attrs)]
        specs = A.fill(frame.attrs[A.TREE], leaves)
        saved = int(frame.attrs[RESIDUALS])
        given = [bool(g) for g in frame.attrs[GIVEN]]
        first_traced = saved + sum(given)
        static = _static_of(r, frame, memory, specs, first_traced)
        residuals = tuple(memory.array(frame, b, False) for b in frame.args[:saved])
        it = iter(frame.args[saved:first_traced])
        cotangents = tuple(memory.array(frame, next(it), False) if g else None for g in given)
        needs = tuple(bool(n) for n in frame.attrs[NEEDS]) if NEEDS in frame.attrs else None
        with memory.scope(frame):
            grads = (backward(residuals, cotangents, *static) if needs is None
                     else backward(residuals, cotangents, *static, needs=needs))
        if not isinstance(grads, tuple):
            grads = (grads,)
        picked = [_pick(grads, p) for p in gradient_paths(r, specs) if p is not None and (needs is None or needs[p[0]])]
        for target, value in zip((memory.array(frame, b, True) for b in frame.rets), picked):
            memory.store(target, value)
    return body


#: (op, phase, platform) -> the registered handler (kept alive: XLA holds only its address)
_REGISTERED: dict[tuple[str, str, str], Any] = {}
_LOCK = threading.Lock()


def ensure_registered(op: str, platform: str) -> None:
    """Register op's forward and backward targets with XLA for ``platform`` ("cpu" or "CUDA"), once."""
    import jax
    with _LOCK:
        for phase, make in (("forward", forward_body), ("backward", backward_body)):
            key = (op, phase, platform)
            if key in _REGISTERED:
                continue
            handler = F.handler(make(op, platform))
            address = ctypes.cast(handler, ctypes.c_void_p).value
            jax.ffi.register_ffi_target(target_name(op, phase), jax.ffi.pycapsule(address), platform=platform,
                                        api_version=1)
            _REGISTERED[key] = handler


def register_targets(platform: str = "cpu") -> None:
    """Register every op's targets with XLA for ``platform`` ("cpu" or "CUDA"). A traced call registers
    its own op's; a program that runs dnnbind's ops without tracing them in this process (one loaded
    with ``jax.export.deserialize``) needs this first."""
    from dnnbind.highlevel.specs import OP_NAMES
    for op in OP_NAMES:
        ensure_registered(op, platform)
