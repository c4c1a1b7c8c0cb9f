"""The convolution paths of the cpu backend (conv_paths): each class of problem takes its own path,
and every path agrees with PyTorch and, in float32, with a float64 computation to GEMM rounding."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.cpu import conv_paths, native
from native_parts import require
from dnnbind.highlevel.cpu._blas import gemm
from dnnbind.highlevel.cpu.conv_paths import (Depthwise, Direct, Folded, Pointwise, Shifted, blas_path,
                                                    special_path)

from ..gradcheck import check_gradients
from ..torch_oracle import torch_pad

import dnnbind.highlevel.cpu as cpu_backend
ref_conv = importlib.import_module("dnnbind.highlevel.cpu.conv")
torch = pytest.importorskip("torch")
F = torch.nn.functional

# (name, x shape, w shape, conv keyword arguments, the path expected)
CASES = [
    ("1x1", (2, 6, 5, 7), (4, 6, 1, 1), dict(), Pointwise),
    ("1x1 strided", (2, 6, 7, 8), (4, 6, 1, 1), dict(stride=(2, 3)), Pointwise),
    ("1x1 grouped", (3, 6, 4, 4), (9, 2, 1, 1), dict(groups=3), Pointwise),
    ("1x1 1-d", (2, 4, 9), (3, 4, 1), dict(stride=2), Pointwise),
    ("1x1 3-d", (1, 3, 3, 4, 5), (2, 3, 1, 1, 1), dict(), Pointwise),
    # one input channel per group (a broadcast multiply forward), one output channel per group (its data
    # gradient), both (depthwise 1x1)
    ("1x1 depthwise", (3, 5, 4, 6), (5, 1, 1, 1), dict(groups=5), Pointwise),
    ("1x1 channel multiplier strided", (2, 4, 7, 6), (12, 1, 1, 1), dict(groups=4, stride=2), Pointwise),
    ("1x1 one output per group", (2, 6, 5, 5), (3, 2, 1, 1), dict(groups=3), Pointwise),
    ("depthwise 3x3", (2, 5, 9, 8), (5, 1, 3, 3), dict(padding=1, groups=5), Depthwise),
    ("depthwise strided", (2, 4, 9, 10), (4, 1, 3, 3), dict(padding=1, stride=2, groups=4), Depthwise),
    ("depthwise dilated", (1, 3, 9, 9), (3, 1, 3, 2), dict(padding=((2, 1), (0, 2)), dilation=(2, 3), groups=3),
     Depthwise),
    ("depthwise 1-d", (2, 6, 11), (6, 1, 5), dict(padding=2, groups=6), Depthwise),
    ("depthwise 3-d", (1, 4, 4, 5, 6), (4, 1, 3, 3, 3), dict(padding=1, groups=4), Depthwise),
    ("depthwise 3-d strided", (1, 2, 5, 6, 5), (2, 1, 2, 3, 2), dict(stride=(2, 1, 2), groups=2), Depthwise),
    ("depthwise wide padding", (1, 2, 4, 4), (2, 1, 2, 2), dict(padding=3, groups=2), Depthwise),
    # strided and undilated: one stride-1 problem per stride phase (phases without taps when stride > kernel)
    ("depthwise stride > kernel", (2, 3, 11, 10), (3, 1, 2, 2), dict(stride=3, groups=3), Depthwise),
    ("depthwise 5x3 stride (2, 3)", (1, 4, 13, 14), (4, 1, 5, 3), dict(stride=(2, 3), padding=((2, 1), (0, 1)),
                                                                         groups=4), Depthwise),
    ("depthwise 1-d strided", (2, 3, 12), (3, 1, 4), dict(stride=3, padding=1, groups=3), Depthwise),
    ("depthwise strided dilated", (1, 2, 11, 11), (2, 1, 3, 3), dict(stride=2, dilation=2, padding=2, groups=2),
     Depthwise),
    ("small groups", (2, 6, 7, 7), (6, 2, 3, 3), dict(padding=1, groups=3), None),
    # stride 1 with 16 or more channels per group: products per kernel offset on the shifted input
    ("shifted 3x3", (2, 32, 12, 13), (5, 32, 3, 3), dict(padding=1), Shifted),
    ("shifted grouped dilated", (2, 64, 12, 12), (6, 32, 3, 2), dict(padding=(2, 1), dilation=(2, 1), groups=2),
     Shifted),
    ("shifted 1-d", (3, 32, 140), (4, 32, 3), dict(padding=1), Shifted),
    ("shifted asymmetric padding", (2, 32, 12, 12), (4, 32, 3, 3), dict(padding=((0, 2), (1, 0))), Shifted),
    ("shifted strided is im2col", (2, 32, 24, 24), (5, 32, 3, 3), dict(padding=1, stride=2), None),
    ("shifted 3-d", (2, 16, 2, 5, 30), (3, 16, 2, 2, 3), dict(padding=(0, 1, 1)), Shifted),
    # small output planes (at most FOLDED_MAX_OUTPUTS pixels), several samples: one product over all of them
    ("folded 3x3", (3, 32, 6, 7), (5, 32, 3, 3), dict(padding=1), Folded),
    ("folded strided", (2, 16, 9, 8), (6, 16, 3, 3), dict(padding=1, stride=2), Folded),
    ("folded grouped dilated", (2, 16, 8, 9), (4, 8, 3, 3), dict(padding=2, dilation=2, groups=2), Folded),
    ("folded 1-d strided", (3, 24, 15), (4, 24, 3), dict(stride=2), Folded),
    ("folded 3-d", (2, 8, 4, 5, 6), (3, 8, 2, 2, 3), dict(padding=(0, 1, 1), stride=(1, 2, 1)), Folded),
    ("folded asymmetric padding", (2, 12, 5, 7), (2, 12, 3, 2), dict(padding=((0, 2), (1, 0)), stride=(2, 1)), Folded),
    ("one sample folds too", (1, 32, 6, 7), (5, 32, 3, 3), dict(padding=1, stride=2), Folded),
    # stride 1, the filter outweighing the columns: the data gradient's product reads it transposed
    ("one sample, filter outweighing its columns", (1, 16, 3, 3), (40, 16, 3, 3), dict(padding=1), Folded),
    # what Direct leaves to other paths or does itself: strided and dilated data gradients (col2im), the
    # filter gradient of a plane of DIRECT_FILTER_MIN_RUN outputs and more (in C)
    ("direct strided dilated", (2, 6, 13, 12), (4, 3, 3, 3), dict(stride=2, dilation=2, padding=1, groups=2), None),
    ("direct large plane", (2, 4, 30, 30), (5, 4, 3, 3), dict(padding=1), None),
    ("direct large strided plane", (2, 3, 61, 60), (4, 3, 3, 2), dict(padding=(1, 0), stride=(2, 1)), None),
    # a first layer (7x7/2 from 3 channels): its data gradient by col2im (DIRECT_DATA_MAX_GROUP_CHANNELS)
    ("direct first layer", (2, 3, 30, 30), (4, 3, 7, 7), dict(padding=3, stride=2), None),
]
IDS = [c[0] for c in CASES]


def _torch_conv(x, w, b, kwargs, flip):
    rank = x.ndim - 2
    dims = ConvDims(x.shape, w.shape, **kwargs)
    kw = {k: v for k, v in kwargs.items() if k != "padding"}
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    bt = None if b is None else torch.tensor(b, requires_grad=True)
    kernel = torch.flip(wt, list(range(2, 2 + rank))) if flip else wt
    yt = getattr(F, f"conv{rank}d")(F.pad(xt, torch_pad(list(zip(dims.pad_low, dims.pad_high)))), kernel, bt, **kw)
    return yt, [t for t in (xt, wt, bt) if t is not None]


@pytest.mark.parametrize("name, x_shape, w_shape, kwargs, path", CASES, ids=IDS)
def test_each_class_takes_its_path(kernels, name, x_shape, w_shape, kwargs, path):
    """Without the C kernels, the BLAS path listed; with them, Direct for all but 1x1, depthwise and small
    output planes (Folded)."""
    dims = ConvDims(x_shape, w_shape, **kwargs)
    assert blas_path(dims) is path
    assert special_path(dims) is _expected(kernels, path, dims)


def _expected(kernels, path, dims):
    """The path special_path takes for a problem whose BLAS path is ``path``: Folded keeps grouped
    problems only from FOLDED_MIN_GROUP_CHANNELS channels per group."""
    from dnnbind.highlevel.cpu.conv_paths import FOLDED_MIN_GROUP_CHANNELS
    narrow = path is Folded and dims.groups > 1 and dims.in_channels // dims.groups < FOLDED_MIN_GROUP_CHANNELS
    return path if kernels == "numpy" or (path in (Pointwise, Depthwise, Folded) and not narrow) else Direct


@pytest.mark.parametrize("name, x_shape, w_shape, kwargs, path, flip",
                         [c + (False,) for c in CASES] + [CASES[i] + (True,) for i in (1, 10, 21)],
                         ids=IDS + [IDS[i] + " flip" for i in (1, 10, 21)])
def test_paths_match_torch_in_float64(rng, kernels, name, x_shape, w_shape, kwargs, path, flip):
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    y, pullback = dnnbind.conv(x, w, b, flip=flip, **kwargs)
    yt, leaves = _torch_conv(x, w, b, kwargs, flip)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    for ours, theirs in zip(pullback(dy), torch.autograd.grad(yt, leaves, torch.tensor(dy))):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("name, x_shape, w_shape, kwargs, path", CASES, ids=IDS)
def test_paths_in_float32_are_within_gemm_rounding_of_float64(rng, kernels, name, x_shape, w_shape, kwargs, path):
    """float32 results against the float64 computation: errors of the size a float32 GEMM makes
    (a few ulps times the square root of the summed terms, relative to the terms' magnitude)."""
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    y64, pb64 = dnnbind.conv(x, w, **kwargs)
    dy = rng.standard_normal(y64.shape)
    y32, pb32 = dnnbind.conv(x.astype(np.float32), w.astype(np.float32), **kwargs)
    assert y32.dtype == np.float32
    eps = np.finfo(np.float32).eps
    terms = int(np.prod(w_shape[1:]))
    np.testing.assert_allclose(y32, y64, rtol=0, atol=8 * eps * np.sqrt(terms) * np.abs(x).max() * np.abs(w).max())
    for g32, g64 in zip(pb32(dy.astype(np.float32)), pb64(dy)):
        assert g32.dtype == np.float32
        scale = np.abs(g64).max() + 1.0
        np.testing.assert_allclose(g32, g64, rtol=0, atol=64 * eps * np.sqrt(dy.size) * scale)


# torch's conv_transpose takes symmetric padding only
SYMMETRIC = [c for c in CASES if c[4] is not None and ConvDims(c[1], c[2], **c[3]).symmetric_padding]


@pytest.mark.parametrize("name, x_shape, w_shape, kwargs, path", SYMMETRIC, ids=[c[0] for c in SYMMETRIC])
def test_conv_transpose_on_each_path_matches_torch(rng, kernels, name, x_shape, w_shape, kwargs, path):
    """conv_transpose with the same geometry (w has the transposed layout, the same shape here): its
    forward is the path's data gradient, its pullback the path's forward and filter gradient."""
    dims = ConvDims(x_shape, w_shape, **kwargs)
    x = rng.standard_normal(dims.y_shape)
    w, b = rng.standard_normal(w_shape), rng.standard_normal(x_shape[1])
    y, pullback = dnnbind.conv_transpose(x, w, b, **kwargs)
    transposed = ConvDims.transposed(x.shape, w.shape, **kwargs)
    assert special_path(transposed) is _expected(kernels, path, transposed)
    rank = len(x_shape) - 2
    xt, wtt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    kw = {k: v for k, v in kwargs.items() if k != "padding"}
    yt = getattr(F, f"conv_transpose{rank}d")(xt, wtt, bt, padding=dims.pad_low, **kw)
    assert y.shape == tuple(yt.shape)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    for ours, theirs in zip(pullback(dy), torch.autograd.grad(yt, (xt, wtt, bt), torch.tensor(dy))):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-11, atol=1e-11)


