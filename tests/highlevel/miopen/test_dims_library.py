"""ConvDims and PoolDims agree with the real libMIOpen 3.4's output dimensions.

Hundreds of random valid configurations (groups, dilation, stride, symmetric padding; 1 to 3 spatial
dims, 1-d run as 2-d) are drawn here with a seeded generator and evaluated in ONE child process, through
the backend's own plans (miopenGetConvolutionNdForwardOutputDim, miopenGetPoolingNdForwardOutputDim)
and, for 2-d convolutions, MIOpen's 4-d call (miopenGetConvolutionForwardOutputDim) as well.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from dnnbind.highlevel.dims import ConvDims, PoolDims
from dnnbind.highlevel.gpu.layout import lift

SEED = 20240611
N_CONV, N_TRANSPOSED, N_POOL = 300, 100, 200


def _conv_configs(rng: np.random.Generator, n: int) -> list[dict]:
    out: list[dict] = []
    while len(out) < n:
        rank = int(rng.integers(1, 4))
        groups = int(rng.choice([1, 1, 2, 3, 4]))
        c_in, c_out = groups * int(rng.integers(1, 4)), groups * int(rng.integers(1, 4))
        kernel = [int(k) for k in rng.integers(1, 6, rank)]
        config = dict(x=[int(rng.integers(1, 4)), c_in] + [int(s) for s in rng.integers(1, 24, rank)],
                      w=[c_out, c_in // groups] + kernel, stride=[int(s) for s in rng.integers(1, 4, rank)],
                      padding=[int(p) for p in rng.integers(0, 4, rank)],
                      dilation=[int(d) for d in rng.integers(1, 4, rank)], groups=groups)
        try:
            ConvDims(config["x"], config["w"], stride=config["stride"], padding=config["padding"],
                     dilation=config["dilation"], groups=groups)
        except ValueError:
            continue
        out.append(config)
    return out


def _transposed_configs(rng: np.random.Generator, n: int) -> list[dict]:
    out: list[dict] = []
    while len(out) < n:
        rank = int(rng.integers(1, 4))
        groups = int(rng.choice([1, 2]))
        stride = [int(s) for s in rng.integers(1, 4, rank)]
        dilation = [int(d) for d in rng.integers(1, 3, rank)]
        config = dict(x=[1, groups * int(rng.integers(1, 3))] + [int(s) for s in rng.integers(1, 9, rank)],
                      w=None, stride=stride, dilation=dilation, groups=groups,
                      padding=[int(p) for p in rng.integers(0, 3, rank)],
                      output_padding=[int(rng.integers(0, max(s, d))) for s, d in zip(stride, dilation)])
        config["w"] = [config["x"][1], int(rng.integers(1, 3))] + [int(k) for k in rng.integers(1, 5, rank)]
        try:
            dims = _transposed(config)
        except ValueError:
            continue
        config["dims_x"], config["dims_w"] = list(dims.x_shape), list(dims.w_shape)
        out.append(config)
    return out


def _transposed(c: dict) -> ConvDims:
    return ConvDims.transposed(c["x"], c["w"], stride=c["stride"], padding=c["padding"],
                               output_padding=c["output_padding"], dilation=c["dilation"], groups=c["groups"])


def _pool_configs(rng: np.random.Generator, n: int) -> list[dict]:
    out: list[dict] = []
    while len(out) < n:
        rank = int(rng.integers(1, 4))
        window = [int(k) for k in rng.integers(1, 6, rank)]
        config = dict(x=[int(rng.integers(1, 3)), int(rng.integers(1, 4))] + [int(s) for s in rng.integers(1, 20, rank)],
                      window=window, stride=[int(s) for s in rng.integers(1, 4, rank)],
                      padding=[int(rng.integers(0, k // 2 + 1)) for k in window],
                      ceil_mode=bool(rng.integers(2)))      # ceil_mode: x padded explicitly past the padding
        try:
            PoolDims(config["x"], window, stride=config["stride"], padding=config["padding"],
                     ceil_mode=config["ceil_mode"])
        except ValueError:
            continue
        out.append(config)
    return out


CHILD = r"""
import importlib, json
from ctypes import byref, c_int
from dnnbind.highlevel.dims import ConvDims, PoolDims
from dnnbind.highlevel.miopen.settings import MIOpenSettings
from dnnbind.gen import miopen as lib
conv_plan = importlib.import_module("dnnbind.highlevel.miopen.conv_plan")
pool = importlib.import_module("dnnbind.highlevel.miopen.pool")
config = json.loads(CONFIG)
out = {"conv": [], "conv4d": [], "transposed": [], "pool": []}
for c in config["conv"]:
    p = conv_plan.ConvPlan(ConvDims(c["x"], c["w"], stride=c["stride"], padding=c["padding"],
                                    dilation=c["dilation"], groups=c["groups"]), "NCHW", MIOpenSettings())
    out["conv"].append(list(p.conv.output_shape(p.x, p.w)))
    if len(c["x"]) == 4:
        n, k, h, w = c_int(), c_int(), c_int(), c_int()
        lib.miopenGetConvolutionForwardOutputDim(p.conv.handle, p.x.handle, p.w.handle, byref(n), byref(k), byref(h),
                                                 byref(w))
        out["conv4d"].append([n.value, k.value, h.value, w.value])
