"""The package's metadata: a license file that says what the metadata says, honest extras."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_license_file_is_the_mit_license_the_metadata_names():
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE", "LICENSES/*.txt"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n\nCopyright (c) ") and "the dnnbind developers" in text.splitlines()[2]
    assert not any(c.startswith("License ::") for c in PROJECT["classifiers"])     # PEP 639: the expression only


def test_other_license_files_are_the_vendor_notices_the_generated_modules_carry():
    """LICENSES/ holds exactly the notices headers.json names for vendor text shipped in generated modules."""
    import json
    configs = json.loads((ROOT / "generator" / "headers.json").read_text())
    named = {c["license_file"] for c in configs.values() if isinstance(c, dict) and c.get("license_file")}
    assert named and {p.relative_to(ROOT).as_posix() for p in (ROOT / "LICENSES").glob("*.txt")} == named


def test_no_placeholder_urls():
    assert all("example" not in url for url in PROJECT.get("urls", {}).values())


def test_the_torch_extra_is_the_tested_range_not_an_exact_pin():
    (requirement,) = PROJECT["optional-dependencies"]["torch"]
    assert "==" not in requirement and re.fullmatch(r"torch>=[\d.]+,<[\d.]+", requirement), requirement


def test_the_demo_plotting_library_comes_with_the_dev_extra():
    assert any(r.startswith("matplotlib") for r in PROJECT["optional-dependencies"]["dev"])


def test_the_jax_extra_is_the_tested_range_of_jax_and_jaxlib():
    """dnnbind.gen.xla_ffi comes from the pinned jaxlib's header: the extra starts at that jaxlib and stays
    within its minor series (the tested range), for jax and jaxlib alike."""
    import json
    pinned = json.loads((ROOT / "generator" / "headers.json").read_text())["xla_ffi"]["packages"][0]["version"]
    jax, jaxlib = PROJECT["optional-dependencies"]["jax"]
    for name, requirement in (("jax", jax), ("jaxlib", jaxlib)):
        m = re.fullmatch(rf"{name}>=([\d.]+),<([\d.]+)", requirement)
        assert m and m.group(1) == pinned, requirement


def test_the_docs_extra_pins_what_make_docs_runs():
    """`make docs` fails on warnings: a new Sphinx or theme may warn where the pinned one did not."""
    docs = PROJECT["optional-dependencies"]["docs"]
    assert {r.split("==")[0] for r in docs} == {"sphinx", "myst-parser", "furo"}
    assert all(re.fullmatch(r"[\w-]+==[\d.]+", r) for r in docs), docs
