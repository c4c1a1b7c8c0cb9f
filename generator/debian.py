"""Fetch pinned Debian packages (MIOpen's headers and runtime) into a private, git-ignored root.

``python -m generator.debian fetch miopen`` (or ``fetch(config, cache_dir)``) downloads the packages that
``headers.json`` pins, with ``apt-get`` driven by a private sources list and private state/cache
directories, and unpacks them under ``<cache_dir>/debian/<suite>/root`` (cache_dir: the project's
``.cache``, or $DNNBIND_CACHE_DIR). It never touches the system's apt sources and never installs
anything. Debian's unstable suite moves: when a pinned version is gone, the suite's current version is
taken and a message says so; the versions obtained go to ``manifest.json`` next to the root, so a
freshness check can report "header moved from X to Y".
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from generator.problems import InputProblem

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = Path(os.environ.get("DNNBIND_CACHE_DIR", REPO_ROOT / ".cache"))   # the project's cache
ARCH = "amd64"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MANIFEST = "manifest.json"
LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
Log = Callable[[str], None]


class DebianFetchError(InputProblem):
    """apt could not give us what headers.json asks for."""


# ---------------------------------------------------------------- Debian version order (dpkg's rules)

def _order(c: str) -> int:
    if c == "~":
        return -1
    if c.isdigit():
        return 0
    return ord(c) if c.isalpha() else ord(c) + 256


def _compare_part(a: str, b: str) -> int:
    """dpkg's verrevcmp: alternating non-digit runs (by _order) and digit runs (numerically)."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i, j = i + 1, j + 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            first_diff = first_diff or ord(a[i]) - ord(b[j])
            i, j = i + 1, j + 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_version(v: str) -> tuple[int, str, str]:
    epoch, _, rest = v.partition(":") if ":" in v else ("0", "", v)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch or 0), upstream, revision


def compare_versions(a: str, b: str) -> int:
    """Negative, zero or positive as Debian version ``a`` sorts before, equal to or after ``b``."""
    ea, ua, ra = _split_version(a)
    eb, ub, rb = _split_version(b)
    return (ea - eb) or _compare_part(ua, ub) or _compare_part(ra, rb)


def newest(versions: Iterable[str]) -> str:
    best = None
    for v in versions:
        if best is None or compare_versions(v, best) > 0:
            best = v
    if best is None:
        raise ValueError("no versions")
    return best


# ---------------------------------------------------------------- package index text and pin resolution

Stanza = dict[str, str]


