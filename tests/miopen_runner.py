"""Run Python against the real MIOpen on a machine without an AMD GPU (or ROCm).

``make headers`` (``python -m generator.debian fetch miopen``) unpacks Debian's MIOpen and its whole
dependency closure, glibc included, under ``.cache/debian/<suite>/root``. That libMIOpen.so.1 needs a newer
glibc than the host's, so a child Python is started under the unpacked dynamic loader::

    <root>/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
        --library-path <root>/usr/lib/x86_64-linux-gnu:<root>/lib/x86_64-linux-gnu
        --argv0 <venv>/bin/python  <the real interpreter ELF>  -c CODE | SCRIPT ARGS...

The loader needs the real ELF (the venv's bin/python is a symlink); ``--argv0`` hands Python the venv
path as argv[0], so it finds pyvenv.cfg and keeps the venv's site-packages (numpy works). PYTHONPATH gets
``src`` (``import dnnbind``) and DNNBIND_MIOPEN_LIBRARY names the unpacked libMIOpen.so.1. Libraries that
are not in the root (libffi, libpython) still come from the host, which the newer glibc runs fine.

Use from tests: ``run_under_debian_loader("print(1)")``; it raises DebianRootMissing (skip-worthy)
when the cache is not populated. From a shell: ``python tests/miopen_runner.py -c "code"``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = Path(os.environ.get("DNNBIND_CACHE_DIR", REPO_ROOT / ".cache"))
LOADER = "ld-linux-x86-64.so.2"


class DebianRootMissing(RuntimeError):
    """The unpacked Debian MIOpen is not in the cache (tests should skip)."""


@dataclass(frozen=True)
class DebianRoot:
    """The unpacked packages: where the loader, the library directories and libMIOpen are."""
    root: Path
    library_dirs: tuple[Path, ...]
    loader: Path
    library: Path
    library_env: str

    @property
    def library_path(self) -> str:
        return ":".join(map(str, self.library_dirs))

    def manifest(self) -> dict:
        """The versions generator.debian recorded (empty when there is no manifest)."""
        path = self.root.parent / "manifest.json"
        return json.loads(path.read_text()) if path.exists() else {}


def _config() -> dict:
    return json.loads((REPO_ROOT / "generator" / "headers.json").read_text())["miopen"]


def find_root(cache_dir: Path | None = None) -> DebianRoot:
    """The populated root, or DebianRootMissing saying how to make it."""
    config = _config()
    root = Path(cache_dir or CACHE_DIR) / "debian" / config["suite"] / "root"
    dirs = tuple(root / d for d in config.get("library_dirs", ["usr/lib/x86_64-linux-gnu"]))
    loader = next((d / LOADER for d in dirs if (d / LOADER).exists()), None)
    library = next((d / config["sonames"][0] for d in dirs if (d / config["sonames"][0]).exists()), None)
    if loader is None or library is None:
        what = LOADER if loader is None else config["sonames"][0]
        raise DebianRootMissing(f"Debian's MIOpen is not unpacked ({what} not under {root}); run `make headers` "
                                f"(or `python -m generator.debian fetch miopen`)")
    return DebianRoot(root, dirs, loader, library, config.get("library_env", "DNNBIND_MIOPEN_LIBRARY"))


def command(args: Sequence[str], root: DebianRoot, python: str | None = None) -> list[str]:
    """The argv that runs ``python args...`` under the root's loader."""
    python = python or sys.executable
    real = Path(python).resolve()
    with open(real, "rb") as f:
        if f.read(4) != b"\x7fELF":
            raise RuntimeError(f"{python} resolves to {real}, which is not an ELF executable")
    return [str(root.loader), "--library-path", root.library_path, "--argv0", python, str(real), *args]


def environment(root: DebianRoot, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """base (default os.environ) plus PYTHONPATH=src and the library variable; no LD_* leftovers."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), env.get("PYTHONPATH")]))
    env[root.library_env] = str(root.library)
    return env


def run_under_debian_loader(code_or_args: str | Sequence[str], *, capture: bool = True, check: bool = False,
                            timeout: float | None = 300, env: Mapping[str, str] | None = None,
                            cwd: str | Path | None = None, python: str | None = None,
                            cache_dir: Path | None = None) -> subprocess.CompletedProcess:
    """Run Python code (a string, as ``-c``) or argv (``["script.py", ...]``, ``["-m", "pytest", ...]``).

    Output is captured as text unless ``capture`` is false. ``env`` entries are added to the child's
    environment. Raises DebianRootMissing when the cache is not populated.
    """
    root = find_root(cache_dir)
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else list(code_or_args)
    child_env = environment(root)
    child_env.update(env or {})
    return subprocess.run(command(args, root, python), env=child_env, cwd=cwd, check=check,
                          timeout=timeout, capture_output=capture, text=True)


def main(argv: list[str] | None = None) -> int:
    """``python tests/miopen_runner.py -c CODE`` or ``python tests/miopen_runner.py SCRIPT ARGS...``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    try:
        return run_under_debian_loader(argv, capture=False, timeout=None).returncode
    except DebianRootMissing as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
