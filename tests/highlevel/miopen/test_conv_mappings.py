"""The MIOpen backend's convolution mappings, in this process (no library, no GPU): argument orders against
the generated module's signatures, the flip strategy against the reference backend, and Find before run
per handle (checked on a device: tests/highlevel/miopen/test_gpu.py)."""
from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest

import dnnbind
from dnnbind.gen import miopen as lib
from dnnbind.highlevel.dims import ConvDims
from dnnbind.highlevel.miopen import conv_algos, conv_args

conv_module = importlib.import_module("dnnbind.highlevel.miopen.conv")

# ---------------------------------------------------------------------------------- argument orders

_PREFIX = {"forward": "Forward", "backward_data": "BackwardData", "backward_weights": "BackwardWeights"}
_FUNCTIONS = {  # call kind -> generated function names (for a direction's prefix)
    "workspace": ["miopenConvolution{}GetWorkSpaceSize"],
    "find": ["miopenFindConvolution{}Algorithm"],
    "run": ["miopenConvolution{}"],
    "solution": ["miopenConvolution{}GetSolutionCount", "miopenConvolution{}GetSolution",
                 "miopenConvolution{}GetSolutionWorkspaceSize", "miopenConvolution{}CompileSolution"],
    "immediate": ["miopenConvolution{}Immediate"],
}
_DATA_CALLS = ("find", "run", "immediate")


def _tensor_params(function) -> list[str]:
    """The tensor descriptor parameters of a generated function, in order (convDesc left out)."""
    return [p for p in inspect.signature(function).parameters if p.endswith("Desc") and p != "convDesc"]


@pytest.mark.parametrize("direction", conv_args.DIRECTIONS)
@pytest.mark.parametrize("call", conv_args.CALLS)
def test_argument_orders_match_the_header(direction, call):
    inputs, out = conv_args.ORDER[direction][call], conv_args.output_name(direction)
    for template in _FUNCTIONS[call]:
        function = getattr(lib, template.format(_PREFIX[direction]))
        assert _tensor_params(function) == [f"{inputs[0]}Desc", f"{inputs[1]}Desc", f"{out}Desc"], function.__name__
        if call in _DATA_CALLS:          # each descriptor is followed by its data pointer
            params = list(inspect.signature(function).parameters)
            for name in (*inputs, out):
                assert params[params.index(f"{name}Desc") + 1] == name, (function.__name__, name)


def test_the_orders_really_differ_within_forward():
    """The reason for the table: forward's workspace query and run take x and w the other way round."""
    forward = conv_args.ORDER[conv_args.FORWARD]
    assert forward["workspace"] == ("w", "x") and forward["run"] == ("x", "w")
    assert conv_args.ordered("forward", "workspace", {"x": 1, "w": 2}) == (2, 1)
    assert conv_args.ordered("forward", "find", {"x": 1, "w": 2}) == (1, 2)
    assert conv_args.data_args("backward_weights", "run", {"x": ("xd", 1), "dy": ("dyd", 2)}) == ("dyd", 2, "xd", 1)
    assert conv_args.descriptor_args("backward_data", "workspace", {"w": "wd", "dy": "dyd"}, "c", "dxd") == \
        ("dyd", "wd", "c", "dxd")


def test_ordered_refuses_the_wrong_inputs():
    with pytest.raises(ValueError, match=r"forward takes inputs \('x', 'w'\), got \('dy', 'w'\)"):
        conv_args.ordered("forward", "run", {"dy": 1, "w": 2})


@pytest.mark.parametrize("direction", conv_args.DIRECTIONS)
def test_direction_table_binds_the_direction_s_functions(direction):
    d = conv_algos.direction(direction)
    p = _PREFIX[direction]
    assert d.workspace.__name__ == f"miopenConvolution{p}GetWorkSpaceSize"
    assert d.find.__name__ == f"miopenFindConvolution{p}Algorithm"
    assert d.run.__name__ == f"miopenConvolution{p}"
    assert d.immediate.__name__ == f"miopenConvolution{p}Immediate"
    assert d.compile_solution.__name__ == f"miopenConvolution{p}CompileSolution"
    assert conv_args.PERF_FIELD[direction] in dict(lib.miopenConvAlgoPerf_t_anon0._fields_)


# --------------------------------------------------------------------------------------------- flip


def _cross(x, w, dims):
    """MIOpen stand-in: cross-correlation (the reference backend with flip=False)."""
    return dnnbind.conv(x, w, stride=dims.stride, padding=tuple(zip(dims.pad_low, dims.pad_high)),
                        dilation=dims.dilation, groups=dims.groups)


@pytest.mark.parametrize("x_shape, w_shape, kwargs", [
    ((2, 4, 7, 6), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, (0, 2)), dilation=(1, 2), groups=2)),
    ((1, 3, 9), (2, 3, 4), dict(padding=2)),
    ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), dict(stride=2, padding=1)),
])
def test_flip_strategy_gives_true_convolution_and_its_gradients(rng, x_shape, w_shape, kwargs):
    """conv(flip=True) == cross-correlation with the flipped kernel, dx alike, and dw flipped back."""
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    dims = ConvDims(x_shape, w_shape, flip=True, dtype="float64", **kwargs)
    y_true, back_true = dnnbind.conv(x, w, flip=True, **kwargs)
    w_run = conv_module._weights(np, w, dims, "NCHW")
    assert not np.array_equal(w_run, w)
    y, back = _cross(x, w_run, dims)
    np.testing.assert_allclose(y, y_true, rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    dx, dw_run = back(dy)
    dx_true, dw_true = back_true(dy)
    np.testing.assert_allclose(dx, dx_true, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(conv_module._weight_grad(np, dw_run, dims, "NCHW"), dw_true, rtol=1e-12, atol=1e-12)
    assert not np.allclose(dw_run, dw_true)        # without flipping back it would be wrong


def test_flip_strategy_for_conv_transpose(rng):
    kwargs = dict(stride=2, padding=1, output_padding=1, groups=2)
    x, w = rng.standard_normal((2, 4, 3, 4)), rng.standard_normal((4, 3, 3, 2))
    dims = ConvDims.transposed(x.shape, w.shape, flip=True, dtype="float64", **kwargs)
    y_true, back_true = dnnbind.conv_transpose(x, w, flip=True, **kwargs)
    y, back = dnnbind.conv_transpose(x, conv_module._weights(np, w, dims, "NCHW"), **kwargs)
    np.testing.assert_allclose(y, y_true, rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    (dx, dw), (dx_true, dw_true) = back(dy), back_true(dy)
    np.testing.assert_allclose(dx, dx_true, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(conv_module._weight_grad(np, dw, dims, "NCHW"), dw_true, rtol=1e-12, atol=1e-12)


def test_without_flip_the_weights_pass_through(rng):
    w = rng.standard_normal((4, 2, 3, 3))
    dims = ConvDims((1, 2, 5, 5), w.shape, dtype="float64")
    assert conv_module._weights(np, w, dims, "NCHW") is w
    assert conv_module._weight_grad(np, w, dims, "NCHW") is w
    np.testing.assert_array_equal(conv_args.flip_spatial(conv_args.flip_spatial(w)), w)
    np.testing.assert_array_equal(conv_args.flip_spatial(w)[:, :, 0, 0], w[:, :, 2, 2])
