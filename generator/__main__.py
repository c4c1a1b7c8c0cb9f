"""The generator's command line: ``python -m generator {headers,generate,check,report,diff} LIB``."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from generator import pipeline


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in [("headers", "download the pinned headers into .cache/"),
                            ("generate", "regenerate src/dnnbind/gen/LIB.py and show what changed"),
                            ("check", "fail when the committed module differs from a fresh generation"),
                            ("report", "print counts: functions, enums, structs, macros, pointer kinds")]:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("library", nargs="+", help="cudnn, miopen")
        if name in ("generate", "check", "report"):
            p.add_argument("--headers", type=Path, help="parse headers from this directory instead")
    p = sub.add_parser("diff", help="Markdown API diff between two header versions (directories or versions)")
    p.add_argument("library", nargs=1, help="cudnn, miopen")
    p.add_argument("--old", required=True, help="directory, version (9.1.1.17), package==version or Debian suite")
    p.add_argument("--new", default="pinned", help="the same; default: the pinned headers in .cache/")
    p.add_argument("--output", type=Path, help="also write the Markdown to this file")
    args = parser.parse_args(argv)
    status = 0
    for library in args.library:
        if args.command == "headers":
            from generator import fetch
            fetch.fetch(library)
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


if __name__ == "__main__":
    sys.exit(main())
