"""The activation spec's facts about its modes, checked against the op itself."""
from __future__ import annotations

import numpy as np
import pytest

import dnnbind
from dnnbind.highlevel.specs import SPECS
from dnnbind.highlevel.specs.activation import ACTIVATION_DEFAULTS

# both sides of every kink, the kinks themselves and values past the clip ceilings
X = np.array([-7.0, -2.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0, 2.0, 6.0, 7.0])
CASES = [(mode, None) for mode in ACTIVATION_DEFAULTS] + [
    ("leaky_relu", 0.0), ("leaky_relu", 0.3), ("leaky_relu", -0.5), ("leaky_relu", 1.5),
    ("clipped_relu", 1.0), ("elu", 0.3), ("swish", 2.0)]


@pytest.mark.parametrize("mode, alpha", CASES, ids=lambda v: str(v))
def test_the_result_stands_for_x_exactly_where_the_spec_says(mode, alpha):
    """result_stands_for_x: the pullback at the result y is the pullback at x (what lets a layer made with
    inplace=True overwrite x without a copy); where the spec says no, some x tells them apart."""
    y, at_x = dnnbind.activation(X, mode, alpha=alpha)
    _, at_y = dnnbind.activation(y, mode, alpha=alpha)
    dy = np.linspace(1.0, 2.0, X.size)
    same = np.array_equal(at_x(dy), at_y(dy))
    assert SPECS["activation"].result_stands_for_x({"mode": mode, "alpha": alpha}) == same
