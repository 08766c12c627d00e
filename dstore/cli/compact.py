"""``dstore compact`` and ``dstore prune``: a sharded dataset's shards rewritten to the
target size as a new version, and what only older versions need deleted."""

from __future__ import annotations

import argparse
from typing import Any

from .common import bars, from_argument, key_values, print_lines

__all__ = ["add_compact", "add_prune"]


def add_compact(sub: Any) -> None:
    """Add ``dstore compact`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "compact",
        help="rewrite a sharded dataset's shards (many small ones after many appends) into "
        "shards of the target size, as a new version",
        description="Rewrite the latest version of the sharded dataset at PATH into shards of "
        "the target size, as its next version: the same records in the same order. The old "
        "shards move to .dstore-versions/superseded/, where older versions still read them, "
        "until 'dstore prune' deletes them.",
    )
    p.add_argument("path", help="the dataset folder")
    p.add_argument(
        "-o",
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="shard_mb=SIZE: the target shard size (default: the dataset's)",
    )
    from_argument(p, "input format: %(formats)s (default: from PATH)")
    p.set_defaults(func=_cmd_compact)


def _cmd_compact(args: argparse.Namespace) -> int:
    from ..api.versions import compact

    with bars(("compact", "rec")) as (bar,):
        report = compact(
            args.path, format=args.from_format, options=key_values(args.option), progress=bar
        )
    print_lines(report.summary().replace("appended ", "compacted ", 1).splitlines())
    return 0


def add_prune(sub: Any) -> None:
    """Add ``dstore prune`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "prune",
        help="delete what only older versions need, keeping the N latest (the others are "
        "listed as pruned)",
        description="Keep the N latest versions of the sharded dataset at PATH: delete the "
        "shards that only older versions list (those a compaction superseded) and files of "
        "appends killed before their commit. The older versions stay in 'dstore log' as "
        "pruned; reading one is an error.",
    )
    p.add_argument("path", help="the dataset folder")
    p.add_argument(
        "--keep",
        type=int,
        required=True,
        metavar="N",
        help="versions to keep, >= 1 (required: no default)",
    )
    from_argument(p, "input format: %(formats)s (default: from PATH)")
    p.set_defaults(func=_cmd_prune)


def _cmd_prune(args: argparse.Namespace) -> int:
    from ..api.versions import prune

    print(prune(args.path, keep=args.keep, format=args.from_format).summary())
    return 0
