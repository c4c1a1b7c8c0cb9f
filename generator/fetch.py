"""``make headers``: put each library's pinned headers into the git-ignored cache.

cuDNN and the CUDA runtime headers come from PyPI wheels (downloaded with pip, only their include
directories unpacked); MIOpen comes from Debian's packages (see generator.debian).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from generator import config as cfg


def wheel_dir() -> Path:
    return cfg.CACHE_DIR / "wheels"


def find_wheel(name: str, version: str) -> Path | None:
    stem = f"{name.replace('-', '_')}-{version}-"
    matches = sorted(wheel_dir().glob(stem + "*.whl"))
    return matches[0] if matches else None


def download_wheel(name: str, version: str) -> Path:
    """The pinned wheel, downloaded once into the cache."""
    found = find_wheel(name, version)
    if found:
        return found
    wheel_dir().mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--dest", str(wheel_dir()), f"{name}=={version}"], check=True)
    found = find_wheel(name, version)
    if found is None:
        raise RuntimeError(f"pip downloaded no wheel for {name}=={version}")
    return found


def fetch_pypi(library: str, config: dict[str, Any]) -> Path:
    """Unpack the include directories of the pinned wheels into ``.cache/headers/<library>``."""
    root = cfg.cache_root(library)
    manifest = root / "manifest.json"
    pins = {p["name"]: p["version"] for p in config["packages"]}
    if manifest.exists() and json.loads(manifest.read_text()).get("packages") == pins:
        print(f"{config['title']}: headers already present ({_describe(pins)})")
        return root
    started = time.perf_counter()
    for package in config["packages"]:
        wheel = download_wheel(package["name"], package["version"])
        prefix = package["include"].rstrip("/") + "/"
        with zipfile.ZipFile(wheel) as zf:
            for member in zf.namelist():
                if member.startswith(prefix) and not member.endswith("/"):
                    zf.extract(member, root)
    manifest.write_text(json.dumps({"packages": pins}, indent=2, sort_keys=True) + "\n")
    print(f"{config['title']}: got {_describe(pins)} in {time.perf_counter() - started:.1f} s")
    return root


def _describe(pins: dict[str, str]) -> str:
    return ", ".join(f"{name} {version}" for name, version in pins.items())


def fetch(library: str) -> Path:
    config = cfg.load_all()[library]
    if config["source"] == "pypi":
        return fetch_pypi(library, config)
    if config["source"] == "debian":
        from generator import debian
        return debian.fetch(config, cfg.CACHE_DIR)
    raise ValueError(f"unknown header source {config['source']!r} for {library}")
