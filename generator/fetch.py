"""``make headers``: put each library's pinned headers into the git-ignored cache.

cuDNN and the CUDA runtime headers come from PyPI wheels (downloaded with pip, only their include
directories unpacked); MIOpen comes from Debian's packages (see generator.debian, checked by apt's
signatures). A pinned wheel is pinned by version and by the sha256 of each of its files
(``sha256`` in headers.json): a file that does not match is refused before anything is unpacked
from it, so a wheel replaced on the index never flows into the generated modules or the tests.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from generator import config as cfg
from generator.problems import InputProblem


def wheel_dir() -> Path:
    return cfg.CACHE_DIR / "wheels"


def find_wheel(name: str, version: str, dest: Path | None = None) -> Path | None:
    stem = f"{name.replace('-', '_')}-{version}-"
    matches = sorted((dest or wheel_dir()).glob(stem + "*.whl"))
    return matches[0] if matches else None


class DownloadError(InputProblem):
    """pip could not download a pinned wheel (pip's own output says why)."""


class WheelHashError(InputProblem):
    """A downloaded wheel is not the file headers.json pins (or no hash is pinned for it)."""


def pinned_hashes(name: str, version: str) -> dict[str, str] | None:
    """``{file name: sha256}`` pinned in headers.json for ``name==version``; None when not pinned
    (``python -m generator diff`` reads other releases, which have no pins)."""
    for library in cfg.load_all().values():
        for package in library.get("packages", []) + library.get("deviceless", {}).get("packages", []):
            if package["name"] == name and package["version"] == version:
                return dict(package.get("sha256", {}))
    return None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_wheel(path: Path, name: str, version: str) -> Path:
    """``path`` when it is the file pinned for ``name==version`` (or nothing is pinned for that
    release); WheelHashError otherwise, saying which file, both hashes and what to do."""
    pins = pinned_hashes(name, version)
    if pins is None:
        return path
    expected = pins.get(path.name)
    if expected is None:
        raise WheelHashError(
            f"{path}: no sha256 is pinned for this file of {name}=={version} in generator/headers.json "
            f"(pinned: {', '.join(sorted(pins)) or 'none'}); its sha256 is {sha256(path)}: compare it with "
            f"the index's own (https://pypi.org/project/{name}/{version}/#files) and add it there")
    got = sha256(path)
    if got != expected:
        raise WheelHashError(
            f"{path}: sha256 {got} does not match the pin {expected} in generator/headers.json for "
            f"{name}=={version}; refusing it. Delete the file and run `make headers` again; if the index "
            f"still serves this file, it was replaced there: find out why before changing the pin")
    return path


def download_wheel(name: str, version: str, dest: Path | None = None) -> Path:
    """The wheel of ``name==version``, downloaded once into the cache (``dest``, default
    ``.cache/wheels``) and checked against its pin."""
    dest = dest or wheel_dir()
    found = find_wheel(name, version, dest)
    if found:
        return verify_wheel(found, name, version)
    dest.mkdir(parents=True, exist_ok=True)
    print(f"downloading {name}=={version} from PyPI into {dest} ...", flush=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           "--dest", str(dest), f"{name}=={version}"])
    found = find_wheel(name, version, dest)
    if proc.returncode or found is None:
        raise DownloadError(f"pip download {name}=={version} failed (exit status {proc.returncode}; its output "
                            f"above says why) or gave no wheel in {dest}")
    return verify_wheel(found, name, version)


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