def test_direct_leaves_a_first_layers_data_gradient_to_col2im(rng, monkeypatch):
    """Strided, at most DIRECT_DATA_MAX_GROUP_CHANNELS input channels per group and DIRECT_DATA_MIN_TAPS
    taps: the data gradient skips the C kernel (the forward keeps it); narrower kernels, wider groups and
    stride 1 keep it."""
    require(native.library() is not None, "dnnbind_native._kernels (the C kernels)")
    first = ConvDims((2, 3, 30, 30), (4, 3, 7, 7), padding=3, stride=2)
    assert special_path(first) is Direct and not Direct.native_data_grad(first)
    for x_shape, w_shape, kw in [((2, 3, 30, 30), (4, 3, 5, 5), dict(padding=2, stride=2)),
                                 ((2, 4, 30, 30), (4, 4, 7, 7), dict(padding=3, stride=2)),
                                 ((2, 8, 30, 30), (4, 4, 7, 7), dict(padding=3, stride=2, groups=2)),
                                 ((2, 3, 30, 30), (4, 3, 7, 7), dict(padding=3))]:
        assert Direct.native_data_grad(ConvDims(x_shape, w_shape, **kw)), (x_shape, w_shape, kw)
    called = []
    for name in ("conv_forward", "conv_data_grad", "conv_filter_grad"):
        real = getattr(native, name)
        monkeypatch.setattr(native, name, lambda *a, _real=real, _name=name: called.append(_name) or _real(*a))
    for channels, data_grad_in_c in ((3, False), (4, True)):
        called.clear()
        x, w = rng.standard_normal((2, channels, 30, 30)), rng.standard_normal((4, channels, 7, 7))
        y, pullback = dnnbind.conv(x, w, padding=3, stride=2)
        dx, dw = pullback(rng.standard_normal(y.shape))
        assert called[0] == "conv_forward" and ("conv_data_grad" in called) == data_grad_in_c, (channels, called)
        assert dx.shape == x.shape and dw.shape == w.shape


