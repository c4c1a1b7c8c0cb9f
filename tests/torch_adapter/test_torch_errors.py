"""dnnbind.torch.errors: the ops' array names become the torch arguments' names, values stay as given."""
from __future__ import annotations

import pytest
import torch

import dnnbind.torch as dt
from dnnbind.torch.errors import rename


def test_whole_names_are_renamed_and_quoted_values_are_not():
    names = {"x": "input", "w": "weight", "axis": "dim"}
    assert rename("x has 3 channels but w.shape[1] = 2", names) == "input has 3 channels but weight.shape[1] = 2"
    assert rename("axis='x' must be an int, not str", names) == "dim='x' must be an int, not str"
    assert rename("wx, x2 and x[0] stay", names) == "wx, x2 and x[0] stay"


def test_a_layers_error_keeps_the_value_the_user_passed():
    with pytest.raises(TypeError, match=r"^dim='x' must be an int, not str$"):
        dt.Softmax(dim="x")(torch.randn(2, 3))


def test_a_dim_out_of_range_is_an_index_error_as_torchs_and_names_dim():
    for layer in (dt.Softmax(dim=3), dt.LogSoftmax(dim=-3)):
        with pytest.raises(IndexError, match=r"^dim=-?3 is out of range for an array with 2 dimensions$"):
            layer(torch.randn(2, 3))
        with pytest.raises(IndexError):
            getattr(torch.nn, type(layer).__name__)(dim=layer.dim)(torch.randn(2, 3))


@pytest.mark.parametrize("call", [
    lambda: dt.Conv2d(3, 2, 3)(torch.randn(1, 3, 2, 2)),                  # the output would be empty
    lambda: dt.Conv2d(3, 2, 3)(torch.randn(1, 4, 5, 5)),                  # channels
    lambda: dt.Conv2d(3, 2, 3)(torch.randn(1, 3, 5, 5, dtype=torch.float64)),    # dtypes differ
    lambda: dt.Conv2d(3, 2, 3)(torch.ones(1, 3, 5, 5, dtype=torch.int64)),  # an integer input
    lambda: dt.MaxPool2d(4)(torch.randn(1, 1, 2, 2)),                      # window past the input
    lambda: dt.conv(torch.randn(1, 3, 5, 5), torch.randn(2, 4, 3, 3)),     # the functional form
], ids=["empty", "channels", "dtypes", "integer", "window", "functional"])
def test_an_ops_value_or_type_error_is_also_a_runtime_error_as_torchs(call):
    """torch raises RuntimeError for these mistakes: code written for its layers (``except RuntimeError``)
    catches dnnbind's too, and code catching ValueError or TypeError still does."""
    with pytest.raises(RuntimeError) as found:
        call()
    assert isinstance(found.value, (ValueError, TypeError))
    assert type(found.value).__name__ in ("TorchValueError", "TorchTypeError")
