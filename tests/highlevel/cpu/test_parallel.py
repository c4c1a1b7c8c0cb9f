"""The kernels' own thread pool (csrc/parallel.c, through native._launch): every range run exactly once
whatever the number of parts, callers on several threads at once, a forked child, errors and refusals."""
from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.cpu import native
from dnnbind.highlevel.cpu._threads import split
from native_parts import require



@pytest.fixture(autouse=True)
def _kernels():
    """The kernels' own thread pool needs the kernels: skipped when DNNBIND_NATIVE=0, missing fails."""
    require(native.library() is not None, "dnnbind_native._kernels (the C kernels)")


_alive: list[np.ndarray] = []


def _affine_call(rng, planes=13):
    """A per-channel affine kernel call (a kernel without a status) over ``planes`` samples: its ranges
    count (sample, channel) planes."""
    a = rng.standard_normal((planes, 3, 50))
    scale, shift = rng.standard_normal(3), rng.standard_normal(3)
    out = np.full_like(a, np.nan)
    fn = native._kernel("channel_affine", a.dtype)
    args = (native._data(a), native._data(scale), native._data(shift), native._data(out), 3, 50, 0)   # plane by plane
    _alive.extend((a, scale, shift))        # args hold bare addresses
    return fn, args, out, a * scale[:, None] + shift[:, None], planes * 3


@pytest.mark.parametrize("team", [None, 3, 8])
@pytest.mark.parametrize("parts", [1, 2, 3, 5, 8])
def test_every_range_runs_once_whatever_the_parts(rng, parts, team):
    """Each range is written once, whether the team (default: the cores) is smaller or larger than the
    parts (the NaN fill would show a range left out, and the kernel adds into nothing, so a range run
    twice leaves the same values: the depthwise forward below, which writes a kept copy too, checks the
    counts another way)."""
    fn, args, out, expected, count = _affine_call(rng)
    native._launch(fn, args, split(count, parts), team)
    np.testing.assert_allclose(out, expected, rtol=1e-15, atol=1e-15)        # (one FMA per element in C)

    dims = ConvDims((3, 7, 11, 10), (7, 1, 3, 3), padding=1, groups=7)
    x, w = rng.standard_normal(dims.x_shape), rng.standard_normal(dims.w_shape)
    serial = native.depthwise_forward(x, w, dims, False)
    y, keep = np.full(dims.y_shape, np.nan), np.full(dims.x_shape, np.nan)
    args = (native._data(x), native._data(w), native._data(y), native._data(keep), native.geometry(dims))
    native._launch(native._kernel("depthwise_forward", x.dtype), args, split(21, parts), team)
    np.testing.assert_array_equal(y, serial)
    np.testing.assert_array_equal(keep, x)


