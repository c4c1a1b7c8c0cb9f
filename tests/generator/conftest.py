"""Fixtures for the generator's header-fixture tests: the built fixture module and the compiled library."""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

import fixture_build as fb


@pytest.fixture(scope="session")
def fixture_built() -> fb.Built:
    """fixtures/fixture.h parsed, classified and rendered once per session."""
    return fb.build("fixture.h")


@pytest.fixture(scope="session")
def generated_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where rendered modules are written before they are imported."""
    return tmp_path_factory.mktemp("generated")


@pytest.fixture(scope="session")
def fixture_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fixtures/fixture.c compiled to a shared library (every fixture.h function except fxMissing)."""
    if fb.c_compiler() is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH to build the fixture library")
    out = tmp_path_factory.mktemp("lib") / "libfixture.so"
    return fb.compile_shared([fb.FIXTURES / "fixture.c"], out, defines=["FX_BETA_API=1"])


@pytest.fixture
def fx(fixture_built: fb.Built, generated_dir: Path) -> ModuleType:
    """A fresh import of the generated fixture module (nothing loaded, no warning issued yet)."""
    return fb.import_text(fixture_built.text, generated_dir)


@pytest.fixture
def fxlib(fx: ModuleType, fixture_library: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The generated fixture module, pointed at the compiled fixture library through its env variable."""
    monkeypatch.setenv(fb.LIBRARY_ENV, str(fixture_library))
    return fx