def parse_index(text: str) -> dict[str, list[Stanza]]:
    """Parse Packages-format text (what ``apt-cache show`` prints) into {package: [stanzas]}."""
    index: dict[str, list[Stanza]] = {}
    for block in re.split(r"\n\s*\n", text):
        stanza: Stanza = {}
        key = None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and key:
                stanza[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                stanza[key] = value.strip()
        if "Package" in stanza and "Version" in stanza:
            index.setdefault(stanza["Package"], []).append(stanza)
    return index


def depends_names(stanza: Stanza) -> list[str]:
    """Package names in a stanza's Pre-Depends and Depends, alternatives included."""
    names = []
    for field in ("Pre-Depends", "Depends"):
        for alt in re.split(r"[,|]", stanza.get(field, "")):
            name = alt.strip().split(" ")[0].split(":")[0]
            if name:
                names.append(name)
    return names


def name_stem(name: str) -> str:
    """A package name without its trailing soname version (libboost-filesystem1.90.0 -> libboost-filesystem)."""
    return re.sub(r"[0-9][0-9.]*(t64)?$", "", name)


def rename_candidates(name: str, index: Mapping[str, list[Stanza]]) -> list[str]:
    """Successors of a vanished library package: dependencies of the indexed packages with its stem."""
    stem = name_stem(name)
    if stem == name:
        return []
    found = {d for stanzas in index.values() for s in stanzas for d in depends_names(s)}
    return sorted(d for d in found if d != name and name_stem(d) == stem)


@dataclass(frozen=True)
class Choice:
    """What was taken for one pinned package."""
    pinned_name: str
    pinned: str
    name: str
    version: str
    stanza: Stanza

    @property
    def moved(self) -> bool:
        return (self.name, self.version) != (self.pinned_name, self.pinned)


def choose(pinned_name: str, pinned: str, index: Mapping[str, list[Stanza]], suite: str) -> tuple[Choice, str | None]:
    """Take the pinned version if the suite has it, else its newest version (or a renamed successor's).

    Returns the choice and a message when the pin was not honoured. Raises DebianFetchError when neither
    the package nor a successor is in the index.
    """
    stanzas = index.get(pinned_name, [])
    for s in stanzas:
        if s["Version"] == pinned:
            return Choice(pinned_name, pinned, pinned_name, pinned, s), None
    name = pinned_name
    if not stanzas:
        successors = [c for c in rename_candidates(pinned_name, index) if index.get(c)]
        if not successors:
            raise DebianFetchError(f"pinned {pinned_name} {pinned} is gone from {suite} and no successor was "
                                   f"found; update generator/headers.json")
        name = successors[-1]
        stanzas = index[name]
    version = newest(s["Version"] for s in stanzas)
    stanza = next(s for s in stanzas if s["Version"] == version)
    took = version if name == pinned_name else f"{name} {version}"
    note = "" if name == pinned_name else " (renamed)"
    return (Choice(pinned_name, pinned, name, version, stanza),
            f"pinned {pinned_name} {pinned} is gone from {suite}; took {took} instead{note}")


def deb_filename(choice: Choice) -> str:
    """The file name ``apt-get download`` gives a package (epoch colon written as %3a)."""
    arch = choice.stanza.get("Architecture", ARCH)
    return f"{choice.name}_{choice.version.replace(':', '%3a')}_{arch}.deb"


# ---------------------------------------------------------------- the machine's Debian mirror

def parse_sources(text: str) -> list[tuple[str, list[str]]]:
    """(URI, suites) of every enabled ``deb`` entry, one-line or deb822 format."""
    entries: list[tuple[str, list[str]]] = []
    lines = [ln.split("#", 1)[0].rstrip() for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    for ln in lines:
        m = re.match(r"^deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)", ln)
        if m:
            entries.append((m.group(2), [m.group(3)]))
    for block in re.split(r"\n\s*\n", "\n".join(lines)):
        fields = {k.strip().lower(): v.strip() for k, _, v in
                  (ln.partition(":") for ln in block.splitlines() if ":" in ln and not ln.startswith((" ", "deb ")))}
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes").lower() != "no":
            for uri in fields.get("uris", "").split():
                entries.append((uri, fields.get("suites", "").split()))
    return entries


def debian_mirror(etc: Path = Path("/etc/apt")) -> str:
    """The Debian archive URI this machine's apt uses (DNNBIND_DEBIAN_MIRROR overrides)."""
    if os.environ.get("DNNBIND_DEBIAN_MIRROR"):
        return os.environ["DNNBIND_DEBIAN_MIRROR"].rstrip("/")
    files = [etc / "sources.list"] + sorted((etc / "sources.list.d").glob("*.list")) \
        + sorted((etc / "sources.list.d").glob("*.sources"))
    for f in files:
        if f.is_file():
            for uri, _ in parse_sources(f.read_text(errors="replace")):
                if uri.rstrip("/").endswith("/debian"):
                    return uri.rstrip("/")
    raise DebianFetchError(f"no Debian archive found in {etc}/sources.list*; set DNNBIND_DEBIAN_MIRROR")


# ---------------------------------------------------------------- private apt

class PrivateApt:
    """apt-get/apt-cache with their own sources list, lists, cache and an empty dpkg status."""

    def __init__(self, state: Path, mirror: str, suite: str, components: Iterable[str] = ("main",)) -> None:
        self.state, self.mirror, self.suite = state, mirror, suite
        for d in ("lists/partial", "cache/archives/partial"):
            (state / d).mkdir(parents=True, exist_ok=True)
        (state / "sources.list").write_text(
            f"deb [arch={ARCH} signed-by={KEYRING}] {mirror} {suite} {' '.join(components)}\n")

    def options(self) -> list[str]:
        opts = {"Dir::Etc::SourceList": self.state / "sources.list", "Dir::Etc::SourceParts": "/dev/null",
                "Dir::Etc::Preferences": "/dev/null", "Dir::Etc::PreferencesParts": "/dev/null",
                "Dir::State": self.state, "Dir::State::Lists": self.state / "lists",
                "Dir::State::Status": "/dev/null", "Dir::Cache": self.state / "cache",
                "APT::Architecture": ARCH, "APT::Architectures": ARCH, "Acquire::Languages": "none"}
        if os.geteuid() == 0:
            opts["APT::Sandbox::User"] = "root"
        return [a for k, v in opts.items() for a in ("-o", f"{k}={v}")]

    def _run(self, tool: str, *args: str, cwd: Path | None = None, check: bool = True) -> str:
        proc = subprocess.run([tool, *self.options(), *args], cwd=cwd, capture_output=True, text=True)
        if check and proc.returncode:
            raise DebianFetchError(f"{tool} {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr.strip()}")
        return proc.stdout

    def update(self) -> None:
        self._run("apt-get", "-q", "update")

    def show(self, names: Iterable[str]) -> dict[str, list[Stanza]]:
        """The suite's stanzas for these names (names it lacks are simply absent)."""
        names = list(names)
        return parse_index(self._run("apt-cache", "show", *names, check=False)) if names else {}

    def download(self, specs: list[str], dest: Path) -> None:
        self._run("apt-get", "-q", "download", *specs, cwd=dest)


# ---------------------------------------------------------------- unpacking and checking the root

def unpack(deb: Path, root: Path, exclude: Iterable[str] = ()) -> None:
    """``dpkg -x`` the package into root; with excludes, extract through tar to skip those paths."""
    exclude = list(exclude)
    if not exclude:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        return
    tar = ["tar", "-x", "-C", str(root)] + [f"--exclude=./{p.strip('/')}" for p in exclude]
    data = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
    subprocess.run(tar, stdin=data.stdout, check=True)
    data.stdout.close()  # type: ignore[union-attr]
    if data.wait():
        raise DebianFetchError(f"dpkg-deb --fsys-tarfile {deb} failed")


def find_library(root: Path, soname: str, dirs: Iterable[str] = LIB_DIRS) -> Path | None:
    for d in dirs:
        if (root / d / soname).exists():
            return root / d / soname
    return None


def missing_sonames(root: Path, sonames: Iterable[str], dirs: Iterable[str] = LIB_DIRS) -> dict[str, str]:
    """{soname: needed by} for the DT_NEEDED closure of sonames not found in root (needs readelf)."""
    dirs = tuple(dirs)
    if not shutil.which("readelf"):
        return {}
    missing: dict[str, str] = {}
    seen: set[str] = set()
    todo = [(s, "headers.json") for s in sonames]
    while todo:
        soname, parent = todo.pop()
        if soname in seen:
            continue
        seen.add(soname)
        path = find_library(root, soname, dirs)
        if path is None:
            missing[soname] = parent
            continue
        out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
        todo += [(n, soname) for n in re.findall(r"\(NEEDED\).*\[(.+?)\]", out)]
    return missing


# ---------------------------------------------------------------- manifest and fetch

def suite_dir(config: Mapping[str, Any], cache_dir: Path = DEFAULT_CACHE) -> Path:
    """``<cache_dir>/debian/<suite>``: the apt state, the .debs, the root and the manifest."""
    return Path(cache_dir) / "debian" / config["suite"]


def root_dir(config: Mapping[str, Any], cache_dir: Path = DEFAULT_CACHE) -> Path:
    """Where the packages are unpacked (headers under ``root/usr/include``)."""
    return suite_dir(config, cache_dir) / "root"


def load_manifest(config: Mapping[str, Any], cache_dir: Path = DEFAULT_CACHE) -> dict[str, Any] | None:
    path = suite_dir(config, cache_dir) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def moves(manifest: Mapping[str, Any], role: str | None = None) -> list[str]:
    """"<pinned name> moved from X to Y" for every package (of a role) whose pin was not honoured."""
    out = []
    for pinned_name, p in manifest.get("packages", {}).items():
        if (role is None or p["role"] == role) and (p["name"], p["version"]) != (pinned_name, p["pinned"]):
            got = p["version"] if p["name"] == pinned_name else f"{p['name']} {p['version']}"
            out.append(f"{pinned_name} moved from {p['pinned']} to {got}")
    return out


def _request(config: Mapping[str, Any]) -> dict[str, Any]:
    request = {k: config.get(k) for k in ("suite", "header_packages", "runtime_packages", "extract_exclude")}
    if config.get("components", ["main"]) != ["main"]:          # non-free too (libcuda1)
        request["components"] = config["components"]
    return request


def _pins(config: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    pins = {n: (v, "header") for n, v in config.get("header_packages", {}).items()}
    pins.update({n: (v, "runtime") for n, v in config.get("runtime_packages", {}).items()})
    return pins


def root_complete(config: Mapping[str, Any], root: Path) -> bool:
    """True when root holds the entry header (if the config names one) and every configured library."""
    entry_ok = "entry" not in config or any((root / d / config["entry"]).is_file() for d in config.get("include_dirs", ["usr/include"]))
    dirs = config.get("library_dirs", LIB_DIRS)
    return entry_ok and all(find_library(root, s, dirs) for s in config.get("sonames", []))


def is_current(config: Mapping[str, Any], manifest: Mapping[str, Any] | None, root: Path) -> bool:
    """True when the manifest answers this config and the root is complete."""
    return bool(manifest) and manifest.get("request") == _request(config) and root_complete(config, root)


def _resolve(apt: PrivateApt, pins: Mapping[str, tuple[str, str]], suite: str) -> tuple[list[Choice], list[str]]:
    """Ask the suite about every pinned package (and successors of vanished ones); choose versions."""
    index = apt.show(pins)
    missing = [n for n in pins if n not in index]
    if missing:
        index.update(apt.show({c for n in missing for c in rename_candidates(n, index)}))
    results = [choose(name, pinned, index, suite) for name, (pinned, _) in pins.items()]
    return [c for c, _ in results], [m for _, m in results if m]


def _download(apt: PrivateApt, choices: list[Choice], debs: Path, log: Log) -> dict[str, Choice]:
    """Download the .debs not already in ``debs`` (right name and size); drop stale ones."""
    debs.mkdir(parents=True, exist_ok=True)
    wanted = {deb_filename(c): c for c in choices}
    todo = [c for f, c in wanted.items()
            if not (debs / f).is_file() or str((debs / f).stat().st_size) != c.stanza.get("Size")]
    t0 = time.monotonic()
    mb = sum(int(c.stanza.get("Size", 0)) for c in todo) / 1e6
    if todo:
        log(f"downloading {len(todo)} packages, {mb:.1f} MB:")
    for i, c in enumerate(todo, 1):               # one at a time, so that a slow mirror shows progress
        log(f"  [{i}/{len(todo)}] {c.name} {c.version} ({int(c.stanza.get('Size', 0)) / 1e6:.1f} MB)")
        apt.download([f"{c.name}={c.version}"], debs)
    log(f"downloaded {len(todo)} of {len(choices)} packages, {mb:.1f} MB in {time.monotonic() - t0:.1f} s")
    for stale in {p.name for p in debs.glob("*.deb")} - set(wanted):
        (debs / stale).unlink()
    return wanted


def _unpack_all(wanted: Mapping[str, Choice], debs: Path, root: Path, excludes: Mapping[str, list[str]],
                log: Log) -> None:
    """Unpack every .deb into a fresh ``root.partial`` and swap it in for ``root``."""
    t0 = time.monotonic()
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for f, c in wanted.items():
        unpack(debs / f, partial, excludes.get(c.name, excludes.get(c.pinned_name, [])))
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)
    log(f"unpacked into {root} in {time.monotonic() - t0:.1f} s")


def fetch(config: Mapping[str, Any], cache_dir: Path = DEFAULT_CACHE, *, refresh: bool = False,
          log: Log = print) -> Path:
    """Make ``<cache_dir>/debian/<suite>/root`` hold the configured packages; return that root.

    Does nothing when the manifest already answers the config (unless ``refresh``: then the suite is
    asked again and only what changed is downloaded and unpacked).
    """
    start = time.monotonic()
    suite, base = config["suite"], suite_dir(config, cache_dir)
    root, debs = base / "root", base / "debs"
    manifest = load_manifest(config, cache_dir)
    if not refresh and manifest and is_current(config, manifest, root):
        got = ", ".join(f"{p['name']} {p['version']}" for p in manifest["packages"].values()
                        if p["role"] == "header" or not config.get("header_packages"))
        log(f"{config['title']} from Debian {suite}: up to date ({got}); {time.monotonic() - start:.2f} s")
        for line in manifest.get("messages", []):
            log(f"note: {line}")
        return root

    mirror = debian_mirror()
    apt = PrivateApt(base / "apt", mirror, suite, config.get("components", ["main"]))
    log(f"{config['title']}: asking {mirror} {suite} ...")
    apt.update()
    pins = _pins(config)
    choices, messages = _resolve(apt, pins, suite)
    for message in messages:
        log(f"WARNING: {message}")
    wanted = _download(apt, choices, debs, log)
    unpacked = {p["deb"] for p in manifest.get("packages", {}).values()} if manifest else set()
    same_excludes = bool(manifest) and manifest.get("request", {}).get("extract_exclude") == config.get("extract_exclude")
    if unpacked != set(wanted) or not same_excludes or not root_complete(config, root):
        _unpack_all(wanted, debs, root, config.get("extract_exclude", {}), log)
    host = set(config.get("host_sonames", []))              # the system's own libc and friends
    dirs = config.get("library_dirs", LIB_DIRS)
    for soname, parent in missing_sonames(root, config.get("sonames", []), dirs).items():
        if soname not in host:
            log(f"WARNING: {soname} (needed by {parent}) is not in the unpacked root; the host's copy would be used")
    packages = {c.pinned_name: {"role": pins[c.pinned_name][1], "pinned": c.pinned, "name": c.name,
                                "version": c.version, "deb": deb_filename(c)} for c in choices}
    (base / MANIFEST).write_text(json.dumps(
        {"suite": suite, "mirror": mirror, "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
         "request": _request(config), "packages": packages, "messages": messages}, indent=2) + "\n")
    for c in choices:
        log(f"  {c.name} {c.version}" + ("" if not c.moved else f"   (pinned {c.pinned_name} {c.pinned})"))
    log(f"{config['title']} from Debian {suite}: done in {time.monotonic() - start:.1f} s; root {root}")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator.debian", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="download and unpack a library's pinned Debian packages")
    f.add_argument("library", help="key in generator/headers.json, e.g. miopen")
    f.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"default {DEFAULT_CACHE}")
    f.add_argument("--refresh", action="store_true", help="ask the suite again even when the cache is complete")
    args = parser.parse_args(argv)
    config = json.loads((REPO_ROOT / "generator" / "headers.json").read_text())[args.library]
    if config.get("source") != "debian":
        parser.error(f"{args.library} does not come from Debian (source={config.get('source')!r})")
    try:
        fetch(config, args.cache, refresh=args.refresh)
    except DebianFetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
