"""``make setup`` step 4: the two user-space libraries that let cuDNN build plans without a GPU, for tests.

``libcuda.so.1`` comes from Debian's non-free ``libcuda1`` (through generator.debian: a private apt
with the archive's signature checks), ``libcublasLt.so.13`` from the ``nvidia-cublas`` wheel (pinned by
version and sha256, generator.fetch). Both are pinned in headers.json under ``cudnn.deviceless`` and
unpacked under ``.cache/deviceless/``; ``manifest.json`` there maps each soname to its file (relative to
that folder). Nothing is installed and nothing loads them unless asked (dnnbind.runtime.deviceless).
"""
from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

from generator import config as cfg, debian, fetch

MANIFEST = "manifest.json"


def base_dir(cache_dir: Path | None = None) -> Path:
    """``.cache/deviceless``: the Debian root, the wheel, the unpacked libraries and the manifest."""
    return Path(cache_dir or cfg.CACHE_DIR) / "deviceless"


def section(library: str = "cudnn") -> dict[str, Any]:
    return cfg.load_all()[library]["deviceless"]


def _unpack_wheel_libraries(package: dict[str, Any], base: Path) -> dict[str, Path]:
    """Extract the wheel members ``package["libraries"]`` names (soname -> member) under base/<name>."""
    wheel = fetch.download_wheel(package["name"], package["version"], base / "wheels")
    out = {}
    with zipfile.ZipFile(wheel) as zf:
        for soname, member in package["libraries"].items():
            target = base / package["name"] / package["version"] / soname
            info = zf.getinfo(member)
            if not target.is_file() or target.stat().st_size != info.file_size:
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(soname + ".partial")
                with zf.open(info) as src, partial.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                partial.rename(target)
            out[soname] = target
    return out


def fetch_libraries(library: str = "cudnn", cache_dir: Path | None = None) -> dict[str, Path]:
    """Fetch (once) and unpack the pinned libraries; write and return {soname: path}."""
    base = base_dir(cache_dir)
    conf = section(library)
    root = debian.fetch(conf["debian"], base)
    found: dict[str, Path] = {}
    for soname in conf["debian"]["sonames"]:
        path = debian.find_library(root, soname, conf["debian"]["library_dirs"])
        if path is None:
            raise debian.DebianFetchError(f"{soname} is not in {conf['debian']['runtime_packages']} (unpacked in {root})")
        found[soname] = path
    for package in conf["packages"]:
        found.update(_unpack_wheel_libraries(package, base))
    manifest = {"libraries": {s: str(p.relative_to(base)) for s, p in sorted(found.items())}}
    (base / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    for soname, path in sorted(found.items()):
        print(f"  {soname}: {path}")
    return found


def libraries(cache_dir: Path | None = None) -> dict[str, Path]:
    """{soname: path} of what ``make setup`` fetched (empty when it has not run)."""
    base = base_dir(cache_dir)
    path = base / MANIFEST
    if not path.is_file():
        return {}
    return {s: base / p for s, p in json.loads(path.read_text())["libraries"].items()}
