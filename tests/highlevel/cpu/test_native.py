"""dnnbind's own C kernels (cpu/native.py, csrc/): built by the development install, equal to
PyTorch on random geometries for every instruction set this CPU runs, and guarded against arrays
that do not fit the problem."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys

import numpy as np
import pytest
from native_parts import needs_native

from dnnbind.highlevel.dims import ConvDims, PoolDims
from dnnbind.highlevel.gpu.window_max import first_in_x
from dnnbind.highlevel.cpu import conv_paths, native

torch = pytest.importorskip("torch")
pytestmark = needs_native          # the C kernels themselves: skipped when DNNBIND_NATIVE=0 turns them off
F = torch.nn.functional


def test_kernels_are_built_and_say_for_which_instruction_set():
    assert native.library() is not None, "the C kernels are not built: run make setup (pip install -e .)"
    assert native.isa() in ("baseline", "x86-64-v3 (AVX2, FMA)", "x86-64-v4 (AVX-512)")
    assert native.supported_isas()[-1] == "base"
    assert native.available(np.float32) and native.available(np.float64)
    assert not native.available(np.float16) and not native.available(np.int32)


def _geometries(rng, count, tall=False):
    """Random depthwise problems of rank 1 to 3: kernels, strides, dilations and paddings (asymmetric
    ones included) of every kind, and planes long enough to cross the kernels' chunks. ``tall``: rank 2
    and 3 with kernels of 5 to 8 rows at stride and dilation 1 along them (the row-shared correlation of
    csrc/depthwise_typed.h, on instruction sets with 64-byte vectors), rows of any width."""
    out = []
    while len(out) < count:
        rank = int(rng.integers(2 if tall else 1, 4))
        kernel = tuple(int(k) for k in rng.integers(1, 5, rank))
        stride = tuple(int(s) for s in rng.integers(1, 4, rank))
        dilation = tuple(int(d) for d in rng.integers(1, 3, rank))
        if tall:
            row = rank - 2
            kernel, stride, dilation = (tuple(v if i != row else new for i, v in enumerate(t))
                                        for t, new in ((kernel, int(rng.integers(5, 9))), (stride, 1), (dilation, 1)))
        padding = tuple((int(a), int(b)) for a, b in rng.integers(0, 4, (rank, 2)))
        longest = {1: 3000, 2: 48, 3: 12}[rank]
        size = tuple(int(z) for z in rng.integers(1, longest, rank))
        if any(z + a + b < (k - 1) * d + 1 for z, (a, b), k, d in zip(size, padding, kernel, dilation)):
            continue
        channels, batch = int(rng.integers(2, 5)), int(rng.integers(1, 4))
        out.append(ConvDims((batch, channels) + size, (channels, 1) + kernel, stride=stride, padding=padding,
                            dilation=dilation, groups=channels))
    return out


def _torch_depthwise(x, w, dy, dims):
    pad = [p for lo_hi in reversed(list(zip(dims.pad_low, dims.pad_high))) for p in lo_hi]
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    conv = getattr(F, f"conv{dims.spatial_rank}d")
    yt = conv(F.pad(xt, pad), wt, stride=dims.stride, dilation=dims.dilation, groups=dims.groups)
    yt.backward(torch.tensor(dy))
    return yt.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()


@pytest.fixture(params=native.supported_isas() or ["none"])
def isa(request, monkeypatch):
    """Each instruction set's build of the kernels this CPU runs."""
    if request.param == "none":
        pytest.fail("the C kernels are not built: run make setup (pip install -e .)")
    monkeypatch.setattr(native, "_kernel", lambda name, dtype: native._typed_kernel(name, dtype, request.param))
    return request.param


@pytest.mark.parametrize("tall", [False, True], ids=["any kernel", "tall kernel"])
def test_depthwise_kernels_match_torch_in_float64(rng, isa, tall):
    for i, dims in enumerate(_geometries(rng, 60, tall)):
        x, w = rng.standard_normal(dims.x_shape), rng.standard_normal(dims.w_shape)
        dy = rng.standard_normal(dims.y_shape)
        threaded = bool(i % 2)
        ours = (native.depthwise_forward(x, w, dims, threaded), native.depthwise_data_grad(dy, w, dims, threaded),
                native.depthwise_filter_grad(dy, x, dims, threaded))
        for name, a, b in zip(("y", "dx", "dw"), ours, _torch_depthwise(x, w, dy, dims)):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11, err_msg=f"{name} of {dims}")


@pytest.mark.parametrize("tall", [False, True], ids=["any kernel", "tall kernel"])
def test_depthwise_kernels_in_float32_are_within_rounding_of_float64(rng, isa, tall):
    eps = np.finfo(np.float32).eps
    for dims in _geometries(rng, 30, tall):
        x, w = rng.standard_normal(dims.x_shape), rng.standard_normal(dims.w_shape)
        dy = rng.standard_normal(dims.y_shape)
        x32, w32, dy32 = (a.astype(np.float32) for a in (x, w, dy))
        pairs = [(native.depthwise_forward(x32, w32, dims, False), native.depthwise_forward(x, w, dims, False),
                  int(np.prod(dims.kernel_size))),
                 (native.depthwise_data_grad(dy32, w32, dims, False), native.depthwise_data_grad(dy, w, dims, False),
                  int(np.prod(dims.kernel_size))),
                 (native.depthwise_filter_grad(dy32, x32, dims, True), native.depthwise_filter_grad(dy, x, dims, True),
                  dims.batch * int(np.prod(dims.out_size)))]
        for a32, a64, terms in pairs:
            assert a32.dtype == np.float32
            bound = 4 * eps * np.sqrt(terms) * max(np.abs(x).max(), np.abs(dy).max()) * np.abs(w).max() * 4
            np.testing.assert_allclose(a32, a64, rtol=0, atol=max(bound, 4 * eps * np.abs(a64).max()))


def test_kernels_refuse_arrays_that_do_not_fit_the_problem():
    dims = ConvDims((2, 3, 8, 8), (3, 1, 3, 3), padding=1, groups=3)
    x, w = np.zeros(dims.x_shape), np.zeros(dims.w_shape)
    with pytest.raises(ValueError, match=r"argument x: expected a C-contiguous float64 array of shape \(2, 3, 8, 8\)"):
        native.depthwise_forward(np.zeros((2, 3, 8, 7)), w, dims, False)
    with pytest.raises(ValueError, match=r"argument w: .*got float32"):
        native.depthwise_forward(x, w.astype(np.float32), dims, False)
    with pytest.raises(ValueError, match=r"argument dy: .*contiguous: False"):
        native.depthwise_data_grad(np.zeros((2, 3, 8, 16))[..., ::2], w, dims, False)


def test_native_off_runs_the_numpy_paths():
    """DNNBIND_NATIVE=0: no library is loaded, and a depthwise convolution gives the same result."""
    code = ("import numpy as np, dnnbind\n"
            "from dnnbind.highlevel.cpu import native\n"
            "assert native.library() is None and not native.available(np.float32)\n"
            "rng = np.random.default_rng(0)\n"
            "x, w = rng.standard_normal((2, 4, 9, 9)), rng.standard_normal((4, 1, 3, 3))\n"
            "y, pb = dnnbind.conv(x, w, padding=1, stride=2, groups=4)\n"
            "np.save(__import__('sys').argv[1], np.concatenate([y.ravel()] + [g.ravel() for g in pb(np.cos(y))]))\n")
    results = []
    for value in ("0", "1"):
        path = f"{os.environ.get('TMPDIR', '/tmp')}/dnnbind-native-{value}-{os.getpid()}.npy"
        subprocess.run([sys.executable, "-c", code if value == "0" else code.replace("is None and not", "is not None and")
                        , path], check=True, env={**os.environ, "DNNBIND_NATIVE": value})
        results.append(np.load(path))
        os.remove(path)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("row_mode_plane", [0, native.ROW_MODE_PLANE, 1 << 30])
