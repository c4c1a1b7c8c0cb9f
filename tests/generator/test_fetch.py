"""The wheels `make headers` and `make setup` download are pinned by sha256 as well as by version."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from generator import config as cfg, fetch

ROOT = Path(__file__).resolve().parents[2]
PINNED = [p for p in cfg.load_all()["cudnn"]["packages"]]


def test_every_pinned_wheel_has_a_hash():
    for package in PINNED:
        hashes = package["sha256"]
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes.values()), package["name"]
        assert all(name.endswith(".whl") and f"-{package['version']}-" in name for name in hashes)


@pytest.mark.parametrize("package", PINNED, ids=[p["name"] for p in PINNED])
def test_the_cached_wheels_are_the_pinned_files(package):
    wheel = fetch.find_wheel(package["name"], package["version"])
    assert wheel is not None, "run make headers"
    assert fetch.download_wheel(package["name"], package["version"]) == wheel     # cached, checked, no download


def _pinned_name(package: dict) -> str:
    return next(iter(package["sha256"]))


def test_a_replaced_wheel_is_refused_before_anything_is_unpacked(monkeypatch, tmp_path):
    package = PINNED[0]                                             # the first one make headers reads
    monkeypatch.setattr(cfg, "CACHE_DIR", tmp_path)
    (tmp_path / "wheels").mkdir()
    impostor = tmp_path / "wheels" / _pinned_name(package)
    impostor.write_bytes(b"PK\x05\x06" + bytes(18))              # a valid, empty zip: not the pinned file
    with pytest.raises(fetch.WheelHashError) as info:
        fetch.download_wheel(package["name"], package["version"])
    text = str(info.value)
    assert str(impostor) in text and fetch.sha256(impostor) in text and package["sha256"][impostor.name] in text
    assert "refusing it" in text and "Delete the file and run `make headers` again" in text
    with pytest.raises(fetch.WheelHashError):                       # and make headers never unpacks it
        fetch.fetch_pypi("cudnn", cfg.load_all()["cudnn"])
    assert not (tmp_path / "headers").exists() or not any((tmp_path / "headers").rglob("*.h"))


def test_a_wheel_file_without_a_pin_is_refused(monkeypatch, tmp_path):
    package = PINNED[-1]
    monkeypatch.setattr(cfg, "CACHE_DIR", tmp_path)
    (tmp_path / "wheels").mkdir()
    other = tmp_path / "wheels" / _pinned_name(package).replace("x86_64", "aarch64")
    other.write_bytes(b"PK\x05\x06" + bytes(18))
    with pytest.raises(fetch.WheelHashError, match=r"no sha256 is pinned for this file of nvidia-cuda-crt==13\.5\.37") \
            as info:
        fetch.download_wheel(package["name"], package["version"])
    assert f"its sha256 is {fetch.sha256(other)}: compare it with the index's own" in str(info.value)


def test_releases_that_are_not_pinned_are_not_checked(tmp_path):
    wheel = tmp_path / "nvidia_cudnn_cu12-9.1.1.17-py3-none-manylinux1_x86_64.whl"
    wheel.write_bytes(b"anything")
    assert fetch.verify_wheel(wheel, "nvidia-cudnn-cu12", "9.1.1.17") == wheel


def test_make_setup_installs_the_cudnn_library_by_hash():
    dry = subprocess.run(["make", "-n", "setup", f"PYTHON={sys.executable}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60).stdout
    cudnn = PINNED[0]
    assert f"{cudnn['name']}=={cudnn['version']} --hash=sha256:{cudnn['sha256'][_pinned_name(cudnn)]}" in dry
    assert re.search(r"pip install --no-deps --no-index --find-links \.cache/wheels --require-hashes -r ", dry)
