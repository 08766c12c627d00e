"""The flags of datasets that grow: ``convert --append``/``--append-again`` and
``--version N`` on the commands that read a dataset (``log``, ``compact`` and ``prune``
are their own modules)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = [
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
