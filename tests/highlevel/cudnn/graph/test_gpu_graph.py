"""Each graph-API primitive executed on a GPU (cudnnBackendExecute) against the numpy ops (and torch on the CPU
for layer norm). Run by `make gpu-check`; NOT YET RUN: no GPU was available when this was written. The same
graphs and plans are built devicelessly by test_graph_plans.py."""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel.cudnn.graph.execute import run_graph
from dnnbind.highlevel.cudnn.graph.graphs import GraphSpec, NormDims
from dnnbind.highlevel.dims import ConvDims, PoolDims
from highlevel.gpu.device import cuda  # noqa: F401  (fixture)

pytestmark = pytest.mark.gpu

TOLERANCE = {"float32": 1e-4, "float16": 1e-2}
PADDING = ((1, 2), (1, 1))
EPS = 1e-5


def _device(cp, a: np.ndarray, layout: str):
    """A device copy of NCHW-shaped ``a`` whose memory is laid out as ``layout``."""
    return cp.asarray(np.ascontiguousarray(a.transpose(0, 2, 3, 1) if layout == "NHWC" else a))


def _host(cp, a, layout: str) -> np.ndarray:
    h = cp.asnumpy(a).astype(np.float64)
    return h.transpose(0, 3, 1, 2) if layout == "NHWC" else h


def _empty(cp, shape, dtype, layout: str):
    n, c, *spatial = shape
    return cp.full((n, *spatial, c) if layout == "NHWC" else shape, np.nan, dtype)


def _close(got: np.ndarray, want: np.ndarray, dtype: str, what: str) -> None:
    scale = max(1.0, float(np.abs(want).max()))
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.abs(got - want).max() <= TOLERANCE[dtype] * scale, (what, float(np.abs(got - want).max()))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_convolution_graphs(cuda, dtype, layout):
    cp, rng = cuda, np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 9, 9)).astype(dtype)
    w = (rng.standard_normal((16, 8, 3, 3)) * 0.3).astype(dtype)
    bias = rng.standard_normal(16).astype(dtype)
    dims = ConvDims(x.shape, w.shape, padding=PADDING, dtype=dtype)
    y_ref, pullback = dnnbind.conv(x.astype(np.float64), w.astype(np.float64), padding=PADDING)
    dy = rng.standard_normal(y_ref.shape).astype(dtype)
    dx_ref, dw_ref = pullback(dy.astype(np.float64))
    xd, wd, dyd = _device(cp, x, layout), _device(cp, w, layout), _device(cp, dy, layout)

    y = _empty(cp, y_ref.shape, dtype, layout)
    run_graph(GraphSpec("conv_forward", dims, layout), {"x": xd, "w": wd, "y": y})
    _close(_host(cp, y, layout), y_ref, dtype, "conv_forward")
    dx = _empty(cp, x.shape, dtype, layout)
    run_graph(GraphSpec("conv_backward_data", dims, layout), {"dx": dx, "w": wd, "dy": dyd})
    _close(_host(cp, dx, layout), dx_ref, dtype, "conv_backward_data")
    dw = _empty(cp, w.shape, dtype, layout)
    run_graph(GraphSpec("conv_backward_filter", dims, layout), {"x": xd, "dw": dw, "dy": dyd})
    _close(_host(cp, dw, layout), dw_ref, dtype, "conv_backward_filter")
    fused = _empty(cp, y_ref.shape, dtype, layout)
    run_graph(GraphSpec("conv_bias_activation", dims, layout, activation="relu"),
              {"x": xd, "w": wd, "bias": _device(cp, bias.reshape(1, 16, 1, 1), layout), "y": fused})
    _close(_host(cp, fused, layout), np.maximum(y_ref + bias.reshape(1, 16, 1, 1), 0), dtype,
           "conv_bias_activation")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_layer_norm_graphs(cuda, dtype, layout):
    torch = pytest.importorskip("torch")
    cp, rng = cuda, np.random.default_rng(1)
    shape = (6, 4, 3, 5)
    x, dy = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    scale, bias = (rng.standard_normal((1,) + shape[1:]).astype(dtype) for _ in range(2))
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    st, bt = (torch.tensor(a[0].astype(np.float64), requires_grad=True) for a in (scale, bias))
    yt = torch.nn.functional.layer_norm(xt, shape[1:], st, bt, EPS)
    yt.backward(torch.tensor(dy.astype(np.float64)))
    dims = NormDims(shape, dtype)
    stats = dict(shape=(shape[0], 1, 1, 1), dtype=np.float32)
    arrays = {"x": _device(cp, x, layout), "scale": _device(cp, scale, layout), "bias": _device(cp, bias, layout),
              "y": _empty(cp, shape, dtype, layout), "mean": cp.full(fill_value=np.nan, **stats),
              "inv_variance": cp.full(fill_value=np.nan, **stats)}
    run_graph(GraphSpec("layer_norm_forward", dims, layout), arrays, epsilon=EPS)
    _close(_host(cp, arrays["y"], layout), yt.detach().numpy(), dtype, "layer_norm_forward")
    flat = x.astype(np.float64).reshape(shape[0], -1)
    _close(cp.asnumpy(arrays["mean"]).ravel(), flat.mean(1), dtype, "mean")
    _close(cp.asnumpy(arrays["inv_variance"]).ravel(), 1 / np.sqrt(flat.var(1) + EPS), dtype, "inv_variance")
    back = {k: arrays[k] for k in ("x", "scale", "mean", "inv_variance")}
    back.update(dy=_device(cp, dy, layout), dx=_empty(cp, shape, dtype, layout),
                dscale=_empty(cp, scale.shape, dtype, layout), dbias=_empty(cp, bias.shape, dtype, layout))
    run_graph(GraphSpec("layer_norm_backward", dims, layout), back, epsilon=EPS)
    _close(_host(cp, back["dx"], layout), xt.grad.numpy(), dtype, "dx")
    _close(_host(cp, back["dscale"], layout)[0], st.grad.numpy(), dtype, "dscale")
    _close(_host(cp, back["dbias"], layout)[0], bt.grad.numpy(), dtype, "dbias")