@pytest.mark.parametrize("index", [0, 1, 5, 6, 9])
def test_path_gradients_by_finite_differences(rng, index):
    _, x_shape, w_shape, kwargs, _ = CASES[index]
    x, w, b = rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(w_shape[0])
    check_gradients(lambda: dnnbind.conv(x, w, b, **kwargs), [x, w, b], max_points=20)


@pytest.mark.parametrize("index", [0, 1, 2, 5, 6, 9])
def test_threaded_and_serial_agree(rng, kernels, index):
    """1x1 and depthwise problems split over the pool give what one thread gives."""
    _, x_shape, w_shape, kwargs, _ = CASES[index]
    x, w = rng.standard_normal((6,) + x_shape[1:]), rng.standard_normal(w_shape)
    dims = ConvDims(x.shape, w.shape, **kwargs)
    results = []
    for threaded in (True, False):
        y, pullback = cpu_backend.conv(x, w, None, dims, threaded=threaded)
        results.append((y,) + pullback(np.cos(y)))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_depthwise_blocks_cover_every_sample_and_channel(monkeypatch, rng):
    """numpy's depthwise path: blocks smaller than a sample's channels (large planes) give the same
    result as one block."""
    monkeypatch.setattr(native, "available", lambda dtype: False)
    x, w = rng.standard_normal((3, 7, 12, 12)), rng.standard_normal((7, 1, 3, 3))
    y_one, pb_one = dnnbind.conv(x, w, padding=1, groups=7)
    grads_one = pb_one(np.sin(y_one))
    conv_paths = importlib.import_module("dnnbind.highlevel.cpu.conv_paths")
    monkeypatch.setattr(conv_paths, "BLOCK_ELEMENTS", 300)   # 2 channels of one sample per block
    y, pullback = dnnbind.conv(x, w, padding=1, groups=7)
    np.testing.assert_array_equal(y, y_one)
    for a, b in zip(pullback(np.sin(y)), grads_one):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def test_depthwise_threads_follow_the_blas_rule(monkeypatch, kernels):
    """The numpy depthwise path calls BLAS: it splits over the pool only when BLAS is single-threaded.
    The C kernels call no BLAS: they split big problems whatever BLAS does."""
    big = ConvDims((8, 96, 56, 56), (96, 1, 3, 3), padding=1, groups=96)
    small = ConvDims((1, 4, 6, 6), (4, 1, 3, 3), padding=1, groups=4)
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    assert Depthwise.use_threads(big) == (kernels == "native" and ref_conv.workers() > 1)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert Depthwise.use_threads(big) == (ref_conv.workers() > 1)
    assert not Depthwise.use_threads(small)
    # 1x1: split over samples only when BLAS is single-threaded (else BLAS threads the products)
    assert Pointwise.use_threads(ConvDims((8, 64, 56, 56), (128, 64, 1, 1))) == (ref_conv.workers() > 1)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    assert not Pointwise.use_threads(ConvDims((8, 64, 56, 56), (128, 64, 1, 1)))


