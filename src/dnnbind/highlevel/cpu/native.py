"""dnnbind's own C kernels (``csrc/``), for the problems numpy can only run at memory speed.

They ship in the optional, separately built package dnnbind-native (``native/``; ``csrc/`` below is its
``src/dnnbind_native/csrc/kernels/``), as the library ``dnnbind_native._kernels`` (on x86-64 with GCC each
kernel three times: for AVX-512, for AVX2 with FMA and for any x86-64; the library says which of them
this CPU runs, :func:`isa`), found by :mod:`dnnbind.compiled` and loaded here with ctypes. A call split
over the cores runs on the kernels' own thread pool (csrc/parallel.c, through :func:`_launch`), whose
workers spin briefly between calls instead of sleeping. Without the package :func:`available` is False
and the cpu backend runs its numpy paths, which compute the same sums. ``DNNBIND_NATIVE=0`` turns the
kernels off (to compare the two).

The kernels trust their arguments, so every array is checked here against the problem (dtype,
C order, shape) before its address reaches C.
"""
from __future__ import annotations

import ctypes
import functools
import math
import sys
import threading
import warnings
from typing import Any, Sequence

import numpy as np

from dnnbind import compiled
from dnnbind.highlevel.dims import ConvDims, PoolDims
from dnnbind.highlevel.specs.activation import STEP_MODES
from dnnbind.highlevel.cpu import _blas
from dnnbind.highlevel.cpu._blas import loaded_libraries
from dnnbind.highlevel.cpu._threads import blas_single_threaded, one_blas_thread, split, workers

_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
#: dnnbind_isa()'s answers (csrc/dispatch.h) and the suffixes of the kernels compiled for them
_ISA_SUFFIX = {0: "base", 3: "v3", 4: "v4"}
_Triple = ctypes.c_int64 * 3


class Geometry(ctypes.Structure):
    """A convolution's geometry as the kernels read it (csrc/depthwise.c: ``geometry``); spatial ranks
    below 3 have leading dims of size 1."""
    _fields_ = [("in_", _Triple), ("out", _Triple), ("kernel", _Triple), ("stride", _Triple),
                ("dilation", _Triple), ("pad", _Triple), ("channels", ctypes.c_int64)]


def library_path() -> str | None:
    """Where the kernels' library lies (``dnnbind_native._kernels``), or None: the package is absent or
    DNNBIND_NATIVE=0. Found as the import system would find it, without importing it (it is no Python
    module)."""
    return compiled.library_path("_kernels")


#: the revision of the kernels' parameters this module calls them with (:data:`_SIGNATURES`): the library's
#: ``dnnbind_kernels_interface()`` must give it (csrc/kernels/isa.c), or its kernels are not used. Bump
#: both with every change to a kernel's parameters.
INTERFACE = 2


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The kernels' library, or None: dnnbind-native not installed, turned off by DNNBIND_NATIVE=0, or
    built for other kernel parameters than this dnnbind calls them with (a warning says so: calling
    them would crash the process)."""
    path = library_path()
    if path is None:
        return None
    lib = ctypes.CDLL(path)
    interface = getattr(lib, "dnnbind_kernels_interface", None)
    found = None if interface is None else interface()
    if found != INTERFACE:
        warnings.warn(f"dnnbind-native's C kernels ({path}) take the parameters of interface {found or 1}, this "
                      f"dnnbind calls interface {INTERFACE}: the cpu backend runs without them (numpy alone) "
                      f"until dnnbind-native of the same version is installed (pip install ./native from the "
                      f"same source tree)", RuntimeWarning, stacklevel=2)
        return None
    lib.dnnbind_isa.restype, lib.dnnbind_isa.argtypes = ctypes.c_int, []
    lib.dnnbind_isa_name.restype, lib.dnnbind_isa_name.argtypes = ctypes.c_char_p, []
    lib.dnnbind_share_openmp.restype = ctypes.c_int
    lib.dnnbind_share_openmp.argtypes = [ctypes.c_void_p] * 2
    lib.dnnbind_parallel.restype = ctypes.c_int
    lib.dnnbind_parallel.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int64, ctypes.c_int64]
    return lib


def isa() -> str | None:
    """The instruction set whose kernels run here, or None without the kernels."""
    lib = library()
    return None if lib is None else lib.dnnbind_isa_name().decode()


def supported_isas() -> list[str]:
    """Suffixes of the instruction sets this CPU runs and the library has, best first (tests run each)."""
    lib = library()
    if lib is None:
        return []
    best = lib.dnnbind_isa()
    return [suffix for level, suffix in sorted(_ISA_SUFFIX.items(), reverse=True)
            if level <= best and hasattr(lib, f"dnnbind_depthwise_forward_f32_{suffix}")]


def _kernel(name: str, dtype: np.dtype) -> Any:
    """The kernel ``dnnbind_<name>`` for ``dtype``, compiled for this CPU's best instruction set."""
    return _typed_kernel(name, dtype, _best_suffix())


@functools.lru_cache(maxsize=1)
def _best_suffix() -> str:
    return supported_isas()[0]


_P, _I, _GEOMETRY = ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(Geometry)
#: each kernel's parameters (csrc/*_typed.h) and whether it returns a status (0, or -1: no memory)
_SIGNATURES: dict[str, tuple[list[Any], bool]] = {
    "depthwise_forward": ([_P, _P, _P, _P, _GEOMETRY, _I, _I], True),
    "depthwise_data_grad": ([_P, _P, _P, _GEOMETRY, _I, _I], True),
    "depthwise_filter_grad": ([_P, _P, _P, _GEOMETRY, _I, _I, _I], True),
    "conv_forward": ([_P, _P, _P, _P, _P, _GEOMETRY, _I, _I, _I, _I, _I], True),
    "conv_filter_grad": ([_P, _P, _P, _P, _GEOMETRY, _I, _I, _I, _I, _I], True),
    "conv_data_grad": ([_P, _P, _P, _GEOMETRY, _I, _I, _I, _I], True),
    "maxpool_forward": ([_P, _P, _P, _I, _GEOMETRY, _I, _I], True),
    "maxpool_backward": ([_P, _P, _I, _P, _GEOMETRY, _I, _I], True),
    "plane_max": ([_P, _P, _P, _I, _I, _I, _I], False),
    "channel_sums": ([_P, _P, _P, _P] + [_I] * 5, False),
    "channel_moments": ([_P, _P, _P] + [_I] * 5, False),
    "column_sums": ([_P] * 5 + [_I] * 4, False),
    "channel_affine": ([_P] * 4 + [_I] * 5, False),
    "batchnorm_normalize": ([_P] * 7 + [_I] * 5, False),
    "batchnorm_data_grad": ([_P] * 7 + [_I] * 5, False),
    "lstm_forward": ([_P] * 9 + [_I] * 4 + [_P, _P, _I, _I], False),
    "lstm_forward_stack": ([_P] + [_I] * 4 + [_P, _I, _I], False),
    "lstm_backward": ([_P] * 8 + [_I] * 3 + [_P, _P, _I, _I], False),
    "vmath": ([_P, _P, _I, _I], False),
    "activation_forward": ([_P] * 4 + [_I] * 3, False),
    "activation_backward": ([_P] * 3 + [_I] * 2, False),
    "activation_backward_from": ([_P] * 4 + [_I] * 3, False),
    "softmax_forward": ([_P] * 2 + [_I] * 5, False),
    "softmax_backward": ([_P] * 3 + [_I] * 5, False),
    "swap_axes": ([_P, _P, _I, _I, _I, _I, _I, _I], False),
}


