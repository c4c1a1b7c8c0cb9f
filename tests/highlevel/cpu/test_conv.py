"""conv and conv_transpose on the cpu backend: hand-worked cases, finite differences, PyTorch."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dnnbind
from dnnbind.highlevel.dims import ConvDims

from ..gradcheck import check_gradients
from ..torch_oracle import torch_pad

import dnnbind.highlevel.cpu as cpu_backend
from dnnbind.highlevel.cpu import native as ref_native
from native_parts import require
ref_conv = importlib.import_module("dnnbind.highlevel.cpu.conv")

X33 = np.arange(1.0, 10.0).reshape(1, 1, 3, 3)
W22 = np.array([[1.0, 2.0], [3.0, 4.0]]).reshape(1, 1, 2, 2)


# ---------------------------------------------------------------------------------------------- by hand


def test_cross_correlation_by_hand():
    y, _ = dnnbind.conv(X33, W22)
    # [1 2; 4 5].[1 2; 3 4] = 1 + 4 + 12 + 20 = 37, and so on
    np.testing.assert_array_equal(y, [[[[37, 47], [67, 77]]]])


def test_flip_is_true_convolution_by_hand():
    y, _ = dnnbind.conv(X33, W22, flip=True)
    # kernel [4 3; 2 1]: 4 + 6 + 8 + 5 = 23, ...
    np.testing.assert_array_equal(y, [[[[23, 33], [53, 63]]]])


def test_padding_stride_and_bias_by_hand():
    y, _ = dnnbind.conv(X33, np.ones((1, 1, 2, 2)), np.array([0.5]), stride=2, padding=((1, 0), (0, 1)))
    # padded rows: [0 0 0 0; 1 2 3 0; 4 5 6 0; 7 8 9 0], windows at rows 0, 2 and columns 0, 2
    np.testing.assert_array_equal(y, [[[[3.5, 3.5], [24.5, 15.5]]]])


def test_dilation_and_1d_by_hand():
    y, _ = dnnbind.conv(np.array([[[1.0, 2.0, 3.0, 4.0, 5.0]]]), np.array([[[1.0, -1.0]]]), dilation=3)
    np.testing.assert_array_equal(y, [[[1 - 4, 2 - 5]]])


def test_groups_by_hand():
    x = np.stack([X33[0, 0], 10 * X33[0, 0]])[None]
    w = np.stack([W22[0], -W22[0]])  # group 0 sees channel 0, group 1 channel 1
    y, _ = dnnbind.conv(x, w, groups=2)
    np.testing.assert_array_equal(y[0, 0], [[37, 47], [67, 77]])
    np.testing.assert_array_equal(y[0, 1], [[-370, -470], [-670, -770]])


def test_gradients_by_hand():
    y, pullback = dnnbind.conv(X33, W22, np.zeros(1))
    dx, dw, db = pullback(np.ones_like(y))
    # every output uses the whole kernel once: dx counts how often each input meets each weight
    np.testing.assert_array_equal(dx[0, 0], [[1, 3, 2], [4, 10, 6], [3, 7, 4]])
    np.testing.assert_array_equal(dw[0, 0], [[1 + 2 + 4 + 5, 2 + 3 + 5 + 6], [4 + 5 + 7 + 8, 5 + 6 + 8 + 9]])
    np.testing.assert_array_equal(db, [4])


def test_conv_transpose_by_hand():
    x = np.array([[1.0, 2.0], [3.0, 4.0]]).reshape(1, 1, 2, 2)
    w = np.array([[1.0, 10.0], [100.0, 1000.0]]).reshape(1, 1, 2, 2)
    y, _ = dnnbind.conv_transpose(x, w, stride=2)
    # every input pixel stamps a scaled copy of the kernel into its own 2x2 block
    expected = np.block([[1 * w[0, 0], 2 * w[0, 0]], [3 * w[0, 0], 4 * w[0, 0]]])
    np.testing.assert_array_equal(y[0, 0], expected)
    y, _ = dnnbind.conv_transpose(x, w, stride=1, padding=((0, 1), (1, 0)))
    full = np.zeros((3, 3))
    for i in range(2):
        for j in range(2):
            full[i:i + 2, j:j + 2] += x[0, 0, i, j] * w[0, 0]
    np.testing.assert_array_equal(y[0, 0], full[0:2, 1:3])


def test_conv_transpose_is_the_data_gradient_of_conv(rng):
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((6, 2, 3, 2))
    kwargs = dict(stride=(2, 1), padding=((1, 0), (0, 1)), dilation=(1, 2), groups=2)
    y, pullback = dnnbind.conv(x, w, **kwargs)
    dy = rng.standard_normal(y.shape)
    out_pad = tuple(s - ((o - 1) * st - lo - hi + d * (k - 1) + 1)
                    for s, o, st, lo, hi, d, k in zip(x.shape[2:], y.shape[2:], (2, 1), (1, 0), (0, 1), (1, 2), (3, 2)))
    yt, _ = dnnbind.conv_transpose(dy, w, **kwargs, output_padding=out_pad)
    np.testing.assert_allclose(yt, pullback(dy)[0], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------- finite differences

CONFIGS = [
    dict(x=(2, 3, 6), w=(2, 3, 3), stride=2, padding=((2, 1),), dilation=1, groups=1),
    dict(x=(1, 4, 5, 6), w=(6, 2, 2, 3), stride=(1, 2), padding=((1, 0), (0, 2)), dilation=(2, 1), groups=2),
    dict(x=(2, 2, 5, 5), w=(3, 2, 3, 3), stride=1, padding=1, dilation=1, groups=1),
    dict(x=(1, 2, 4, 3, 5), w=(2, 1, 2, 2, 3), stride=(2, 1, 1), padding=(0, 1, (1, 0)), dilation=1, groups=2),
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_gradients(rng, config, flip, bias):
    c = dict(config)
    x, w = rng.standard_normal(c.pop("x")), rng.standard_normal(c.pop("w"))
    inputs = [x, w] + ([rng.standard_normal(w.shape[0])] if bias else [])
    check_gradients(lambda: dnnbind.conv(*inputs, flip=flip, **c), inputs, max_points=25)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose_gradients(rng, config, flip, bias):
    c = dict(config)
    x_shape, w_shape = c.pop("x"), c.pop("w")
    # reuse the geometry: conv_transpose takes w as (C_in, C_out/groups, *k)
    x = rng.standard_normal((x_shape[0], w_shape[0]) + x_shape[2:])
    w = rng.standard_normal(w_shape)
    stride = c["stride"] if isinstance(c["stride"], tuple) else (c["stride"],) * (len(x_shape) - 2)
    c["output_padding"] = tuple(s - 1 for s in stride)
    inputs = [x, w] + ([rng.standard_normal(w.shape[1] * c["groups"])] if bias else [])
    check_gradients(lambda: dnnbind.conv_transpose(*inputs, flip=flip, **c), inputs, max_points=25)


def test_padding_wider_than_the_kernel_reaches(rng):
    """Outputs that see only padding: the data gradient crops them (stride 1) or skips them (col2im)."""
    x, w = rng.standard_normal((2, 2, 4, 3)), rng.standard_normal((3, 2, 1, 2))
    for stride in (1, 2):
        check_gradients(lambda: dnnbind.conv(x, w, stride=stride, padding=((3, 1), (0, 2))), [x, w])
        y, _ = dnnbind.conv(x, w, stride=stride, padding=((3, 1), (0, 2)))
        assert np.all(y[:, :, :3 // stride] == 0)


def test_conv_transpose_output_padding_beyond_stride_gradients(rng):
    x, w = rng.standard_normal((1, 2, 4)), rng.standard_normal((2, 3, 3))
    check_gradients(lambda: dnnbind.conv_transpose(x, w, stride=1, dilation=2, output_padding=1), [x, w])


# ---------------------------------------------------------------------------------------------- paths inside the backend


def _run(x, w, dims, threaded):
    y, pullback = cpu_backend.conv(x, w, None, dims, threaded=threaded)
    return (y,) + pullback(np.cos(y))


@pytest.mark.parametrize("x_shape, w_shape, groups, stride", [
    ((6, 6, 9, 9), (6, 2, 3, 3), 3, 1),     # flat rows, split over samples
    ((1, 8, 9, 9), (4, 2, 3, 3), 4, 1),     # one sample: split over groups
    ((5, 4, 9, 10), (4, 2, 3, 3), 2, 2),    # strided windows
    ((3, 2, 4, 4, 4), (2, 2, 3, 3, 3), 1, 1),  # 3-d with many wasted flat columns: windows
])
def test_threaded_and_serial_agree(rng, x_shape, w_shape, groups, stride):
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    dims = ConvDims(x_shape, w_shape, groups=groups, stride=stride, padding=1)
    for a, b in zip(_run(x, w, dims, True), _run(x, w, dims, False)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_thread_rule_follows_blas_threads(monkeypatch):
    """im2col's products split over the pool where numpy's BLAS is single-threaded."""
    big = ConvDims((8, 64, 56, 56), (64, 64, 3, 3), padding=1)
    small = ConvDims((2, 20, 28, 28), (15, 20, 3, 3))
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    assert not ref_conv.use_threads(big)                                     # numpy's default: BLAS threaded
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert ref_conv.use_threads(big) == (ref_conv.workers() > 1)
    assert not ref_conv.use_threads(small)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")  # OpenBLAS reads its own variable first
    assert not ref_conv.use_threads(big)


def test_layout_choice():
    assert ref_conv._Layout(ConvDims((1, 1, 9, 9), (1, 1, 3, 3), padding=1), np.float32, False).flat
    assert not ref_conv._Layout(ConvDims((1, 1, 9, 9), (1, 1, 3, 3), stride=2), np.float32, False).flat
    assert not ref_conv._Layout(ConvDims((1, 1, 4, 4, 4), (1, 1, 3, 3, 3)), np.float32, False).flat


def test_large_batches_build_columns_block_by_block(rng, monkeypatch):
    """Past BLOCK_BYTES the sweep builds columns per block of samples (the im2col path, C kernels off),
    with the results of one sample at a time."""
    monkeypatch.setattr(ref_native, "available", lambda dtype: False)
    x, w = rng.standard_normal((24, 8, 24, 24)), rng.standard_normal((8, 8, 3, 3))
    dims = ConvDims(x.shape, w.shape, padding=1)
    lay = ref_conv._Layout(dims, x.dtype, False)
    assert lay.block < 24 and not lay.whole
    y, dx, dw = _run(x, w, dims, False)
    small = [_run(x[i:i + 1], w, ConvDims((1,) + x.shape[1:], w.shape, padding=1), False) for i in range(0, 24, 5)]
    for i, (ys, dxs, dws) in zip(range(0, 24, 5), small):
        np.testing.assert_allclose(y[i:i + 1], ys, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dx[i:i + 1], dxs, rtol=1e-12, atol=1e-12)
    total = sum(_run(x[i:i + 1], w, ConvDims((1,) + x.shape[1:], w.shape, padding=1), False)[2] for i in range(24))
    np.testing.assert_allclose(dw, total, rtol=1e-10)


# ---------------------------------------------------------------------------------------------- dtypes


def test_float32_and_float16(rng):
    x, w, b = rng.standard_normal((2, 4, 8, 8)), rng.standard_normal((6, 2, 3, 3)), rng.standard_normal(6)
    ref, ref_pb = dnnbind.conv(x, w, b, padding=1, groups=2)
    dy = rng.standard_normal(ref.shape)
    ref_grads = ref_pb(dy)
    for dtype, tol in ((np.float32, 1e-4), (np.float16, 2e-2)):
        y, pullback = dnnbind.conv(x.astype(dtype), w.astype(dtype), b.astype(dtype), padding=1, groups=2)
        assert y.dtype == dtype
        np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * 10)
        grads = pullback(dy.astype(dtype))
        assert all(g.dtype == dtype for g in grads)
        for g, r in zip(grads, ref_grads):
            np.testing.assert_allclose(g, r, rtol=tol, atol=tol * 30)


def test_non_contiguous_inputs(rng):
    x = rng.standard_normal((2, 5, 9, 8))[:, ::2, ::-1]
    w = np.asfortranarray(rng.standard_normal((2, 3, 3, 3)))
    y, pullback = dnnbind.conv(x, w, padding=1)
    y2, pullback2 = dnnbind.conv(np.ascontiguousarray(x), np.ascontiguousarray(w), padding=1)
    np.testing.assert_array_equal(y, y2)
    dy = rng.standard_normal(y.shape)[..., ::-1]
    for a, b in zip(pullback(dy), pullback2(np.ascontiguousarray(dy))):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------- errors


def test_argument_errors_name_the_argument(rng):
    x, w = rng.standard_normal((2, 30, 5, 5)), rng.standard_normal((8, 7, 3, 3))
    with pytest.raises(ValueError, match=r"groups=4 does not divide the 30 input channels of x"):
        dnnbind.conv(x, w, groups=4)
    with pytest.raises(ValueError, match=r"b has shape \(3,\) but must have shape \(8,\)"):
        dnnbind.conv(x[:, :7], w, np.zeros(3))
    with pytest.raises(TypeError, match=r"w has dtype float32 but x has dtype float64"):
        dnnbind.conv(x[:, :7], w.astype(np.float32))
    with pytest.raises(TypeError, match=r"x has dtype int64"):
        dnnbind.conv(x.astype(np.int64), w)
    with pytest.raises(ValueError, match=r"b has shape \(2,\) but must have shape \(6,\)"):
        dnnbind.conv_transpose(rng.standard_normal((1, 6, 3, 3)), rng.standard_normal((6, 3, 2, 2)), np.zeros(2),
                               groups=2)
    y, pullback = dnnbind.conv(x[:, :7], w)
    with pytest.raises(ValueError, match=r"dy has shape \(2, 8, 3\) but must have shape \(2, 8, 3, 3\)"):
        pullback(np.zeros((2, 8, 3)))
    with pytest.raises(TypeError, match=r"dy has dtype int64"):
        pullback(np.zeros(y.shape, np.int64))


# ---------------------------------------------------------------------------------------------- against PyTorch


@st.composite
def torch_conv_case(draw):
    rank = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 2, 3]))
    cin = groups * draw(st.integers(1, 2))
    cout = groups * draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(rank))
    pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(rank))
    size = tuple(max(d * (k - 1) + 1 - lo - hi, 1) + draw(st.integers(0, 4))
                 for d, k, (lo, hi) in zip(dilation, kernel, pads))
    batch = draw(st.integers(1, 3))
    return dict(x=(batch, cin) + size, w=(cout, cin // groups) + kernel, stride=stride, dilation=dilation,
                padding=pads, groups=groups, flip=draw(st.booleans()), bias=draw(st.booleans()),
                threaded=draw(st.booleans()))


@settings(max_examples=40, deadline=None)
@given(torch_conv_case())
def test_conv_matches_torch(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(case["x"]), rng.standard_normal(case["w"])
    b = rng.standard_normal(case["w"][0]) if case["bias"] else None
    dims = ConvDims(x.shape, w.shape, stride=case["stride"], padding=case["padding"], dilation=case["dilation"],
                    groups=case["groups"], flip=case["flip"])
    y, pullback = cpu_backend.conv(x, w, b, dims, threaded=case["threaded"])
    rank = len(case["x"]) - 2
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    bt = None if b is None else torch.tensor(b, requires_grad=True)
    kernel = torch.flip(wt, list(range(2, 2 + rank))) if case["flip"] else wt
    conv = getattr(F, f"conv{rank}d")
    yt = conv(F.pad(xt, torch_pad(case["padding"])), kernel, bt, stride=case["stride"], dilation=case["dilation"],
              groups=case["groups"])
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-10, atol=1e-10)
    dy = rng.standard_normal(y.shape)
    wanted = [t for t in (xt, wt, bt) if t is not None]
    expected = torch.autograd.grad(yt, wanted, torch.tensor(dy))
    for ours, theirs in zip(pullback(dy), expected):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10, atol=1e-10)


@st.composite
def torch_transpose_case(draw):
    rank = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 2]))
    cin = groups * draw(st.integers(1, 2))
    cout_g = draw(st.integers(1, 2))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(rank))
    padding = tuple(draw(st.integers(0, 1)) for _ in range(rank))
    out_pad = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    size = tuple(draw(st.integers(1, 4)) + p for p in padding)
    return dict(x=(draw(st.integers(1, 2)), cin) + size, w=(cin, cout_g) + kernel, stride=stride,
                dilation=dilation, padding=padding, output_padding=out_pad, groups=groups, bias=draw(st.booleans()))


@settings(max_examples=30, deadline=None)
@given(torch_transpose_case())
def test_conv_transpose_matches_torch(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(case["x"]), rng.standard_normal(case["w"])
    b = rng.standard_normal(case["w"][1] * case["groups"]) if case["bias"] else None
    kwargs = {k: case[k] for k in ("stride", "padding", "output_padding", "dilation", "groups")}
    try:
        ConvDims.transposed(x.shape, w.shape, **kwargs)
    except ValueError:
        return  # an empty output; the error paths are tested elsewhere
    y, pullback = dnnbind.conv_transpose(x, w, b, **kwargs)
    rank = len(case["x"]) - 2
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    bt = None if b is None else torch.tensor(b, requires_grad=True)
    yt = getattr(F, f"conv_transpose{rank}d")(xt, wt, bt, **kwargs)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-10, atol=1e-10)
    dy = rng.standard_normal(y.shape)
    expected = torch.autograd.grad(yt, [t for t in (xt, wt, bt) if t is not None], torch.tensor(dy))
    for ours, theirs in zip(pullback(dy), expected):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-10, atol=1e-10)


def test_conv_float32_matches_torch_on_a_real_size(rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((4, 16, 20, 20)).astype(np.float32)
    w = rng.standard_normal((32, 4, 3, 3)).astype(np.float32)
    y, pullback = dnnbind.conv(x, w, padding=1, groups=4)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    yt = torch.nn.functional.conv2d(xt, wt, padding=1, groups=4)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-4, atol=1e-4)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    for ours, theirs in zip(pullback(dy), torch.autograd.grad(yt, (xt, wt), torch.tensor(dy))):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("x_shape, w_shape, kwargs", [
    ((1, 1, 4, 4), (1, 1, 3, 3), dict(padding=1)),
    ((2, 4, 5, 6), (6, 2, 3, 2), dict(padding=1, stride=(2, 1), groups=2)),
    ((3, 2, 7), (4, 2, 3), dict(stride=2, dilation=2)),
])
def test_small_problems_skip_the_sweep_with_the_same_results(monkeypatch, rng, x_shape, w_shape, kwargs):
    """A small problem (columns gathered at once) runs one gather and one product; the result and the
    gradients equal the blocked sweep's."""
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    dims = ConvDims(x_shape, w_shape, **kwargs)
    lay = ref_conv.layout(dims, x.dtype, False)
    assert lay.whole
    y, pullback = cpu_backend.conv(x, w, None, dims, threaded=False)
    dy = rng.standard_normal(y.shape)
    grads = pullback(dy)
    monkeypatch.setattr(lay, "whole", False)
    y2, pullback2 = cpu_backend.conv(x, w, None, dims, threaded=False)
    np.testing.assert_array_equal(y, y2)
    for a, b in zip(grads, pullback2(dy)):
        np.testing.assert_array_equal(a, b)


