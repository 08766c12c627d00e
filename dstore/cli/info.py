"""``dstore info``: its arguments and its command."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_drop, add_follow_links, drop_options, from_argument, print_lines
from .versions import add_version_flag, version_keywords

__all__ = ["add_info", "cmd_info"]


def add_info(sub: Any) -> None:
    """Add ``dstore info`` to the subcommands ``sub``."""
    p = sub.add_parser("info", help="splits, fields, shapes, dtypes, sizes, codec details")
    p.add_argument("path", help="dataset to describe")
    add_drop(p)
    add_follow_links(p)
    # --from names an input's format in every subcommand; --format is the older spelling
    from_argument(
        p, "input format: %(formats)s (default: from PATH's extension or contents)", "--format"
    )
    add_version_flag(p, "PATH")
    p.set_defaults(func=cmd_info)


def cmd_info(args: argparse.Namespace) -> int:
    from .. import api

    report = api.info(
        args.path,
        format=args.from_format,
        follow_links=args.follow_links,
        **drop_options(args),
        **version_keywords(args),
    )
    print_lines(report.lines())
    return 0
