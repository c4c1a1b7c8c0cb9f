"""Command line: ``python -m dnnbind info`` and ``python -m dnnbind ops``."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dnnbind", description="dnnbind command line")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("info", help="versions, libraries found (or why not), CuPy, PyTorch and GPUs")
    commands.add_parser("ops", help="the support matrix: each op on each backend, its dtypes and features")
    args = parser.parse_args(argv)
    if args.command == "info":
        from dnnbind.info import main as info
        return info()
    if args.command == "ops":
        from dnnbind.highlevel.support import main as ops
        return ops()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
