"""``python -m dnnbind plans --device FILE.json [--cache-dir DIR]``: build the standard plans ahead of time.

Imports nothing heavy until the subcommand runs (``python -m dnnbind info`` parses the same arguments)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(commands: Any) -> None:
    """The ``plans`` subcommand's arguments."""
    p = commands.add_parser("plans", help="build cuDNN graph-API plans ahead of time for a device, without a GPU")
    p.add_argument("--device", required=True, metavar="FILE.json",
                   help="the device's properties as cuDNN's JSON (tests/data/deviceprop/ has examples)")
    p.add_argument("--cache-dir", metavar="DIR", help="store the plans in this persistent plan cache")
    p.add_argument("--dtype", action="append", help="only this dtype (repeatable; float16, bfloat16, float32)")
    p.add_argument("--layout", action="append", help="only this layout (repeatable; NCHW, NHWC)")
    p.add_argument("--op", action="append", help="only this graph op (repeatable; conv_forward, ...)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON lines instead of a table")
    p.add_argument("--deterministic", action="store_true", help="only engines with bitwise reproducible results")
    p.add_argument("--workspace-limit", type=int, metavar="BYTES",
                   help="only plans whose workspace fits (default: the backend's, 1 GiB)")
    p.add_argument("--allow-tf32", action="store_true", help="float32 convolutions may run on TF32 tensor cores")


def main(args: argparse.Namespace) -> int:
    from dnnbind.highlevel.cudnn.graph import ahead
    from dnnbind.highlevel.cudnn.graph.device import Device
    from dnnbind.runtime import deviceless
    try:
        device = Device.from_file(args.device)
    except (OSError, ValueError) as exc:
        print(f"error: --device {args.device}: {exc}", file=sys.stderr)
        return 2
    try:
        specs = list(ahead.standard_specs(args.dtype or ahead.DTYPES, args.layout or ahead.LAYOUTS,
                                          args.op or ahead.OPS))
    except (TypeError, ValueError) as exc:
        print(f"error: --dtype/--layout/--op: {exc}", file=sys.stderr)
        return 2
    from dnnbind.highlevel.gpu.settings import Settings
    try:
        limit = {} if args.workspace_limit is None else {"workspace_limit": args.workspace_limit}
        settings = Settings(deterministic=args.deterministic, allow_tf32=args.allow_tf32, **limit)
    except (TypeError, ValueError) as exc:
        print(f"error: --workspace-limit: {exc}", file=sys.stderr)
        return 2
    try:
        deviceless.enable()
    except deviceless.DevicelessError as exc:
        print(f"error: cannot build plans here: {exc}", file=sys.stderr)
        return 1
    rows = ahead.build_all(device, specs, settings, cache_dir=args.cache_dir)
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(f"device: {device.name} (sm {device.properties['deviceVer']}, fingerprint {device.fingerprint})")
        print(f"settings: deterministic={settings.deterministic}, workspace_limit={settings.workspace_limit}, "
              f"allow_tf32={settings.allow_tf32}")
        print(ahead.table(rows))
        if args.cache_dir:
            print(f"stored {sum(1 for r in rows if 'file' in r)} plan set(s) in {args.cache_dir}")
    return 0 if all(r["plans"] for r in rows) else 3
