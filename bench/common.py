"""Timing and reporting shared by the benchmarks: medians of repeats, and one table format."""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence


def median_seconds(fn: Callable[[], object], repeats: int = 5, number: int = 1, warmup: int = 1,
                   sync: Callable[[], None] | None = None) -> float:
    """Median over ``repeats`` of the mean time of ``number`` back-to-back calls.

    ``sync`` (a device synchronisation) runs after the warm-up and at the end of every repeat, inside
    the timed span, so asynchronous GPU work is counted.
    """
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        if sync is not None:
            sync()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


@dataclass
class Row:
    name: str
    ours: float            # seconds
    reference: float       # seconds, measured in the same run
    reference_name: str
    goal: float            # the ratio ours/reference must not exceed
    unit: str = "ms"
    note: str = ""         # printed after the result (a ratio's spread)

    @property
    def ratio(self) -> float:
        return self.ours / self.reference

    @property
    def met(self) -> bool:
        return self.ratio <= self.goal


def print_table(title: str, rows: list[Row]) -> None:
    scale = {"ms": 1e3, "us": 1e6, "s": 1.0}
    print(f"\n{title}")
    print(f"{'benchmark':<44} {'dnnbind':>11} {'reference':>11}  {'ratio':>6}  {'goal':>6}  result   reference")
    for r in rows:
        k = scale[r.unit]
        print(f"{r.name:<44} {r.ours * k:>8.3f} {r.unit:<2} {r.reference * k:>8.3f} {r.unit:<2}  {r.ratio:>6.2f}  "
              f"{'<=' + format(r.goal, '.2f'):>6}  {'met' if r.met else 'MISSED':<7}  {r.reference_name}")


def timeit(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn`` in milliseconds, after one warm-up call."""
    return compare(fn, None, repeats)[0]


#: The clock compare() reads: wall time, or (bench_reference --cpu-time) the calling thread's CPU time,
#: which other processes on a busy machine barely disturb; it counts only work done in the calling
#: thread, so it is used with BLAS and torch limited to one thread.
CLOCK: Callable[[], float] = time.perf_counter

#: Idle time between bursts: OpenBLAS worker threads spin up to ~2^28 cycles after a call, and
#: OpenMP workers spin too; without a pause one library's spinning threads steal the other's cores.
PAUSE_S = 0.25

#: Untimed calls after each pause, for at least this long (and at least WARM_CALLS of them): a VM's
#: idle vCPUs come back slowly. Measured on the 2-core VM, a 0.5 ms convolution took 1-2 ms for its
#: first ~10 calls after a 0.25 s pause (torch's for its first ~5), so that timing right after the
#: pause measured the wake-up, and the worst ratio of a table was whichever case woke slowest.
WARM_S = 0.03
WARM_CALLS = 2


def compare(ours: Callable[[], object], theirs: Callable[[], object] | None, repeats: int,
            burst: int = 2, number: int = 1) -> tuple[float, float | None]:
    """Median times (ms per call) of two functions, timed in alternating bursts with a pause in between
    (:func:`rounds`).

    Alternating spreads the machine's background load over both.
    """
    times = rounds([ours] if theirs is None else [ours, theirs], repeats, burst, number)
    medians = [statistics.median([t for burst_times in bucket for t in burst_times]) for bucket in times]
    return medians[0], (medians[1] if theirs is not None else None)


def rounds(fns: Sequence[Callable[[], object]], repeats: int, burst: int = 2,
           number: int = 1) -> list[list[list[float]]]:
    """Per function, per round, the ``burst`` samples (ms per call) of the functions timed in turn, round
    after round (``repeats`` samples each in all). Each burst starts, after a pause, with untimed calls
    (:data:`WARM_S`, :data:`WARM_CALLS`: the library's threads and the machine's idle cores wake up),
    then takes ``burst`` samples, each the mean of ``number`` back-to-back calls (many, for calls of
    microseconds). A ratio of functions taken round by round (:func:`ratio_per_round`) sees the same
    background load on both sides."""
    times: list[list[list[float]]] = [[] for _ in fns]
    for _ in range(-(-repeats // burst)):
        for fn, bucket in zip(fns, times):
            time.sleep(PAUSE_S)
            warm(fn)
            samples = []
            for _ in range(burst):
                start = CLOCK()
                for _ in range(number):
                    fn()
                samples.append((CLOCK() - start) / number * 1e3)
            bucket.append(samples)
    return times


def ratio_per_round(times: Sequence[Sequence[Sequence[float]]],
                    ratio: Callable[..., float]) -> list[float]:
    """``ratio`` of the functions' median times in each round of :func:`rounds`, one value per round."""
    return [ratio(*[statistics.median(samples) for samples in per_fn]) for per_fn in zip(*times)]


def warm(fn: Callable[[], object]) -> None:
    """Call ``fn`` untimed for :data:`WARM_S` seconds and at least :data:`WARM_CALLS` times."""
    start = time.perf_counter()
    calls = 0
    while calls < WARM_CALLS or time.perf_counter() - start < WARM_S:
        fn()
        calls += 1


def set_cpus(cpus: set[int]) -> None:
    """Run this process on ``cpus`` from now on, the cpu backend's pool counting them at once."""
    from dnnbind.highlevel.cpu._threads import forget_workers
    os.sched_setaffinity(0, cpus)
    forget_workers()