@functools.lru_cache(maxsize=None)
def _typed_kernel(name: str, dtype: np.dtype, suffix: str) -> Any:
    lib = library()
    assert lib is not None
    fn = getattr(lib, f"dnnbind_{name}_{_SUFFIX[dtype]}_{suffix}")
    fn.argtypes, status = _SIGNATURES[name]
    fn.restype = ctypes.c_int if status else None
    return fn


def available(dtype: Any) -> bool:
    """Whether the kernels are there for arrays of ``dtype`` (float32 and float64)."""
    return np.dtype(dtype) in _SUFFIX and library() is not None


@functools.lru_cache(maxsize=256)
def geometry(dims: ConvDims | PoolDims) -> Geometry:
    """``dims`` (1 to 3 spatial dims, as ConvDims and PoolDims allow) as the kernels' geometry: a pooling
    window is a kernel. A dim with one output has no stride (stride 1): the stride moves only outputs
    after the first, and a stride of 1 keeps the kernels' plane layout in one phase (a global pooling
    window or a kernel as large as its input would otherwise be split into a phase per position)."""
    lead = 3 - dims.spatial_rank
    kernel = dims.window if isinstance(dims, PoolDims) else dims.kernel_size
    stride = tuple(1 if out == 1 else s for s, out in zip(dims.stride, dims.out_size))

    def triple(values: tuple[int, ...], fill: int) -> Any:
        return _Triple(*((fill,) * lead + tuple(values)))

    return Geometry(triple(dims.x_shape[2:], 1), triple(dims.out_size, 1), triple(kernel, 1),
                    triple(stride, 1), triple(dims.dilation, 1), triple(dims.pad_low, 0),
                    dims.x_shape[1])


