"""Fixtures of the cpu backend's tests: which kernels the convolution paths run on."""
from __future__ import annotations

import pytest

from dnnbind.highlevel.cpu import conv_paths, native
from native_parts import require


@pytest.fixture(params=["native", "numpy"])
def kernels(request, monkeypatch):
    """Run the test once on dnnbind's C kernels (where a path has them; the direct convolution on the
    tests' small problems too, which it leaves to BLAS in use) and once on the numpy paths alone. Every
    product runs on numpy's BLAS either way. The C kernels are
    part of the development install (make setup builds them), so their absence fails here instead of
    skipping, unless DNNBIND_NATIVE=0 turns them off (then the native runs skip)."""
    if request.param == "native":
        require(native.library() is not None, "dnnbind_native._kernels (the C kernels)")
        monkeypatch.setattr(conv_paths, "DIRECT_MIN_MACS", 0)
    else:
        monkeypatch.setattr(native, "available", lambda dtype: False)
    return request.param
