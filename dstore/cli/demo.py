"""``dstore demo``: its arguments and its command."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_demo", "cmd_demo"]


def add_demo(sub: Any) -> None:
    """Add ``dstore demo`` to the subcommands ``sub``."""
    p = sub.add_parser("demo", help="build sample data from real photos and convert it")
    p.add_argument(
        "dir",
        nargs="?",
        default="dstore-demo",
        help="folder for the sample data and outputs (default: %(default)s)",
    )
    p.add_argument(
        "--records", type=int, default=300, help="sample records to build (default: %(default)s)"
    )
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    for line in run_demo(args.dir, records=args.records):
        print(line)
    return 0
