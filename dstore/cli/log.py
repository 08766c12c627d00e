"""``dstore log``: the versions of a dataset, as a table or JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import from_argument, print_lines

__all__ = ["add_log"]


def add_log(sub: Any) -> None:
    """Add ``dstore log`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "log",
        help="the versions of a dataset: time, operation, records per split, source",
        description="List the versions of the dataset at PATH, oldest first: the first write is "
        "version 1, each append and compaction the next; per version its UTC time, what made "
        "it, the records per split and how many it added, its source, and whether it can still "
        "be read (kept), was pruned, or was replaced (formats written whole by each append).",
    )
    p.add_argument("path", help="the dataset")
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array of objects (version, time, operation, records, added, source, "
        "state) (default: a table)",
    )
    from_argument(p, "input format: %(formats)s (default: from PATH)")
    p.set_defaults(func=_cmd_log)


def _cmd_log(args: argparse.Namespace) -> int:
    from ..api.versions import log

    report = log(args.path, format=args.from_format)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print_lines(report.lines())
    return 0