def test_callers_on_several_threads_at_once_all_get_their_results(rng):
    """One job holds the pool at a time; a second caller meanwhile runs its ranges on its own thread."""
    calls = [_affine_call(np.random.default_rng(i), planes=40) for i in range(6)]
    errors: list[BaseException] = []

    def caller(fn, args, out, expected, count):
        try:
            for _ in range(60):
                out.fill(np.nan)
                native._launch(fn, args, split(count, 3))
                np.testing.assert_allclose(out, expected, rtol=1e-15, atol=1e-15)
        except BaseException as error:      # reported below, on the test's thread
            errors.append(error)

    threads = [threading.Thread(target=caller, args=call) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    assert not errors, errors[0]


def test_a_forked_child_starts_its_own_workers():
    """After fork() the parent's workers do not exist in the child: its first split call must start new
    ones, not wait for the old ones forever."""
    code = ("import os, numpy as np\n"
            "from dnnbind.highlevel.dims import ConvDims\n"
            "from dnnbind.highlevel.cpu import native\n"
            "dims = ConvDims((4, 6, 20, 20), (6, 1, 3, 3), padding=1, groups=6)\n"
            "x, w = np.ones(dims.x_shape), np.ones(dims.w_shape)\n"
            "y = native.depthwise_forward(x, w, dims, True)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os._exit(0 if np.array_equal(native.depthwise_forward(x, w, dims, True), y) else 3)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "raise SystemExit(os.waitstatus_to_exitcode(status))\n")
    result = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert result.returncode == 0


def test_a_kernel_error_on_a_worker_reaches_the_caller(rng):
    """A kernel that cannot allocate its working buffer (here: a geometry with 2**40 kernel taps) fails in
    every range; the pool reports it as MemoryError, as a single call does."""
    dims = ConvDims((2, 3, 8, 8), (3, 1, 3, 3), padding=1, groups=3)
    huge = native.Geometry.from_buffer_copy(native.geometry(dims))
    huge.kernel[0] = 1 << 40
    x, w, y = np.zeros(dims.x_shape), np.zeros(dims.w_shape), np.zeros(dims.y_shape)
    args = (native._data(x), native._data(w), native._data(y), 0, huge)
    fn = native._kernel("depthwise_forward", x.dtype)
    for parts in (1, 2, 3):
        with pytest.raises(MemoryError, match="could not allocate its working buffer"):
            native._launch(fn, args, split(6, parts))


def test_more_arguments_than_the_pool_passes_are_refused(rng):
    fn, args, out, _, count = _affine_call(rng)
    with pytest.raises(RuntimeError, match=r"refused the call \(status -2\)"):
        native._launch(fn, args + (0,) * (native.POOL_MAX_ARGS + 1 - len(args)), split(count, 2))
    assert np.isnan(out).all(), "nothing ran"


def test_more_ranges_than_one_call_counts_are_refused(rng):
    """A call's ranges count in 16 bits of the pool's claim word: 65,536 of them are refused, not
    miscounted; 65,535 run."""
    a = rng.standard_normal((1 << 16, 1, 1))
    one, none, out = np.ones(1), np.zeros(1), np.full_like(a, np.nan)
    fn = native._kernel("channel_affine", a.dtype)
    args = (native._data(a), native._data(one), native._data(none), native._data(out), 1, 1, 0)
    with pytest.raises(RuntimeError, match=r"refused the call \(status -2\)"):
        native._launch(fn, args, split(1 << 16, 1 << 16))
    assert np.isnan(out).all(), "nothing ran"
    native._launch(fn, args, split(1 << 16, (1 << 16) - 1))
    np.testing.assert_array_equal(out, a)


# -- on PyTorch's OpenMP team -------------------------------------------------------------------------

def _torch_team():
    """Import dnnbind.torch (which hands the kernels torch's OpenMP team); skip without torch."""
    pytest.importorskip("torch")
    import dnnbind.torch  # noqa: F401
    return native.share_openmp_team()


def test_with_torch_loaded_the_kernels_run_on_its_openmp_team(rng):
    assert _torch_team(), "torch's libgomp was not found among the loaded libraries"
    try:
        for parts in (1, 2, 3, 5, 8):
            test_every_range_runs_once_whatever_the_parts(rng, parts, None)
            test_every_range_runs_once_whatever_the_parts(rng, parts, 8)
        test_a_kernel_error_on_a_worker_reaches_the_caller(rng)
        test_callers_on_several_threads_at_once_all_get_their_results(rng)
    finally:
        native.share_openmp_team()


def test_the_team_follows_torchs_thread_count(rng):
    """torch.set_num_threads(1): a team of one runs every range."""
    import torch
    assert _torch_team()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        test_every_range_runs_once_whatever_the_parts(rng, 4, None)
    finally:
        torch.set_num_threads(before)


def test_back_to_the_own_workers_and_a_forked_child_with_torch(rng):
    assert _torch_team()
    assert native.share_openmp_team(False) is False
    try:
        test_every_range_runs_once_whatever_the_parts(rng, 3, None)
    finally:
        assert native.share_openmp_team()
    code = ("import os, numpy as np, torch, dnnbind.torch\n"
            "from dnnbind.highlevel.dims import ConvDims\n"
            "from dnnbind.highlevel.cpu import native\n"
            "dims = ConvDims((4, 6, 20, 20), (6, 1, 3, 3), padding=1, groups=6)\n"
            "x, w = np.ones(dims.x_shape), np.ones(dims.w_shape)\n"
            "y = native.depthwise_forward(x, w, dims, True)\n"
            "torch.ones(1 << 20).sum()\n"                       # torch's team exists and spins
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    os._exit(0 if np.array_equal(native.depthwise_forward(x, w, dims, True), y) else 3)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "raise SystemExit(os.waitstatus_to_exitcode(status))\n")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_a_team_past_the_most_workers_still_runs_every_range():
    """A team larger than MAX_THREADS (256) workers: the threads there are take every range (in a child
    process, which then holds its 256 workers, not the test session)."""
    code = ("import numpy as np\n"
            "from dnnbind.highlevel.cpu import native\n"
            "from dnnbind.highlevel.cpu._threads import split\n"
            "a = np.arange(600 * 7, dtype=np.float64).reshape(200, 3, 7)\n"
            "scale, shift, out = np.full(3, 2.0), np.full(3, 1.0), np.full_like(a, np.nan)\n"
            "fn = native._kernel('channel_affine', a.dtype)\n"
            "args = (native._data(a), native._data(scale), native._data(shift), native._data(out), 3, 7, 0)\n"
            "native._launch(fn, args, split(600, 300), 300)\n"
            "raise SystemExit(0 if np.array_equal(out, a * 2 + 1) else 3)\n")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_every_kernel_fits_the_pool():
    """No kernel takes more arguments before its range than the pool passes (csrc/parallel.c's MAX_ARGS)."""
    for name, (params, _) in native._SIGNATURES.items():
        assert len(params) - 2 <= native.POOL_MAX_ARGS, name
