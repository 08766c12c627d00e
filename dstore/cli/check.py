"""The command line of ``dstore check``, and its hooks into ``convert --check`` and
``dstore bench``: parsing and printing only, the work is :mod:`dstore.check`'s.

Imported by ``dstore.cli`` at start-up: it imports nothing of the library until a
command runs (``dstore --help`` loads no numpy)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import (
    add_drop,
    add_follow_links,
    bars,
    drop_options,
    fill_help,
    from_argument,
    print_lines,
)
from .versions import add_version_flag, version_keywords

__all__ = [
    "add_check_command",
    "add_convert_check",
    "convert_check",
    "finish_convert",
    "leakage_line",
]


def add_convert_check(p: argparse.ArgumentParser) -> None:
    """``convert --check``."""
    p.add_argument(
        "--check",
        action="store_true",
        help="also check the records as they are written, as 'dstore check' does, and print "
        "its summary line; exit 1 if a split duplicates another (the output is kept) "
        "(default: no check)",
    )


def convert_check(args: argparse.Namespace) -> Any:
    """``convert --check``'s observer of the batches written (None without the flag)."""
    if not args.check:
        return None
    clash = next((f for f in ("per_source", "resume", "scheduler") if getattr(args, f)), None)
    if clash is not None:
        from ..errors import UsageError

        flag = "--" + clash.replace("_", "-")
        raise UsageError(f"--check and {flag} do not go together: convert, then check")
    from ..check import ConvertCheck

    return ConvertCheck(where=args.dst)


def finish_convert(observer: Any) -> int:
    """After a conversion: the check's summary line, and its exit status (0 without one)."""
    if observer is None:
        return 0

    checked = observer.report()
    print_lines([checked.summary_line()])
    return int(checked.exit_code)


def leakage_line(src: str) -> str:
    """The line ``dstore bench`` prints about its input."""
    from ..check import leakage_summary

    return leakage_summary(src)


def _defaults() -> dict[str, str]:
    from ..check import DEFAULT_COSINE, DEFAULT_NEAR

    return {"near": str(DEFAULT_NEAR), "cosine": f"{DEFAULT_COSINE:g}"}


def add_check_command(sub: Any) -> None:
    """The ``check`` subcommand."""

    p = sub.add_parser(
        "check",
        help="find exact and near duplicates, within and across splits (exit 1 when a split "
        "shares records with another)",
        description="Read PATH once and report its duplicates: exact (equal values of the "
        "checked fields), near images (pHash within --near bits) and near feature vectors "
        "(cosine of at least --cosine); per evaluation split, the records that duplicate "
        "training records; label conflicts. Exit status: 1 when a record of one split "
        "duplicates one of another, 0 when none does, 2 on an error.",
    )
    p.add_argument("path", help="the dataset: a path, a quoted glob, a folder of files, @LIST")
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object {"duplicates": [...], "summary": {...}} (default: a table)',
    )
    p.add_argument(
        "--fields",
        metavar="F,...",
        help="comma-separated fields compared (default: every field but labels: y, labels, "
        "image/object/..., and a many-file read's source field)",
    )
    near = p.add_argument(
        "--near",
        type=int,
        metavar="BITS",
        help="pHash bits (of 64) two near-duplicate images may differ by; 0 finds equal "
        "hashes only (default: %(near)s)",
    )
    cosine = p.add_argument(
        "--cosine",
        type=float,
        metavar="C",
        help="cosine similarity from which two feature vectors are near-duplicates "
        "(default: %(cosine)s)",
    )
    for action, key in ((near, "near"), (cosine, "cosine")):
        fill_help(action, **{key: lambda key=key: [_defaults()[key]]})
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="threads hashing batches while the next is read (default: one per core)",
    )
    from_argument(p, "input format: %(formats)s (default: from PATH's extension)")
    add_drop(p)
    add_follow_links(p)
    add_version_flag(p, "PATH")
    p.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    import json

    from ..check import check

    settings: dict[str, Any] = {
        k: getattr(args, k) for k in ("near", "cosine") if getattr(args, k) is not None
    }
    settings.update(drop_options(args))
    settings.update(version_keywords(args))
    fields = [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None
    with bars(("check", "rec")) as (bar,):
        report = check(
            args.path,
            fields=fields,
            format=args.from_format,
            follow_links=args.follow_links,
            workers=args.workers,
            progress=bar,
            **settings,
        )
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print_lines(report.lines())
    return int(report.exit_code)
