"""Batch norm's shape checks (dnnbind.highlevel.dims.batchnorm)."""
from __future__ import annotations

import pytest

from dnnbind.highlevel.dims.batchnorm import check_batchnorm

def test_check_batchnorm():
    assert check_batchnorm((4, 3, 5), (3,), (3,), None, None, True) == 3
    with pytest.raises(ValueError, match=r"gamma has shape \(4,\) but must have shape \(3,\)"):
        check_batchnorm((4, 3), (4,), (3,), None, None, True)
    with pytest.raises(ValueError, match=r"beta has shape"):
        check_batchnorm((4, 3), (3,), (3, 1), None, None, True)
    with pytest.raises(ValueError, match=r"running_mean and running_var must be given together"):
        check_batchnorm((4, 3), (3,), (3,), (3,), None, True)
    with pytest.raises(ValueError, match=r"running_var has shape \(2,\)"):
        check_batchnorm((4, 3), (3,), (3,), (3,), (2,), True)
    with pytest.raises(ValueError, match=r"training=False needs running_mean and running_var"):
        check_batchnorm((4, 3), (3,), (3,), None, None, False)
    with pytest.raises(ValueError, match=r"more than one value per channel"):
        check_batchnorm((1, 3, 1, 1), (3,), (3,), None, None, True)
    assert check_batchnorm((1, 3), (3,), (3,), (3,), (3,), False) == 3
    with pytest.raises(ValueError, match=r"x has shape \(3,\) \(1 dimensions\)"):
        check_batchnorm((3,), (3,), (3,), None, None, True)


# ---------------------------------------------------------------------------------------------- RNNDims
