"""``dstore verify``: its arguments and its command."""

from __future__ import annotations

import argparse
from typing import Any

from .common import EXIT_MISMATCH, add_follow_links, bars, from_argument, print_lines
from .versions import add_version_flag, version_keywords

__all__ = ["add_verify", "cmd_verify"]


def add_verify(sub: Any) -> None:
    """Add ``dstore verify`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "verify",
        help="compare two datasets record by record, or check one alone (exit 1 on any problem)",
    )
    p.add_argument("a", help="the reference dataset")
    p.add_argument(
        "b",
        nargs="?",
        help="the dataset compared with A (default: none: check A alone, checksums, "
        "then every record decoded)",
    )
    from_argument(
        p,
        "input format of A, and of B unless --from-b is given: %(formats)s "
        "(default: from the paths)",
        "--format",
    )
    p.add_argument(
        "--from-b",
        dest="b_format",
        metavar="FORMAT",
        help="input format of B (default: --from, else from B's path)",
    )
    add_follow_links(p)
    add_version_flag(p, "B (A when alone)")
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from .. import api

    if args.b_format and not args.b:
        raise argparse.ArgumentTypeError("--from-b needs a second dataset B")
    with bars(("scan", "file"), ("verify", "rec")) as (scan, bar):
        if args.b:
            b_format = args.b_format or args.from_format
            report = api.verify(
                args.a,
                args.b,
                a_format=args.from_format,
                b_format=b_format,
                follow_links=args.follow_links,
                progress=bar,
                scan_progress=scan,
                **version_keywords(args),
            )
        else:
            report = api.check(
                args.a,
                format=args.from_format,
                follow_links=args.follow_links,
                progress=bar,
                scan_progress=scan,
                **version_keywords(args),
            )
    print_lines(report.lines())
    return 0 if report.ok else EXIT_MISMATCH
