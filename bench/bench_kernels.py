"""dnnbind's hand-written C kernels (dnnbind-native) against the libraries doing the same job.

    python bench/bench_kernels.py [--quick] [--repeats N] [--family NAME] [--cpu-time]

A kernel is worth keeping only where it beats the well-kept library that does the same job by more than
10% (issue 42): numpy's BLAS for products and im2col convolutions, numpy for elementwise passes and
reductions. For each family of kernels (a csrc/ file of dnnbind-native) this times the kernel path
against the library route on a few float32 shapes (ResNet-18-like layers at batch 8, and small batches),
and prints library time / kernel time with the verdict: ``keep`` above 1.10, else ``library``.

Most rows time one of dnnbind's public ops twice: as it runs (the kernels where the cpu backend uses
them) and with the kernels turned off in-process (:func:`kernels_off`: what ``DNNBIND_NATIVE=0`` gives,
the numpy and BLAS paths the backend would keep without them, e.g. im2col or shifted products on BLAS
for a convolution, numpy expressions for softmax, pooling and activations). A few rows time one
kernel against the numpy expression for the same result (vmath's exp, the per-channel sums, the
flipped filter of a data gradient).

Both sides use every core as they would in a user's process: the kernels their pool, numpy's BLAS its
own threads, numpy's elementwise loops one thread. Timing is bench/common.py's compare (alternating
bursts after a pause). Each row names the kernels numpy's BLAS ran (threadpoolctl); measure with
``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` unset (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE``).
torch is not imported: with it loaded the kernels' thread rules change (make bench runs this table
before the torch comparisons). ``--cpu-time`` compares the two on one core instead (the process pinned to
one CPU, numpy's BLAS limited to one thread, the calling thread's CPU time: figures a busy machine
barely disturbs, as bench_reference's ``--cpu-time``).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

# this checkout's code first, before any installed copy (an editable install may point at another checkout)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dnnbind  # noqa: E402
import dnnbind.highlevel.cpu  # noqa: E402
from dnnbind.highlevel.cpu import native  # noqa: E402

import blas_info  # noqa: E402
import common  # noqa: E402
from common import Row, compare  # noqa: E402

#: Keep a kernel where the library route takes more than this many times the kernel's time.
KEEP_ABOVE = 1.10
#: Each timed sample is at least this long (calls of microseconds are repeated back to back).
SAMPLE_S = 2e-3

Call = Callable[[], Any]


@dataclass(frozen=True)
class Case:
    """One row: a family of C kernels, a problem, and how to build its two calls (kernel, library)."""
    family: str
    name: str
    build: Callable[[], tuple[Call, Call]]
    quick: bool = False          # in the --quick set


@contextlib.contextmanager
def kernels_off() -> Iterator[None]:
    """The C kernels off in this process while inside (as ``DNNBIND_NATIVE=0`` turns them off): the cpu
    backend takes its numpy and BLAS paths."""
    found = native.library
    native.library = lambda: None                               # type: ignore[assignment]
    try:
        yield
    finally:
        native.library = found                                  # type: ignore[assignment]


def _arrays(shapes: list[tuple[int, ...]], scales: tuple[float, ...] = ()) -> list[np.ndarray]:
    """Standard normal float32 arrays of ``shapes``, the i-th times ``scales[i]`` (default 1)."""
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s, dtype=np.float32) * np.float32(scales[i] if i < len(scales) else 1)
            for i, s in enumerate(shapes)]


def op_case(family: str, name: str, op: Callable[..., Any], shapes: list[tuple[int, ...]], backward: bool,
            quick: bool = False, scales: tuple[float, ...] = ()) -> Case:
    """A public op on arrays of ``shapes``: forward alone (inference, under ``dnnbind.no_grad()``) or forward
    and backward, with the kernels (as it runs) and without them (:func:`kernels_off`)."""

    def build() -> tuple[Call, Call]:
        arrays = _arrays(shapes, scales)
        with dnnbind.no_grad():
            y = op(*arrays)[0]
        y = y[0] if isinstance(y, tuple) else y
        dy = np.random.default_rng(1).standard_normal(np.shape(y), dtype=np.float32)

        def call() -> Any:
            if not backward:
                with dnnbind.no_grad():
                    return op(*arrays)[0]
            out, pullback = op(*arrays)
            return out, pullback(dy)

        def library() -> Any:
            with kernels_off():
                return call()

        return call, library

    return Case(family, f"{name} {'fwd+bwd' if backward else 'fwd'}", build, quick)


def both(family: str, name: str, op: Callable[..., Any], shapes: list[tuple[int, ...]],
         quick: bool = False, scales: tuple[float, ...] = ()) -> list[Case]:
    """The forward and the forward + backward of an op (only the latter in the --quick set)."""
    return [op_case(family, name, op, shapes, False, scales=scales),
            op_case(family, name, op, shapes, True, quick, scales)]


def call_case(family: str, name: str, make: Callable[[], tuple[Call, Call]], quick: bool = False) -> Case:
    return Case(family, name, make, quick)


def _vmath(function: str, library: Callable[[np.ndarray], np.ndarray]) -> Callable[[], tuple[Call, Call]]:
    def build() -> tuple[Call, Call]:
        (x,) = _arrays([(8, 64, 56, 56)])
        return (lambda: native.vmath(x, function)), (lambda: library(x))
    return build


def _channel_sums() -> tuple[Call, Call]:
    from dnnbind.highlevel.cpu import channels
    (a,) = _arrays([(8, 64, 56, 56)])

    def library() -> Any:
        with kernels_off():
            return channels.channel_sums(a)

    return (lambda: channels.channel_sums(a)), library


def _flipped_filter() -> tuple[Call, Call]:
    from dnnbind.highlevel.cpu.conv_geometry import data_grad_problem
    from dnnbind.highlevel.dims import ConvDims
    x_shape, w_shape = (8, 512, 7, 7), (512, 512, 3, 3)
    dims = ConvDims(x_shape, w_shape, padding=1, dtype=np.float32)
    dy, w = _arrays([dims.y_shape, w_shape])

    def library() -> Any:
        with kernels_off():
            return data_grad_problem(dy, w, dims)[1]

    return (lambda: data_grad_problem(dy, w, dims)[1]), library


def _lstm(seq: int, batch: int, inputs: int,
          hidden: int) -> tuple[Callable[..., Any], list[tuple[int, ...]], tuple[float, ...]]:
    """An LSTM layer's op, its arrays' shapes and their scales (weights as torch initializes them)."""
    def op(x: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray, b_hh: np.ndarray) -> Any:
        return dnnbind.rnn(x, [(w_ih, w_hh, b_ih, b_hh)], mode="lstm", hidden_size=hidden)
    return (op, [(seq, batch, inputs), (4 * hidden, inputs), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)],
            (1.0,) + (hidden ** -0.5,) * 4)


def _conv(**kw: Any) -> Callable[..., Any]:
    return lambda x, w: dnnbind.conv(x, w, **kw)


def cases() -> list[Case]:
    """Every row, by family (the csrc/ file whose kernels the kernel side runs)."""
    from dnnbind.highlevel.cpu.activation import sigmoid
    lstm, lstm1 = _lstm(50, 32, 128, 256), _lstm(200, 1, 64, 128)
    return [
        # direct convolution (conv.c), against im2col / shifted products on numpy's BLAS
        *both("direct conv", "3x3 64->64 @56 b8", _conv(padding=1), [(8, 64, 56, 56), (64, 64, 3, 3)], quick=True),
        *both("direct conv", "3x3 128->128 @28 b8", _conv(padding=1), [(8, 128, 28, 28), (128, 128, 3, 3)]),
        *both("direct conv", "3x3/2 128->256 @28 b8", _conv(padding=1, stride=2),
              [(8, 128, 28, 28), (256, 128, 3, 3)], quick=True),
        *both("direct conv", "7x7/2 3->64 @224 b8", _conv(padding=3, stride=2), [(8, 3, 224, 224), (64, 3, 7, 7)]),
        *both("direct conv", "3x3 64->64 @56 b1", _conv(padding=1), [(1, 64, 56, 56), (64, 64, 3, 3)], quick=True),
        *both("direct conv", "grouped g=4 128 @28 b8", _conv(padding=1, groups=4), [(8, 128, 28, 28), (128, 32, 3, 3)]),
        # depthwise convolution (depthwise.c), against numpy's blocked shifted views
        *both("depthwise", "3x3 96 @56 b8", _conv(padding=1, groups=96), [(8, 96, 56, 56), (96, 1, 3, 3)], quick=True),
        *both("depthwise", "3x3/2 96 @56 b8", _conv(padding=1, stride=2, groups=96), [(8, 96, 56, 56), (96, 1, 3, 3)]),
        *both("depthwise", "3x3 32 @112 b1", _conv(padding=1, groups=32), [(1, 32, 112, 112), (32, 1, 3, 3)],
              quick=True),
        # the folded path's im2col columns on small planes are numpy's window copy (a C copy was no faster)
        # the stride-1 data gradient's flipped, transposed filter (swaps.c), against numpy's transpose copy
        call_case("filters", "flip-transpose w(512, 512, 3, 3)", _flipped_filter, quick=True),
        # 1x1 (pointwise) convolutions have no kernel: they are numpy's BLAS products either way
        # pooling (pool.c; mean pooling on depthwise.c's kernels), against numpy's window views
        *both("pooling", "maxpool 3x3/2 64 @112 b8", lambda x: dnnbind.maxpool(x, 3, stride=2, padding=1),
              [(8, 64, 112, 112)], quick=True),
        *both("pooling", "maxpool 3x3/2 64 @112 b1", lambda x: dnnbind.maxpool(x, 3, stride=2, padding=1),
              [(1, 64, 112, 112)]),
        *both("pooling", "meanpool 2x2 128 @56 b8", lambda x: dnnbind.meanpool(x, 2), [(8, 128, 56, 56)], quick=True),
        *both("pooling", "global maxpool 512 @7 b8", lambda x: dnnbind.maxpool(x, 7), [(8, 512, 7, 7)]),
        # softmax (softmax.c), against numpy expressions
        *both("softmax", "rows (64, 1000)", lambda x: dnnbind.softmax(x, axis=1), [(64, 1000)], quick=True),
        *both("softmax", "rows (1, 1000)", lambda x: dnnbind.softmax(x, axis=1), [(1, 1000)]),
        *both("softmax", "channels 21 @64 b8", lambda x: dnnbind.softmax(x, axis=1), [(8, 21, 64, 64)], quick=True),
        *both("softmax", "logsoftmax rows (64, 1000)", lambda x: dnnbind.logsoftmax(x, axis=1), [(64, 1000)]),
        # the LSTM time loop (recurrent.c), against numpy's step loop on BLAS products
        *both("recurrent", "lstm (50, 32, 128 -> 256)", *lstm[:2], quick=True, scales=lstm[2]),
        *both("recurrent", "lstm (200, 1, 64 -> 128)", *lstm1[:2], scales=lstm1[2]),
        # activations (pointwise.c, on vmath_typed.h's exp), against numpy expressions
        *both("pointwise", "relu 64 @56 b8", lambda x: dnnbind.activation(x, "relu"), [(8, 64, 56, 56)], quick=True),
        *both("pointwise", "sigmoid 64 @56 b8", lambda x: dnnbind.activation(x, "sigmoid"), [(8, 64, 56, 56)],
              quick=True),
        *both("pointwise", "tanh 64 @56 b8", lambda x: dnnbind.activation(x, "tanh"), [(8, 64, 56, 56)]),
        *both("pointwise", "elu 64 @56 b8", lambda x: dnnbind.activation(x, "elu"), [(8, 64, 56, 56)]),
        *both("pointwise", "relu 64 @56 b1", lambda x: dnnbind.activation(x, "relu"), [(1, 64, 56, 56)]),
        # vmath alone (vmath_typed.h: the loops' exp and sigmoid), against numpy's (its tanh alone lost to
        # np.tanh, 0.45x: only the LSTM loop and the tanh activation use it)
        call_case("vmath", "exp 64 @56 b8", _vmath("exp", np.exp), quick=True),
        call_case("vmath", "sigmoid 64 @56 b8", _vmath("sigmoid", sigmoid)),
        # per-channel sums and maps (channels.c): batch norm, conv biases' gradients
        *both("channel sums", "batchnorm 64 @56 b8", lambda x, g, b: dnnbind.batchnorm(x, g, b),
              [(8, 64, 56, 56), (64,), (64,)], quick=True),
        *both("channel sums", "batchnorm1d (256, 512)", lambda x, g, b: dnnbind.batchnorm(x, g, b),
              [(256, 512), (512,), (512,)]),
        call_case("channel sums", "sums over (8, 64, 56, 56)", _channel_sums, quick=True),
    ]


@contextlib.contextmanager
def one_core() -> Iterator[None]:
    """Inside: this process on one CPU (the kernels' pool then runs every call in the calling thread),
    numpy's BLAS on one thread, and compare() reading the calling thread's CPU time."""
    from threadpoolctl import threadpool_limits
    cpus, clock = os.sched_getaffinity(0), common.CLOCK
    common.set_cpus({min(cpus)})
    common.CLOCK = time.thread_time
    print("\ntiming: CPU time of the calling thread; one CPU, numpy's BLAS on one thread")
    try:
        with threadpool_limits(1, user_api="blas"):
            yield
    finally:
        common.CLOCK = clock
        common.set_cpus(cpus)


def _number(fn: Call) -> int:
    """Calls per timed sample: enough for :data:`SAMPLE_S`."""
    start = time.perf_counter()
    fn()
    return max(1, int(SAMPLE_S / max(time.perf_counter() - start, 1e-7)))


def measure(case: Case, repeats: int) -> Row:
    """The case's kernel and library times (seconds), as a Row whose ratio is kernel / library: met
    (kernel kept) where the library takes more than :data:`KEEP_ABOVE` times the kernel's time."""
    kernel, library = case.build()
    number = min(_number(kernel), _number(library))
    ours, theirs = compare(kernel, library, repeats, number=number)
    unit = "us" if theirs < 0.1 else "ms"
    return Row(f"{case.family}: {case.name}", ours / 1e3, theirs / 1e3, "library route", 1 / KEEP_ABOVE, unit)


def print_rows(rows: list[Row], blas: str) -> None:
    scale = {"ms": 1e3, "us": 1e6}
    print(f"\nC kernels vs the library doing the same job (float32; keep where library/kernel > {KEEP_ABOVE:.2f})")
    print(f"{'family: case':<52}{'kernel':>13}{'library':>13}{'lib/kern':>9}  {'verdict':<8} BLAS kernels")
    for r in rows:
        k = scale[r.unit]
        print(f"{r.name:<52}{r.ours * k:>10.3f} {r.unit}{r.reference * k:>10.3f} {r.unit}{1 / r.ratio:>8.2f}x  "
              f"{'keep' if r.met else 'library':<8} {blas}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> list[Row]:
    """Print the table; returns no rows with goals (the verdicts are for the maintainers to act on)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few shapes per family, two samples each")
    parser.add_argument("--repeats", type=int, default=None, help="samples per side (default 6; --quick 2)")
    parser.add_argument("--family", action="append", help="only this family (repeatable)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="one pinned CPU, numpy's BLAS on one thread, timed by the thread's CPU time")
    args = parser.parse_args([] if argv is None and __name__ != "__main__" else argv)
    if native.library() is None:
        print("\nC kernels vs the libraries: skipped (dnnbind-native is not installed, or DNNBIND_NATIVE=0)")
        return []
    if "torch" in sys.modules:
        print("\nnote: torch is loaded in this process, which changes the kernels' thread rules; "
              "run bench/bench_kernels.py alone for figures without it")
    # measured as a training loop that opts in to glibc's heap padding runs (as bench_reference measures;
    # dnnbind never sets it by itself: see dnnbind/highlevel/cpu/_heap.py), so that neither side's figure
    # is mostly the page faults of its fresh arrays
    dnnbind.highlevel.cpu.keep_heap_padding()
    repeats = args.repeats or (2 if args.quick else 6)
    chosen = [c for c in cases() if (c.quick or not args.quick) and (not args.family or c.family in args.family)]
    blas = blas_info.kernels()
    with one_core() if args.cpu_time else contextlib.nullcontext():
        rows = [measure(case, repeats) for case in chosen]
    print_rows(rows, blas + (" (1 thread)" if args.cpu_time else ""))
    losing = sorted({r.name.split(":")[0] for r in rows if not r.met})
    print(f"families with a row where the library is faster or within {KEEP_ABOVE - 1:.0%}: "
          + (", ".join(losing) if losing else "none"))
    return []


if __name__ == "__main__":
    print("\n".join(blas_info.header_lines()))
    main()