@pytest.mark.parametrize("stride, kernel, padding, output_padding", [(2, 3, 1, 1), (3, 2, 0, 2), ((2, 3), (4, 3), 1, 0)])
def test_strided_depthwise_conv_transpose_matches_torch(rng, kernels, stride, kernel, padding, output_padding):
    """conv_transpose's forward is the depthwise data gradient, split by stride phase; its backward the
    depthwise forward and filter gradient."""
    kernel = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    x, w, b = rng.standard_normal((2, 3, 5, 6)), rng.standard_normal((3, 1) + kernel), rng.standard_normal(3)
    _conv_transpose_matches_torch(rng, x, w, b, dict(stride=stride, padding=padding, output_padding=output_padding,
                                                     groups=3))


def _conv_transpose_matches_torch(rng, x, w, b, kw):
    """dnnbind.conv_transpose against F.conv_transpose2d in float64: y and every gradient."""
    y, pullback = dnnbind.conv_transpose(x, w, b, **kw)
    leaves = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    yt = F.conv_transpose2d(*leaves, **kw)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    for ours, theirs in zip(pullback(dy), torch.autograd.grad(yt, leaves, torch.tensor(dy))):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("threaded", [False, True])
def test_shifted_threads_split_the_samples_alike(rng, threaded):
    """Split over the pool or not, the shifted path computes every output the same way."""
    x, w = rng.standard_normal((3, 32, 6, 5)), rng.standard_normal((4, 32, 3, 3))
    dims = ConvDims(x.shape, w.shape, padding=1)
    dy = rng.standard_normal(dims.y_shape)
    one = [Shifted.forward(x, w, dims, False), Shifted.data_grad(dy, w, dims, False), Shifted.filter_grad(dy, x, dims, False)]
    other = [Shifted.forward(x, w, dims, threaded), Shifted.data_grad(dy, w, dims, threaded),
             Shifted.filter_grad(dy, x, dims, threaded)]
    for a, b in zip(one, other):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def test_gemm_refuses_operands_that_run_past_their_arrays():
    """BLAS reads raw memory: the wrapper checks every operand's span first."""
    a, b, c = np.ones((4, 3)), np.ones((3, 5)), np.zeros((4, 5))
    gemm(a, 0, 3, b, 0, 5, c, 0, 5, 4, 5, 3)
    np.testing.assert_array_equal(c, np.full((4, 5), 3.0))
    with pytest.raises(ValueError, match="b's 3 x 5 matrix at offset 1"):
        gemm(a, 0, 3, b, 1, 5, c, 0, 5, 4, 5, 3)
    with pytest.raises(ValueError, match="c must be a C-contiguous float64 array"):
        gemm(a, 0, 3, b, 0, 5, c.T.copy().T, 0, 5, 4, 5, 3)