for c in config["transposed"]:
    dims = ConvDims(c["dims_x"], c["dims_w"], stride=c["stride"], padding=c["padding"], dilation=c["dilation"],
                    groups=c["groups"])
    p = conv_plan.ConvPlan(dims, "NCHW", MIOpenSettings())
    out["transposed"].append(list(p.conv.output_shape(p.x, p.w)))
for c in config["pool"]:
    p = pool.PoolPlan(PoolDims(c["x"], c["window"], stride=c["stride"], padding=c["padding"],
                               ceil_mode=c["ceil_mode"]), "max")
    out["pool"].append(list(p.pooling.output_shape(p.x)))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def configs():
    rng = np.random.default_rng(SEED)
    return {"conv": _conv_configs(rng, N_CONV), "transposed": _transposed_configs(rng, N_TRANSPOSED),
            "pool": _pool_configs(rng, N_POOL)}


@pytest.fixture(scope="module")
def miopen_dims(miopen_run, configs):
    result = miopen_run(f"CONFIG = {json.dumps(configs)!r}\n" + CHILD)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_random_configurations_are_varied(configs):
    convs = configs["conv"]
    assert {len(c["x"]) - 2 for c in convs} == {1, 2, 3}
    assert any(c["groups"] > 1 for c in convs) and any(max(c["dilation"]) > 1 for c in convs)
    assert any(max(c["stride"]) > 1 for c in convs) and any(max(c["padding"]) > 0 for c in convs)
    assert any(max(c["output_padding"]) > 0 for c in configs["transposed"])
    assert {len(c["x"]) - 2 for c in configs["pool"]} == {1, 2, 3}
    assert sum(any(PoolDims(c["x"], c["window"], stride=c["stride"], padding=c["padding"],
                            ceil_mode=c["ceil_mode"]).ceil_extra) for c in configs["pool"]) > 20


def test_conv_dims_equal_miopen_s_nd_output_dims(configs, miopen_dims):
    ours = [list(lift(ConvDims(c["x"], c["w"], stride=c["stride"], padding=c["padding"], dilation=c["dilation"],
                               groups=c["groups"]).y_shape)) for c in configs["conv"]]
    assert len(miopen_dims["conv"]) == N_CONV
    mismatches = [(c, a, b) for c, a, b in zip(configs["conv"], ours, miopen_dims["conv"]) if a != b]
    assert not mismatches, mismatches[:5]


def test_conv_dims_equal_miopen_s_4d_output_dims(configs, miopen_dims):
    ours = [list(ConvDims(c["x"], c["w"], stride=c["stride"], padding=c["padding"], dilation=c["dilation"],
                          groups=c["groups"]).y_shape) for c in configs["conv"] if len(c["x"]) == 4]
    assert len(ours) == len(miopen_dims["conv4d"]) > 50
    assert ours == miopen_dims["conv4d"]


def test_transposed_dims_are_the_forward_convolution_miopen_sees(configs, miopen_dims):
    """conv_transpose runs MIOpen's data gradient of the convolution whose input is its output: MIOpen's
    forward output for that input is what the transposed op takes (extended by output_padding // stride)."""
    ours = [list(lift(_transposed(c).y_shape)) for c in configs["transposed"]]
    assert ours == miopen_dims["transposed"]
    for c in configs["transposed"]:
        assert list(_transposed(c).transpose_input_shape) == c["x"]


def test_pool_dims_equal_miopen_s_output_dims(configs, miopen_dims):
    ours = [list(lift(PoolDims(c["x"], c["window"], stride=c["stride"], padding=c["padding"],
                               ceil_mode=c["ceil_mode"]).y_shape)) for c in configs["pool"]]
    assert len(miopen_dims["pool"]) == N_POOL
    mismatches = [(c, a, b) for c, a, b in zip(configs["pool"], ours, miopen_dims["pool"]) if a != b]
    assert not mismatches, mismatches[:5]
