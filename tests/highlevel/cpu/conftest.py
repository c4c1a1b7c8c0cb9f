"""Fixtures of the cpu backend's tests: which kernels the convolution paths run on."""
from __future__ import annotations

import pytest

from dnnbind.highlevel.cpu import conv_paths, native
from native_parts import require


@pytest.fixture(params=["native", "numpy"])
def kernels(request, monkeypatch):
    """Run the test once on dnnbind's C kernels (where a path has them; the direct convolution on the
    tests' small problems too, which it leaves to BLAS in use; every product on dnnbind's own, whatever
    this machine's BLAS) and once on the numpy paths alone (products on numpy's BLAS). The C kernels are
    part of the development install (make setup builds them), so their absence fails here instead of
    skipping, unless DNNBIND_NATIVE=0 turns them off (then the native runs skip)."""
    if request.param == "native":
        require(native.library() is not None, "dnnbind_native._kernels (the C kernels)")
        monkeypatch.setattr(conv_paths, "DIRECT_MIN_MACS", 0)
        use_packed_gemm(monkeypatch, True)
    else:
        monkeypatch.setattr(native, "available", lambda dtype: False)
    return request.param


@pytest.fixture(params=["packed", "blas"])
def products(request, monkeypatch):
    """Run the test once with every product on dnnbind's own (native.packed_product) and once on numpy's BLAS."""
    if request.param == "packed":
        require(native.library() is not None, "dnnbind_native._kernels (the C kernels)")
    use_packed_gemm(monkeypatch, request.param == "packed")
    return request.param


def use_packed_gemm(monkeypatch, packed: bool) -> None:
    """Products on dnnbind's own (native.packed_product, however small) or on numpy's BLAS, until the test ends."""
    monkeypatch.setattr(native, "_packed_gemm_wins", lambda: packed)
    monkeypatch.setattr(native, "PACKED_MIN_MACS", 0)