@pytest.mark.parametrize("trans_b, accumulate", [(False, False), (True, False), (False, True), (True, True)])
def test_pitched_products_read_and_write_rows_a_pitch_apart(rng, trans_b, accumulate):
    """Operands as offsets and row pitches into flat arrays (the shifted path's form): BLAS reads only
    those rows and adds to C when asked."""
    m, n, k = 5, 7, 6
    a, b, c = rng.standard_normal(200), rng.standard_normal(200), rng.standard_normal(200)
    av = a[3:3 + m * 9].reshape(m, 9)[:, :k]
    bv = b[5:5 + (n if trans_b else k) * 11].reshape(-1, 11)[:, :(k if trans_b else n)]
    start = c.copy()
    gemm(a, 3, 9, b, 5, 11, c, 2, 10, m, n, k, trans_b=trans_b, accumulate=accumulate)
    written = c[2:2 + m * 10].reshape(m, 10)[:, :n]
    expected = av @ (bv.T if trans_b else bv) + (start[2:2 + m * 10].reshape(m, 10)[:, :n] if accumulate else 0)
    np.testing.assert_allclose(written, expected, rtol=1e-12, atol=1e-12)
    untouched = np.ones(200, bool)
    untouched[2:2 + m * 10] = np.tile(np.arange(10) >= n, m)
    np.testing.assert_array_equal(c[untouched], start[untouched])


