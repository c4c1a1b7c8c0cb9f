"""The generator's command line: ``python -m generator {headers,deviceless,generate,check,report,diff} LIB``.

Before anything else it checks generator/headers.json and generator/pointer_overrides.json against
their JSON Schemas (generator/schemas/). Its known failures end in messages on stderr, each line
starting ``python -m generator COMMAND: error:``, never in a traceback:

exit status 0: done (``check``: the committed modules are fresh);
exit status 1: a problem in the inputs, which a maintainer fixes there: an input file that is not
    valid JSON (``FILE:LINE:COLUMN``) or breaks its schema (one line per problem: the file, the entry
    and what is wrong), header diagnostics (file and line), classification problems (unclassified
    or stale entries in pointer_overrides.json), a download that fails or whose sha256 differs from
    its pin; ``check`` also exits 1 when a committed module is stale;
exit status 2: a usage mistake: an unknown library, a --headers directory that is not there or lacks
    the headers (or no headers fetched: run `make headers`), a version or Debian suite that does not
    exist, or arguments argparse refuses.

A traceback means a bug in the generator itself.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

from generator import config as cfg, pipeline
from generator.fetch import WheelHashError
from generator.problems import InputProblem

PROG = "python -m generator"
DISTRO_INFO = Path("/usr/share/distro-info/debian.csv")
#: suite names Debian's archive answers to besides the codenames
SUITE_ALIASES = ("unstable", "testing", "stable", "oldstable", "oldoldstable", "experimental")


class UsageError(Exception):
    """A mistake in what the user typed: reported in one line, exit status 2."""


def check_libraries(names: list[str]) -> None:
    known = sorted(cfg.load_all())
    for name in names:
        if name not in known:
            raise UsageError(f"unknown library {name!r}; valid: {', '.join(known)}")


def check_headers_dir(path: Path | None) -> None:
    if path is not None and not path.is_dir():
        raise UsageError(f"--headers {str(path)!r} is not a directory; give the directory that holds the "
                         f"library's headers, or leave --headers out to use the ones `make headers` fetched")


def debian_suites(path: Path = DISTRO_INFO) -> set[str] | None:
    """Every suite name Debian has had (codenames from distro-info-data, plus the aliases); None when
    this machine lacks distro-info-data (then apt itself says whether a suite exists)."""
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        return {row["series"] for row in csv.DictReader(f)} | set(SUITE_ALIASES)


def valid_specs(library: str) -> str:
    """What ``diff --old/--new`` accepts for this library, in words."""
    if cfg.load_all()[library]["source"] == "debian":
        return "'pinned', a headers directory, or a Debian suite (sid, unstable, experimental, testing, a codename)"
    return "'pinned', a headers directory, a release such as 9.1.1.17, or package==version"


def check_spec(library: str, spec: str) -> None:
    """Refuse, before anything is downloaded, a diff side that cannot name headers."""
    from generator import versions
    config = cfg.load_all()[library]
    if spec == versions.PINNED or Path(spec).is_dir():
        return
    if config["source"] == "debian":
        suites = debian_suites()
        if versions.SUITE.match(spec) and (suites is None or spec in suites):
            return
        what = "is not a directory or a Debian suite" if suites is not None else "is not a directory or a suite name"
    else:
        if versions.VERSION.match(spec):
            return
        what = "is not a directory or a version"
    raise UsageError(f"{spec!r} {what}; valid for {library}: {valid_specs(library)}")


def one_line(exc: BaseException) -> str:
    """An exception's message on one line: its lines joined with "; ", tools' "ERROR:"/"E:" dropped."""
    parts = []
    for line in str(exc).splitlines():
        line = line.strip().replace("ERROR: ", "").removeprefix("E: ").rstrip(":")
        if line:
            parts.append(line)
    return "; ".join(parts) or type(exc).__name__


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n", 1)[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    try:
        libraries = ", ".join(sorted(cfg.load_all()))
    except InputProblem:                     # main() reports it, after parsing the command line
        libraries = "a library of generator/headers.json"
    for name, help_text in [("headers", "download the pinned headers into .cache/"),
                            ("deviceless", "download libcuda.so.1 and cuBLASLt into .cache/deviceless/ (tests only)"),
                            ("generate", "regenerate src/dnnbind/gen/LIB.py and show what changed"),
                            ("check", "fail when the committed module differs from a fresh generation"),
                            ("report", "print counts: functions, enums, structs, macros, pointer kinds")]:
        s = sub.add_parser(name, help=help_text)
        s.add_argument("library", nargs="+", help=libraries)
        if name in ("generate", "check", "report"):
            s.add_argument("--headers", type=Path, help="parse headers from this directory instead")
    s = sub.add_parser("diff", help="Markdown API diff between two header versions (directories or versions)")
    s.add_argument("library", nargs=1, help=libraries)
    s.add_argument("--old", required=True, help="directory, version (9.1.1.17), package==version or Debian suite")
    s.add_argument("--new", default="pinned", help="the same; default: the pinned headers in .cache/")
    s.add_argument("--output", type=Path, help="also write the Markdown to this file")
    return p


def run(args: argparse.Namespace) -> int:
    status = 0
    for library in args.library:
        if args.command == "headers":
            from generator import fetch
            fetch.fetch(library)
        elif args.command == "deviceless":
            from generator import deviceless
            if "deviceless" not in cfg.load_all()[library]:
                raise UsageError(f"{library} has no deviceless libraries (only cudnn has)")
            deviceless.fetch_libraries(library)
        elif args.command == "generate":
            started = time.perf_counter()
            result = pipeline.build(library, args.headers)
            changes = pipeline.write(result)
            print(pipeline.report_text(result))
            print(changes)
            print(f"{library}: generated in {time.perf_counter() - started:.2f} s")
        elif args.command == "check":
            status |= pipeline.check(library, args.headers)
        elif args.command == "diff":
            from generator import versions
            text = versions.diff_text(library, args.old, args.new)
            print(text)
            if args.output:
                args.output.write_text(text)
        elif args.command == "report":
            print(pipeline.report_text(pipeline.build(library, args.headers)))
    return status


def main(argv: list[str] | None = None) -> int:
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)       # progress lines appear as they happen under make
    args = parser().parse_args(argv)
    from generator.debian import DebianFetchError
    try:
        cfg.validate()
        check_libraries(args.library)
        check_headers_dir(getattr(args, "headers", None))
        if args.command == "diff":
            for spec in (args.old, args.new):
                check_spec(args.library[0], spec)
        try:
            return run(args)
        except FileNotFoundError as exc:                   # no headers where the user pointed, no such release
            if args.command == "headers":
                raise
            valid = f"; valid --old/--new: {valid_specs(args.library[0])}" if args.command == "diff" else ""
            raise UsageError(one_line(exc) + valid) from None
        except DebianFetchError as exc:
            if args.command == "diff":
                raise UsageError(f"{one_line(exc)}; valid --old/--new: {valid_specs(args.library[0])}") from None
            raise
    except UsageError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (DebianFetchError, WheelHashError) as exc:          # the network or the index, not the user
        print(f"{PROG} {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except InputProblem as exc:                                  # the inputs: JSON files, headers, overrides
        for line in exc.lines():
            print(f"{PROG} {args.command}: error: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