@pytest.mark.parametrize("shape", [(5, 3), (2, 3, 7), (3, 4, 5, 6), (2, 2, 3, 4, 5), (4, 8, 96, 96), (4100, 1030)])
def test_channel_kernels_match_numpy_in_float64(rng, isa, shape, row_mode_plane, monkeypatch):
    """Sums (float64 whatever the data), means and variances in one pass, affine maps and batch norm's two passes,
    on shapes of every rank and ones large enough to be split over the pool; plane by plane, in row
    mode (the data as rows, parameters per column: columns past a block of sums), and as chosen."""
    monkeypatch.setattr(native, "ROW_MODE_PLANE", row_mode_plane)
    for dtype in (np.float64, np.float32):
        a, b = rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)
        c = shape[1]
        axes = tuple(i for i in range(len(shape)) if i != 1)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        sums, products = native.channel_sums(a, b)
        assert sums.dtype == products.dtype == np.float64
        np.testing.assert_allclose(sums, a64.sum(axis=axes), rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(products, (a64 * b64).sum(axis=axes), rtol=1e-12, atol=1e-9)
        alone, none = native.channel_sums(a)
        assert none is None
        np.testing.assert_array_equal(alone, sums)      # the sum is the same with or without the products
        per = (1, c) + (1,) * (len(shape) - 2)
        for offset in (0.0, 1e4):          # one pass, shifted: an offset far above the spread keeps precision
            data = (a64 + offset).astype(dtype)
            mean, var = native.channel_moments(data)
            exact = data.astype(np.float64)
            np.testing.assert_allclose(mean, exact.mean(axis=axes), rtol=1e-12, atol=1e-12 * (1 + offset))
            np.testing.assert_allclose(var, exact.var(axis=axes), rtol=1e-9)
        k, m, g, h = (rng.standard_normal(c).astype(dtype) for _ in range(4))
        tol = dict(rtol=1e-6, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(native.channel_affine(a, k, m), a * k.reshape(per) + m.reshape(per), **tol)
        np.testing.assert_allclose(native.channel_affine(a, None, m), a + m.reshape(per), **tol)
        xhat, y = native.batchnorm_normalize(a, m, k, g, h)
        np.testing.assert_allclose(xhat, (a - m.reshape(per)) * k.reshape(per), **tol)
        np.testing.assert_allclose(y, xhat * g.reshape(per) + h.reshape(per), **tol)
        nothing, y_alone = native.batchnorm_normalize(a, m, k, g, h, keep_xhat=False)
        assert nothing is None
        np.testing.assert_array_equal(y_alone, y)       # the same y, whether xhat is written or not
        dx = native.batchnorm_data_grad(a, b, h, m, k, g)
        np.testing.assert_allclose(dx, (a - m.reshape(per) - (b - h.reshape(per)) * k.reshape(per)) * g.reshape(per),
                                   **tol)


@pytest.mark.parametrize("first", [np.inf, -np.inf, np.nan, 1.0])
def test_channel_moments_propagate_infinities_and_nans_as_numpy(first):
    """The shift is a channel's first value: an infinite or NaN one is not used as a shift, and the mean and
    variance are numpy's (inf and nan, nan and nan), whichever element holds it."""
    for where in ((0, 0, 0), (1, 0, 5)):
        a = np.ones((2, 3, 40))
        a[where] = first
        a[1, 1, 7] = -np.inf
        mean, var = native.channel_moments(a)
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(mean, a.mean(axis=(0, 2)))
            np.testing.assert_array_equal(var, a.var(axis=(0, 2)))


def test_channel_kernels_refuse_what_does_not_fit():
    a = np.zeros((2, 3, 4))
    with pytest.raises(ValueError, match=r"argument a: expected a C-contiguous"):
        native.channel_moments(a[:, :, ::2])
    with pytest.raises(ValueError, match="argument b: .*got float32"):
        native.channel_sums(a, np.zeros((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match="argument shift"):
        native.channel_affine(a, None, np.zeros(3, np.float32))


def _pool_geometries(rng, count):
    """Random pooling problems: ranks 1 to 3, windows, strides, dilations, padding and ceil_mode."""
    out = []
    while len(out) < count:
        rank = int(rng.integers(1, 4))
        window = tuple(int(k) for k in rng.integers(1, 4, rank))
        try:
            out.append(PoolDims((2, 3) + tuple(int(z) for z in rng.integers(1, 14, rank)), window,
                                stride=tuple(int(s) for s in rng.integers(1, 4, rank)),
                                padding=tuple(int(rng.integers(0, k // 2 + 1)) for k in window),
                                dilation=tuple(int(d) for d in rng.integers(1, 3, rank)),
                                ceil_mode=bool(rng.integers(0, 2)), dtype="float64"))
        except ValueError:     # an empty output
            continue
    return out


def test_maxpool_kernels_equal_the_numpy_path_bit_for_bit(rng, isa, monkeypatch):
    """The same maxima, the same winners (ties to the first position, NaN wins, -inf against padding)
    and the same gradients as the numpy path, which test_pool checks against PyTorch."""
    pool = __import__("dnnbind.highlevel.cpu.pool", fromlist=["pool"])
    for i, dims in enumerate(_pool_geometries(rng, 120)):
        x = rng.standard_normal(dims.x_shape)
        if i % 3 == 0:
            x = np.round(x)                                    # ties
        if i % 5 == 0:
            x.flat[rng.integers(0, x.size, 3)] = np.nan
        if i % 7 == 0:
            x.flat[rng.integers(0, x.size, 3)] = -np.inf
        dy = rng.standard_normal(dims.y_shape)
        y, winners = native.maxpool_forward(x, dims, bool(i % 2))
        winners = first_in_x(np, y, winners, dims)             # the shared fix-up both paths run after
        dx = native.maxpool_backward(dy, winners, dims, bool(i % 2))
        with monkeypatch.context() as numpy_only:
            numpy_only.setattr(native, "available", lambda dtype: False)
            y0, (winners0,) = pool._maxpool(x, dims)
            dx0 = pool._maxpool_backward((winners0,), (dy,), dims)
        np.testing.assert_array_equal(y, y0)
        assert winners.dtype == winners0.dtype == dims.winner_dtype
        np.testing.assert_array_equal(winners, winners0)
        np.testing.assert_allclose(dx, dx0, rtol=1e-13, atol=1e-13)   # overlapping windows add in another order


def _conv_geometries(rng, count):
    """Random dense and grouped problems of rank 1 to 3 (strides, dilations, asymmetric padding)."""
    out = []
    while len(out) < count:
        rank, groups = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        kernel = tuple(int(k) for k in rng.integers(1, 4, rank))
        stride = tuple(int(s) for s in rng.integers(1, 3, rank))
        dilation = tuple(int(d) for d in rng.integers(1, 3, rank))
        padding = tuple((int(a), int(b)) for a, b in rng.integers(0, 3, (rank, 2)))
        size = tuple(int(z) for z in rng.integers(1, {1: 300, 2: 24, 3: 8}[rank], rank))
        if any(z + a + b < (k - 1) * d + 1 for z, (a, b), k, d in zip(size, padding, kernel, dilation)):
            continue
        inputs, outputs = groups * int(rng.integers(1, 6)), groups * int(rng.integers(1, 16))
        out.append(ConvDims((int(rng.integers(1, 4)), inputs) + size, (outputs, inputs // groups) + kernel,
                            stride=stride, padding=padding, dilation=dilation, groups=groups))
    return out


def test_conv_kernels_match_torch_in_float64(rng, isa):
    """The direct convolution's forward, data gradient (the strided kernel; stride 1 runs as a forward) and
    filter gradient, every instruction set's build, against torch (channel counts past a tile's multiple,
    and planes longer than the filter gradient's chunk, included)."""
    for i, dims in enumerate(_conv_geometries(rng, 50)):
        x, w = rng.standard_normal(dims.x_shape), rng.standard_normal(dims.w_shape)
        dy = rng.standard_normal(dims.y_shape)
        pad = [p for lo_hi in reversed(list(zip(dims.pad_low, dims.pad_high))) for p in lo_hi]
        xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        yt = getattr(F, f"conv{dims.spatial_rank}d")(F.pad(xt, pad), wt, stride=dims.stride, dilation=dims.dilation,
                                                   groups=dims.groups)
        yt.backward(torch.tensor(dy))
        threaded = bool(i % 2)
        np.testing.assert_allclose(native.conv_forward(x, w, dims, threaded), yt.detach().numpy(), rtol=1e-11,
                                   atol=1e-11, err_msg=str(dims))
        np.testing.assert_allclose(native.conv_filter_grad(dy, x, dims, threaded), wt.grad.numpy(), rtol=1e-11,
                                   atol=1e-10, err_msg=str(dims))
        np.testing.assert_allclose(native.conv_data_grad(dy, w, dims, threaded), xt.grad.numpy(), rtol=1e-11,
                                   atol=1e-11, err_msg=str(dims))


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25])
def test_conv_kernels_cover_every_last_block_of_channels_exactly(rng, isa, channels):
    """The register tiles' last block of channels, short of a whole tile, runs as a tile of a third, two
    thirds or all of its rows (conv_typed.h: tile_fit): every count of channels left over, for output
    channels (the forward, and the stride-1 data gradient as a forward) and input channels (the strided
    data gradient's tiles), every instruction set's build, equals torch in float64."""
    for dims in (ConvDims((2, 3, 7, 6), (channels, 3, 3, 3), padding=1),
                 ConvDims((2, channels, 7, 6), (5, channels, 3, 3), padding=1),
                 ConvDims((2, channels, 9, 8), (4, channels, 3, 2), stride=2, padding=1)):
        x, w = rng.standard_normal(dims.x_shape), rng.standard_normal(dims.w_shape)
        dy = rng.standard_normal(dims.y_shape)
        xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        yt = F.conv2d(xt, wt, stride=dims.stride, padding=dims.pad_low)
        yt.backward(torch.tensor(dy))
        np.testing.assert_allclose(native.conv_forward(x, w, dims, False), yt.detach().numpy(), rtol=1e-11,
                                   atol=1e-11, err_msg=str(dims))
        data_grad = conv_paths.Direct.data_grad(dy, w, dims, False)
        np.testing.assert_allclose(data_grad, xt.grad.numpy(), rtol=1e-11, atol=1e-11, err_msg=str(dims))


@pytest.mark.parametrize("team", [2, 3, 7])
def test_conv_filter_grad_split_over_outputs_of_every_group_equals_one_thread(rng, monkeypatch, team):
    """The filter gradient's output channels split over the pool across groups (parts of whole groups,
    parts straddling two, more parts than channels in a group) sum each channel as one thread does."""
    for groups, per_group in ((32, 8), (3, 5), (4, 1), (1, 13)):
        dims = ConvDims((3, groups * 2, 9, 11), (groups * per_group, 2, 3, 3), padding=1, groups=groups)
        x, dy = rng.standard_normal(dims.x_shape), rng.standard_normal(dims.y_shape)
        monkeypatch.setattr(native, "workers", lambda: 1)
        alone = native.conv_filter_grad(dy, x, dims, False)
        monkeypatch.setattr(native, "workers", lambda: team)
        np.testing.assert_array_equal(native.conv_filter_grad(dy, x, dims, True), alone)


@pytest.mark.parametrize("team", [2, 3, 8])
def test_conv_forward_split_over_output_channels_equals_one_thread(rng, monkeypatch, team):
    """Fewer samples than threads (batch-1 inference): each sample's blocks of output channels split over
    the pool (parts of several blocks, of one, empty parts past the last block, groups) give one thread's
    bits, and the kept copy of x is whole."""
    for batch, groups, outputs in ((1, 1, 64), (1, 2, 26), (2, 1, 13), (1, 1, 5), (3, 3, 36)):
        dims = ConvDims((batch, 6, 13, 11), (outputs, 6 // groups, 3, 3), padding=1, groups=groups)
        x, w = rng.standard_normal(dims.x_shape), rng.standard_normal(dims.w_shape)
        monkeypatch.setattr(native, "workers", lambda: 1)
        alone = native.conv_forward(x, w, dims, False)
        monkeypatch.setattr(native, "workers", lambda: team)
        keep = np.full_like(x, np.nan)
        splits = native.conv_forward_splits(dims, True)
        assert splits == (1 if batch >= team else min(-(-outputs // groups // native._tile_outputs()),
                                                      -(-team // batch)))
        np.testing.assert_array_equal(native.conv_forward(x, w, dims, True, keep), alone)
        np.testing.assert_array_equal(keep, x)


@pytest.mark.parametrize("team", [1, 2, 3])
def test_conv_forward_adds_the_bias_as_adding_it_after(rng, monkeypatch, team):
    """The bias the forward kernel adds as it writes y gives the bits of adding it to y afterwards, for
    every output channel of every group and part (split samples, strides, float32 and float64)."""
    monkeypatch.setattr(native, "workers", lambda: team)
    for dtype in (np.float64, np.float32):
        for batch, groups, outputs, stride in ((1, 1, 64, 1), (4, 2, 26, 2), (3, 3, 36, 1), (2, 1, 5, 3)):
            dims = ConvDims((batch, 6, 13, 11), (outputs, 6 // groups, 3, 3), padding=1, stride=stride,
                            groups=groups)
            x, w = rng.standard_normal(dims.x_shape).astype(dtype), rng.standard_normal(dims.w_shape).astype(dtype)
            b = rng.standard_normal(outputs).astype(dtype)
            after = native.conv_forward(x, w, dims, True) + b.reshape(1, -1, 1, 1)
            np.testing.assert_array_equal(native.conv_forward(x, w, dims, True, bias=b), after)


@pytest.mark.parametrize("team", [1, 2, 3])
def test_conv_filter_grad_sums_the_bias_gradient_as_channel_sums(rng, monkeypatch, team):
    """The bias gradient the filter gradient's kernel sums from the dy planes it reads gives channel_sums'
    bits, and the same dw, for every output channel of every group and part; planes small enough for
    channel_sums' row mode (the last two) take channel_sums itself."""
    monkeypatch.setattr(native, "workers", lambda: team)
    for dtype in (np.float64, np.float32):
        for batch, groups, outputs, stride, size in ((1, 1, 64, 1, 19), (4, 2, 26, 2, 19), (3, 3, 36, 1, 19),
                                                     (5, 1, 5, 3, 19), (5, 1, 5, 3, 11), (2, 2, 8, 1, 4)):
            dims = ConvDims((batch, 6, size, size - 2), (outputs, 6 // groups, 3, 3), padding=1, stride=stride,
                            groups=groups)
            assert native._row_mode(np.empty(dims.y_shape)) == (size < 19)
            x, dy = rng.standard_normal(dims.x_shape).astype(dtype), rng.standard_normal(dims.y_shape).astype(dtype)
            dw, db = native.conv_filter_grad(dy, x, dims, True, bias_grad=True)
            assert db.dtype == np.float64
            np.testing.assert_array_equal(db, native.channel_sums(dy)[0])
            np.testing.assert_array_equal(dw, native.conv_filter_grad(dy, x, dims, True))


def test_forward_kernels_keep_an_exact_copy_of_x(rng):
    """``keep``: the forward's own copy of x, made by the kernel as it reads each plane, equals x, and a
    later change of x leaves it (and so the backward) alone; small planes (plain stores) and large ones
    (non-temporal stores from any alignment), on one thread and split."""
    cases = []
    for size, dtype in (((9, 8), np.float64), ((33, 37), np.float64), ((45, 61), np.float32), ((7, 7), np.float32)):
        cases += [(native.conv_forward, ConvDims((3, 4, *size), (6, 2, 3, 3), stride=2, padding=1, groups=2), dtype),
                  (native.depthwise_forward, ConvDims((3, 4, *size), (4, 1, 3, 3), padding=1, groups=4), dtype)]
    for forward, dims, dtype in cases:
        x, w = rng.standard_normal(dims.x_shape).astype(dtype), rng.standard_normal(dims.w_shape).astype(dtype)
        keep = np.empty_like(x)
        y = forward(x, w, dims, True, keep)
        np.testing.assert_array_equal(keep, x)
        np.testing.assert_array_equal(y, forward(x, w, dims, False))
        x += 1
        assert not np.array_equal(keep, x)
        with pytest.raises(ValueError, match="argument keep"):
            forward(x, w, dims, False, np.empty(dims.x_shape, np.float16))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("function", ["exp", "tanh", "sigmoid"])
def test_vector_math_is_within_three_units_in_the_last_place(rng, isa, dtype, function):
    """The LSTM loop's exp, tanh and sigmoid against float64 (float32) or long double (float64) numpy,
    over the whole range, with NaN in giving NaN out and the sign of zero kept (tanh through the tanh
    activation, the same vector code)."""
    limit = 110 if dtype == np.float32 else 750        # past where exp overflows and underflows
    special = [0.0, -0.0, 0.3, -0.3, 0.29999, 0.30001, 20, -20, 60, -60, 1e-30, -1e-30, 1e-300, 88.7, -87.3, -103]
    x = np.concatenate([rng.uniform(-1, 1, 20000), rng.uniform(-limit, limit, 20000),
                        rng.standard_normal(20000) * 1e-3, special]).astype(dtype)
    x = x[np.isfinite(x)]
    wide = x.astype(np.float64 if dtype == np.float32 else np.longdouble)
    with np.errstate(over="ignore"):     # exact values past float32's range, cast to it below
        _check_vector_math(x, wide, dtype, function)
    edges = np.array([np.nan, np.inf, -np.inf, 1000, -1000], dtype)
    expected = {"exp": [np.nan, np.inf, 0, np.inf, 0], "tanh": [np.nan, 1, -1, 1, -1], "sigmoid": [np.nan, 1, 0, 1, 0]}
    np.testing.assert_array_equal(_vector_math(edges, function), np.array(expected[function], dtype))


def _vector_math(x, function):
    """vmath_typed.h's function of x: vmath's exp and sigmoid, vtanh through the tanh activation."""
    if function == "tanh":
        return native.activation_forward(x, "tanh", None, False)[0]
    return native.vmath(x, function)


def _check_vector_math(x, wide, dtype, function):
    y = _vector_math(x, function)
    exact = {"exp": np.exp, "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v))}[function](wide)
    assert np.array_equal(np.isinf(y), np.isinf(exact.astype(dtype)))
    finite = np.isfinite(exact.astype(dtype)) & (np.abs(exact) >= np.finfo(dtype).tiny)
    ulps = np.abs(y[finite] - exact[finite]) / np.spacing(np.abs(exact[finite]).astype(dtype))
    assert float(ulps.max()) <= 3.0
    if function == "tanh":          # odd: the sign of every result, zeros included, is x's
        assert np.array_equal(np.signbit(y), np.signbit(exact.astype(dtype)))


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-11), (np.float32, 2e-5)])
@pytest.mark.parametrize("layers, bidirectional, bias, batch, I, H", [
    (1, False, True, 3, 5, 6), (2, True, False, 1, 5, 6), (2, False, True, 17, 5, 6),
    # past the kernels' depth blocks (128 rows of [h; x]) in both parts, hidden units no multiple of a
    # panel's rows, batches of a vector and a half and of a vector less one column
    (1, False, True, 21, 140, 150), (1, True, True, 15, 3, 131),
    # batches narrower than a vector (products over rows, csrc/recurrent_typed.h: narrow_panel), with
    # two and with seven columns, hidden units no multiple of a narrow panel's rows
    (1, True, True, 2, 9, 19), (2, False, True, 7, 4, 23),
    # a stack of three (the forward's wavefront), without biases
    (3, False, False, 16, 8, 16)])
def test_lstm_time_loop_matches_the_numpy_loop(rng, isa, monkeypatch, dtype, rtol, layers, bidirectional, bias, batch,
                                               I, H):
    """The C time loop (one length, no projection) against the numpy loop, results and every gradient."""
    import dnnbind
    from .test_rnn import make_weights
    T = 7
    scale = min(1.0, 3 / np.sqrt(H + I))      # keeps wide layers' gates off their flat ends
    dirs = 2 if bidirectional else 1
    weights = [tuple(None if w is None else (w * scale).astype(dtype) for w in entry)
               for entry in make_weights(rng, "lstm", I, H, layers, dirs, bias)]
    x = rng.standard_normal((T, batch, I)).astype(dtype)
    h0, c0 = (rng.standard_normal((layers * dirs, batch, H)).astype(dtype) for _ in range(2))
    cotangents = [rng.standard_normal(s).astype(dtype) for s in ((T, batch, dirs * H), h0.shape, c0.shape)]

    def run():
        (y, hy, cy), pullback = dnnbind.rnn(x, weights, h0=h0, c0=c0, hidden_size=H, num_layers=layers,
                                            bidirectional=bidirectional)
        dx, dh0, dc0, dweights = pullback(*cotangents)
        return [y, hy, cy, dx, dh0, dc0] + [w for entry in dweights for w in entry if w is not None]

    calls = []
    original, stack = native.lstm_forward, native.lstm_forward_stack
    monkeypatch.setattr(native, "lstm_forward", lambda *a: calls.append("layer") or original(*a))
    monkeypatch.setattr(native, "lstm_forward_stack", lambda x, layers: calls.extend(["stacked"] * len(layers))
                        or stack(x, layers))
    ours = run()
    # the C loop ran for every layer and direction: a unidirectional stack's layers in one wavefront
    assert calls == ["stacked" if layers > 1 and not bidirectional else "layer"] * (layers * dirs)
    monkeypatch.setattr(native, "available", lambda dtype: False)
    for a, b in zip(ours, run(), strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("I, H, batch", [(140, 150, 21), (3, 13, 1), (200, 12, 40), (1, 130, 16), (20, 37, 7),
                                         (9, 20, 6)])
@pytest.mark.parametrize("group_columns", [3, 8, 1 << 30])
def test_lstm_loop_kernels_give_the_same_sums_on_any_team(rng, isa, monkeypatch, dtype, I, H, batch, group_columns):
    """Each sum of the loops' packed products runs over the depth in one order whatever the chunks of
    hidden units or the backward's groups of columns are (``group_columns``: the fewest a group takes):
    one thread and teams of two and three give the same bits (and split, inside every_core, also beside
    torch's threads)."""
    T = 5
    x = rng.standard_normal((T, I, batch)).astype(dtype)
    w_ih, w_hh = ((rng.standard_normal((4 * H, n)) / np.sqrt(n)).astype(dtype) for n in (I, H))
    bias = rng.standard_normal(4 * H).astype(dtype)
    dy = rng.standard_normal((T, H, batch)).astype(dtype)
    splits = []
    launch = native._launch
    monkeypatch.setattr(native, "_launch", lambda fn, args, chunks, t=None: splits.append(len(chunks))
                        or launch(fn, args, chunks, t))
    monkeypatch.setattr(native, "LSTM_THREAD_MIN_MACS", 0)
    monkeypatch.setattr(native, "LSTM_GROUP_MIN_COLUMNS", group_columns)
    monkeypatch.setattr(native, "LSTM_GROUP_MAX_HIDDEN", 1 << 30)
    grouped = []
    column_groups = native._column_groups
    monkeypatch.setattr(native, "_column_groups", lambda *a: grouped.append(column_groups(*a)) or grouped[-1])

    def run(team):
        monkeypatch.setattr(native, "workers", lambda: team)
        acts = np.empty((T, 4 * H, batch), dtype)
        hs, cs = np.zeros((T + 1, H, batch), dtype), np.zeros((T + 1, H, batch), dtype)
        hs[0], cs[0] = rng.standard_normal((2, H, batch)).astype(dtype)
        tcs = np.empty((T, H, batch), dtype)
        with native.every_core():
            native.lstm_forward(x, w_ih, bias, w_hh, np.arange(T)[::-1], acts, hs, cs, tcs)
            dh, dc = np.ones((H, batch), dtype), np.zeros((H, batch), dtype)
            dgates = native.lstm_backward(acts, cs, tcs, w_hh, dy, dh, dc)
        return acts, hs, cs, tcs, dgates, dh, dc

    state = rng.bit_generator.state
    alone = run(1)
    for team in (2, 3):
        rng.bit_generator.state = state
        for a, b in zip(run(team), alone, strict=True):
            assert np.array_equal(a, b)
    assert 2 in splits and 3 in splits, "the loops did not split"
    assert (max(grouped) > 1) == (batch % 2 == 0 and batch // 2 >= group_columns or
                                  batch % 3 == 0 and batch // 3 >= group_columns), grouped
    # and what they sum is the LSTM's: the first step's gates against a float64 product, within the
    # rounding of a sum over the depth (the activations' slopes are at most 1)
    h0, x0 = alone[1][0].astype(np.float64), x[T - 1].astype(np.float64)
    pre = w_hh.astype(np.float64) @ h0 + w_ih.astype(np.float64) @ x0 + bias[:, None]
    magnitude = np.abs(w_hh) @ np.abs(h0) + np.abs(w_ih) @ np.abs(x0) + np.abs(bias)[:, None]
    sig = 1 / (1 + np.exp(-pre))
    expect = np.concatenate([sig[:2 * H], np.tanh(pre[2 * H:3 * H]), sig[3 * H:]])
    bound = (H + I + 1) * np.finfo(dtype).eps * magnitude + 4 * np.finfo(dtype).eps
    assert np.all(np.abs(alone[0][0] - expect) <= bound)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layers, I, H, batch", [(2, 140, 150, 21), (3, 3, 13, 1), (2, 20, 37, 7), (4, 16, 32, 16)])
def test_lstm_stack_wavefront_gives_the_layer_by_layer_bits_on_any_team(rng, isa, monkeypatch, dtype, layers, I, H,
                                                                         batch):
    """The wavefront over a stack of layers (every layer's step of a round side by side) gives each layer's
    tapes as its own loop does, layer after layer, on its input the states of the layer below: the same
    bits, on one thread and teams of two and three, with one or two chunks a layer."""
    T = 6
    x = rng.standard_normal((T, I, batch)).astype(dtype)
    params = []
    for layer in range(layers):
        n = I if layer == 0 else H
        params.append(((rng.standard_normal((4 * H, n)) / np.sqrt(n)).astype(dtype),
                       None if layer == 1 else rng.standard_normal(4 * H).astype(dtype),
                       (rng.standard_normal((4 * H, H)) / np.sqrt(H)).astype(dtype)))
    starts = rng.standard_normal((layers, 2, H, batch)).astype(dtype)
    monkeypatch.setattr(native, "LSTM_THREAD_MIN_MACS", 0)

    def tapes(layer):
        hs, cs = np.empty((T + 1, H, batch), dtype), np.empty((T + 1, H, batch), dtype)
        hs[0], cs[0] = starts[layer]
        return np.empty((T, 4 * H, batch), dtype), hs, cs, np.empty((T, H, batch), dtype)

    expected, below = [], x
    for layer, (w_ih, bias, w_hh) in enumerate(params):
        expected.append(tapes(layer))
        native.lstm_forward(below, w_ih, bias, w_hh, np.arange(T), *expected[-1])
        below = np.ascontiguousarray(expected[-1][1][1:])
    for team, chunks in ((1, 1), (2, 1), (2, 2), (3, 1), (3, 2)):
        monkeypatch.setattr(native, "workers", lambda: team)
        monkeypatch.setattr(native, "STACK_CHUNKS", chunks)
        found = [tapes(layer) for layer in range(layers)]
        with native.every_core():
            native.lstm_forward_stack(x, [(*p, *t) for p, t in zip(params, found)])
        for mine, theirs in zip(found, expected):
            for a, b in zip(mine, theirs, strict=True):
                assert np.array_equal(a, b), (team, chunks)


def test_lstm_stack_refuses_layers_that_do_not_stack(rng):
    x = np.zeros((3, 4, 2))
    layer = lambda n: (np.zeros((20, n)), None, np.zeros((20, 5)), np.empty((3, 20, 2)), np.zeros((4, 5, 2)),
                       np.zeros((4, 5, 2)), np.empty((3, 5, 2)))
    with pytest.raises(ValueError, match="layer 1's w_ih"):
        native.lstm_forward_stack(x, [layer(4), layer(4)])
    with pytest.raises(ValueError, match="layer 0's w_ih"):        # the first layer's inputs are x's
        native.lstm_forward_stack(x, [layer(7), layer(5)])
    with pytest.raises(ValueError, match="no layers"):
        native.lstm_forward_stack(x, [])


def test_every_core_holds_blas_to_one_thread_and_lets_the_kernels_split(monkeypatch):
    """Inside every_core numpy's BLAS runs on one thread and the kernels' team takes the cores (also
    beside torch's threads); where numpy's BLAS is already held to one thread beside torch's threads
    without their team, it changes nothing."""
    from dnnbind.highlevel.cpu import _threads
    monkeypatch.setattr(native, "_team_shared", False)
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert not native.cores_to_spare()
    with native.every_core():
        assert _threads.blas_single_threaded() and native.cores_to_spare()
        with native.every_core():
            assert native.cores_to_spare()
        assert native.cores_to_spare()
    assert not native.cores_to_spare()
    with _threads.one_blas_thread():
        with native.every_core():
            assert not native.cores_to_spare()


def _operands(rng, dtype, m, k, n, layout):
    """a (m, k) and b (k, n) as ``layout`` says: C-ordered, transposed views (BLAS reads them transposed),
    rows a pitch apart (every other row of a larger array), or strided both ways (copied first)."""
    def one(rows, cols):
        if layout == "c":
            return rng.standard_normal((rows, cols)).astype(dtype)
        if layout == "transposed":
            return rng.standard_normal((cols, rows)).astype(dtype).T
        if layout == "pitch":
            return rng.standard_normal((2 * rows, cols + 3)).astype(dtype)[::2, 1:cols + 1]
        return rng.standard_normal((2 * rows, 2 * cols)).astype(dtype)[::2, ::2]
    return one(m, k), one(k, n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["c", "transposed", "pitch", "strided"])
@pytest.mark.parametrize("m, k, n", [(64, 48, 40), (7, 3, 5), (1, 9, 1), (3, 1, 4), (33, 17, 1)])
@pytest.mark.parametrize("team", [1, 2, 3])
def test_a_product_split_by_rows_over_the_team_equals_numpys(rng, monkeypatch, dtype, layout, m, k, n, team):
    """native.split_product: each range of rows one call of numpy's CBLAS gemm on the kernels' team gives
    numpy's product, for operands read in place (rows or columns contiguous) and copied (neither)."""
    from dnnbind.highlevel.cpu._threads import one_blas_thread
    monkeypatch.setattr(native, "workers", lambda: team)
    a, b = _operands(rng, dtype, m, k, n, layout)
    out = np.full((m, n), np.nan, dtype)
    chunks = []
    original = native._launch
    monkeypatch.setattr(native, "_launch", lambda fn, args, parts, t=None: chunks.append(len(parts))
                        or original(fn, args, parts, t))
    with one_blas_thread():
        native.split_product(a, b, out, threaded=True)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=rtol, atol=rtol * k)
    assert chunks == [min(team, m)]


def test_a_product_with_nothing_to_sum_is_zero_and_an_empty_one_is_left_alone():
    a, b = np.ones((4, 0), np.float32), np.ones((0, 3), np.float32)
    out = np.full((4, 3), np.nan, np.float32)
    native.split_product(a, b, out, threaded=True)
    assert (out == 0).all()
    native.split_product(np.ones((0, 2)), np.ones((2, 3)), np.empty((0, 3)), threaded=True)


def test_a_split_product_refuses_what_does_not_fit():
    a, b = np.ones((4, 5), np.float32), np.ones((5, 3), np.float32)
    for bad_b, out, words in ((np.ones((4, 3), np.float32), np.empty((4, 3), np.float32), "a (4, 5) @ b (4, 3)"),
                              (b, np.empty((3, 4), np.float32), "not (3, 4)"),
                              (b, np.empty((3, 4), np.float32).T, "C-contiguous"),
                              (b.astype(np.float64), np.empty((4, 3), np.float32), "one dtype")):
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            native.split_product(a, bad_b, out, threaded=True)


def test_an_lstms_weight_products_split_over_torchs_team(rng, monkeypatch):
    """Under dnnbind.torch (numpy's BLAS held to one thread, the kernels on torch's team) an LSTM's
    products, the input projection and the weight gradients, run split by rows over the team instead of
    on one core."""
    import dnnbind.torch  # noqa: F401  (hands the kernels torch's team)
    assert native.share_openmp_team() and native.cores_to_spare()
    monkeypatch.setattr(native, "workers", lambda: 2)
    products = []
    original = native._launch

    def launch(fn, args, parts, team=None):
        if fn is native._gemm_rows():
            products.append(len(parts))
        return original(fn, args, parts, team)

    monkeypatch.setattr(native, "_launch", launch)
    split = _lstm_results(np.random.default_rng(3), np.float64)
    assert products and all(count == 2 for count in products), products
    monkeypatch.setattr(native, "workers", lambda: 1)
    for a, b in zip(split, _lstm_results(np.random.default_rng(3), np.float64), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(b).max())))


def _runs_without_torch_on_one_blas_thread(code: str) -> None:
    """Run ``code`` in a fresh process (no torch) with numpy's BLAS on one thread by the environment;
    it exits 0 when its checks hold."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0


def _lstm_results(rng, dtype, T=9, I=12, H=64, batch=16, layers=2):
    """An LSTM's results and gradients through dnnbind.rnn with numpy's BLAS held to one thread (as in
    every dnnbind.torch op), where the C time loop splits its steps over the cores."""
    import dnnbind
    from dnnbind.highlevel.cpu._threads import one_blas_thread
    from .test_rnn import make_weights
    weights = [tuple(w.astype(dtype) for w in entry) for entry in make_weights(rng, "lstm", I, H, layers, 1, True)]
    x = rng.standard_normal((T, batch, I)).astype(dtype)
    dy = rng.standard_normal((T, batch, H)).astype(dtype)
    assert 4 * H * H * batch >= native.LSTM_THREAD_MIN_MACS
    with one_blas_thread():
        (y, hy, cy), pullback = dnnbind.rnn(x, weights, hidden_size=H, num_layers=layers)
        dx, dh0, dc0, dweights = pullback(dy)
    return [y, hy, cy, dx, dh0, dc0] + [w for entry in dweights for w in entry]


@pytest.mark.parametrize("team", [2, 3, 5])
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-4)])
def test_lstm_time_loop_split_over_the_cores_equals_one_thread(rng, monkeypatch, team, dtype, rtol):
    """Each step's chunks of hidden units on several threads (torch's OpenMP team here; more chunks than
    threads too) give what one thread gives, within rounding: the loops' own sums are the same bits
    (test_lstm_loop_kernels_give_the_same_sums_on_any_team), but the weight gradients' products, split
    by rows over the team, are GEMMs of other shapes, which some of OpenBLAS's kernels sum in another
    order (Haswell's, which a machine may force through OPENBLAS_CORETYPE)."""
    import dnnbind.torch  # noqa: F401  (hands the kernels torch's team)
    assert native.share_openmp_team() and native.cores_to_spare()
    seeds = np.random.SeedSequence(7)
    monkeypatch.setattr(native, "workers", lambda: 1)
    alone = _lstm_results(np.random.default_rng(seeds), dtype)
    monkeypatch.setattr(native, "workers", lambda: team)
    split_runs = []
    original = native._launch
    monkeypatch.setattr(native, "_launch", lambda fn, args, chunks, t=None: split_runs.append(len(chunks))
                        or original(fn, args, chunks, t))
    for a, b in zip(_lstm_results(np.random.default_rng(seeds), dtype), alone, strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, float(np.abs(b).max())))
    assert team in split_runs, "the time loop did not split"


@pytest.mark.parametrize("team, hidden, batch, groups", [
    (2, 128, 16, 2), (3, 64, 24, 3), (2, 129, 16, 1), (2, 256, 32, 1), (2, 128, 15, 1), (2, 128, 14, 1),
    (1, 128, 16, 1)])
def test_lstm_backward_groups_where_they_pay(team, hidden, batch, groups):
    """Groups of sequences for a layer of at most LSTM_GROUP_MAX_HIDDEN units whose batch splits evenly
    into groups of at least LSTM_GROUP_MIN_COLUMNS, on a team; else the split by hidden units."""
    assert (native.LSTM_GROUP_MAX_HIDDEN, native.LSTM_GROUP_MIN_COLUMNS) == (128, 8)
    assert native._column_groups(team, hidden, batch) == groups


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lstm_backward_in_groups_of_columns_equals_one_group(monkeypatch, dtype):
    """The backward loop in groups of the batch's columns (each group its own recurrence on its own
    core, in arrays of its own) gives what the loop split by hidden units gives, bit for bit: its sums
    run over the depth in one order, and its gate gradients come back in the same order."""
    monkeypatch.setattr(native, "workers", lambda: 2)
    monkeypatch.setattr(native, "cores_to_spare", lambda: True)
    groups = []
    column_groups = native._column_groups
    monkeypatch.setattr(native, "_column_groups", lambda *a: groups.append(column_groups(*a)) or groups[-1])
    seeds = np.random.SeedSequence(11)
    monkeypatch.setattr(native, "LSTM_GROUP_MIN_COLUMNS", 1 << 30)
    units = _lstm_results(np.random.default_rng(seeds), dtype, batch=24)
    assert set(groups) == {1}
    monkeypatch.setattr(native, "LSTM_GROUP_MIN_COLUMNS", 4)
    grouped = _lstm_results(np.random.default_rng(seeds), dtype, batch=24)
    assert set(groups) == {1, 2}
    for a, b in zip(grouped, units, strict=True):
        assert np.array_equal(a, b)


def test_lstm_time_loop_splits_over_the_own_workers_without_torch():
    """A process without torch, numpy's BLAS on one thread by the environment: the time loop's steps on
    the kernels' own workers equal one thread's."""
    code = ("import sys, numpy as np, dnnbind\n"
            "from dnnbind.highlevel.cpu import native\n"
            "assert 'torch' not in sys.modules and native.cores_to_spare()\n"
            "chunks, launch = [], native._launch\n"
            "native._launch = lambda fn, args, c, team=None: chunks.append(len(c)) or launch(fn, args, c, team)\n"
            "def run(team):\n"
            "    native.workers = lambda: team\n"
            "    rng = np.random.default_rng(3)\n"
            "    T, I, H, B = 9, 12, 64, 16\n"
            "    weights = [[rng.standard_normal(s) * 0.2 for s in ((4 * H, n), (4 * H, H), (4 * H,), (4 * H,))]\n"
            "               for n in (I, H)]\n"
            "    x, dy = rng.standard_normal((T, B, I)), rng.standard_normal((T, B, H))\n"
            "    (y, hy, cy), pullback = dnnbind.rnn(x, weights, hidden_size=H, num_layers=2)\n"
            "    dx, dh0, dc0, dw = pullback(dy)\n"
            "    return [y, hy, cy, dx, dh0, dc0] + [w for e in dw for w in e]\n"
            "split = run(2)\n"
            "ok = 2 in chunks and all(np.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(split, run(1)))\n"
            "raise SystemExit(0 if ok else 3)\n")
    _runs_without_torch_on_one_blas_thread(code)


def test_lstm_kernels_refuse_what_does_not_fit():
    x, w_ih, w = np.zeros((3, 1, 2)), np.zeros((8, 1)), np.zeros((8, 2))
    tapes = [np.zeros((3, 8, 2)), np.zeros((4, 2, 2)), np.zeros((4, 2, 2)), np.zeros((3, 2, 2))]
    with pytest.raises(ValueError, match="do not fit an LSTM's 3 steps"):
        native.lstm_forward(x, w_ih, None, w, np.array([0, 1, 3]), *tapes)
    with pytest.raises(ValueError, match="do not fit an LSTM's 3 steps"):
        native.lstm_forward(x, w_ih, None, np.zeros((8, 3)), np.arange(3), *tapes)
    with pytest.raises(ValueError, match=r"argument w_ih: .*shape \(8, 1\)"):
        native.lstm_forward(x, np.zeros((8, 2)), None, w, np.arange(3), *tapes)
    with pytest.raises(ValueError, match=r"argument bias: .*shape \(8,\)"):
        native.lstm_forward(x, w_ih, np.zeros(4), w, np.arange(3), *tapes)
    with pytest.raises(ValueError, match=r"argument hs: "):
        native.lstm_forward(x, w_ih, None, w, np.arange(3), tapes[0], np.zeros((3, 2, 2)), *tapes[2:])


def test_array_addresses_are_numpys_for_every_kind_of_array():
    """The kernels' array addresses (read through the buffer protocol where it can be) equal numpy's own,
    for views, read-only, empty and non-contiguous arrays alike."""
    a = np.arange(24.0).reshape(4, 6)
    read_only = a.copy()
    read_only.flags.writeable = False
    for v in (a, a[1:], a[:, 2:], a.T, read_only, np.zeros(0), np.broadcast_to(np.ones(3), (2, 3))):
        assert native._data(v) == v.ctypes.data


# -- pointwise activations --------------------------------------------------------------------------

def _activation_inputs(rng, dtype, alpha):
    """Typical values, values far out (where exp under- and overflows), the kinks, alpha itself (clipped
    relu's ceiling), zeros of both signs, NaN and infinities; enough of them to cross the kernels'
    blocks and vectors with ragged ends."""
    limit = 110 if dtype == np.float32 else 750
    special = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-30, -1e-30, 20, -20, -87.3, -103, 88.7, alpha, -alpha,
               np.nextafter(alpha, 0), np.nextafter(alpha, 2 * alpha)]
    return np.concatenate([rng.standard_normal(3001) * 3, rng.uniform(-limit, limit, 1000), special]).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode, alpha", [("relu", None), ("sigmoid", None), ("tanh", None), ("leaky_relu", 0.01),
                                         ("clipped_relu", 6.0), ("swish", 1.5), ("swish", -0.7), ("elu", 1.0),
                                         ("elu", 0.7)])
def test_activation_kernels_match_numpy_in_float64(rng, isa, dtype, mode, alpha):
    """y in one pass, and f' recomputed from what the backward reads (x, or y for relu, sigmoid and tanh):
    the masks and the piecewise-linear modes bit for bit what the numpy path gives, the modes with exp
    within a few units in the last place of a float64 (float32) or long double (float64) computation;
    NaN where numpy has NaN."""
    activation = importlib.import_module("dnnbind.highlevel.cpu.activation")   # the module, not the op
    x = _activation_inputs(rng, dtype, 6.0 if alpha is None else alpha)
    wide = np.longdouble if dtype == np.float64 else np.float64
    from_y = activation.BACKWARD_READS[mode] == ("y",)
    with np.errstate(all="ignore"):
        y, mask = native.activation_forward(x, mode, alpha, True)
        numpy_y = activation._apply(x, mode, alpha)
        exact_y = activation._apply(x.astype(wide), mode, alpha)
        slope = native.activation_backward_from(np.ones_like(x), y if from_y else x, mode, alpha)
        exact_slope = activation._slope(exact_y if from_y else x.astype(wide), mode, alpha)
    assert y.dtype == dtype and (mask is None) == (mode not in native.MASKED_ACTIVATIONS)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(numpy_y))
    if mode in ("relu", "leaky_relu", "clipped_relu"):
        np.testing.assert_array_equal(y, numpy_y.astype(dtype))
        np.testing.assert_array_equal(np.signbit(y), np.signbit(numpy_y))
        numpy_slope = activation._slope(y if from_y else x, mode, alpha)
        np.testing.assert_array_equal(slope, numpy_slope.astype(dtype))
        if mask is not None:            # the forward's mask: the same derivative, read from x
            np.testing.assert_array_equal(mask, activation._slope(x, mode, alpha))
            np.testing.assert_array_equal(mask, numpy_slope)
        return
    eps = np.finfo(dtype).eps
    finite = np.isfinite(exact_y)
    # swish rounds alpha x to dtype first (as the numpy path does): e^(alpha x) then carries a relative
    # error of |alpha x| units
    reach = 1 + (np.abs(alpha * x[finite].astype(wide)) if mode == "swish" else 0)
    scale = np.maximum(np.abs(exact_y[finite]), np.finfo(dtype).tiny)
    assert bool(np.all(np.abs(y[finite] - exact_y[finite]) / scale <= 4 * eps * reach))
    # the derivative (1 - y and the like): within a few units of y's last place, as far as y is
    assert bool(np.all(np.abs(slope[finite] - exact_slope[finite]) <= 8 * eps * reach))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode, alpha", [("relu", None), ("clipped_relu", 6.0), ("tanh", None), ("swish", 1.0),
                                         ("elu", 1.0)])
def test_activation_kernels_split_over_the_pool_equal_one_thread(rng, monkeypatch, dtype, mode, alpha):
    """Element ranges on several threads (more ranges than threads, ragged ends) give what one thread
    gives, forward and both backwards, bit for bit; without a backward to come no mask is written."""
    x = (rng.standard_normal(native.POINTWISE_THREAD_MIN_ELEMENTS * 3 + 7) * 4).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    runs = []
    for team in (1, 3):
        monkeypatch.setattr(native, "workers", lambda: team)
        y, mask = native.activation_forward(x, mode, alpha, True)
        runs.append((y, native.activation_backward_from(dy, x, mode, alpha))
                    + (() if mask is None else (mask, native.activation_backward(dy, mask))))
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)
    y, mask = native.activation_forward(x, mode, alpha, False)
    assert mask is None and np.array_equal(y, runs[0][0])
    if len(runs[0]) > 2:                # the mask's gradient is the one recomputed from x
        np.testing.assert_array_equal(runs[0][3], dy * runs[0][2])
        np.testing.assert_array_equal(runs[0][3], runs[0][1])


def test_activation_kernels_refuse_arrays_that_do_not_fit():
    x = np.zeros((4, 5), np.float32)
    with pytest.raises(ValueError, match="argument x: .*contiguous: False"):
        native.activation_forward(np.zeros((4, 10), np.float32)[:, ::2], "relu", None, True)
    with pytest.raises(ValueError, match=r"argument mask: .*shape \(4, 5\), got bool \(5, 4\)"):
        native.activation_backward(x, np.zeros((5, 4), bool))
    with pytest.raises(ValueError, match="argument dy: .*contiguous: False"):
        native.activation_backward(np.zeros((4, 10), np.float32)[:, ::2], np.zeros((4, 5), bool))
    with pytest.raises(ValueError, match=r"argument source: .*float32 array of shape \(4, 5\), got float64"):
        native.activation_backward_from(x, np.zeros((4, 5)), "tanh", None)
    with pytest.raises(ValueError, match="argument source: .*contiguous: False"):
        native.activation_backward_from(x, np.zeros((4, 10), np.float32)[:, ::2], "tanh", None)
    y, mask = native.activation_forward(np.zeros((0, 3)), "relu", None, True)
    assert y.shape == mask.shape == (0, 3) and native.activation_backward(np.zeros((0, 3)), mask).shape == (0, 3)
    assert native.activation_backward_from(np.zeros((0, 3)), y, "relu", None).shape == (0, 3)


# -- softmax ------------------------------------------------------------------------------------------

def _softmax_wide(x, axis, log):
    """softmax / log-softmax in a wider type, as the numpy path computes them."""
    shifted = x - x.max(axis=axis, keepdims=True)
    total = np.exp(shifted).sum(axis=axis, keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape, axis", [((7, 1000), 1), ((3, 5, 33), 2), ((4, 37, 9, 31), 1), ((2, 300, 600), 1),
                                         ((513, 3), 0), ((1, 1), 1), ((6, 1, 5), 1), ((5, 17), 0)])
def test_softmax_kernels_match_a_wider_computation(rng, isa, dtype, log, shape, axis):
    """Rows (the last axis) and blocks of positions (any other axis: whole blocks, a short last one),
    forward and data gradient, within a few units in the last place of the same formulas in float64
    (float32) or long double (float64)."""
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    wide = np.longdouble if dtype == np.float64 else np.float64
    y = native.softmax_forward(x, axis, log)
    exact = _softmax_wide(x.astype(wide), axis, log)
    eps = np.finfo(dtype).eps
    # x - max rounds in dtype (as numpy's path does): exp of it then carries a relative error of
    # |x - max| units; log-softmax's absolute error is that of its two terms
    reach = 1 + np.abs(x.astype(wide) - x.max(axis=axis, keepdims=True))
    # and the sum of n terms, taken in double: float64's own rounding over n terms (as a product's of
    # length n), nothing for float32's
    reach += shape[axis] if dtype == np.float64 else 0
    room = 8 * eps * (reach if log else reach * np.abs(exact))
    assert bool(np.all(np.abs(y - exact) <= room + np.finfo(dtype).tiny))
    dx = native.softmax_backward(y, dy, axis, log)
    yw, dyw = y.astype(wide), dy.astype(wide)
    exact_dx = (dyw - np.exp(yw) * dyw.sum(axis=axis, keepdims=True) if log
                else dyw * yw - yw * (dyw * yw).sum(axis=axis, keepdims=True))
    scale = np.abs(dyw).sum(axis=axis, keepdims=True) + np.abs(dyw)
    assert bool(np.all(np.abs(dx - exact_dx) <= 8 * eps * scale * (shape[axis] if dtype == np.float64 else 1)))


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_softmax_kernels_carry_nan_and_infinities_as_numpy_does(log, axis):
    """A NaN or an infinity in a line gives what numpy's passes give (NaN where they do), and a line of
    equal values gives equal probabilities."""
    x = np.zeros((3, 4, 5), np.float32)
    index = [1, 2, 3]
    for value, at in ((np.nan, 0), (np.inf, 1), (-np.inf, 2)):
        spot = list(index)
        spot[axis] = at
        x[tuple(spot)] = value
    with np.errstate(all="ignore"):
        y = native.softmax_forward(x, axis, log)
        shifted = x - x.max(axis=axis, keepdims=True)
        expected = (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True)) if log
                    else np.exp(shifted) / np.exp(shifted).sum(axis=axis, keepdims=True))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
    finite = ~np.isnan(expected)
    np.testing.assert_allclose(y[finite], expected[finite], rtol=1e-6)
    assert bool(np.isnan(y).any()) and bool(finite.any())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_kernels_split_over_the_pool_equal_one_thread(rng, monkeypatch, dtype):
    for shape, axis in (((64, 3000), 1), ((8, 40, 700), 1)):
        x = rng.standard_normal(shape).astype(dtype)
        dy = rng.standard_normal(shape).astype(dtype)
        runs = []
        for team in (1, 3):
            monkeypatch.setattr(native, "workers", lambda: team)
            y = native.softmax_forward(x, axis, True)
            runs.append((y, native.softmax_backward(y, dy, axis, True), native.softmax_forward(x, axis, False)))
        for a, b in zip(*runs, strict=True):
            np.testing.assert_array_equal(a, b)


