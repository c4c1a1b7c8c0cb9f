"""Header sets other than the pinned one: a directory, a PyPI release, or another Debian suite.

``resolve(library, spec)`` turns what a maintainer types after ``--old``/``--new`` into headers:

* a directory: headers already there (laid out like the cache, or holding the entry header itself;
  then the pinned cache supplies the other include directories, such as CUDA's);
* for a PyPI library, a version (``9.1.1.17``) or ``package==version``: that release's wheel is
  downloaded into ``.cache/wheels`` and its include directory unpacked into
  ``.cache/headers/<lib>-<version>/`` next to the pinned CUDA header wheels' (``libraries=True``
  unpacks its shared libraries too). A bare version is looked for under the pinned package name,
  then under the same name for older CUDA majors (nvidia-cudnn-cu13, -cu12, -cu11);
* ``pinned``: the pinned headers that ``make headers`` put in the cache;
* for a Debian library, a suite name (``experimental``): the configured header packages at the
  newest version that suite has, unpacked under ``.cache/debian/<suite>/root``.

Nothing here is version-specific: the parse, classification (non-strict) and rendering are the
generator's own.
"""
from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from generator import classify, config as cfg, fetch, parse, pipeline, render
from generator.api import api_of_ir
from generator.config import HeaderSet

VERSION = re.compile(r"^(?:(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==)?(?P<version>\d+(?:\.\d+)+)$")
SUITE = re.compile(r"^[a-z][a-z0-9-]*$")
PINNED = "pinned"
Log = Callable[[str], None]


def to_stderr(line: str) -> None:
    """Progress goes to stderr, so that ``diff``'s Markdown on stdout stays clean."""
    print(line, file=sys.stderr)


@dataclass(frozen=True)
class HeaderSource:
    """Where one side of a diff comes from."""
    library: str
    label: str                  # for people: "nvidia-cudnn-cu12 8.9.7.29 + nvidia-cuda-runtime 13.5.37 ..."
    headers: HeaderSet
    config: dict[str, Any]
    root: Path | None = None    # the unpacked cache root, when fetched


def version_root(library: str, version: str) -> Path:
    return cfg.CACHE_DIR / "headers" / f"{library}-{version}"


def candidate_names(name: str) -> list[str]:
    """The pinned wheel name, then the same name for each older CUDA major (…-cu13, -cu12, -cu11)."""
    m = re.match(r"^(.*-cu)(\d+)$", name)
    if not m:
        return [name]
    return [f"{m.group(1)}{n}" for n in range(int(m.group(2)), 10, -1)]


def _wheel(names: list[str], version: str) -> tuple[str, Path]:
    """The first of ``names`` that has a wheel of ``version`` (cached, or downloaded with pip); a pinned
    release is checked against its hashes (see fetch.verify_wheel)."""
    for name in names:
        found = fetch.find_wheel(name, version)
        if found:
            return name, fetch.verify_wheel(found, name, version)
    errors = []
    for name in names:
        fetch.wheel_dir().mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                               "--only-binary=:all:", "--dest", str(fetch.wheel_dir()), f"{name}=={version}"],
                              capture_output=True, text=True)
        found = fetch.find_wheel(name, version)
        if proc.returncode == 0 and found:
            return name, fetch.verify_wheel(found, name, version)
        errors.append(f"{name}=={version}: {(proc.stderr.strip().splitlines() or ['no wheel'])[-1]}")
    raise FileNotFoundError("no wheel found on PyPI:\n  " + "\n  ".join(errors))


def _extract(wheel: Path, prefix: str, root: Path) -> int:
    prefix = prefix.rstrip("/") + "/"
    count = 0
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.namelist():
            if member.startswith(prefix) and not member.endswith("/"):
                zf.extract(member, root)
                count += 1
    return count


def library_prefixes(config: dict[str, Any]) -> list[str]:
    """Where the library's wheel keeps its shared objects (the site-packages steps of its search)."""
    return [step[1] for step in config.get("library_search", []) if step[0] == "site-packages"]


def fetch_pypi_version(library: str, spec: str, *, libraries: bool = False, log: Log = to_stderr) -> Path:
    """Unpack one release's headers (and its libraries when asked) into ``.cache/headers/<lib>-<version>``."""
    config = cfg.load_all()[library]
    m = VERSION.match(spec)
    if not m:
        raise ValueError(f"{spec!r} is not a version (9.1.1.17) or package==version")
    version, main, deps = m.group("version"), config["packages"][0], config["packages"][1:]
    root = version_root(library, version)
    manifest_path = root / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    if manifest and (manifest.get("libraries") or not libraries) and \
            (not m.group("name") or m.group("name") in manifest["packages"]):
        return root
    started = time.perf_counter()
    name, wheel = _wheel([m.group("name")] if m.group("name") else candidate_names(main["name"]), version)
    if not _extract(wheel, main["include"], root):
        raise FileNotFoundError(f"{wheel.name} has no {main['include']}/ (the pinned wheel's include directory)")
    if libraries:
        for prefix in library_prefixes(config):
            _extract(wheel, prefix, root)
    packages = {name: version}
    for dep in deps:
        _extract(fetch.download_wheel(dep["name"], dep["version"]), dep["include"], root)
        packages[dep["name"]] = dep["version"]
    manifest_path.write_text(json.dumps({"packages": packages, "libraries": libraries}, indent=2) + "\n")
    log(f"{config['title']}: unpacked {_describe(packages)} into {root} in {time.perf_counter() - started:.1f} s")
    return root


