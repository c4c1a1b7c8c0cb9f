"""`make setup`'s deviceless step: libcuda.so.1 from Debian non-free through the private, signature-checked apt,
and cuBLASLt from a wheel pinned by sha256, unpacked under .cache/deviceless."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from generator import config as cfg, debian, deviceless, fetch

SECTION = cfg.load_all()["cudnn"]["deviceless"]


def test_the_pins():
    deb = SECTION["debian"]
    assert deb["suite"] and deb["components"] == ["non-free"] and deb["sonames"] == ["libcuda.so.1"]
    assert re.fullmatch(r"\d+\.\d+\.\d+-\d+", deb["runtime_packages"]["libcuda1"])
    (wheel,) = SECTION["packages"]
    assert wheel["name"] == "nvidia-cublas" and wheel["version"].startswith("13.")
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) and f"-{wheel['version']}-" in f for f, h in wheel["sha256"].items())
    assert fetch.pinned_hashes(wheel["name"], wheel["version"]) == wheel["sha256"]


def test_the_private_apt_asks_for_non_free_with_the_archive_key(tmp_path):
    apt = debian.PrivateApt(tmp_path, "http://deb.debian.org/debian", "trixie", ["non-free"])
    assert (tmp_path / "sources.list").read_text() == (
        f"deb [arch=amd64 signed-by={debian.KEYRING}] http://deb.debian.org/debian trixie non-free\n")
    assert debian._request(SECTION["debian"])["components"] == ["non-free"]
    assert "components" not in debian._request(cfg.load_all()["miopen"])       # MIOpen's request is unchanged
    assert apt.options()


def test_a_replaced_cublas_wheel_is_refused(tmp_path):
    (wheel,) = SECTION["packages"]
    impostor = tmp_path / next(iter(wheel["sha256"]))
    impostor.write_bytes(b"PK\x05\x06" + bytes(18))
    with pytest.raises(fetch.WheelHashError, match="refusing it"):
        fetch.download_wheel(wheel["name"], wheel["version"], tmp_path)


def test_the_fetched_libraries_are_the_sonames():
    found = deviceless.libraries()
    if not found:
        pytest.skip(".cache/deviceless/manifest.json is absent: run `make setup` (or `make deviceless`)")
    assert set(found) == {"libcuda.so.1", "libcublasLt.so.13"}
    if shutil.which("readelf") is None:
        pytest.skip("readelf is not installed")
    for soname, path in found.items():
        dynamic = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
        assert f"Library soname: [{soname}]" in dynamic, path