@pytest.mark.parametrize("threaded, by_rows", [(False, False), (True, False), (True, True)])
def test_stacked_products_broadcast_and_accumulate_like_matmul(rng, threaded, by_rows):
    """conv_paths.product over stacks, broadcast as np.matmul does (one filter for every sample), with
    an inner dimension of one, and accumulating."""
    w, x = rng.standard_normal((3, 20, 30)), rng.standard_normal((4, 3, 30, 50))
    out = np.empty((4, 3, 20, 50))
    conv_paths.product(w, x, out, threaded, by_rows)
    np.testing.assert_allclose(out, w @ x, rtol=1e-12, atol=1e-12)
    before = out.copy()
    conv_paths.product(w, x, out, threaded, by_rows, accumulate=True)
    np.testing.assert_allclose(out, before + w @ x, rtol=1e-12, atol=1e-12)
    narrow = np.empty((4, 3, 20, 50))
    conv_paths.product(w[..., :1], x[:, :, :1], narrow, threaded, by_rows)
    np.testing.assert_allclose(narrow, w[..., :1] @ x[:, :, :1], rtol=1e-15)


@pytest.mark.parametrize("x_shape, w_shape, kw", [
    ((2, 4, 5, 12), (4, 32, 3, 3), dict(padding=1)),                             # the convolution is shifted
    ((2, 64, 5, 6), (64, 3, 3, 2), dict(padding=(1, 0), dilation=(1, 2), groups=2)),   # its data gradient is
])
def test_shifted_conv_transpose_matches_torch(rng, x_shape, w_shape, kw):
    """A stride-1 conv_transpose runs a convolution's data gradient forward and its forward and filter
    gradient backward: with 32 channels per group on either side, one of them takes the shifted path."""
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    _conv_transpose_matches_torch(rng, x, w, rng.standard_normal(w_shape[1] * kw.get("groups", 1)), kw)


