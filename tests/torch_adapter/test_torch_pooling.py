"""MaxPool{1,2,3}d and AvgPool{1,2,3}d are torch.nn's: kernel, stride, padding, dilation, ceil_mode,
count_include_pad, divisor_override and return_indices are dnnbind's ops' own (divisor_override an exact
rescale)."""
from __future__ import annotations

import itertools

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
    ("MaxPool2d", (1, 1, 8, 9), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("MaxPool2d", (2, 3, 9, 8), {"kernel_size": 3, "dilation": 2}),
    ("MaxPool3d", (1, 2, 7, 6, 8), {"kernel_size": (2, 1, 3), "dilation": (1, 2, 2), "padding": (1, 0, 1),
                                    "stride": (1, 2, 2), "ceil_mode": True}),
    ("MaxPool1d", (2, 3, 13), {"kernel_size": 4, "dilation": 3, "stride": 2, "padding": 2, "ceil_mode": True}),
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
    ("AvgPool2d", (1, 1, 8, 9), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ("AvgPool2d", (2, 3, 8, 9), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("AvgPool3d", (1, 2, 5, 6, 7), {"kernel_size": (3, 2, 3), "stride": (2, 3, 2), "padding": (1, 1, 0),
                                    "ceil_mode": True, "divisor_override": 5}),
]


@pytest.mark.parametrize("name, x_shape, kwargs", CASES, ids=[
    "max2d-padding", "max1d-ceil", "max2d-ceil", "max3d-ceil-padding", "max2d-unbatched-dilation1",
    "max2d-dilation-on-kernel1", "max2d-ceil-past-half-the-kernel", "max2d-dilation", "max3d-dilation-ceil",
    "max1d-dilation-ceil-padding", "avg2d", "avg3d-exclude-pad", "avg1d-ceil", "avg2d-ceil-exclude-pad",
    "avg2d-divisor", "avg2d-ceil-divisor", "avg3d-exclude-pad-divisor", "avg2d-ceil-no-extra-window",
    "avg1d-unbatched", "avg2d-ceil-include-pad", "avg2d-ceil-padding-include-pad", "avg3d-ceil-divisor"])
def test_pool_layers_equal_torch(name, x_shape, kwargs):
    assert_layer_matches(getattr(dt, name)(**kwargs), getattr(nn, name)(**kwargs), torch.randn(x_shape, **F64))


def _sweep():
    """Every combination of odd and even sizes, strides, paddings, dilation and ceil_mode in 1-d, and a
    few in 2-d and 3-d (each checked by torch: combinations torch refuses are left out)."""
    for size, k, s, p, d, ceil in itertools.product((5, 6, 7), (2, 3), (1, 2, 3), (0, 1), (1, 2), (False, True)):
        yield (2, 2, size), k, s, p, d, ceil
    for size, k, s, p, d, ceil in itertools.product(((7, 6), (5, 9)), ((3, 2), 3), ((2, 1), 2), ((1, 0), 1),
                                                     ((2, 1), 1), (False, True)):
        yield (1, 2) + size, k, s, p, d, ceil
    for ceil in (False, True):
        yield (1, 1, 5, 6, 7), (3, 2, 2), (2, 2, 3), (1, 1, 0), (1, 2, 2), ceil


SWEEP = [case for case in _sweep()
         if all(2 * pp <= kk and (sz + 2 * pp - dd * (kk - 1) - 1) >= 0
                for sz, kk, pp, dd in zip(case[0][2:], *(v if isinstance(v, tuple) else (v,) * (len(case[0]) - 2)
                                                         for v in (case[1], case[3], case[4]))))]


@pytest.mark.parametrize("x_shape, k, s, p, d, ceil", SWEEP)
def test_pool_layers_sweep_equals_torch(x_shape, k, s, p, d, ceil):
    n = len(x_shape) - 2
    x = torch.randn(x_shape, **F64)
    assert_layer_matches(getattr(dt, f"MaxPool{n}d")(k, s, p, d, ceil_mode=ceil),
                         getattr(nn, f"MaxPool{n}d")(k, s, p, d, ceil_mode=ceil), x)
    for include in (True, False):
        kwargs = {"ceil_mode": ceil, "count_include_pad": include}
        assert_layer_matches(getattr(dt, f"AvgPool{n}d")(k, s, p, **kwargs),
                             getattr(nn, f"AvgPool{n}d")(k, s, p, **kwargs), x)


def test_max_pool_ties_with_dilation_go_to_the_first_maximum_as_in_torch():
    x = torch.tensor([[[1.0, 2.0, 2.0, 2.0, 1.0, 2.0, 0.0, 2.0]]], **F64)
    assert_layer_matches(dt.MaxPool1d(3, 1, 1, dilation=2, ceil_mode=True),
                         nn.MaxPool1d(3, 1, 1, dilation=2, ceil_mode=True), x)


@pytest.mark.parametrize("x_shape, k, s, p, d, ceil", SWEEP[::7])
def test_max_pool_return_indices_equal_torchs(x_shape, k, s, p, d, ceil):
    """(y, indices): indices equal torch's (ties included), int64 and without gradient; y's gradient as
    torch's; max_unpool takes them as torch's."""
    n = len(x_shape) - 2
    x = torch.randn(x_shape, **F64).round()
    ours, theirs = (getattr(ns, f"MaxPool{n}d")(k, s, p, d, return_indices=True, ceil_mode=ceil) for ns in (dt, nn))
    assert repr(ours) == repr(theirs)
    xo, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    (y, indices), (yt, it) = ours(xo), theirs(xt)
    torch.testing.assert_close(y, yt, rtol=0, atol=0)
    assert indices.dtype == torch.int64 and not indices.requires_grad
    assert torch.equal(indices, it)
    w = torch.linspace(-1, 1, y.numel(), **F64).reshape(y.shape)
    (y * w).sum().backward()
    (yt * w).sum().backward()
    torch.testing.assert_close(xo.grad, xt.grad, rtol=1e-12, atol=1e-12)


def test_max_pool_return_indices_unbatched_and_switched_after_construction():
    layer, x = dt.MaxPool2d(2), torch.randn(3, 4, 6)
    layer.return_indices = True
    y, indices = layer(x)
    yt, it = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
    assert torch.equal(y, yt) and torch.equal(indices, it) and indices.shape == (3, 2, 3)
    assert torch.equal(torch.nn.functional.max_unpool2d(y, indices, 2), torch.nn.functional.max_unpool2d(yt, it, 2))


def test_pool_errors_name_torchs_arguments():
    with pytest.raises(ValueError, match="must be at most half the kernel_size"):
        dt.MaxPool2d(2, padding=2)(torch.randn(1, 1, 6, 6))
    with pytest.raises(ValueError, match="must be at most half the kernel_size"):
        dt.MaxPool1d(2, padding=2, dilation=3)(torch.randn(1, 1, 6))      # torch: half the undilated kernel
    with pytest.raises(TypeError, match=r"ceil_mode=1 must be a bool"):
        dt.MaxPool1d(2, ceil_mode=1)(torch.randn(1, 1, 6))
    with pytest.raises(ValueError, match=r"dilation=0 must be positive"):
        dt.MaxPool1d(2, dilation=0)(torch.randn(1, 1, 6))
    with pytest.raises(ValueError, match=r"output would be empty.*dilated to \(5,\)"):
        dt.MaxPool1d(3, dilation=2)(torch.randn(1, 1, 4))
    with pytest.raises(ValueError, match=r"divisor_override=0 must be a non-zero int"):          # the op's check
        dt.AvgPool2d(2, divisor_override=0)(torch.randn(1, 1, 4, 4))
    with pytest.raises(ValueError, match=r"MaxPool3d: expected 4D \(unbatched\) or 5D \(batched\) input"):
        dt.MaxPool3d(2)(torch.randn(4, 4))


@pytest.mark.parametrize("make, x_shape", [
    (lambda ns: ns.MaxPool2d(2, stride=0), (1, 1, 6, 6)),
    (lambda ns: ns.AvgPool1d(2, stride=0), (1, 1, 6)),
    (lambda ns: ns.MaxPool1d((2, 2)), (2, 3, 4)),
    (lambda ns: ns.MaxPool2d((2, 2, 2)), (2, 3, 4, 4)),
    (lambda ns: ns.AvgPool2d((2, 2, 2)), (2, 3, 4, 4)),
    (lambda ns: ns.AvgPool3d(2, stride=(1, 1)), (1, 2, 4, 4, 4)),
    (lambda ns: ns.MaxPool1d(2, stride=(2, 2)), (2, 3, 4)),
    (lambda ns: ns.MaxPool2d(3, padding=(1, 1, 1)), (2, 3, 6, 6)),
    (lambda ns: ns.MaxPool2d(2, dilation=(1, 2, 1)), (2, 3, 5, 5)),
], ids=["max-stride-0", "avg-stride-0", "max1d-kernel-2", "max2d-kernel-3", "avg2d-kernel-3", "avg3d-stride-2",
        "max1d-stride-2", "max2d-padding-3", "max2d-dilation-3"])
def test_a_zero_stride_or_a_setting_for_other_dims_is_refused_as_torch_does(make, x_shape):
    """Where torch refuses, so does dnnbind (before, a zero stride meant the kernel size and a tuple
    one longer pooled the channels as a spatial axis)."""
    x = torch.randn(x_shape)
    with pytest.raises(RuntimeError):
        make(nn)(x)
    with pytest.raises(ValueError, match=r"stride=\[?0\]? must be positive|must be a single int or a tuple of \d ints"):
        make(dt)(x)


@pytest.mark.parametrize("make, x_shape", [
    (lambda ns: ns.MaxPool2d((3,), stride=[], padding=(1,)), (2, 3, 7, 7)),
    (lambda ns: ns.AvgPool3d((2,), stride=(1,)), (2, 3, 4, 4, 4)),
    (lambda ns: ns.MaxPool3d([2, 1, 2], stride=[1, 1, 2], dilation=[1], return_indices=True), (3, 5, 4, 6)),
], ids=["max2d-one-tuples", "avg3d-one-tuples", "max3d-lists-unbatched"])
def test_one_tuples_and_lists_mean_what_they_mean_in_torch(make, x_shape):
    x = torch.randn(x_shape, **F64)
    torch.testing.assert_close(make(dt)(x), make(nn)(x))


def test_pool_layers_refuse_what_torch_refuses():
    """Over the whole sweep (before filtering), dnnbind's layers raise exactly where torch's do."""
    for x_shape, k, s, p, d, ceil in _sweep():
        n = len(x_shape) - 2
        x = torch.randn(x_shape, **F64)
        for make in (lambda ns: getattr(ns, f"MaxPool{n}d")(k, s, p, d, ceil_mode=ceil),
                     lambda ns: getattr(ns, f"AvgPool{n}d")(k, s, p, ceil_mode=ceil)):
            outcomes = []
            for ns in (dt, nn):
                try:
                    outcomes.append(tuple(make(ns)(x).shape))
                except (ValueError, RuntimeError):
                    outcomes.append(None)
            assert outcomes[0] == outcomes[1], (x_shape, k, s, p, d, ceil, outcomes)


def test_pool_options_compile_with_fullgraph():
    """ceil_mode, dilation, return_indices and divisor_override (whose divisors are a traced constant)
    compile without graph breaks and give eager's results."""
    x = torch.randn(2, 3, 9, 8, **F64)
    maxpool = dt.MaxPool2d(3, 2, 1, dilation=2, ceil_mode=True, return_indices=True)
    avgpool = dt.AvgPool2d(3, 2, 1, ceil_mode=True, divisor_override=2)
    compiled = torch.compile(lambda t: (maxpool(t), avgpool(t)), fullgraph=True)
    (y, indices), mean = compiled(x)
    (y_eager, indices_eager), mean_eager = maxpool(x), avgpool(x)
    assert torch.equal(y, y_eager) and torch.equal(indices, indices_eager)
    torch.testing.assert_close(mean, nn.AvgPool2d(3, 2, 1, ceil_mode=True, divisor_override=2)(x))
    torch.testing.assert_close(mean, mean_eager)
