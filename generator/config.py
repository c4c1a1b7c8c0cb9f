"""Reading generator/headers.json and finding each library's headers on disk."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import inputs

GENERATOR_DIR = Path(__file__).resolve().parent
REPO_ROOT = GENERATOR_DIR.parent
CACHE_DIR = Path(os.environ.get("DNNBIND_CACHE_DIR", REPO_ROOT / ".cache"))


HEADERS_FILE = GENERATOR_DIR / "headers.json"
OVERRIDES_FILE = GENERATOR_DIR / "pointer_overrides.json"


def shown(path: Path) -> str:
    """How messages name one of the generator's files: relative to the repository when inside it."""
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def load_all() -> dict[str, dict[str, Any]]:
    """Every library's entry in headers.json, checked against its schema (InputError otherwise)."""
    return inputs.load(HEADERS_FILE, "headers.schema.json", shown(HEADERS_FILE))


def load_overrides(library: str) -> dict[str, Any]:
    """One library's entry in pointer_overrides.json, checked against its schema (InputError otherwise)."""
    overrides = inputs.load(OVERRIDES_FILE, "pointer_overrides.schema.json", shown(OVERRIDES_FILE))
    if library not in overrides and load_all().get(library, {}).get("types_only"):
        return {"rules": [], "exceptions": {}}     # no functions, so no pointer parameters to classify
    unknown = sorted(set(overrides) - set(load_all()) - {"$schema"})
    if unknown:
        raise inputs.InputError(f"{shown(OVERRIDES_FILE)}: {unknown[0]}: no library of that name in headers.json "
                                f"(libraries there: {', '.join(sorted(load_all()))})")
    if library not in overrides:
        raise inputs.InputError(f"{shown(OVERRIDES_FILE)}: (top level): no entry for library {library!r} "
                                f"(headers.json has one; libraries here: {', '.join(sorted(overrides)) or 'none'})")
    return overrides[library]


#: headers.json keys that name a function of the library's headers (the generated module calls them)
FUNCTION_KEYS = ("error_string", "last_error", "version_function")


def function_problems(library: str, config: dict[str, Any], declared: set[str]) -> list[str]:
    """headers.json entries naming functions the headers no longer declare: the module would fail at import
    or lose the library's own error messages, so generation fails instead."""
    return [f"{shown(HEADERS_FILE)}: {library}.{key}: {config[key]} is not a function of the headers"
            for key in FUNCTION_KEYS if config.get(key) and config[key] not in declared]


def sonames(config: dict[str, Any]) -> frozenset[str]:
    """Every shared library headers.json names for a library: its own and the deviceless ones."""
    deviceless = config.get("deviceless", {})
    return frozenset(config.get("sonames", [])) | frozenset(deviceless.get("debian", {}).get("sonames", [])) \
        | {name for package in deviceless.get("packages", []) for name in package.get("libraries", {})}


def validate() -> None:
    """Check both input files against their schemas, and that every library has its overrides."""
    for library in load_all():
        load_overrides(library)


@dataclass(frozen=True)
class HeaderSet:
    """Where one parse reads its headers from: include directories and the entry header."""
    library: str
    include_dirs: tuple[Path, ...]
    entry: Path
    origin: str                # "cache" or the environment variable that pointed elsewhere


def cache_root(library: str, config: dict[str, Any] | None = None) -> Path:
    """Where `make headers` unpacks a library: wheels under headers/<lib>, Debian packages under
    debian/<suite>/root."""
    config = config or load_all()[library]
    if config.get("source") == "debian":
        from generator import debian
        return debian.root_dir(config, CACHE_DIR)
    return CACHE_DIR / "headers" / library


def header_set(library: str, config: dict[str, Any] | None = None, root: Path | None = None) -> HeaderSet:
    """The headers to parse: an explicit directory (``root``), a user's install named by the
    library's environment variables, or what ``make headers`` put in the cache."""
    config = config or load_all()[library]
    if root is not None:
        dirs = _dirs_under(Path(root), config)
        origin = str(root)
    else:
        env_dirs, origin = _dirs_from_env(config)
        dirs = env_dirs + _dirs_under(cache_root(library, config), config)
        origin = origin or "cache"
    for d in dirs:
        entry = d / config["entry"]
        if entry.exists():
            return HeaderSet(library, tuple(dirs), entry, origin)
    where = ", ".join(map(str, dirs)) or "(nowhere)"
    raise FileNotFoundError(f"{config['title']} header {config['entry']} not found in {where}; "
                            f"run `make headers` (or set {' / '.join(config.get('include_env', []))})")


def _dirs_under(root: Path, config: dict[str, Any]) -> list[Path]:
    subdirs = config.get("include_dirs") or [p["include"] for p in config.get("packages", [])]
    unique: dict[str, None] = dict.fromkeys(subdirs)
    return [root / s for s in unique if (root / s).is_dir()]


def _dirs_from_env(config: dict[str, Any]) -> tuple[list[Path], str]:
    """CUDNN_INCLUDE_DIR points at cudnn.h's directory, CUDA_HOME / ROCM_PATH at an install prefix."""
    dirs: list[Path] = []
    names = []
    for var in config.get("include_env", []):
        value = os.environ.get(var)
        if not value:
            continue
        path = Path(value)
        names.append(var)
        dirs.append(path if var.endswith("INCLUDE_DIR") else path / "include")
    return [d for d in dirs if d.is_dir()], "+".join(names)
