"""Benchmark the numpy reference backend against PyTorch on the CPU, side by side in one run.

    python bench/bench_reference.py [--repeats N] [--cpu-time] [--skip-threads]

Every figure is the median of several timed repeats, taken in alternating bursts (ours, torch's)
with a pause between bursts so that neither library's idle worker threads slow the other, and 30 ms
of untimed calls after each pause (bench/common.py: the machine's idle cores wake up first). torch
gets as many threads as numpy's BLAS has, so the two compete on equal terms. Rows without torch
installed are skipped with a message.

Tables (each ratio against torch measured in the same run):

* every convolution layer of ResNet-18 at batch 8 plus depthwise 3x3 layers (32, 96, 144 channels),
  forward and forward + backward, with their geometric mean (goal <= 1.25x) and worst case (<= 2x);
  a forward alone is an inference forward on both sides (``dnnbind.no_grad()``, torch without autograd);
* ResNet-18's layers at batch 1, forward + backward, reported;
* the grouped seed case, LSTM and GRU (50, 32, 128 -> 256), forward + backward;
* per-call overhead: a tiny convolution through ``dnnbind.conv`` against ``torch.conv2d``, and the
  shape-and-argument work of a repeated call alone (the public op with a do-nothing backend), in us;
* a training step (forward, backward, Adam) of a small CNN and of an LSTM model built from
  ``dnnbind.torch`` layers against the same models built from torch's own layers;
* the adapter's overhead: forward + backward of the CNN's dnnbind part and of a 2-layer LSTM through
  ``dnnbind.torch``, eager and ``torch.compile``'d, against the same ops on numpy arrays (goal <= 1.1x),
  and torch.compile's own cost per step (a compiled do-nothing custom op pair with the CNN's
  parameters; again beside kernels that write as many bytes as the CNN's activations, less the
  writes: the machinery on the caches the real kernels leave) against the CNN's ops on numpy, reported;
  and the compiled CNN with a do-nothing custom op pair after it in the same compiled model against the
  compiled CNN alone (what one op pair adds to a compiled step), reported; and the compiled CNN against
  its ops on numpy plus the cold-cache floor (goal <= 1.05x);
* one problem of each other class (dilated, grouped, 1-d, 3-d and transposed convolution, pooling,
  batch norm, softmax, activations: bench/reference_classes.py) through the public ops, forward and
  forward + backward against torch's functional ops, reported without a goal;
* extra memory of a convolution's forward + backward: the peak resident memory during the call above
  the resident memory before it (Linux: VmHWM after resetting it through /proc/self/clear_refs),
  ours against torch's, and numpy's own allocations as tracemalloc counts them (in a fresh child
  process, so that nothing earlier in this run holds memory the calls could reuse).

``--cpu-time`` times with the calling thread's CPU time instead of wall time, with the process pinned
to one CPU and numpy's BLAS (run it under OPENBLAS_NUM_THREADS=1) and torch on one thread, so that all
work happens in the timed thread: figures that a busy machine barely disturbs, for comparing
algorithms; wall time with every core is what users see.

Then the convolution's thread pool is compared with a single thread, twice: with numpy's BLAS as it
is, and (in a child process) with BLAS limited to one thread, the case where conv.use_threads turns
the pool on.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

# this checkout's code first, before any installed copy (an editable install may point at another checkout)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import dnnbind
import dnnbind.highlevel.cpu
from dnnbind.highlevel.dims import ConvDims

# the benchmarks measure the cpu backend as a training loop that opts in to glibc's heap padding would run it
# (dnnbind never sets it by itself: see dnnbind/highlevel/cpu/_heap.py for its measured effect)
dnnbind.highlevel.cpu.keep_heap_padding()

sys.path.insert(0, str(Path(__file__).resolve().parent))
import blas_info  # noqa: E402
import common  # noqa: E402
from common import Row, compare, timeit  # noqa: E402  (bench/common.py: timing, the row type run.py summarises)
import reference_classes  # noqa: E402
import reference_layers  # noqa: E402
import reference_memory  # noqa: E402
import reference_overhead  # noqa: E402
import reference_training  # noqa: E402

# the module, not the function of the same name that dnnbind.highlevel.cpu exports
import dnnbind.highlevel.cpu as reference_backend
ref_conv = importlib.import_module("dnnbind.highlevel.cpu.conv")

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None


def blas_threads() -> int:
    """Threads numpy's BLAS uses (threadpoolctl when available, else the usual variables)."""
    blas = blas_info.numpy_blas()
    if blas is not None:
        return blas.threads
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return len(os.sched_getaffinity(0))