def test_softmax_kernels_refuse_arrays_that_do_not_fit():
    y = np.zeros((4, 5), np.float32)
    with pytest.raises(ValueError, match="argument x: .*contiguous: False"):
        native.softmax_forward(np.zeros((4, 10), np.float32)[:, ::2], 1, False)
    with pytest.raises(ValueError, match=r"argument dy: .*float32 array of shape \(4, 5\), got float64"):
        native.softmax_backward(y, np.zeros((4, 5)), 1, False)
    assert native.softmax_forward(np.zeros((0, 3)), 1, True).shape == (0, 3)


def test_the_data_gradients_filter_from_c_equals_numpys_flipped_transpose(rng, isa, monkeypatch):
    """The stride-1 data gradient's filter from C equals numpy's swapped, flipped view of the filter, to
    the bit, for groups, kernel ranks 1 to 3 and group widths across the kernel's block of 16 input
    channels, split over the pool and not."""
    from dnnbind.highlevel.cpu import conv_geometry
    cases = [((5, 3, 4), 1), ((12, 2, 3, 3), 3), ((40, 37, 3, 3), 1), ((64, 17, 1, 2, 3), 2), ((4, 33, 2, 2), 4),
             ((7, 1, 5), 7)]
    for i, (shape, groups) in enumerate(cases):
        for dtype in (np.float64, np.float32):
            w = rng.standard_normal(shape).astype(dtype)
            k, cg = shape[:2]
            grouped = (groups, k // groups, cg) + shape[2:]
            expected = np.flip(w.reshape(grouped).swapaxes(1, 2), tuple(range(3, len(grouped))))
            monkeypatch.setattr(native, "POINTWISE_THREAD_MIN_ELEMENTS", 0 if i % 2 else w.size + 1)
            got = native.filter_flip_transpose(w, groups)
            assert got.shape == (groups * cg, k // groups) + shape[2:]
            np.testing.assert_array_equal(got, expected.reshape(got.shape))
            # and data_grad_problem gives the same filter with the kernels or without (numpy's view)
            dims = ConvDims((1, groups * cg) + (6,) * (len(shape) - 2), shape, padding=1, groups=groups)
            dy = rng.standard_normal(dims.y_shape).astype(dtype)
            with_kernels = conv_geometry.data_grad_problem(dy, w, dims)[1]
            np.testing.assert_array_equal(with_kernels, conv_geometry.data_grad_problem(dy, np.asfortranarray(w), dims)[1])


def test_swapped_axes_from_c_equal_numpys_to_the_bit(rng, isa, monkeypatch):
    """swap_axes equals numpy's swapped copy, for runs of one element and of several, leading axes or none,
    both dtypes, across the kernel's block of 16 rows, split over the pool and not, into a new array or a
    given one; a view that is not C-contiguous (in or out) takes numpy's copy, with the same result."""
    cases = [((30, 512, 16), 0), ((30, 16, 128), 1), ((3, 5, 17, 2), 1), ((33, 1), 0), ((2, 7, 40), 1),
             ((1, 3, 4, 5), 2), ((0, 4, 3), 1)]
    for i, (shape, first) in enumerate(cases):
        for dtype in (np.float64, np.float32):
            a = rng.standard_normal(shape).astype(dtype)
            expected = np.swapaxes(a, first, first + 1)
            monkeypatch.setattr(native, "SWAP_THREAD_MIN_ELEMENTS", 0 if i % 2 else a.size + 1)
            got = native.swap_axes(a, first)
            assert got.flags.c_contiguous and got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)
            into = np.full(expected.shape, np.nan, dtype)
            assert native.swap_axes(a, first, out=into) is into
            np.testing.assert_array_equal(into, expected)
    a = rng.standard_normal((6, 4, 5))
    wide = np.zeros((6, 5, 9))
    native.swap_axes(a[:, ::-1], 1, out=wide[:, :, 2:6])           # neither contiguous: numpy's copy
    np.testing.assert_array_equal(wide[:, :, 2:6], np.swapaxes(a[:, ::-1], 1, 2))
    assert not wide[:, :, :2].any() and not wide[:, :, 6:].any()


def test_the_data_gradients_filter_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="argument groups: 3 does not divide 4 output channels"):
        native.filter_flip_transpose(np.zeros((4, 2, 3, 3), np.float32), 3)
    with pytest.raises(ValueError, match=r"argument w: .*contiguous: False"):
        native.filter_flip_transpose(np.asfortranarray(np.zeros((4, 2, 3, 3), np.float32)), 1)


def test_kernels_built_for_other_parameters_are_not_called(monkeypatch):
    """A dnnbind-native built from another source tree (its kernels' parameters another revision) is not
    called, with a warning naming both revisions, rather than called with the wrong arguments (which
    would crash the process); the numpy paths run instead."""
    assert native.library() is not None and native.library().dnnbind_kernels_interface() == native.INTERFACE
    native.library.cache_clear()
    monkeypatch.setattr(native, "INTERFACE", native.INTERFACE + 1)
    try:
        with pytest.warns(RuntimeWarning, match=f"interface {native.INTERFACE - 1}, this dnnbind calls interface "
                                                f"{native.INTERFACE}"):
            assert native.library() is None
        assert not native.available(np.float32)
    finally:
        native.library.cache_clear()
        monkeypatch.undo()
    assert native.available(np.float32)
