"""Datasets that grow, on the command line: ``convert --append``, ``--version N`` on the
read commands, and ``log``, ``compact``, ``prune``; each makes one call into the API."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = [
    "add_commands",
    "add_convert_flags",
    "add_version_flag",
    "convert_keywords",
    "version_keywords",
]


def _version(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(
            f"a version is a whole number >= 1 (dstore log lists them); got {text!r}"
        )
    return number


def add_version_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--version",
        type=_version,
        metavar="N",
        help=f"read {what} as it was at version N ('dstore log' lists them; default: the latest)",
    )


def version_keywords(args: argparse.Namespace) -> dict[str, Any]:
    return {"version": args.version} if getattr(args, "version", None) is not None else {}


def add_convert_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--append",
        action="store_true",
        help="add SRC's records after DST's, split by split, as DST's next version; with DST's "
        "own settings (dtype policy, image codec, -o options, layout: a different one given "
        "is an error). Refused when the schemas disagree or SRC is in DST's history "
        "(default: write a new DST)",
    )
    p.add_argument(
        "--append-again",
        action="store_true",
        help="with --append: append SRC even though DST's history holds it (default: refuse)",
    )
    add_version_flag(p, "SRC")


def convert_keywords(args: argparse.Namespace) -> dict[str, Any]:
    return {"append": args.append, "append_again": args.append_again, **version_keywords(args)}


def _cmd_log(args: argparse.Namespace) -> int:
    from ..api.versions import log

    report = log(args.path, format=args.from_format)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        from . import _print_lines

        _print_lines(report.lines())
    return 0


def _cmd_compact(args: argparse.Namespace) -> int:
    from ..api.versions import compact
    from . import _bars, _key_values, _print_lines

    with _bars(("compact", "rec")) as (bar,):
        report = compact(
            args.path, format=args.from_format, options=_key_values(args.option), progress=bar
        )
    _print_lines(report.summary().replace("appended ", "compacted ", 1).splitlines())
    return 0


def _cmd_prune(args: argparse.Namespace) -> int:
    from ..api.versions import prune

    print(prune(args.path, keep=args.keep, format=args.from_format).summary())
    return 0


def add_commands(sub: Any, from_argument: Any) -> None:
    """``log``, ``compact`` and ``prune``."""
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
