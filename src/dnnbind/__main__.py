"""Command line: ``python -m dnnbind info``, ``python -m dnnbind ops`` and ``python -m dnnbind plans --device FILE.json``."""
from __future__ import annotations

import argparse
import sys

from dnnbind.highlevel.cudnn.graph import cli as plans


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dnnbind", description="dnnbind command line")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("info", help="versions, libraries found (or why not), CuPy, PyTorch and GPUs")
    commands.add_parser("ops", help="the support matrix: each op on each backend, its dtypes and features")
    plans.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "info":
        from dnnbind.info import main as info
        return info()
    if args.command == "ops":
        from dnnbind.highlevel.support import main as ops
        return ops()
    if args.command == "plans":
        return plans.main(args)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
