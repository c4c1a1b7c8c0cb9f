"""MaxPool{1,2,3}d and AvgPool{1,2,3}d are torch.nn's: ceil_mode and divisor_override where dnnbind's
ops translate them exactly, NotImplementedError naming the argument where they do not."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import dnnbind.torch as dt
from layer_checks import assert_layer_matches

F64 = {"dtype": torch.float64}

CASES = [
    ("MaxPool2d", (2, 3, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ("MaxPool1d", (2, 3, 9), {"kernel_size": 2, "ceil_mode": True}),
    ("MaxPool2d", (2, 3, 8, 9), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ("MaxPool3d", (1, 2, 5, 7, 7), {"kernel_size": (2, 3, 2), "stride": (2, 3, 2), "padding": (1, 1, 0),
                                    "ceil_mode": True}),
    ("MaxPool2d", (3, 7, 7), {"kernel_size": 2, "dilation": (1, 1)}),
    ("MaxPool2d", (2, 3, 6, 7), {"kernel_size": (1, 2), "dilation": (3, 1)}),
    ("AvgPool2d", (2, 3, 6, 6), {"kernel_size": 2}),
    ("AvgPool3d", (2, 3, 4, 5, 4), {"kernel_size": 2, "padding": 1, "count_include_pad": False}),
    ("AvgPool1d", (2, 3, 9), {"kernel_size": 2, "ceil_mode": True, "count_include_pad": False}),
    ("AvgPool2d", (2, 3, 8, 9), {"kernel_size": 3, "stride": 2, "ceil_mode": True, "count_include_pad": False}),
    ("AvgPool2d", (2, 3, 7, 8), {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 4}),
    ("AvgPool2d", (2, 3, 8, 9), {"kernel_size": 3, "stride": 2, "ceil_mode": True, "divisor_override": 2}),
    ("AvgPool3d", (1, 2, 5, 4, 5), {"kernel_size": 2, "padding": 1, "count_include_pad": False,
                                    "divisor_override": 3}),
    ("AvgPool2d", (2, 3, 10, 10), {"kernel_size": 3, "padding": 1, "ceil_mode": True}),
    ("AvgPool1d", (3, 9), {"kernel_size": 3, "stride": 2}),
]


@pytest.mark.parametrize("name, x_shape, kwargs", CASES, ids=[
    "max2d-padding", "max1d-ceil", "max2d-ceil", "max3d-ceil-padding", "max2d-unbatched-dilation1",
    "max2d-dilation-on-kernel1", "avg2d", "avg3d-exclude-pad", "avg1d-ceil", "avg2d-ceil-exclude-pad",
    "avg2d-divisor", "avg2d-ceil-divisor", "avg3d-exclude-pad-divisor", "avg2d-ceil-no-extra-window",
    "avg1d-unbatched"])
def test_pool_layers_equal_torch(name, x_shape, kwargs):
    assert_layer_matches(getattr(dt, name)(**kwargs), getattr(nn, name)(**kwargs), torch.randn(x_shape, **F64))


@pytest.mark.parametrize("make, match", [
    (lambda: dt.MaxPool2d(3, dilation=2), r"MaxPool2d: dilation=2 is not supported by dnnbind yet"),
    (lambda: dt.MaxPool3d((2, 1, 2), dilation=(1, 2, 2)), r"MaxPool3d: dilation=\(1, 2, 2\) is not supported"),
    (lambda: dt.MaxPool1d(3, return_indices=True), r"MaxPool1d: return_indices=True is not supported"),
], ids=["dilation", "dilation-per-dim", "return-indices"])
def test_max_pool_options_without_an_exact_translation_are_refused_at_construction(make, match):
    with pytest.raises(NotImplementedError, match=match + ".*needs the high-level op to support it"):
        make()


@pytest.mark.parametrize("layer, x_shape, match", [
    (dt.MaxPool2d(3, 2, padding=1, ceil_mode=True), (1, 1, 8, 9), r"ceil_mode=True.*high-side padding \(2, 1\)"),
    (dt.AvgPool2d(3, 2, ceil_mode=True), (1, 1, 8, 9), r"ceil_mode=True.*count_include_pad=True"),
], ids=["ceil-needs-too-much-padding", "avg-ceil-divisor-would-differ"])
def test_pool_inputs_without_an_exact_translation_are_refused(layer, x_shape, match):
    x = torch.randn(x_shape)
    with pytest.raises(NotImplementedError, match=match):
        layer(x)
    torch_layer = getattr(nn, type(layer).__name__)(**{k: getattr(layer, k) for k in (
        "kernel_size", "stride", "padding", "ceil_mode")})
    assert torch_layer(x).shape[-1] >= 1      # torch computes it: the refusal is dnnbind's gap, not bad input


def test_max_pool_options_changed_after_construction_are_refused_in_forward():
    layer = dt.MaxPool2d(2)
    layer.return_indices = True
    with pytest.raises(NotImplementedError, match="return_indices=True"):
        layer(torch.randn(1, 1, 4, 4))


def test_pool_errors_name_torchs_arguments():
    with pytest.raises(ValueError, match="must be at most half the kernel_size"):
        dt.MaxPool2d(2, padding=2)(torch.randn(1, 1, 6, 6))
    with pytest.raises(ValueError, match=r"AvgPool2d: divisor_override=0 must be a non-zero int"):
        dt.AvgPool2d(2, divisor_override=0)(torch.randn(1, 1, 4, 4))
    with pytest.raises(ValueError, match=r"MaxPool3d: expected 4D \(unbatched\) or 5D \(batched\) input"):
        dt.MaxPool3d(2)(torch.randn(4, 4))