@pytest.mark.parametrize("threaded", [False, True])
def test_folded_blocks_and_threads_compute_the_same(monkeypatch, rng, threaded):
    """Cut into blocks of samples (here one sample each) and split over the pool or not, the folded path
    gives what one block on one thread gives."""
    conv_paths = importlib.import_module("dnnbind.highlevel.cpu.conv_paths")
    for kwargs in (dict(padding=1), dict(padding=1, stride=2, groups=2)):
        x, w = rng.standard_normal((3, 16, 7, 6)), rng.standard_normal((4, 16 // kwargs.get("groups", 1), 3, 3))
        dims = ConvDims(x.shape, w.shape, **kwargs)
        assert blas_path(dims) is Folded
        dy = rng.standard_normal(dims.y_shape)

        def run(th):
            return [Folded.forward(x, w, dims, th), Folded.data_grad(dy, w, dims, th), Folded.filter_grad(dy, x, dims, th)]

        whole = run(False)
        monkeypatch.setattr(conv_paths, "FOLDED_BLOCK_BYTES", 1)
        assert len(Folded._blocks(dims, 8)) == 3
        for a, b in zip(whole, run(threaded)):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
        monkeypatch.undo()


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "conv_transpose"])
@pytest.mark.parametrize("name, x_shape, w_shape, kwargs, path", SYMMETRIC, ids=[c[0] for c in SYMMETRIC])
def test_backward_skips_the_gradients_not_needed(rng, transposed, name, x_shape, w_shape, kwargs, path):
    """The residual form's ``needs``: on every path, each gradient asked for equals the full backward's
    and the others are None."""
    import itertools
    if transposed:
        dims = ConvDims.transposed(ConvDims(x_shape, w_shape, **kwargs).y_shape, w_shape, **kwargs)
        forward, backward = cpu_backend.conv_transpose_forward, cpu_backend.conv_transpose_backward
        x = rng.standard_normal(dims.y_shape)
    else:
        dims = ConvDims(x_shape, w_shape, **kwargs)
        forward, backward = cpu_backend.conv_forward, cpu_backend.conv_backward
        x = rng.standard_normal(x_shape)
    w, b = rng.standard_normal(w_shape), rng.standard_normal(dims.in_channels if transposed else w_shape[0])
    y, saved = forward(x, w, b, dims)
    dy = rng.standard_normal(y.shape)
    full = backward(saved, (dy,), dims)
    for needs in itertools.product((False, True), repeat=3):
        for need, got, want in zip(needs, backward(saved, (dy,), dims, needs=needs), full):
            if need:
                np.testing.assert_array_equal(got, want)
            else:
                assert got is None


@pytest.mark.parametrize("groups, takes_direct", [(32, True), (8, True), (4, False), (1, False)])
def test_small_planes_in_narrow_groups_take_direct(kernels, groups, takes_direct):
    """Folded serves small output planes before Direct, but for grouped problems only from
    FOLDED_MIN_GROUP_CHANNELS channels per group (narrower groups: Direct, where the kernels are built)."""
    from dnnbind.highlevel.cpu.conv_paths import FOLDED_MIN_GROUP_CHANNELS
    dims = ConvDims((8, 512, 7, 7), (512, 512 // groups, 3, 3), padding=1, groups=groups)
    assert blas_path(dims) is Folded
    assert (512 // groups < FOLDED_MIN_GROUP_CHANNELS and groups > 1) is takes_direct
    assert special_path(dims) is (Direct if takes_direct and kernels != "numpy" else Folded)


def test_a_tiny_problem_is_left_to_blas():
    """Below DIRECT_MIN_MACS the direct convolution's fixed costs exceed a BLAS path's."""
    tiny = ConvDims((1, 1, 4, 4), (1, 1, 3, 3), padding=1)
    assert special_path(tiny) is blas_path(tiny)
    big = ConvDims((8, 64, 56, 56), (64, 64, 3, 3), padding=1)
    assert special_path(big) is (Direct if native.library() is not None else blas_path(big))


