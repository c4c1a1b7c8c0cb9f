"""Finding, loading and binding a vendor library: search order, clear failures, lazy symbols."""
from __future__ import annotations

import ctypes
import warnings

import pytest

from dnnbind.gen import cudnn
from dnnbind.runtime import CudnnError, LibraryNotFoundError, LibraryVersionError, SymbolNotFoundError
from dnnbind.runtime.loader import Library, LazySymbol, Unchecked, version_mismatch


def library(**overrides) -> Library:
    settings = dict(title="cuDNN", sonames=("libcudnn.so.9",), env="DNNBIND_TEST_LIBRARY",
                    search=(("site-packages", "nvidia/cudnn/lib"), ("system",)), header_version=(9, 28, 1),
                    install_hint="Install it: pip install nvidia-cudnn-cu13", error_class=CudnnError)
    settings.update(overrides)
    return Library(**settings)


def test_site_packages_wheel_is_found_first(monkeypatch):
    monkeypatch.delenv("DNNBIND_TEST_LIBRARY", raising=False)
    how, path = library().candidates()[0]
    assert how.startswith("site-packages") and path.endswith("nvidia/cudnn/lib/libcudnn.so.9")


def test_environment_variable_wins(monkeypatch):
    monkeypatch.setenv("DNNBIND_TEST_LIBRARY", cudnn.library_path())
    assert library().candidates()[0] == ("$DNNBIND_TEST_LIBRARY", cudnn.library_path())


def test_bad_environment_path_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("DNNBIND_TEST_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(LibraryNotFoundError, match=r"\$DNNBIND_TEST_LIBRARY=.*missing.so.* could not be loaded"):
        library().load()


def test_no_library_says_how_to_install(monkeypatch):
    monkeypatch.delenv("DNNBIND_TEST_LIBRARY", raising=False)
    lost = library(sonames=("libdnnbind-does-not-exist.so.1",))
    with pytest.raises(LibraryNotFoundError) as info:
        lost.load()
    text = str(info.value)
    assert "pip install nvidia-cudnn-cu13" in text and "DNNBIND_TEST_LIBRARY" in text
    assert "system loader: libdnnbind-does-not-exist.so.1: cannot open shared object file" in text
    assert text.count("libdnnbind-does-not-exist.so.1") == 2         # the sonames list and the one attempt


def test_missing_symbol_fails_when_called_naming_function_and_version(monkeypatch):
    monkeypatch.setenv("DNNBIND_TEST_LIBRARY", cudnn.library_path())
    lib = library()
    lib.read_version = cudnn._read_version
    namespace: dict = {}
    stub = LazySymbol(lib, namespace, "cudnnFutureFunction", (), ctypes.c_int, None)
    with pytest.raises(SymbolNotFoundError, match=r"cudnnFutureFunction is not in libcudnn.so.9 9\.28\.1"):
        stub()
    assert "_cudnnFutureFunction" not in namespace


def test_lazy_symbol_replaces_itself(monkeypatch):
    monkeypatch.setenv("DNNBIND_TEST_LIBRARY", cudnn.library_path())
    lib = library()
    namespace: dict = {}
    namespace["_cudnnGetVersion"] = LazySymbol(lib, namespace, "cudnnGetVersion", (), ctypes.c_size_t, None)
    assert namespace["_cudnnGetVersion"]() == 92801
    assert isinstance(namespace["_cudnnGetVersion"], ctypes._CFuncPtr)
    assert Unchecked(namespace).cudnnGetVersion() == 92801


def test_major_version_mismatch_is_refused_every_time(monkeypatch):
    """The real cuDNN 9.28.1 against bindings that claim 10.0.0 headers: refused, naming both versions and
    the ways out, on every call (not just the first)."""
    monkeypatch.setenv("DNNBIND_TEST_LIBRARY", cudnn.library_path())
    monkeypatch.delenv("DNNBIND_ALLOW_VERSION_MISMATCH", raising=False)
    lib = library(header_version=(10, 0, 0))
    lib.read_version = cudnn._read_version
    for _ in range(2):
        with pytest.raises(LibraryVersionError) as info:
            lib.load()
        text = str(info.value)
        assert "is version 9.28.1, a major version older than the 10.0.0 headers" in text
        assert "make generate" in text and "DNNBIND_ALLOW_VERSION_MISMATCH=1" in text


def test_major_version_mismatch_allowed_by_the_environment_warns_once(monkeypatch):
    monkeypatch.setenv("DNNBIND_TEST_LIBRARY", cudnn.library_path())
    monkeypatch.setenv("DNNBIND_ALLOW_VERSION_MISMATCH", "1")
    lib = library(header_version=(8, 9, 7))
    lib.read_version = cudnn._read_version
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        lib.load()
        lib.load()
    messages = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "a major version newer than the 8.9.7 headers" in messages[0]


@pytest.mark.parametrize("loaded, header, expected", [
    ((9, 28, 1), (9, 1, 0), None), ((9, 0, 0), (9, 28, 1), None),
    ((8, 9, 7), (9, 28, 1), "older"), ((10, 0, 0), (9, 28, 1), "newer"), ((2, 0, 0), (3, 4, 0), "older")])
def test_version_mismatch_rule(loaded, header, expected):
    """Same major: fine; any other major, older or newer: refused, saying which."""
    message = version_mismatch("X", "/lib/x.so", loaded, header, "pip install x")
    assert (message is None) if expected is None else (f"a major version {expected} than" in message)


def test_cudnn_versions_decode():
    from dnnbind.runtime.versions import cudnn_version
    assert cudnn_version(92801) == (9, 28, 1)
    assert cudnn_version(8907) == (8, 9, 7)
