"""dnnbind's own C kernels (reference/native.py, csrc/): built by the development install, equal to
PyTorch on random geometries for every instruction set this CPU runs, and guarded against arrays
that do not fit the problem."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.reference import native

torch = pytest.importorskip("torch")
F = torch.nn.functional


def test_kernels_are_built_and_say_for_which_instruction_set():
    assert native.library() is not None, "the C kernels are not built: run make setup (pip install -e .)"
    assert native.isa() in ("baseline", "x86-64-v3 (AVX2)", "x86-64-v4 (AVX-512)")
    assert native.supported_isas()[-1] == "base"
    assert native.available(np.float32) and native.available(np.float64)
    assert not native.available(np.float16) and not native.available(np.int32)


def _geometries(rng, count):
    """Random depthwise problems of rank 1 to 3: kernels, strides, dilations and paddings (asymmetric
    ones included) of every kind, and planes long enough to cross the kernels' chunks."""
    out = []
    while len(out) < count:
        rank = int(rng.integers(1, 4))
        kernel = tuple(int(k) for k in rng.integers(1, 5, rank))
        stride = tuple(int(s) for s in rng.integers(1, 4, rank))
        dilation = tuple(int(d) for d in rng.integers(1, 3, rank))
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


def test_depthwise_kernels_match_torch_in_float64(rng, isa):
    for i, dims in enumerate(_geometries(rng, 60)):
        x, w = rng.standard_normal(dims.x_shape), rng.standard_normal(dims.w_shape)
        dy = rng.standard_normal(dims.y_shape)
        threaded = bool(i % 2)
        ours = (native.depthwise_forward(x, w, dims, threaded), native.depthwise_data_grad(dy, w, dims, threaded),
                native.depthwise_filter_grad(dy, x, dims, threaded))
        for name, a, b in zip(("y", "dx", "dw"), ours, _torch_depthwise(x, w, dy, dims)):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11, err_msg=f"{name} of {dims}")


def test_depthwise_kernels_in_float32_are_within_rounding_of_float64(rng, isa):
    eps = np.finfo(np.float32).eps
    for dims in _geometries(rng, 30):
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
            "from dnnbind.highlevel.reference import native\n"
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