def _address(a: np.ndarray, name: str, shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The address of ``a`` after checking it is what the kernel will read or write: C-ordered, of
    ``dtype`` and ``shape``."""
    if a.dtype != dtype or a.shape != tuple(shape) or not a.flags.c_contiguous:
        raise ValueError(f"native kernel argument {name}: expected a C-contiguous {dtype} array of shape "
                         f"{tuple(shape)}, got {a.dtype} {a.shape} (contiguous: {a.flags.c_contiguous})")
    return _data(a)


def _data(a: np.ndarray) -> int:
    """The address of ``a``'s first element: through the buffer protocol (a quarter of the time
    ``a.ctypes.data`` takes, paid per array per kernel call), or ``a.ctypes`` where that refuses (a
    read-only or empty array)."""
    try:
        # ndarray has the buffer protocol; numpy's stubs do not say so
        return ctypes.addressof(ctypes.c_char.from_buffer(a))  # type: ignore[arg-type]
    except (TypeError, ValueError, BufferError):
        return int(a.ctypes.data)


def share_openmp_team(enabled: bool = True) -> bool:
    """Run the kernels' split calls on the OpenMP team of the libgomp already loaded in this process
    (PyTorch's: dnnbind.torch asks for it when imported), instead of the kernels' own workers; whether
    they now do. torch's OpenMP threads spin after every torch op: a worker of our own beside them gets
    half a core, and a split call waits for its slowest part. On that team the kernels take the cores
    torch's threads hold anyway, as many as torch.set_num_threads allows. ``enabled=False``: back to
    the kernels' own workers."""
    global _team_shared
    lib = library()
    _team_shared = False
    if lib is None:
        return False
    if not enabled:
        lib.dnnbind_share_openmp(None, None)
        return False
    for gomp in loaded_libraries("libgomp"):
        names = ("GOMP_parallel", "omp_get_max_threads")
        try:
            addresses = [ctypes.cast(getattr(gomp, name), ctypes.c_void_p).value for name in names]
        except AttributeError:               # another OpenMP runtime, or not one at all
            continue
        _team_shared = lib.dnnbind_share_openmp(*addresses) == 0
        return _team_shared
    return False


_team_shared = False


def cores_to_spare() -> bool:
    """Whether a split call's other parts get cores nobody spins on: on torch's team, in a process
    without torch (whose OpenMP threads would spin beside the kernels' own workers), or inside
    :func:`every_core`."""
    return _team_shared or _claimed > 0 or "torch" not in sys.modules


class _EveryCore:
    """The context manager :func:`every_core` returns."""

    __slots__ = ("entered",)

    def __enter__(self) -> None:
        global _claimed
        self.entered = not blas_single_threaded() or cores_to_spare()
        if self.entered:
            one_blas_thread().__enter__()
            with _claim_lock:
                _claimed += 1

    def __exit__(self, *exc: object) -> None:
        global _claimed
        if self.entered:
            with _claim_lock:
                _claimed -= 1
            one_blas_thread().__exit__(None, None, None)


def every_core() -> _EveryCore:
    """Run a whole op's loops on the kernels' team, where the op may take every core: numpy's BLAS
    would (it is not held to one thread), or the cores are to spare. Inside, numpy's BLAS runs on one
    thread (the op's own products with it): OpenBLAS's own workers,
    which poll for a tenth of a second after each threaded call, then never run beside the team's
    (measured: an LSTM layer's forward 10.6 ms median, 8.1 ms best, with them; 8.3 ms, 8.1 ms best, on
    the team alone). Where numpy's BLAS is held to one thread beside torch's threads, nothing changes."""
    return _EveryCore()


#: how many every_core blocks are open (any thread's)
_claimed = 0
_claim_lock = threading.Lock()


#: csrc/parallel.c's MAX_ARGS: the most arguments a kernel the pool runs takes before its range
POOL_MAX_ARGS = 16

#: each kernel's address, for dnnbind_parallel (csrc/parallel.c), under id(fn) with fn itself (ctypes
#: functions cannot be hashed; holding fn keeps its id from passing to another kernel)
_ADDRESSES: dict[int, tuple[Any, int]] = {}


def _launch(fn: Any, args: tuple, chunks: list[tuple[int, int]], team: int | None = None) -> None:
    """Run kernel ``fn(*args, lo, hi)`` over every chunk (contiguous, from :func:`split`): one directly,
    several on the kernels' own thread pool (csrc/parallel.c: its workers spin briefly between calls,
    where Python's pool would sleep and take 50-240 us to wake on a VM), ``team`` threads (default: the
    cores, :func:`workers`) taking the chunks as they come. Raises MemoryError when a kernel could not
    allocate its working buffer."""
    if len(chunks) == 1:
        status = fn(*args, *chunks[0])
    else:
        words = [ctypes.addressof(a) if isinstance(a, ctypes.Structure) else a for a in args]
        bounds = [lo for lo, _ in chunks] + [chunks[-1][1]]
        known = _ADDRESSES.get(id(fn))
        if known is None or known[0] is not fn:
            known = _ADDRESSES[id(fn)] = (fn, ctypes.cast(fn, ctypes.c_void_p).value or 0)
        address = known[1]
        lib = library()
        assert lib is not None
        status = lib.dnnbind_parallel(address, fn.restype is not None, len(words), (ctypes.c_int64 * len(words))(*words),
                                      (ctypes.c_int64 * len(bounds))(*bounds), len(chunks),
                                      workers() if team is None else team)
    if status == -1:
        raise MemoryError(f"{fn.__name__}: could not allocate its working buffer")
    if status:
        raise RuntimeError(f"{fn.__name__}: the kernels' thread pool refused the call (status {status})")


#: Chunks per thread of a split kernel call: the pool's threads take them as they come, so that one
#: thread starting late (a vCPU the hypervisor runs late, a core busy elsewhere) leaves the others its
#: share instead of holding up the call. Four where a chunk's own setup is a plane's buffer; two for the
#: convolution kernels, each chunk of which packs the whole filter.
PIECES_PER_THREAD = 4
CONV_PIECES_PER_THREAD = 2


def _parts(count: int, threaded: bool, per_thread: int = PIECES_PER_THREAD) -> list[tuple[int, int]]:
    return split(count, workers() * per_thread) if threaded else [(0, count)]


def _kept(keep: np.ndarray | None, dims: ConvDims | PoolDims, dtype: np.dtype) -> int:
    """The address for a forward's copy of x (0: none wanted), checked like every other argument."""
    return 0 if keep is None else _address(keep, "keep", dims.x_shape, dtype)


def _filter_shape(dims: ConvDims | PoolDims) -> tuple[int, ...]:
    """The depthwise filter's shape: (C, 1, *kernel); a pooling window's weights for mean pooling."""
    return dims.w_shape if isinstance(dims, ConvDims) else dims.x_shape[1:2] + (1,) + dims.window


def depthwise_forward(x: np.ndarray, w: np.ndarray, dims: ConvDims | PoolDims, threaded: bool,
                      keep: np.ndarray | None = None) -> np.ndarray:
    """y of a depthwise convolution (groups == in == out channels; or a pooling window, zero-padded,
    weighted by ``w``); planes split over the pool. ``keep`` (x's shape) receives a copy of x, made
    while each plane is in cache (the forward's own copy, for its backward)."""
    dtype = x.dtype
    y = np.empty(dims.y_shape, dtype)
    args = (_address(x, "x", dims.x_shape, dtype), _address(w, "w", _filter_shape(dims), dtype),
            _address(y, "y", dims.y_shape, dtype), _kept(keep, dims, dtype), geometry(dims))
    fn = _kernel("depthwise_forward", dtype)
    _launch(fn, args, _split_plane_count(dims, threaded))
    return y


def depthwise_data_grad(dy: np.ndarray, w: np.ndarray, dims: ConvDims | PoolDims, threaded: bool) -> np.ndarray:
    """dx of :func:`depthwise_forward` for output gradient ``dy``."""
    dtype = dy.dtype
    dx = np.empty(dims.x_shape, dtype)
    args = (_address(dy, "dy", dims.y_shape, dtype), _address(w, "w", _filter_shape(dims), dtype),
            _address(dx, "dx", dims.x_shape, dtype), geometry(dims))
    fn = _kernel("depthwise_data_grad", dtype)
    _launch(fn, args, _split_plane_count(dims, threaded))
    return dx


def depthwise_filter_grad(dy: np.ndarray, x: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
    """dw of a depthwise convolution, summed over the batch; channels split over the pool."""
    dtype = dy.dtype
    dw = np.empty(dims.w_shape, dtype)
    args = (_address(dy, "dy", dims.y_shape, dtype), _address(x, "x", dims.x_shape, dtype),
            _address(dw, "dw", dims.w_shape, dtype), geometry(dims), dims.batch)
    fn = _kernel("depthwise_filter_grad", dtype)
    _launch(fn, args, _parts(dims.in_channels, threaded))
    return dw


def _split_plane_count(dims: ConvDims | PoolDims, threaded: bool) -> list[tuple[int, int]]:
    return _parts(dims.x_shape[0] * dims.x_shape[1], threaded)


@functools.lru_cache(maxsize=256)
def run_length(dims: ConvDims) -> int:
    """A sample's run of outputs in the kernels' plane layout (csrc/planes.h: ``layout.run``): its outputs
    from the first to the last, rows a phase's width apart."""
    g = geometry(dims)
    width = [-(-((o - 1) * s + (k - 1) * d + 1) // s) for o, s, k, d in
             zip(g.out, g.stride, g.kernel, g.dilation)]
    return ((g.out[0] - 1) * width[1] + (g.out[1] - 1)) * width[2] + g.out[2]


def conv_forward(x: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool,
                 keep: np.ndarray | None = None, bias: np.ndarray | None = None) -> np.ndarray:
    """y of a convolution (any groups, stride, dilation, padding; w as the forward applies it), as a
    direct convolution, plus ``bias`` per output channel (x's dtype) where given, added as y is written;
    samples split over the pool. ``keep`` as in :func:`depthwise_forward`."""
    dtype = x.dtype
    y = np.empty(dims.y_shape, dtype)
    splits = conv_forward_splits(dims, threaded)
    args = (_address(x, "x", dims.x_shape, dtype), _address(w, "w", dims.w_shape, dtype),
            0 if bias is None else _address(bias, "bias", (dims.out_channels,), dtype),
            _address(y, "y", dims.y_shape, dtype), _kept(keep, dims, dtype), geometry(dims),
            dims.out_channels, dims.groups, splits)
    fn = _kernel("conv_forward", dtype)
    _launch(fn, args, _parts(dims.batch * splits, threaded, CONV_PIECES_PER_THREAD))
    return y


#: Output channels per register tile of the convolution kernels on this CPU (csrc/conv_typed.h: MR).
def _tile_outputs() -> int:
    return 12 if _best_suffix() == "v4" else 6


def conv_forward_splits(dims: ConvDims, threaded: bool) -> int:
    """Parts of each sample's output channels the forward kernel's work units take: 1 (a unit per
    sample) unless there are fewer samples than threads, as in batch-1 inference; then each sample's
    blocks of output channels split so that every thread has a part (each part loads the sample's
    planes itself: a copy, against the part's share of the products; measured, 2-core EPYC, batch 1,
    3x3, 64 channels at 56x56: 2.44 ms on one thread, 1.73 in four parts, 1.4 in two)."""
    if not threaded or dims.batch >= workers():
        return 1
    blocks = -(-(dims.out_channels // dims.groups) // _tile_outputs())
    return max(1, min(blocks, -(-workers() // dims.batch)))


def conv_data_grad(dy: np.ndarray, w: np.ndarray, dims: ConvDims, threaded: bool) -> np.ndarray:
    """dx of a convolution for output gradient ``dy``, as a product of the transposed filter and dy per
    kernel offset, added where the forward read (any stride); samples split over the pool."""
    dtype = dy.dtype
    dx = np.empty(dims.x_shape, dtype)
    args = (_address(dy, "dy", dims.y_shape, dtype), _address(w, "w", dims.w_shape, dtype),
            _address(dx, "dx", dims.x_shape, dtype), geometry(dims), dims.out_channels, dims.groups)
    fn = _kernel("conv_data_grad", dtype)
    _launch(fn, args, _parts(dims.batch, threaded, CONV_PIECES_PER_THREAD))
    return dx


def conv_filter_grad(dy: np.ndarray, x: np.ndarray, dims: ConvDims, threaded: bool,
                     bias_grad: bool = False) -> Any:
    """dw of a convolution, summed over the batch; the output channels (of every group: a part covers
    whole groups where it can, whose planes it then loads once) split over the pool. With ``bias_grad``:
    (dw, db), db :func:`channel_sums` of dy (float64, its bits): from the same pass over dy where that
    sums plane by plane, else by it (row mode)."""
    dtype = dy.dtype
    dw = np.empty(dims.w_shape, dtype)
    together = bias_grad and not _row_mode(dy)
    db = np.empty(dims.out_channels) if together else None
    args = (_address(dy, "dy", dims.y_shape, dtype), _address(x, "x", dims.x_shape, dtype),
            _address(dw, "dw", dims.w_shape, dtype), 0 if db is None else _data(db), geometry(dims),
            dims.out_channels, dims.groups, dims.batch)
    fn = _kernel("conv_filter_grad", dtype)
    _launch(fn, args, _parts(dims.out_channels, threaded, CONV_PIECES_PER_THREAD))
    if bias_grad:
        return dw, db if together else channel_sums(dy)[0]
    return dw


def _winner_dtype(dims: PoolDims) -> np.dtype:
    winner = np.dtype(dims.winner_dtype)
    if winner.itemsize not in (1, 2, 4):
        raise ValueError(f"native max pooling counts windows of at most 2**32 positions, not {len(dims.window_positions)}")
    return winner


def maxpool_forward(x: np.ndarray, dims: PoolDims, threaded: bool) -> tuple[np.ndarray, np.ndarray]:
    """(y, winners) of max pooling: winners are the window positions (row-major) that won, in
    ``dims.winner_dtype``."""
    dtype, winner = x.dtype, _winner_dtype(dims)
    y, winners = np.empty(dims.y_shape, dtype), np.empty(dims.y_shape, winner)
    args = (_address(x, "x", dims.x_shape, dtype), _address(y, "y", dims.y_shape, dtype),
            _address(winners, "winners", dims.y_shape, winner), winner.itemsize, geometry(dims))
    fn = _kernel("maxpool_forward", dtype)
    _launch(fn, args, _split_plane_count(dims, threaded))
    return y, winners


def plane_max(x: np.ndarray, dims: PoolDims, threaded: bool) -> tuple[np.ndarray, np.ndarray]:
    """(y, winners) of global max pooling (one window, the whole unpadded plane): each plane's max and
    the flat index that won, in ``dims.winner_dtype``."""
    dtype, winner = x.dtype, _winner_dtype(dims)
    y, winners = np.empty(dims.y_shape, dtype), np.empty(dims.y_shape, winner)
    args = (_address(x, "x", dims.x_shape, dtype), _data(y), _data(winners), winner.itemsize,
            math.prod(dims.x_shape[2:]))
    _launch(_kernel("plane_max", dtype), args, _split_plane_count(dims, threaded))
    return y, winners


def maxpool_backward(dy: np.ndarray, winners: np.ndarray, dims: PoolDims, threaded: bool) -> np.ndarray:
    """dx of max pooling: every dy added to the input its window's winner read."""
    dtype, winner = dy.dtype, _winner_dtype(dims)
    dx = np.empty(dims.x_shape, dtype)
    args = (_address(dy, "dy", dims.y_shape, dtype), _address(winners, "winners", dims.y_shape, winner),
            winner.itemsize, _address(dx, "dx", dims.x_shape, dtype), geometry(dims))
    fn = _kernel("maxpool_backward", dtype)
    _launch(fn, args, _split_plane_count(dims, threaded))
    return dx


# ------------------------------------------------------------------------------- per-channel kernels
#: Split a per-channel pass over the pool from this many elements on (one pass over memory each).
#: Measured (float32, us, one thread against two, 2-core Xeon with AVX-512): at 262 K elements sums
#: 85/53, batch norm's normalisation 135/81 and data gradient 100/61; at 131 K about even (37/31, 47/45,
#: affine 25/28); at 33 K the split loses (13/18, 16/35).
CHANNEL_THREAD_MIN_ELEMENTS = 1 << 18
#: Planes of fewer elements than this run in row mode (csrc/channels.c): the data as rows of channels
#: times plane elements, summed by column and mapped with per-column parameters, instead of a loop too
#: short to vectorize per plane. Measured (2-core EPYC, float32, batch norm forward + backward against
#: torch): (256, 512) planes of 1 took 13x torch's time plane by plane, 64 channels at 4x4 2.1x.
ROW_MODE_PLANE = 32


def _planes(a: np.ndarray) -> tuple[int, int, int]:
    """(batch, channels, plane) of an (N, C, ...) array."""
    return a.shape[0], a.shape[1], math.prod(a.shape[2:])


def _row_mode(a: np.ndarray) -> bool:
    return math.prod(a.shape[2:]) < ROW_MODE_PLANE


def _per_channel(a: np.ndarray, name: str, channels: int, dtype: Any) -> int:
    return _address(a, name, (channels,), np.dtype(dtype))


def _split_channels(a: np.ndarray) -> list[tuple[int, int]]:
    return _parts(a.shape[1], a.size >= CHANNEL_THREAD_MIN_ELEMENTS)


def _map_layout(a: np.ndarray, params: tuple[tuple[np.ndarray | None, str], ...], dtype: Any) -> tuple[
        list[int], tuple[int, int, int], list[tuple[int, int]], tuple[np.ndarray | None, ...]]:
    """How a per-channel map runs over (N, C, ...) ``a``: the parameters' addresses (0 for None), the
    kernel's (channels, plane, per_column), its ranges, and the arrays behind those addresses where
    they are new (the caller holds them through the call). Row mode spreads each channel's parameter
    over its plane's elements along a row of the sample."""
    n, c, plane = _planes(a)
    addresses = [0 if v is None else _per_channel(v, name, c, dtype) for v, name in params]
    if not _row_mode(a):
        return addresses, (c, plane, 0), _parts(n * c, a.size >= CHANNEL_THREAD_MIN_ELEMENTS), ()
    spread = tuple(None if v is None else _spread(v, plane) for v, _ in params)
    return ([0 if v is None else _data(v) for v in spread], (1, c * plane, 1),
            _parts(n, a.size >= CHANNEL_THREAD_MIN_ELEMENTS), spread)


def _spread(v: np.ndarray, plane: int) -> np.ndarray:
    """Each value of ``v`` ``plane`` times in a row (np.repeat, without its element-by-element loop)."""
    if plane == 1:
        return v
    out = np.empty((v.size, plane), v.dtype)
    out[...] = v[:, None]
    return out.reshape(-1)


def _column_sums(a: np.ndarray, b: np.ndarray | None, center: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Row mode's sums (see csrc/channels.c: column_sums), per channel: each column's sum in float64,
    then each channel's columns added."""
    n, c, plane = _planes(a)
    sums, products = np.empty(c * plane), np.empty(c * plane)
    spread = None if center is None else _spread(center.astype(np.float64), plane)
    args = (_address(a, "a", a.shape, a.dtype), 0 if b is None else _address(b, "b", a.shape, a.dtype),
            0 if spread is None else _data(spread), _data(sums), _data(products), n, c * plane)
    _launch(_kernel("column_sums", a.dtype), args, _parts(c * plane, a.size >= CHANNEL_THREAD_MIN_ELEMENTS))
    if plane > 1:
        sums, products = sums.reshape(c, plane).sum(axis=1), products.reshape(c, plane).sum(axis=1)
    return sums, products


def channel_sums(a: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Per channel (axis 1) of C-contiguous (N, C, ...) ``a``: the sum of a and, with ``b`` (a's shape),
    the sum of a * b; in float64."""
    if _row_mode(a):
        by_column = _column_sums(a, b, None)
        return by_column[0], (by_column[1] if b is not None else None)
    n, c, plane = _planes(a)
    sums, products = np.empty(c), (np.empty(c) if b is not None else None)
    args = (_address(a, "a", a.shape, a.dtype), 0 if b is None else _address(b, "b", a.shape, a.dtype),
            _data(sums), 0 if products is None else _data(products), n, c, plane)
    fn = _kernel("channel_sums", a.dtype)
    _launch(fn, args, _split_channels(a))
    return sums, products


def channel_moments(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per channel of C-contiguous (N, C, ...) ``a`` with N * plane > 0: (mean, biased variance) in float64,
    one pass over the data (row mode: two, the sums and then the squares about the mean)."""
    n, c, plane = _planes(a)
    if _row_mode(a):
        mean = _column_sums(a, None, None)[0] / (n * plane)
        return mean, _column_sums(a, None, mean)[0] / (n * plane)
    mean, var = np.empty(c), np.empty(c)
    args = (_address(a, "a", a.shape, a.dtype), _data(mean), _data(var), n, c, plane)
    _launch(_kernel("channel_moments", a.dtype), args, _split_channels(a))
    return mean, var


def channel_affine(a: np.ndarray, scale: np.ndarray | None, shift: np.ndarray,
                   out: np.ndarray | None = None) -> np.ndarray:
    """a * scale[c] + shift[c] per channel (a + shift[c] without ``scale``), into ``out`` (may be ``a``)."""
    out = np.empty_like(a) if out is None else out
    (k, m), layout, parts, _held = _map_layout(a, ((scale, "scale"), (shift, "shift")), a.dtype)
    args = (_address(a, "a", a.shape, a.dtype), k, m, _address(out, "out", a.shape, a.dtype)) + layout
    _launch(_kernel("channel_affine", a.dtype), args, parts)
    return out


def batchnorm_normalize(x: np.ndarray, mean: np.ndarray, invstd: np.ndarray, gamma: np.ndarray,
                        beta: np.ndarray, keep_xhat: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    """(xhat, y): xhat = (x - mean[c]) * invstd[c], y = xhat * gamma[c] + beta[c], in one pass; xhat None
    (never written) unless ``keep_xhat``."""
    xhat, y = (np.empty_like(x) if keep_xhat else None), np.empty_like(x)
    params = ((mean, "mean"), (invstd, "invstd"), (gamma, "gamma"), (beta, "beta"))
    addresses, layout, parts, _held = _map_layout(x, params, x.dtype)
    args = (_address(x, "x", x.shape, x.dtype), *addresses, 0 if xhat is None else _data(xhat), _data(y)) + layout
    _launch(_kernel("batchnorm_normalize", x.dtype), args, parts)
    return xhat, y


def batchnorm_data_grad(dy: np.ndarray, saved: np.ndarray, shift: np.ndarray, mean_dy: np.ndarray, k: np.ndarray,
                        scale: np.ndarray) -> np.ndarray:
    """Training's dx = (dy - mean_dy[c] - (saved - shift[c]) * k[c]) * scale[c], in one pass: ``saved`` is x
    (shift its mean, k = invstd * mean(dy * xhat)) or x normalised (shift 0, k = mean(dy * xhat))."""
    dx = np.empty_like(dy)
    params = ((shift, "shift"), (mean_dy, "mean_dy"), (k, "k"), (scale, "scale"))
    addresses, layout, parts, _held = _map_layout(dy, params, dy.dtype)
    args = (_address(dy, "dy", dy.shape, dy.dtype), _address(saved, "saved", dy.shape, dy.dtype), *addresses,
            _data(dx)) + layout
    _launch(_kernel("batchnorm_data_grad", dy.dtype), args, parts)
    return dx


# ------------------------------------------------------------------------------- the LSTM time loop
def lstm_forward(x: np.ndarray, w_ih: np.ndarray, bias: np.ndarray | None, w_hh: np.ndarray, steps: np.ndarray,
                 acts: np.ndarray, hs: np.ndarray, cs: np.ndarray, tcs: np.ndarray) -> None:
    """Every step of one LSTM layer and direction (csrc/recurrent_typed.h): x (T, I, B) each time's
    inputs, feature-major; w_ih (4H, I), ``bias`` (4H) both biases summed (None: none), w_hh (4H, H),
    ``steps`` the time of each step; fills the tapes acts (T, 4H, B), hs and cs (T + 1, H, B; entry 0
    the initial state, given) and tcs (T, H, B)."""
    dtype = x.dtype
    count, inputs, batch = x.shape
    rows, hidden = w_hh.shape
    steps = np.ascontiguousarray(steps, dtype=np.int64)
    if rows != 4 * hidden or steps.shape != (count,) or (count and not 0 <= steps.min() <= steps.max() < count):
        raise ValueError(f"lstm_forward: x {x.shape}, w_hh {w_hh.shape} and steps {steps.shape} do not fit an "
                         f"LSTM's {count} steps")
    plane = (hidden, batch)
    args = (_address(x, "x", x.shape, dtype), _address(w_ih, "w_ih", (rows, inputs), dtype),
            0 if bias is None else _address(bias, "bias", (rows,), dtype),
            _address(w_hh, "w_hh", (rows, hidden), dtype), _data(steps),
            _address(acts, "acts", (count, rows, batch), dtype), _address(hs, "hs", (count + 1, *plane), dtype),
            _address(cs, "cs", (count + 1, *plane), dtype), _address(tcs, "tcs", (count, *plane), dtype),
            count, inputs, hidden, batch)
    _run_time_loop(_kernel("lstm_forward", dtype), args, _loop_team(hidden, batch), 1, hidden, batch, 4, hidden + inputs,
                   dtype)


def lstm_forward_stack(x: np.ndarray, layers: Sequence[tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray,
                                                               np.ndarray, np.ndarray, np.ndarray]]) -> None:
    """Every step of a stack of unidirectional LSTM layers, times in order, each layer's input the states
    of the layer below (csrc/recurrent_typed.h: a wavefront, the layers' steps side by side): x (T, I, B)
    the first layer's inputs, feature-major; per layer (w_ih, bias or None, w_hh, acts, hs, cs, tcs) as
    :func:`lstm_forward` takes them (hs[0], cs[0] given). The same tapes as :func:`lstm_forward` layer by
    layer."""
    dtype = x.dtype
    count, inputs, batch = x.shape
    if not layers:
        raise ValueError("lstm_forward_stack: no layers")
    hidden = layers[0][2].shape[1]
    plane = (hidden, batch)
    team = _loop_team(hidden, batch)
    parts = STACK_CHUNKS if team > 1 else 1
    words, held = [], []
    for i, (w_ih, bias, w_hh, acts, hs, cs, tcs) in enumerate(layers):
        rows = 4 * hidden
        if w_hh.shape != (rows, hidden) or w_ih.shape != (rows, hidden if i else inputs):
            raise ValueError(f"lstm_forward_stack: layer {i}'s w_ih {w_ih.shape} and w_hh {w_hh.shape} do not "
                             f"fit a stack of {hidden} units over {inputs} inputs")
        depth = hidden + w_ih.shape[1]
        packed = _packed(parts, 4, hidden, depth, dtype)
        held.append(packed)
        words += [_address(x, "x", (count, inputs, batch), dtype) if i == 0 else 0,
                  _address(w_ih, "w_ih", w_ih.shape, dtype),
                  0 if bias is None else _address(bias, "bias", (rows,), dtype),
                  _address(w_hh, "w_hh", (rows, hidden), dtype), _address(acts, "acts", (count, rows, batch), dtype),
                  _address(hs, "hs", (count + 1, *plane), dtype), _address(cs, "cs", (count + 1, *plane), dtype),
                  _address(tcs, "tcs", (count, *plane), dtype), _data(packed), w_ih.shape[1]]
    table = np.array(words, np.int64)
    sync = _sync(parts, len(layers) * parts, team)
    _launch(_kernel("lstm_forward_stack", dtype), (_data(table), len(layers), count, hidden, batch, _data(sync)),
            split(team, team))


#: Chunks of hidden units per layer and round of :func:`lstm_forward_stack` on a team, taken as they come:
#: one, each layer's step on one core beside the others' (measured, 2-layer (30, 16, 64 -> 128) float32 on
#: torch's team of two: 1.49-1.51 ms, against 1.63 with two chunks, 1.68 with four, and 1.64 layer by layer).
STACK_CHUNKS = 1


def lstm_backward(acts: np.ndarray, cs: np.ndarray, tcs: np.ndarray, w_hh: np.ndarray, dy: np.ndarray,
                  dh: np.ndarray, dc: np.ndarray) -> np.ndarray:
    """The backward loop of :func:`lstm_forward`: dy (T, H, B) the gradients of the states after each
    step; dh and dc (H, B) those of the last state and cell, updated in place to the initial state's.
    Returns the gradients of the gates' pre-activations as one (4H, T B) matrix, its columns in the
    (step, sequence) order of x's rows: the weight gradients' left factor."""
    dtype = acts.dtype
    count, rows, batch = acts.shape
    hidden = rows // 4
    plane = (hidden, batch)
    for name, a in (("dh", dh), ("dc", dc)):
        _address(a, name, plane, dtype)
    team = _loop_team(hidden, batch)
    groups = _column_groups(team, hidden, batch)
    n = batch // groups
    # each group of columns runs in arrays of its own (see the kernel): dh, dc (groups, H, n) and the
    # gate gradients (T, groups, 4H, n)
    columns = (hidden, groups, n)
    dh_g, dc_g = (np.ascontiguousarray(a.reshape(columns).transpose(1, 0, 2)) for a in (dh, dc))
    dgates = np.empty((count, groups, rows, n), dtype)
    args = (_address(acts, "acts", acts.shape, dtype), _address(cs, "cs", (count + 1, *plane), dtype),
            _address(tcs, "tcs", (count, *plane), dtype), _address(w_hh, "w_hh", (rows, hidden), dtype),
            _address(dy, "dy", (count, *plane), dtype), _data(dh_g), _data(dc_g), _data(dgates), count, hidden,
            batch)
    _run_time_loop(_kernel("lstm_backward", dtype), args, team, groups, hidden, n, 1, rows, dtype)
    for a, grouped in ((dh, dh_g), (dc, dc_g)):
        np.copyto(a.reshape(columns), grouped.transpose(1, 0, 2))
    return swap_axes(dgates.reshape(count * groups, rows, n), 0).reshape(rows, count * batch)


def _column_groups(team: int, hidden: int, batch: int) -> int:
    """How many groups of the batch's columns an LSTM backward loop runs side by side, each its own
    recurrence on one core: the team, where the layer has at most :data:`LSTM_GROUP_MAX_HIDDEN` units and
    the batch splits evenly into groups of at least :data:`LSTM_GROUP_MIN_COLUMNS`; else one (each
    step's hidden units split over the team)."""
    if (team > 1 and hidden <= LSTM_GROUP_MAX_HIDDEN and batch % team == 0
            and batch // team >= LSTM_GROUP_MIN_COLUMNS):
        return team
    return 1


#: The fewest of the batch's columns a group of :func:`lstm_backward` takes. Split by hidden units, a
#: step's chunks each read every unit's gate gradients, half of them from the other core's cache; split
#: by columns, nothing crosses cores. Measured, one 128-unit layer's loop over 30 steps of 16 sequences
#: on 2 cores: 0.70-0.72 ms split by units, 0.79 on one thread, 0.46 for 8 sequences on one thread.
#: At least 3: a product of one or two columns interleaves its sums (recurrent_typed.h: narrow_panel's
#: chains), which would give other bits than one thread's.
LSTM_GROUP_MIN_COLUMNS = 8
#: The most hidden units a layer whose backward loop runs in groups has: what crosses cores split by
#: units shrinks against a step's product as the layer grows, and each group packs the whole recurrent
#: matrix. Measured on 2 cores, the loop and its layout changes: 128 units, 30 steps of 16 sequences,
#: 0.73 ms in groups against 0.89 split by units; 256 units, 50 steps of 32, 3.42 ms against 3.28.
LSTM_GROUP_MAX_HIDDEN = 128


#: Split the LSTM time loop over the cores from this many multiply-adds of a step's recurrent product on
#: (a step's chunks wait for the step before: a few microseconds a step; measured on 2 cores, forward and
#: backward loop per step: H=64, B=16 (2^18) 20.7 us on one thread, 18.5 on two; H=32, B=16 10.3
#: against 12.7)
LSTM_THREAD_MIN_MACS = 1 << 18


def _run_time_loop(fn: Any, args: tuple, team: int, groups: int, hidden: int, columns: int, rows_per_unit: int,
                   depth: int, dtype: np.dtype) -> None:
    """Run an LSTM loop kernel on ``team`` threads (:func:`_loop_team`): each step cut into ``groups`` groups
    of ``columns`` of the batch's columns (the backward loop's), each cut into chunks of hidden units,
    one chunk per thread in all. Its turn-taking words live in a fresh, zeroed buffer per call (:func:`_sync`);
    each chunk's packed rows of the recurrent matrix (``rows_per_unit`` per hidden unit, ``depth`` long)
    in one buffer, laid out as the kernel's CHUNK_SLACK_ROWS rule says (panels for ``columns``)."""
    parts = team // groups
    sync = _sync(parts, team, team, groups)
    packed = _packed(team, rows_per_unit, hidden, depth, dtype, parts)
    _launch(fn, args + (_data(packed), _data(sync)), split(team, team))


def _sync(parts: int, per_round: int, team: int, groups: int = 1) -> np.ndarray:
    """A loop kernel's zeroed turn-taking words (csrc/recurrent.c): ``parts`` chunks of hidden units per
    group, layer and round, ``per_round`` chunks a round, the call's ``team`` ranges, ``groups`` groups
    of the batch's columns (a cache line of chunks done each)."""
    sync = np.zeros(_SYNC_DONE + 8 * groups + per_round + team, np.int64)
    sync[1], sync[2], sync[3] = parts, team, groups
    return sync


#: csrc/recurrent.c's SYNC_DONE: where a loop's counts of chunks done start among its turn-taking words
_SYNC_DONE = 16


def _loop_team(hidden: int, batch: int) -> int:
    """The threads an LSTM loop runs on (see :func:`_run_time_loop`)."""
    team = workers()
    if (team < 2 or hidden < team or 4 * hidden * hidden * batch < LSTM_THREAD_MIN_MACS
            or (blas_single_threaded() and not cores_to_spare())):
        return 1
    return team


def _packed(chunks: int, rows_per_unit: int, hidden: int, depth: int, dtype: Any, parts: int | None = None) -> np.ndarray:
    """A loop's buffer for ``chunks`` chunks' packed rows of the recurrent matrix, the hidden units cut
    into ``parts`` (default: ``chunks``), laid out as the kernel's CHUNK_SLACK_ROWS rule says, from its
    first 64-byte boundary."""
    widest = rows_per_unit * -(-hidden // (parts or chunks))
    part = -(-(widest + _CHUNK_SLACK_ROWS) * depth // _PART_ALIGN) * _PART_ALIGN
    return np.empty(chunks * part + 64 // np.dtype(dtype).itemsize, dtype)


#: csrc/recurrent.c's CHUNK_SLACK_ROWS and PART_ALIGN: the rows each chunk's part of a packed buffer holds
#: beyond its own, and the elements its size is a multiple of
_CHUNK_SLACK_ROWS = 16
_PART_ALIGN = 16


#: vmath's functions (csrc/vmath_typed.h), by the number the kernel takes (its tanh is reached through
#: the tanh activation, :func:`activation_forward`: alone, np.tanh is faster)
VMATH = {"exp": 0, "sigmoid": 1}


def vmath(x: np.ndarray, function: str) -> np.ndarray:
    """exp or sigmoid of C-contiguous ``x`` by the kernels' own vector code, which the LSTM loop uses
    (the tests measure its accuracy against numpy's float64)."""
    y = np.empty_like(x)
    _kernel("vmath", x.dtype)(_address(x, "x", x.shape, x.dtype), _data(y), x.size, VMATH[function])
    return y


# ------------------------------------------------------------------------------- pointwise activations
#: the activation modes the kernels compute (csrc/pointwise.c numbers them so); identity stays numpy
ACTIVATIONS = {"relu": 0, "sigmoid": 1, "tanh": 2, "leaky_relu": 3, "clipped_relu": 4, "swish": 5, "elu": 6}
#: the modes whose derivative is saved as a boolean mask (those whose derivative is a step)
MASKED_ACTIVATIONS = STEP_MODES
#: Split a pointwise pass over the pool from this many elements on (one pass over memory each; below it
#: the handoff costs more than the second core saves). Measured on the Folded path's former C column fill
#: (ms, one thread against two, 2-core EPYC): 1.8 M elements (512 channels at 7x7, batch 8) 0.84 against 0.50;
#: 74 K (32 channels at 8x8, batch 4) 0.034 against 0.024.
POINTWISE_THREAD_MIN_ELEMENTS = 1 << 16


def _split_elements(a: np.ndarray) -> list[tuple[int, int]]:
    return _parts(a.size, a.size >= POINTWISE_THREAD_MIN_ELEMENTS)


def activation_forward(x: np.ndarray, mode: str, alpha: float | None, mask: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """(y, the bool mask of where f'(x) is 1, or None unless ``mask``) of an activation in
    :data:`ACTIVATIONS`, in one pass; the mask only for the :data:`MASKED_ACTIVATIONS`."""
    dtype = x.dtype
    y = np.empty(x.shape, dtype)
    saved = np.empty(x.shape, bool) if mask and mode in MASKED_ACTIVATIONS else None
    if x.size == 0:
        return y, saved
    args = (_address(x, "x", x.shape, dtype), _data(y), 0 if saved is None else _data(saved),
            _data(_parameter(alpha, dtype)), ACTIVATIONS[mode])
    _launch(_kernel("activation_forward", dtype), args, _split_elements(x))
    return y, saved


def activation_backward(dy: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """dx = dy * f'(x), f'(x) as :func:`activation_forward`'s bool mask."""
    dtype = dy.dtype
    dx = np.empty(dy.shape, dtype)
    if dy.size == 0:
        return dx
    args = (_address(dy, "dy", dy.shape, dtype), _address(mask, "mask", dy.shape, mask.dtype), _data(dx))
    _launch(_kernel("activation_backward", dtype), args, _split_elements(dy))
    return dx


def activation_backward_from(dy: np.ndarray, source: np.ndarray, mode: str, alpha: float | None) -> np.ndarray:
    """dx = dy * f'(.), f' recomputed from what the mode's backward reads (``source``: y for relu, sigmoid
    and tanh, else x), in one pass."""
    dtype = dy.dtype
    dx = np.empty(dy.shape, dtype)
    if dy.size == 0:
        return dx
    args = (_address(dy, "dy", dy.shape, dtype), _address(source, "source", dy.shape, dtype), _data(dx),
            _data(_parameter(alpha, dtype)), ACTIVATIONS[mode])
    _launch(_kernel("activation_backward_from", dtype), args, _split_elements(dy))
    return dx


def _parameter(alpha: float | None, dtype: Any) -> np.ndarray:
    """An activation's coefficient as the kernels read it (one value of the data's dtype)."""
    return np.array([0.0 if alpha is None else alpha], dtype)


# ------------------------------------------------------------------------------- softmax
#: positions along the axes after the softmax axis that one line of the kernels takes (csrc/softmax.c)
SOFTMAX_BLOCK = 256
#: Split softmax over the pool from this many elements on: an exp and three passes per element, about
#: four times a pointwise pass's work (measured, 2-core EPYC, float32 (64, 1000): 53 us on one thread,
#: 30 us on two).
SOFTMAX_THREAD_MIN_ELEMENTS = 1 << 14


def _softmax_lines(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """(n, inner, lines): the axis' length, the elements after it, and the kernels' units of work."""
    n, inner = shape[axis], math.prod(shape[axis + 1:])
    outer = math.prod(shape[:axis])
    return n, inner, outer if inner == 1 else outer * -(-inner // SOFTMAX_BLOCK)


def softmax_forward(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    """softmax (``log``: log-softmax) of C-contiguous ``x`` along ``axis`` (non-negative), in three passes
    over each line."""
    y = np.empty(x.shape, x.dtype)
    if x.size == 0:
        return y
    n, inner, lines = _softmax_lines(x.shape, axis)
    args = (_address(x, "x", x.shape, x.dtype), _data(y), n, inner, int(log))
    _launch(_kernel("softmax_forward", x.dtype), args, _parts(lines, x.size >= SOFTMAX_THREAD_MIN_ELEMENTS))
    return y


def softmax_backward(y: np.ndarray, dy: np.ndarray, axis: int, log: bool) -> np.ndarray:
    """dx of :func:`softmax_forward` from its result ``y`` and the output gradient ``dy``."""
    dx = np.empty(y.shape, y.dtype)
    if y.size == 0:
        return dx
    n, inner, lines = _softmax_lines(y.shape, axis)
    args = (_address(y, "y", y.shape, y.dtype), _address(dy, "dy", y.shape, y.dtype), _data(dx), n, inner, int(log))
    _launch(_kernel("softmax_backward", y.dtype), args, _parts(lines, y.size >= SOFTMAX_THREAD_MIN_ELEMENTS))
    return dx


# ------------------------------------------------------------------------------- products
def split_product_available(dtype: Any) -> bool:
    """Whether :func:`split_product` runs for ``dtype``: the kernels and numpy's CBLAS gemm are there."""
    return library() is not None and _blas.gemm_available(dtype)


def split_product(a: np.ndarray, b: np.ndarray, out: np.ndarray, threaded: bool) -> None:
    """out = a @ b (2-D; out C-contiguous), its rows split over the kernels' team, each range one call of
    numpy's CBLAS gemm (csrc/products.c), which the caller holds to one thread: under dnnbind.torch the
    team is torch's own OpenMP team, where BLAS's threads of its own would compete with it for the cores.
    a and b are read in place where their rows or columns are contiguous."""
    m, k = a.shape
    n = b.shape[1]
    if b.shape[0] != k or out.shape != (m, n) or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"split_product: a {a.shape} @ b {b.shape} into a C-contiguous writable {(m, n)} out, "
                         f"not {out.shape}")
    dtype = out.dtype
    if a.dtype != dtype or b.dtype != dtype:
        raise ValueError(f"split_product: a, b and out must share one dtype, not {a.dtype}, {b.dtype}, {dtype}")
    if m == 0 or n == 0:
        return
    if k == 0:
        out.fill(0)
        return
    blas = _blas.openblas()
    (a_op, trans_a, lda), (b_op, trans_b, ldb) = _blas.operand(a), _blas.operand(b)
    kind = (1 if dtype == np.float64 else 0) | (2 if blas.index64 else 0)
    gemm = ctypes.cast(blas.gemm[dtype], ctypes.c_void_p).value
    args = (gemm, kind, int(trans_a), int(trans_b), n, k, a_op.ctypes.data, lda, b_op.ctypes.data, ldb,
            out.ctypes.data, n)
    _launch(_gemm_rows(), args, _parts(m, threaded and m >= 2, 1))


@functools.lru_cache(maxsize=1)
def _gemm_rows() -> Any:
    lib = library()
    assert lib is not None
    fn = lib.dnnbind_gemm_rows
    fn.argtypes, fn.restype = [_P, _I, _I, _I, _I, _I, _P, _I, _P, _I, _P, _I, _I, _I], None
    return fn


# ------------------------------------------------------------------------------- layouts
def swap_axes(a: np.ndarray, first: int, out: np.ndarray | None = None) -> np.ndarray:
    """``a`` with axes ``first`` and ``first + 1`` swapped, as a new C-contiguous array or into ``out`` (any
    view of the swapped shape), in one pass (csrc/swaps.c): ``np.ascontiguousarray(np.swapaxes(a, first,
    first + 1))``. numpy's own copy where a or out is not C-contiguous or the kernels do not take the
    dtype; rows split over the pool from :data:`SWAP_THREAD_MIN_ELEMENTS` elements on."""
    shape = a.shape
    swapped = shape[:first] + (shape[first + 1], shape[first]) + shape[first + 2:]
    if out is None:
        out = np.empty(swapped, a.dtype)
    if not (a.flags.c_contiguous and out.flags.c_contiguous) or not available(a.dtype) or a.size == 0:
        np.copyto(out, np.swapaxes(a, first, first + 1))
        return out
    n, na, nb = math.prod(shape[:first]), shape[first], shape[first + 1]
    args = (_data(a), _address(out, "out", swapped, a.dtype), na, nb, math.prod(shape[first + 2:]), 0)
    _launch(_kernel("swap_axes", a.dtype), args, _parts(n * nb, a.size >= SWAP_THREAD_MIN_ELEMENTS))
    return out


#: Split a swap over the pool from this many elements on, below a pointwise pass's threshold: the RNN's
#: layout changes read arrays the loops just wrote from both cores' caches. Measured, the 2-layer (30, 16,
#: 64 -> 128) LSTM's training step (its swaps of 61 K elements), phases of two alternating runs: 7.27-7.29
#: ms against 7.42-7.46 with the pointwise threshold (1 << 16).
SWAP_THREAD_MIN_ELEMENTS = 1 << 14


def filter_flip_transpose(w: np.ndarray, groups: int) -> np.ndarray:
    """The filter of a stride-1 convolution's data gradient from C-contiguous ``w`` (K, C / groups,
    *kernel): (C, K / groups, *kernel), its channel axes swapped within each group and its kernel flipped
    (out[g * cg + c, k, t] = w[g * kg + k, c, taps - 1 - t], t the flat tap): the swap kernel of
    :func:`swap_axes` with its runs of taps reversed; rows split over the pool from
    :data:`POINTWISE_THREAD_MIN_ELEMENTS` elements on."""
    k, cg = w.shape[:2]
    if groups < 1 or k % groups:
        raise ValueError(f"native kernel argument groups: {groups} does not divide {k} output channels")
    kg, taps = k // groups, math.prod(w.shape[2:])
    out = np.empty((groups * cg, kg) + w.shape[2:], w.dtype)
    args = (_address(w, "w", w.shape, w.dtype), _address(out, "out", out.shape, w.dtype), kg, cg, taps, 1)
    _launch(_kernel("swap_axes", w.dtype), args, _parts(groups * cg, w.size >= POINTWISE_THREAD_MIN_ELEMENTS))
    return out