def _describe(packages: dict[str, str]) -> str:
    return " + ".join(f"{n} {v}" for n, v in packages.items())


def fetch_debian_suite(library: str, suite: str, *, log: Log = to_stderr) -> tuple[Path, dict[str, Any]]:
    """The configured header packages, at the newest version ``suite`` has, under .cache/debian/<suite>."""
    from generator import debian
    config = copy.deepcopy(cfg.load_all()[library])
    if suite == config["suite"]:
        return debian.fetch(config, cfg.CACHE_DIR, log=log), config
    config["suite"] = suite
    config["runtime_packages"] = {}                 # headers only: runtime closures differ between suites
    root = debian.fetch({**config, "sonames": []}, cfg.CACHE_DIR, log=log)
    return root, config


def resolve(library: str, spec: str, *, log: Log = to_stderr) -> HeaderSource:
    """What ``--old``/``--new`` name: a directory, a PyPI version, or a Debian suite."""
    config = cfg.load_all()[library]
    path = Path(spec)
    if spec == PINNED:
        return HeaderSource(library, f"pinned: {pinned_label(library, config)}", cfg.header_set(library, config), config)
    if path.is_dir():
        return HeaderSource(library, str(path), directory_headers(library, path, config), config)
    if config["source"] == "pypi" and VERSION.match(spec):
        root = fetch_pypi_version(library, spec, log=log)
        packages = json.loads((root / "manifest.json").read_text())["packages"]
        return HeaderSource(library, _describe(packages), cfg.header_set(library, config, root), config, root)
    if config["source"] == "debian" and SUITE.match(spec):
        from generator import debian
        root, suite_config = fetch_debian_suite(library, spec, log=log)
        manifest = debian.load_manifest(suite_config, cfg.CACHE_DIR) or {}
        got = {p["name"]: p["version"] for p in manifest.get("packages", {}).values() if p["role"] == "header"}
        return HeaderSource(library, f"Debian {spec}: {_describe(got)}", cfg.header_set(library, suite_config, root),
                            suite_config, root)
    kind = "a version (9.1.1.17) or package==version" if config["source"] == "pypi" else "a Debian suite (experimental)"
    raise ValueError(f"{spec!r} is neither a directory nor {kind}")


def pinned_label(library: str, config: dict[str, Any]) -> str:
    """The pinned packages (for Debian: the versions ``make headers`` actually got)."""
    if config["source"] == "pypi":
        return _describe({p["name"]: p["version"] for p in config["packages"]})
    from generator import debian
    manifest = debian.load_manifest(config, cfg.CACHE_DIR) or {}
    got = {p["name"]: p["version"] for p in manifest.get("packages", {}).values() if p["role"] == "header"}
    return f"Debian {config['suite']}: {_describe(got or config.get('header_packages', {}))}"


def directory_headers(library: str, path: Path, config: dict[str, Any]) -> HeaderSet:
    """Headers in ``path``: a cache-like tree, or a directory holding the entry header itself (the
    pinned cache then supplies the include directories that do not hold the entry header)."""
    try:
        return cfg.header_set(library, config, path)
    except FileNotFoundError:
        if not (path / config["entry"]).exists():
            raise
    try:
        others = [d for d in cfg.header_set(library, config).include_dirs if not (d / config["entry"]).exists()]
    except FileNotFoundError:
        others = []
    return HeaderSet(library, (path, *others), path / config["entry"], str(path))


def build(source: HeaderSource, strict: bool = False) -> pipeline.Result:
    """Parse, classify (non-strict unless asked) and render one header set; nothing is written."""
    module = parse.parse(source.headers, source.config)
    classification = classify.classify(module, cfg.load_overrides(source.library), strict=strict)
    text = render.render(module, classification, source.config)
    stub = render.render_stub(module, classification, source.config)
    return pipeline.Result(source.library, source.config, module, classification, text, stub)


def diff_text(library: str, old_spec: str, new_spec: str = "pinned", *, log: Log = to_stderr) -> str:
    """The Markdown API diff between two header sets, with both sides' counts."""
    from generator import diff
    old_source, new_source = resolve(library, old_spec, log=log), resolve(library, new_spec, log=log)
    old_result, new_result = build(old_source), build(new_source)
    old = api_of_ir(old_result.module, old_result.classification)
    new = api_of_ir(new_result.module, new_result.classification)
    return diff.markdown(diff.compare(old, new), old_source.label, new_source.label, diff.counts_table(old, new))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator.versions", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in [("fetch", "unpack a release's headers (and libraries) into the cache"),
                            ("report", "counts for each version, as `python -m generator report` prints them")]:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("library")
        p.add_argument("specs", nargs="+", help="directory, version, package==version or Debian suite")
        if name == "fetch":
            p.add_argument("--libraries", action="store_true", help="unpack the shared libraries too")
    args = parser.parse_args(argv)
    for spec in args.specs:
        if args.command == "fetch":
            print(fetch_pypi_version(args.library, spec, libraries=args.libraries))
        else:
            source = resolve(args.library, spec)
            print(f"[{source.label}]\n{pipeline.report_text(build(source))}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
