"""``dstore index``: its arguments and its command (record indexes for TFRecord files)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import add_follow_links, codecs_where, fill_help, from_argument

__all__ = ["add_index"]


def add_index(sub: Any) -> None:
    """Add ``dstore index`` to the subcommands ``sub``: ``--from``'s help lists the
    formats with record indexes."""
    p = sub.add_parser(
        "index",
        help="write record indexes for TFRecord files dstore did not write, so any record is "
        "one seek away",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="a file, a folder of shards, a glob")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="write <file>.idx files in DALI's format ('offset length' per line, read by NVIDIA "
        "DALI and the tfrecord package) into DIR (default: into .dstore-index/ in each file's "
        "folder, where dstore reads them and no shard glob finds them)",
    )
    add_follow_links(p)
    from_argument(
        p, "input format, one with record indexes: %(formats)s (default: from PATH's extension)"
    )
    fill_help(p._actions[-1], formats=lambda: codecs_where("frame_indexes"))
    p.set_defaults(func=_cmd_index)


def _cmd_index(args: argparse.Namespace) -> int:
    from .. import api

    report = api.index(
        args.paths, out=args.out, format=args.from_format, follow_links=args.follow_links
    )
    print(report.summary())
    return 0
