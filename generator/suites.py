"""A Debian library's runtime from another suite (experimental over sid), for version checks.

``python -m generator.suites fetch miopen experimental`` unpacks the configured packages (headers and
runtime) as ``experimental`` has them, falling back to the pinned suite for everything ``experimental``
lacks, under ``.cache/debian/<suite>-runtime/root``. The pinned package list is only a start: packages
renamed for a new soname (libamdhip64-6 -> libamdhip64-7) are found through the Depends of what was
chosen, and sonames still missing after unpacking (``readelf``'s DT_NEEDED closure) are looked up by
Debian's library package naming (libhiprtc.so.7 -> libhiprtc7). Uses generator.debian's private apt;
never touches the system's apt.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from generator import config as cfg, debian

Log = Callable[[str], None]
MAX_ROUNDS = 8


@dataclass(frozen=True)
class Pick:
    name: str
    version: str
    suite: str
    stanza: dict[str, str]


def soname_packages(soname: str) -> list[str]:
    """Debian's library package names for a soname: libhiprtc.so.7 -> libhiprtc7 (and ...t64)."""
    m = re.match(r"^(lib[^.]+)\.so\.(\d[\d.]*)$", soname)
    if not m:
        return []
    stem, major = m.group(1).replace("_", "-").lower(), m.group(2)
    name = f"{stem}-{major}" if stem[-1].isdigit() else f"{stem}{major}"
    return [name, name + "t64"]


def runtime_root(suite: str) -> Path:
    return cfg.CACHE_DIR / "debian" / f"{suite}-runtime" / "root"


class Overlay:
    """Two private apts: the target suite first, then the pinned (base) suite."""

    def __init__(self, work: Path, suite: str, base: str) -> None:
        mirror = debian.debian_mirror()
        self.apts = [(s, debian.PrivateApt(work / "apt" / s, mirror, s)) for s in (suite, base)]
        self.chosen: dict[str, Pick] = {}

    def update(self) -> None:
        for _, apt in self.apts:
            apt.update()

    def pick(self, name: str) -> Pick | None:
        """The target suite's newest version of ``name``, else the base suite's; None when neither has it."""
        for suite, apt in self.apts:
            stanzas = apt.show([name]).get(name)
            if stanzas:
                version = debian.newest(s["Version"] for s in stanzas)
                return Pick(name, version, suite, next(s for s in stanzas if s["Version"] == version))
        return None

    def pick_or_rename(self, name: str) -> Pick | None:
        """``name``, or the successor that a chosen package depends on (same name stem)."""
        index = {p.name: [p.stanza] for p in self.chosen.values()}
        for candidate in debian.rename_candidates(name, index)[::-1] + [name]:
            found = self.pick(candidate)
            if found:
                return found
        return None

    def download(self, picks: list[Pick], debs: Path) -> None:
        debs.mkdir(parents=True, exist_ok=True)
        for suite, apt in self.apts:
            specs = [f"{p.name}={p.version}" for p in picks if p.suite == suite
                     and not (debs / _deb(p)).is_file()]
            if specs:
                apt.download(specs, debs)


def _deb(p: Pick) -> str:
    return f"{p.name}_{p.version.replace(':', '%3a')}_{p.stanza.get('Architecture', debian.ARCH)}.deb"


def fetch_runtime(library: str, suite: str, *, log: Log = print) -> Path:
    """Unpack ``library``'s packages from ``suite`` (over the pinned suite) with their DT_NEEDED closure."""
    config = cfg.load_all()[library]
    root = runtime_root(suite)
    work = root.parent
    manifest = work / "manifest.json"
    if manifest.exists() and debian.root_complete(config, root) and not debian.missing_sonames(root, config["sonames"]):
        return root
    started = time.monotonic()
    overlay = Overlay(work, suite, config["suite"])
    overlay.update()
    excludes = config.get("extract_exclude", {})
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    wanted = [*config.get("header_packages", {}), *config.get("runtime_packages", {})]
    tried: set[str] = set()
    for _ in range(MAX_ROUNDS):
        picks = []
        for name in wanted:
            if name in tried:
                continue
            tried.add(name)
            found = overlay.pick_or_rename(name)
            if found and found.name not in overlay.chosen:
                overlay.chosen[found.name] = found
                picks.append(found)
        overlay.download(picks, work / "debs")
        for p in picks:
            stem_excludes = next((v for k, v in excludes.items() if debian.name_stem(k) == debian.name_stem(p.name)), [])
            debian.unpack(work / "debs" / _deb(p), root, stem_excludes)
        missing = debian.missing_sonames(root, config["sonames"])
        wanted = [n for soname in missing for n in soname_packages(soname)]
        if not missing or not any(n not in tried for n in wanted):
            break
    for soname, parent in debian.missing_sonames(root, config["sonames"]).items():
        log(f"WARNING: {soname} (needed by {parent}) is not in {root}")
    manifest.write_text(json.dumps({"suite": suite, "base": config["suite"], "packages": {
        p.name: {"version": p.version, "suite": p.suite} for p in overlay.chosen.values()}}, indent=2) + "\n")
    log(f"{config['title']} runtime from Debian {suite} over {config['suite']}: {len(overlay.chosen)} packages "
        f"in {time.monotonic() - started:.1f} s; root {root}")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator.suites", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="unpack a library's runtime from another Debian suite")
    f.add_argument("library")
    f.add_argument("suite")
    args = parser.parse_args(argv)
    try:
        print(fetch_runtime(args.library, args.suite))
    except debian.DebianFetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
