"""Command line: ``python -m dnnbind info``."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dnnbind", description="dnnbind command line")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("info", help="versions, libraries found (or why not), CuPy, PyTorch and GPUs")
    args = parser.parse_args(argv)
    if args.command == "info":
        from dnnbind.info import main as info
        return info()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