# ---------------------------------------------------------------------------------------------- cases


def conv_case(x_shape, w_shape, groups, padding, backward, repeats, threaded=None, stride=1):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    dims = ConvDims(x.shape, w.shape, padding=padding, groups=groups, stride=stride, dtype=x.dtype)
    dy = rng.standard_normal(dims.y_shape, dtype=np.float32)

    def ours():
        if not backward:                 # inference, as torch's side runs without autograd
            with dnnbind.no_grad():
                reference_backend.conv(x, w, None, dims, threaded=threaded)
            return
        y, pullback = reference_backend.conv(x, w, None, dims, threaded=threaded)
        pullback(dy)

    if torch is None:
        return timeit(ours, repeats), None
    xt, wt, dyt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(dy)
    if backward:
        xt.requires_grad_(True)
        wt.requires_grad_(True)

    def theirs():
        y = F.conv2d(xt, wt, padding=padding, groups=groups, stride=stride)
        if backward:
            torch.autograd.grad(y, (xt, wt), dyt)

    with torch.set_grad_enabled(backward):
        return compare(ours, theirs, repeats)


def thread_case(x_shape, w_shape, groups, padding, repeats):
    """conv forward+backward with the thread pool forced on, and off; timed alternately."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    dims = ConvDims(x.shape, w.shape, padding=padding, groups=groups, dtype=x.dtype)
    dy = rng.standard_normal(dims.y_shape, dtype=np.float32)

    def run(threaded):
        return lambda: reference_backend.conv(x, w, None, dims, threaded=threaded)[1](dy)

    return compare(run(True), run(False), repeats)


def lstm_case(seq, batch, inp, hidden, repeats, backward=True, mode="lstm"):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((seq, batch, inp), dtype=np.float32)
    scale = 1 / np.sqrt(hidden)
    gh = {"lstm": 4, "gru": 3}[mode] * hidden
    weights = [tuple(rng.uniform(-scale, scale, shape).astype(np.float32)
                     for shape in ((gh, inp), (gh, hidden), (gh,), (gh,)))]
    dy = rng.standard_normal((seq, batch, hidden), dtype=np.float32)

    def ours():
        if not backward:                 # inference, as torch's side runs without autograd
            with dnnbind.no_grad():
                dnnbind.rnn(x, weights, mode=mode, hidden_size=hidden)
            return
        _, pullback = dnnbind.rnn(x, weights, mode=mode, hidden_size=hidden)
        pullback(dy)

    if torch is None:
        return timeit(ours, repeats), None
    lstm = (torch.nn.LSTM if mode == "lstm" else torch.nn.GRU)(inp, hidden)
    with torch.no_grad():
        for name, value in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"), weights[0]):
            getattr(lstm, name).copy_(torch.from_numpy(value))
    xt, dyt = torch.from_numpy(x).requires_grad_(backward), torch.from_numpy(dy)
    params = list(lstm.parameters())

    def theirs():
        y, _ = lstm(xt)
        if backward:
            torch.autograd.grad(y, [xt] + params, dyt)

    with torch.set_grad_enabled(backward):
        return compare(ours, theirs, repeats)


# ---------------------------------------------------------------------------------------------- main


def print_rows(title: str, rows: list[Row]) -> None:
    print(f"\n{title}")
    print(f"{'case':<40}{'dnnbind':>11}{'torch':>11}{'ratio':>8}{'goal':>8}  result")
    for r in rows:
        k = {"ms": 1e3, "us": 1e6, "MB": 1e-6}[r.unit]
        goal = "-" if r.goal == float("inf") else f"<={r.goal:g}"
        verdict = "-" if r.goal == float("inf") else ("met" if r.met else "MISSED")
        print(f"{r.name:<40}{r.ours * k:>8.2f} {r.unit}{r.reference * k:>8.2f} {r.unit}{r.ratio:>7.2f}x{goal:>8}  "
              f"{verdict}{'  ' + r.note if r.note else ''}")
    sys.stdout.flush()


def layer_rows(repeats: int, layers: list[tuple] = reference_layers.LAYERS, batch: int = reference_layers.BATCH,
               passes: tuple[bool, ...] = (False, True), goals: bool = True) -> list[Row]:
    """Every layer forward and forward + backward (``passes``: whether with the backward), at ``batch``
    samples, then the geometric mean and the worst ratio (against the goals, or reported)."""
    rows = []
    for layer in layers:
        x_shape, w_shape, kw = reference_layers.shapes(layer, batch)
        for backward in passes:
            ours, theirs = conv_case(x_shape, w_shape, kw["groups"], kw["padding"], backward, repeats,
                                     stride=kw["stride"])
            rows.append(Row(f"{layer[0]} {'fwd+bwd' if backward else 'fwd'}", ours / 1e3, theirs / 1e3, "torch CPU",
                            float("inf")))
    ratios = [r.ratio for r in rows]
    worst = max(rows, key=lambda r: r.ratio)
    summary = [Row("conv layers: geometric mean", reference_layers.geomean([r.ours for r in rows]),
                   reference_layers.geomean([r.reference for r in rows]), "torch CPU",
                   reference_layers.GOAL_GEOMEAN if goals else float("inf")),
               Row(f"conv layers: worst ({worst.name})", worst.ours, worst.reference, "torch CPU",
                   reference_layers.GOAL_WORST if goals else float("inf"))]
    assert math.isclose(summary[0].ratio, reference_layers.geomean(ratios))
    return rows + summary


def overhead_rows(repeats: int) -> list[Row]:
    x, w = reference_overhead.tiny_arrays()
    ours, theirs = compare(reference_overhead.tiny_conv(), reference_overhead.torch_tiny_conv(torch), repeats,
                           number=2000)
    with reference_overhead.backend_doing_nothing("conv"):
        argument_work = timeit_calls(reference_overhead.tiny_conv(), repeats)
    return [Row("tiny conv x(1,1,4,4) w(1,1,3,3) per call", ours / 1e3, theirs / 1e3, "torch.conv2d",
                reference_overhead.GOAL_TINY, "us"),
            Row("repeated call: shape+argument work (vs 1us)", argument_work, 1e-6, "1 us: the goal is in us",
                reference_overhead.GOAL_ARGUMENT_US, "us")]


def timeit_calls(fn: Callable[[], object], repeats: int, number: int = 5000) -> float:
    """Median seconds per call over ``repeats`` samples of ``number`` calls."""
    return compare(fn, None, repeats, number=number)[0] / 1e3


def training_rows(repeats: int) -> list[Row]:
    rows = []
    for name, build in (("training step, small CNN (32x3x32x32)", reference_training.cnn_models),
                        ("training step, 2-layer LSTM (30x16x64->128)", reference_training.lstm_models)):
        ours_model, their_model, batch = build(torch)
        ours, theirs = compare(reference_training.step(torch, ours_model, batch),
                               reference_training.step(torch, their_model, batch), repeats)
        rows.append(Row(name, ours / 1e3, theirs / 1e3, "torch's own layers", reference_training.GOAL))
    return rows


def adapter_rows(repeats: int) -> list[Row]:
    """dnnbind.torch layers (eager and torch.compile'd) against the same ops on numpy: forward and backward
    of a small CNN's dnnbind part and of a 2-layer LSTM; then, per model, issue 43's compiled goal: the
    compiled model within 5% of its ops on numpy plus what torch.compile's machinery costs a do-nothing
    custom op pair beside such kernels."""
    from dnnbind.torch import nn as dnn
    torch.manual_seed(0)
    features = reference_training.cnn_features(torch, dnn)
    lstm = dnn.LSTM(64, 128, num_layers=2)
    cases = [("CNN", features, torch.randn(32, 3, 32, 32), reference_training.numpy_cnn_fwd_bwd),
             ("LSTM", lstm, torch.randn(30, 16, 64), reference_training.numpy_lstm_fwd_bwd)]
    rows, goals = [], []
    for name, model, x, numpy_step in cases:
        # three times the samples of the other rows: a ratio of two runs of the same kernels, whose
        # difference (a few percent) is smaller than the spread of a few samples on a shared machine
        ours, theirs = compare(reference_training.torch_fwd_bwd(torch, model, x), numpy_step(model, x),
                               3 * repeats, burst=4)
        rows.append(Row(f"{name} fwd+bwd via dnnbind.torch, eager", ours / 1e3, theirs / 1e3,
                        "the ops on numpy", reference_training.ADAPTER_GOAL))
        compiled, floor, goal = compiled_rows(name, model, x, numpy_step, repeats)
        rows += [compiled, floor]
        goals.append(goal)
    # the floor's warm share: torch.compile's machinery around the null pair on caches nothing disturbs
    features_x = cases[0][2]
    ours, theirs = compare(reference_training.null_compiled_step(torch, features, features_x),
                           reference_training.numpy_cnn_fwd_bwd(features, features_x), 3 * repeats, burst=4)
    rows.append(Row("torch.compile alone: null op pair, CNN's params", ours / 1e3, theirs / 1e3,
                    "the CNN's ops on numpy", float("inf")))
    rows.append(null_pair_row(features, features_x, repeats))
    return rows + goals


def compiled_rows(name: str, model: Any, x: Any, numpy_step: Callable[[Any, Any], Callable[[], None]],
                  repeats: int) -> tuple[Row, Row, Row]:
    """(the torch.compile'd model against its ops on numpy; the floor under it: torch.compile's machinery
    around a do-nothing custom op pair with the model's parameters and residual count, whose kernels each
    write as many bytes as the model's forward streams (:func:`_streamed_bytes`), so that the machinery
    runs on the caches such kernels leave, the writes' own time taken out; issue 43's goal row: the
    compiled model against its ops on numpy plus the floor). The four are timed in the same rounds
    (common.rounds), and the goal's ratio is the median over the rounds of each round's own ratio (its
    range printed): a drift of the machine's speed during the run moves both sides of it alike."""
    compiled = reference_training.torch_fwd_bwd(torch, torch.compile(model, fullgraph=True), x)
    null_step, writes = reference_training.cold_null_compiled_step(torch, model, x, _streamed_bytes(model, x))
    times = common.rounds([compiled, numpy_step(model, x), null_step, writes], 3 * repeats, burst=3)
    ours, numpy_ops, null, written = [statistics.median([t for samples in per_fn for t in samples])
                                      for per_fn in times]
    ratios = common.ratio_per_round(times, lambda c, n, s, w: c / (n + s - w))
    ratio = statistics.median(ratios)
    return (Row(f"{name} fwd+bwd via dnnbind.torch, compiled", ours / 1e3, numpy_ops / 1e3, "the ops on numpy",
                reference_training.ADAPTER_GOAL),
            Row(f"torch.compile alone on cold caches (null pair), {name}", (null - written) / 1e3, numpy_ops / 1e3,
                f"the {name}'s ops on numpy", float("inf")),
            Row(f"{name} compiled vs numpy ops + null pair", ours / 1e3, ours / ratio / 1e3,
                "the ops on numpy + the floor", reference_training.COMPILED_GOAL,
                note=f"(median of {len(ratios)} rounds' ratios; range {min(ratios):.2f}-{max(ratios):.2f}x)"))


def null_pair_row(features: Any, x: Any, repeats: int) -> Row:
    """The compiled CNN with a do-nothing custom op pair after it, in the same compiled model, against the
    compiled CNN alone: what one custom op pair adds to a compiled step (reported), the measure the
    adapter's compiled rows are read against."""
    residuals = len(reference_training.saved_tensors(torch, features, x)[0])
    paired = torch.compile(reference_training.with_null_pair(torch, features, residuals), fullgraph=True)
    alone = torch.compile(features, fullgraph=True)
    ours, theirs = compare(reference_training.torch_fwd_bwd(torch, paired, x),
                           reference_training.torch_fwd_bwd(torch, alone, x), 3 * repeats, burst=4)
    return Row("compiled CNN + a null op pair in the same model", ours / 1e3, theirs / 1e3,
               "the compiled CNN alone", float("inf"))


def _streamed_bytes(model: Any, x: Any) -> int:
    """Bytes of x, of the model's result and of every tensor its forward saves for the backward: what its
    kernels write in a forward, and read back in the backward."""
    saved, out = reference_training.saved_tensors(torch, model, x)
    first = out[0] if isinstance(out, tuple) else out
    return x.nbytes + first.nbytes + sum(t.nbytes for t in saved)


def class_rows(repeats: int) -> list[Row]:
    """One problem of each class in bench/reference_classes.py, forward and forward + backward (no goal)."""
    rows = []
    for case in reference_classes.cases(F):
        for backward in (False, True):
            ours, theirs = compare(*reference_classes.runners(case, torch, backward), repeats)
            rows.append(Row(f"{case[0]} {'fwd+bwd' if backward else 'fwd'}", ours / 1e3, theirs / 1e3, "torch CPU",
                            float("inf"), "us" if theirs < 0.1 else "ms"))
    mean = reference_layers.geomean
    rows.append(Row("classes: geometric mean", mean([r.ours for r in rows]), mean([r.reference for r in rows]),
                    "torch CPU", float("inf")))
    return rows


MEMORY_LAYERS = (reference_layers.RESNET18[1], reference_layers.RESNET18[2], reference_layers.RESNET18[3],
                 reference_layers.DEPTHWISE[0])


def memory_rows() -> list[Row]:
    """Extra peak memory of conv forward + backward, in bytes (printed in MB), measured in a child process."""
    # glibc keeps no freed memory for the next call there (dnnbind's heap padding off): each call's own
    # peak shows in its resident memory, not hidden by pages an earlier call left behind
    env = {**os.environ, "DNNBIND_HEAP_PADDING": "0"}
    done = subprocess.run([sys.executable, __file__, "--memory-only"], capture_output=True, text=True, check=True,
                          env=env)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if "skipped" in report:
        print(f"\nmemory: skipped ({report['skipped']})")
        return []
    rows = [Row(f"memory {name} fwd+bwd", ours, theirs, "torch peak RSS", reference_memory.GOAL, "MB")
            for name, ours, theirs, _ in report["rows"]]
    print_rows("extra memory of conv forward + backward (peak RSS above the start of the call)", rows)
    held = [Row(f"memory held by a training forward, {name}", ours, theirs, "torch's layers",
                reference_training.MEMORY_GOAL, "MB") for name, ours, theirs in report["training"]]
    print_rows("memory a training forward keeps for its backward (RSS with the loss alive above before)", held)
    rows += held
    for name, _, _, numpy_peak in report["rows"]:
        print(f"  numpy allocations (tracemalloc peak) {name}: {numpy_peak / 1e6:.1f} MB")
    print(f"  plus the reference backend's reused scratch buffers, held between calls (not in the peaks "
          f"above): {report['scratch'] / 1e6:.1f} MB in the measuring thread")
    return rows


def memory_child() -> None:
    """Measure MEMORY_LAYERS in this (fresh) process and print one JSON line."""
    if torch is None or not reference_memory.available():
        print(json.dumps({"skipped": "needs torch and Linux /proc/self/clear_refs with glibc"}))
        return
    torch.set_num_threads(blas_threads())
    out = []
    for layer in MEMORY_LAYERS:
        x_shape, w_shape, kw = reference_layers.shapes(layer)
        rng = np.random.default_rng(0)
        x = rng.standard_normal(x_shape, dtype=np.float32)
        w = rng.standard_normal(w_shape, dtype=np.float32)
        y, _ = dnnbind.conv(x, w, **kw)
        dy = rng.standard_normal(y.shape, dtype=np.float32)
        del y
        xt, wt, dyt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_(), torch.from_numpy(dy)

        def ours() -> None:
            dnnbind.conv(x, w, **kw)[1](dy)

        def theirs() -> None:
            torch.autograd.grad(F.conv2d(xt, wt, **kw), (xt, wt), dyt)

        ours(), theirs()
        out.append((layer[0], reference_memory.peak_extra_bytes(ours), reference_memory.peak_extra_bytes(theirs),
                    reference_memory.numpy_peak_bytes(ours)))
    training = []
    for name, models in (("small CNN", reference_training.cnn_models), ("2-layer LSTM", reference_training.lstm_models)):
        ours_model, theirs_model, (inputs, labels) = models(torch)
        held = []
        for model in (ours_model, theirs_model):
            def forward(model: Any = model) -> Any:
                return F.cross_entropy(model(inputs), labels)
            forward().backward()             # (warm: the plans, the first call's allocations)
            held.append(reference_memory.held_bytes(forward))
        training.append((name, *held))
    print(json.dumps({"rows": out, "scratch": scratch_held(), "training": training}))


def scratch_held() -> int:
    return importlib.import_module("dnnbind.highlevel.cpu._scratch").held_bytes()


def main(argv: list[str] | None = None) -> list[Row]:
    """Print every table; return the rows that have goals (for bench/run.py's summary)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--threads-only", action="store_true", help="only the thread-pool table")
    parser.add_argument("--skip-threads", action="store_true", help="leave out the thread-pool tables")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time with thread CPU time, BLAS and torch on one thread (for busy machines)")
    parser.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)   # the child process
    parser.add_argument("--adapter-only", action="store_true", help="only the dnnbind.torch overhead table")
    args = parser.parse_args([] if argv is None and __name__ != "__main__" else argv)
    results: list[Row] = []
    r = args.repeats
    threads = blas_threads()
    if args.memory_only:
        memory_child()
        return []
    if args.adapter_only:
        rows = adapter_rows(r)
        print_rows("the adapter's overhead: dnnbind.torch layers vs the same ops on numpy", rows)
        return rows
    if args.cpu_time:
        if threads != 1:
            print(f"--cpu-time needs numpy's BLAS on one thread (it has {threads}): run it under "
                  f"OPENBLAS_NUM_THREADS=1")
            return []
        common.CLOCK = time.thread_time
        args.skip_threads = True
        common.set_cpus({min(os.sched_getaffinity(0))})   # one CPU: no thread of ours, BLAS's or torch's
        threads = 1
        print("timing: CPU time of the calling thread; process pinned to one CPU (no worker threads anywhere)")
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')} (torch's OpenMP threads spin after each "
          f"parallel op unless PASSIVE; see docs/performance.md, CPU threads)")
    print("\n".join(blas_info.header_lines()))
    print(f"BLAS threads in this run {threads}, CPUs {len(os.sched_getaffinity(0))}")
    grouped = ((2, 100, 28, 28), (15, 20, 3, 3), 5, 0)
    if not args.threads_only:
        if torch is None:
            print("torch is not installed: the comparisons are skipped (pip install torch==2.13.0 to compare)")
            return []
        torch.set_num_threads(threads)
        print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
        layers = layer_rows(r)
        print_rows(f"convolution layers at batch {reference_layers.BATCH} (ResNet-18 and depthwise), vs torch",
                   layers)
        results += [row for row in layers if row.goal != float("inf")]
        # one sample (inference, or training on one image): planes too small for the batch-8 paths' splits
        print_rows("ResNet-18's convolution layers at batch 1, forward + backward, vs torch (reported)",
                   layer_rows(r, reference_layers.RESNET18, batch=1, passes=(True,), goals=False))
        single = [
            ("conv grouped g=5 fwd", lambda: conv_case(*grouped, False, r), 1.0),
            ("conv grouped g=5 fwd+bwd", lambda: conv_case(*grouped, True, r), 1.0),
            ("lstm fwd", lambda: lstm_case(50, 32, 128, 256, r, backward=False), float("inf")),
            ("lstm fwd+bwd", lambda: lstm_case(50, 32, 128, 256, r), 1.5),
            ("gru fwd+bwd", lambda: lstm_case(50, 32, 128, 256, r, mode="gru"), 1.5),
            ("lstm batch 1 (200, 1, 64 -> 128) fwd+bwd", lambda: lstm_case(200, 1, 64, 128, r), float("inf")),
        ]
        rows = []
        for name, case, goal in single:
            ours, theirs = case()
            rows.append(Row(name, ours / 1e3, theirs / 1e3, "torch CPU", goal))
        print_rows("seed case and recurrent networks (50, 32, 128 -> 256; one sequence reported), vs torch", rows)
        results += [row for row in rows if row.goal != float("inf")]
        rows = overhead_rows(r)
        print_rows("per-call overhead", rows)
        results += rows
        rows = training_rows(r)
        print_rows("a training step through dnnbind.torch layers vs torch's own layers", rows)
        results += rows
        rows = adapter_rows(r)
        print_rows("the adapter's overhead: dnnbind.torch layers vs the same ops on numpy", rows)
        results += rows
        print_rows("classes of problems beyond the layer set, through the public ops, vs torch (reported)",
                   class_rows(r))
    if not args.skip_threads:
        thread_tables(args, threads)
    if not args.threads_only:
        results += memory_rows()
    return results


def thread_tables(args: argparse.Namespace, threads: int) -> None:
    r = args.repeats
    grouped = ((2, 100, 28, 28), (15, 20, 3, 3), 5, 0)
    dense = ((8, 64, 56, 56), (64, 64, 3, 3), 1, 1)

    print()
    print(f"thread pool over (groups x batch) chunks vs one thread, conv forward+backward, "
          f"BLAS threads {threads}:")
    print(f"{'case':<34}{'threaded ms':>12}{'serial ms':>10}{'ratio':>8}  rule picks")
    thread_cases = [
        ("g=1 x(8,64,56,56) w(64,64,3,3)", dense),
        ("g=1 x(16,32,32,32) w(32,32,3,3)", ((16, 32, 32, 32), (32, 32, 3, 3), 1, 1)),
        ("g=1 x(2,20,28,28) w(15,20,3,3)", ((2, 20, 28, 28), (15, 20, 3, 3), 1, 0)),
        ("g=5 x(2,100,28,28) w(15,20,3,3)", grouped),
        ("g=5 x(8,100,56,56) w(100,20,3,3)", ((8, 100, 56, 56), (100, 20, 3, 3), 5, 1)),
        ("depthwise x(8,96,56,56) w(96,1,3,3)", ((8, 96, 56, 56), (96, 1, 3, 3), 96, 1)),
    ]
    for name, (xs, ws, g, p) in thread_cases:
        on, off = thread_case(xs, ws, g, p, r)
        dims = ConvDims(xs, ws, padding=p, groups=g)
        path = ref_conv.special_path(dims)
        rule = (path or ref_conv).use_threads(dims)
        print(f"{name:<34}{on:>12.2f}{off:>10.2f}{on / off:>7.2f}x  {'threaded' if rule else 'serial'}")
    sys.stdout.flush()
    if not args.threads_only and threads > 1:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        subprocess.run([sys.executable, __file__, "--threads-only", "--repeats", str(r)], env=env, check=True)


if __name__ == "__main__":
    main()