@pytest.mark.parametrize("mode", ["max", "mean"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_pooling_graphs(cuda, dtype, layout, mode):
    cp, rng = cuda, np.random.default_rng(2)
    x = rng.standard_normal((2, 8, 8, 8)).astype(dtype)
    op = dnnbind.maxpool if mode == "max" else dnnbind.meanpool
    y_ref, pullback = op(x.astype(np.float64), 2)
    dy = rng.standard_normal(y_ref.shape).astype(dtype)
    dx_ref = pullback(dy.astype(np.float64))
    dims = PoolDims(x.shape, 2, dtype=dtype)
    arrays = {"x": _device(cp, x, layout), "y": _empty(cp, y_ref.shape, dtype, layout)}
    if mode == "max" and layout == "NHWC":
        arrays["index"] = cp.zeros((2, 4, 4, 8), np.int8)
    run_graph(GraphSpec("pool_forward", dims, layout, mode=mode), arrays)
    _close(_host(cp, arrays["y"], layout), y_ref, dtype, "pool_forward")
    back = {"dy": _device(cp, dy, layout), "dx": _empty(cp, x.shape, dtype, layout)}
    if mode == "max":
        back.update({"index": arrays["index"]} if layout == "NHWC" else {"x": arrays["x"], "y": arrays["y"]})
    run_graph(GraphSpec("pool_backward", dims, layout, mode=mode), back)
    _close(_host(cp, back["dx"], layout), dx_ref, dtype, "pool_backward")


def test_conv_plan_runs_the_graph_api_when_asked(cuda, monkeypatch):
    """With DNNBIND_CUDNN_GRAPH=1 dnnbind.conv's forward and backward run graph plans (no legacy
    cudnnConvolutionForward in the trace) and agree with the numpy backend."""
    cp, rng = cuda, np.random.default_rng(3)
    monkeypatch.setenv("DNNBIND_CUDNN_GRAPH", "1")
    x, w = rng.standard_normal((2, 4, 7, 7)).astype("float32"), rng.standard_normal((6, 4, 3, 3)).astype("float32")
    with dnnbind.trace(file=None) as calls:
        y, pullback = dnnbind.conv(cp.asarray(x), cp.asarray(w), padding=1)
        dx, dw = pullback(cp.ones(y.shape, "float32"))
    names = {r.function for r in calls}
    assert "cudnnBackendExecute" in names and "cudnnConvolutionForward" not in names, sorted(names)
    y_ref, pb = dnnbind.conv(x.astype(np.float64), w.astype(np.float64), padding=1)
    dx_ref, dw_ref = pb(np.ones(y_ref.shape))
    for got, want, what in ((y, y_ref, "y"), (dx, dx_ref, "dx"), (dw, dw_ref, "dw")):
        _close(cp.asnumpy(got).astype(np.float64), want, "float32", what)


def _graph_ran(calls) -> bool:
    return "cudnnBackendExecute" in {r.function for r in calls}


@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_layer_norm_op_runs_the_graph(cuda, dtype, monkeypatch):
    """dnnbind.layer_norm on CuPy arrays with the graph path on: forward and pullback through the graphs,
    against the numpy backend; weight only (the bias's zeros stand in)."""
    cp, rng = cuda, np.random.default_rng(4)
    monkeypatch.setenv("DNNBIND_CUDNN_GRAPH", "1")
    x, dy = (rng.standard_normal((3, 5, 8)).astype(dtype) for _ in range(2))
    w = rng.standard_normal((5, 8)).astype(dtype)
    with dnnbind.trace(file=None) as calls:
        y, pullback = dnnbind.layer_norm(cp.asarray(x), (5, 8), cp.asarray(w), eps=EPS)
        grads = pullback(cp.asarray(dy))
    assert _graph_ran(calls)
    y_ref, pb = dnnbind.layer_norm(x.astype(np.float64), (5, 8), w.astype(np.float64), eps=EPS)
    for got, want, what in zip((y, *grads), (y_ref, *pb(dy.astype(np.float64))), ("y", "dx", "dweight")):
        _close(cp.asnumpy(got).astype(np.float64), want, dtype, what)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pool_ops_run_the_graph(cuda, layout, count_include_pad, monkeypatch):
    """maxpool / meanpool (3x3, stride 2, padding 1) with the graph path on, against the numpy backend;
    NHWC max pooling's backward stays legacy (the trace says why)."""
    cp, rng = cuda, np.random.default_rng(5)
    monkeypatch.setenv("DNNBIND_CUDNN_GRAPH", "1")
    x = rng.standard_normal((2, 8, 9, 9)).astype("float32")
    xd = _device(cp, x, layout).transpose(0, 3, 1, 2) if layout == "NHWC" else _device(cp, x, layout)
    for op, kw in ((dnnbind.maxpool, {}), (dnnbind.meanpool, {"count_include_pad": count_include_pad})):
        with dnnbind.trace(file=None) as calls:
            y, pullback = op(xd, 3, stride=2, padding=1, **kw)
            dx = pullback(cp.ones(y.shape, "float32"))
        assert _graph_ran(calls)
        y_ref, pb = op(x.astype(np.float64), 3, stride=2, padding=1, **kw)
        _close(cp.asnumpy(y).astype(np.float64), y_ref, "float32", f"{op.__name__} y")
        _close(cp.asnumpy(dx).astype(np.float64), pb(np.ones(y_ref.shape)), "float32", f"{op.__name__} dx")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_fused_conv_bias_activation_runs_the_graph(cuda, layout, monkeypatch):
    from dnnbind.highlevel.cudnn.fused import conv_bias_activation
    cp, rng = cuda, np.random.default_rng(6)
    monkeypatch.setenv("DNNBIND_CUDNN_GRAPH", "1")
    x = rng.standard_normal((2, 8, 9, 9)).astype("float16")
    w = (rng.standard_normal((16, 8, 3, 3)) * 0.3).astype("float16")
    b = rng.standard_normal(16).astype("float16")
    dims = ConvDims(x.shape, w.shape, padding=PADDING, dtype="float16")
    xd = _device(cp, x, layout).transpose(0, 3, 1, 2) if layout == "NHWC" else _device(cp, x, layout)
    with dnnbind.trace(file=None) as calls:
        y = conv_bias_activation(xd, cp.asarray(w), cp.asarray(b), dims, "clipped_relu", 2.0, layout=layout)
    assert y is not None and _graph_ran(calls)
    y_ref, _ = dnnbind.conv(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), padding=PADDING)
    _close(cp.asnumpy(y).astype(np.float64), np.clip(y_ref, 0, 2.0), "float16", "conv_bias_activation")


@pytest.mark.parametrize("flip", [False, True])
def test_the_public_op_runs_the_fused_graph_only_for_inference(cuda, flip, monkeypatch):
    """dnnbind.conv_bias_activation on CuPy arrays: fused under no_grad (flip handled by flipping w), the two
    ops otherwise (the pullback needs the convolution's result), the same values either way."""
    cp, rng = cuda, np.random.default_rng(7)
    monkeypatch.setenv("DNNBIND_CUDNN_GRAPH", "1")
    x = rng.standard_normal((2, 8, 9, 9)).astype("float16")
    w = (rng.standard_normal((16, 8, 3, 3)) * 0.3).astype("float16")
    b = rng.standard_normal(16).astype("float16")
    with dnnbind.trace(file=None) as calls, dnnbind.no_grad():
        fused, _ = dnnbind.conv_bias_activation(cp.asarray(x), cp.asarray(w), cp.asarray(b), padding=1, flip=flip)
    assert _graph_ran(calls)
    trained, pullback = dnnbind.conv_bias_activation(cp.asarray(x), cp.asarray(w), cp.asarray(b), padding=1,
                                                     flip=flip)
    want, _ = dnnbind.conv_bias_activation(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                                           padding=1, flip=flip)
    for got in (fused, trained):
        _close(cp.asnumpy(got).astype(np.float64), want, "float16", "conv_bias_activation")
    assert pullback(cp.ones_like(trained))[0].shape == x.shape