def test_residual_form_takes_its_dims_by_keyword_too(rng):
    """The large-problem BLAS policy wrapper finds ConvDims passed by name as well as by position."""
    x, w = rng.standard_normal((8, 16, 20, 20)).astype(np.float32), rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    dims = ConvDims(x.shape, w.shape, padding=1, dtype=x.dtype)
    y, saved = cpu_backend.conv_forward(x, w, None, dims=dims)
    y2, saved2 = cpu_backend.conv_forward(x, w, None, dims)
    np.testing.assert_array_equal(y, y2)
    for a, b in zip(cpu_backend.conv_backward(saved, (y,), dims=dims), cpu_backend.conv_backward(saved2, (y,), dims)):
        np.testing.assert_array_equal(a, b)


def test_a_convolution_on_the_c_kernels_is_not_refused_for_columns_it_never_builds():
    """The memory check counts one sample's im2col columns only where the forward builds them: a large
    filter on the C kernels' Direct path reads x in place. In a child whose address space is capped at 5
    GiB, a 27x27 filter over 32 channels of 256x256 (5.7 GiB of columns, 0.1 GiB of arrays) runs on the
    kernels and is refused without them, naming what it would need."""
    from childproc import run_python
    from dnnbind.highlevel.cpu import native
    code = """
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (5 << 30, resource.RLIM_INFINITY))
        import numpy as np, dnnbind
        x, w = np.ones((1, 32, 256, 256), np.float32), np.full((1, 32, 27, 27), 0.5, np.float32)
        try:
            y, _ = dnnbind.conv(x, w, padding=13)
            print("ran", y.shape, y[0, 0, 128, 128], y[0, 0, 0, 0])
        except MemoryError as exc:
            print("refused", exc)
    """
    out = run_python(code, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    if native.library() is not None:
        assert out.stdout.split() == ["ran", "(1,", "1,", "256,", "256)", str(np.float32(32 * 27 * 27 * 0.5)),
                                      str(np.float32(32 * 14 * 14 * 0.5))]
    else:
        assert out.stdout.startswith("refused conv_forward on x of shape (1, 32, 256, 256) would need at least 5.7 GiB")
