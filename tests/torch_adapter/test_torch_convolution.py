"""Conv{1,2,3}d and ConvTranspose{1,2,3}d are torch.nn's: same arguments, repr, state_dict, outputs and
gradients, every padding mode included."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import dnnbind.torch as dt
from layer_checks import assert_layer_matches

F64 = {"dtype": torch.float64}


@pytest.mark.parametrize("name, x_shape, kwargs", [
    ("Conv1d", (2, 4, 9), {"kernel_size": 3, "padding": 1, "groups": 2}),
    ("Conv2d", (2, 4, 6, 7), {"kernel_size": (3, 2), "stride": 2, "dilation": (1, 2)}),
    ("Conv3d", (1, 4, 4, 5, 4), {"kernel_size": 2, "bias": False}),
    ("Conv1d", (2, 4, 9), {"kernel_size": 4, "padding": "same", "dilation": 3}),
    ("Conv2d", (2, 4, 6, 7), {"kernel_size": (4, 3), "padding": "same"}),
    ("Conv3d", (1, 4, 4, 5, 4), {"kernel_size": (2, 3, 1), "padding": "valid"}),
    ("Conv2d", (4, 6, 7), {"kernel_size": 3, "padding": 1}),
    ("ConvTranspose1d", (2, 4, 5), {"kernel_size": 3, "stride": 2, "output_padding": 1}),
    ("ConvTranspose2d", (2, 4, 5, 4), {"kernel_size": (3, 2), "stride": (2, 3), "padding": 1, "groups": 2,
                                       "output_padding": (1, 2), "dilation": 1}),
    ("ConvTranspose3d", (1, 4, 3, 4, 3), {"kernel_size": 2, "stride": 2, "dilation": 2, "bias": False}),
    ("ConvTranspose2d", (4, 5, 4), {"kernel_size": 3, "stride": 2}),
], ids=["1d", "2d-stride-dilation", "3d-nobias", "1d-same-even-kernel", "2d-same", "3d-valid", "2d-unbatched",
        "t1d-output-padding", "t2d-groups", "t3d-dilation", "t2d-unbatched"])
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # torch's own layer warns
def test_conv_layers_equal_torch(name, x_shape, kwargs):
    torch.manual_seed(0)
    theirs = getattr(nn, name)(4, 6, **kwargs, **F64)
    ours = getattr(dt, name)(4, 6, **kwargs, **F64)
    assert_layer_matches(ours, theirs, torch.randn(x_shape, **F64))


def test_conv_transpose_output_size_picks_torchs_output_padding():
    torch.manual_seed(0)
    theirs, ours = nn.ConvTranspose2d(3, 2, 3, stride=2, **F64), dt.ConvTranspose2d(3, 2, 3, stride=2, **F64)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(1, 3, 4, 5, **F64)
    y = ours(x, output_size=[10, 12])
    assert y.shape == (1, 2, 10, 12)
    torch.testing.assert_close(y, theirs(x, output_size=[10, 12]))


def test_conv_initialisation_is_torchs():
    torch.manual_seed(0)
    ours = dt.Conv2d(8, 16, 3)
    torch.manual_seed(0)
    theirs = nn.Conv2d(8, 16, 3)
    torch.testing.assert_close(ours.weight, theirs.weight)
    torch.testing.assert_close(ours.bias, theirs.bias)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("name, x_shape, kwargs", [
    ("Conv1d", (2, 4, 9), {"kernel_size": 3, "padding": 2, "stride": 2}),
    ("Conv2d", (2, 4, 6, 7), {"kernel_size": (3, 2), "padding": (1, 2), "dilation": (2, 1), "groups": 2}),
    ("Conv3d", (1, 4, 4, 5, 4), {"kernel_size": 3, "padding": (0, 1, 2)}),
    ("Conv2d", (2, 4, 6, 7), {"kernel_size": (4, 3), "padding": "same"}),
    ("Conv1d", (4, 9), {"kernel_size": 4, "padding": "same", "dilation": 2}),
    ("Conv2d", (4, 6, 7), {"kernel_size": 3, "padding": 1}),
], ids=["1d-stride", "2d-dilation-groups", "3d", "2d-same-even-kernel", "1d-unbatched-same", "2d-unbatched"])
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_padding_modes_pad_as_torch_does(mode, name, x_shape, kwargs):
    torch.manual_seed(0)
    theirs = getattr(nn, name)(4, 6, padding_mode=mode, **kwargs, **F64)
    ours = getattr(dt, name)(4, 6, padding_mode=mode, **kwargs, **F64)
    assert_layer_matches(ours, theirs, torch.randn(x_shape, **F64))


def test_padding_mode_set_after_construction_is_read_by_forward():
    torch.manual_seed(0)
    theirs, ours = nn.Conv1d(2, 2, 3, padding=1, **F64), dt.Conv1d(2, 2, 3, padding=1, **F64)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(1, 2, 5, **F64)
    for layer in (theirs, ours):
        layer.padding_mode = "circular"
    torch.testing.assert_close(ours(x), theirs(x))


def test_padding_mode_errors_are_torchs():
    # reflect padding must be smaller than the input: torch's own pad says so, for dnnbind's layer too
    layer = dt.Conv1d(1, 1, 3, padding=4, padding_mode="reflect")
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        layer(torch.randn(1, 1, 3))


@pytest.mark.parametrize("make", [
    lambda ns: ns.Conv2d(3, 4, (2, 2, 2)), lambda ns: ns.Conv2d(3, 4, 3, stride=(1, 1, 1)),
    lambda ns: ns.Conv1d(3, 4, 3, dilation=(1, 2)), lambda ns: ns.ConvTranspose2d(3, 4, (3, 3, 3)),
    lambda ns: ns.ConvTranspose2d(3, 4, 3, padding=(1, 1, 1)),
], ids=["kernel-3-of-2d", "stride-3-of-2d", "dilation-2-of-1d", "t-kernel-3-of-2d", "t-padding-3-of-2d"])
def test_a_setting_for_other_dims_is_refused_as_torch_does(make):
    x = torch.randn(2, 3, 5, 5) if "2d" in type(make(nn)).__name__.lower() else torch.randn(2, 3, 9)
    with pytest.raises(RuntimeError):
        make(nn)(x)
    with pytest.raises(ValueError, match=r"(Conv|ConvTranspose)\dd: \w+ must be a single int or a tuple of \d ints") as error:
        make(dt)(x)
    assert isinstance(error.value, RuntimeError)           # (caught by code written for torch's layers too)


@pytest.mark.parametrize("name", ["Conv2d", "ConvTranspose2d"])
def test_one_tuples_stand_for_every_dim_as_in_torch(name):
    torch.manual_seed(0)
    kwargs = {"stride": (2,), "padding": (1,), "dilation": [2]}
    assert_layer_matches(getattr(dt, name)(3, 4, 3, **kwargs, **F64), getattr(nn, name)(3, 4, 3, **kwargs, **F64),
                         torch.randn(2, 3, 5, 5, **F64))


def test_conv_errors_name_torchs_tensors():
    layer = dt.Conv2d(1, 2, 3)
    with pytest.raises(TypeError, match=r"weight has dtype torch.float32 but input has dtype torch.float64.*"
                                        r"weight.to\(input.dtype\)"):
        layer(torch.randn(1, 1, 5, 5, **F64))
    with pytest.raises(ValueError, match="input has 2 channels but weight.shape"):
        layer(torch.randn(1, 2, 5, 5))
    with pytest.raises(ValueError, match=r"Conv2d: expected 3D \(unbatched\) or 4D \(batched\) input"):
        layer(torch.randn(1, 1, 1, 5, 5))
