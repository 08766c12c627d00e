"""``dstore card PATH``: the Croissant 1.1 metadata of a dataset (and a Parquet folder's
Hub README.md), written by :func:`dstore.card` (docs/publish.md)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import from_argument

__all__ = ["add_card"]


def _cmd_card(args: argparse.Namespace) -> int:
    from ..api.card import card
    from ..model.names import printable

    about = {k: getattr(args, k) for k in ("name", "description", "license", "creator", "url")}
    report = card(
        args.path,
        out=args.out,
        format=args.from_format,
        source=args.source,
        bench=args.bench,
        hf=args.hf,
        **about,
    )
    print("\n".join(printable(line) for line in report.lines()))
    return 0


def add_card(sub: Any) -> None:
    """Add ``dstore card`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "card",
        help="write the Croissant 1.1 metadata of a dataset (and a Parquet folder's Hub "
        "README.md): files with sha256, fields, lossy choices with their measured error",
        description="Describe the dataset at PATH in Croissant 1.1 (MLCommons): every file "
        "with its sha256, a record set per split, a field per field with its stored dtype "
        "and shape, each lossy choice with the error measured (--source measures it against "
        "what PATH was converted from). A Parquet folder also gets the Hugging Face Hub's "
        "README.md. Prints what it wrote, the values left at a neutral default (give them "
        "with --name, --license...) and what only you can fill in.",
    )
    p.add_argument("path", help="the dataset to describe")
    p.add_argument(
        "--out",
        metavar="FILE",
        help="where to write it (default: PATH/croissant.json in a folder, PATH.croissant.json "
        "beside a file, or a zarr store dstore did not write)",
    )
    for key, what in (
        ("name", "the dataset's name"),
        ("description", "what the dataset is"),
        ("license", "its license: an SPDX or Hub identifier (cc-by-4.0, mit) or a URL"),
        ("creator", "who made it"),
        ("url", "its web page"),
    ):
        p.add_argument(
            f"--{key}",
            help=f"{what} (default: kept from an earlier card, else a "
            "neutral default, reported missing)",
        )
    p.add_argument(
        "--source",
        metavar="SRC",
        help="measure each lossy field's error against SRC, what it was converted from, "
        "as dstore verify SRC PATH does (default: none: the errors the conversion measured "
        "are kept, the others said not measured)",
    )
    p.add_argument(
        "--bench",
        metavar="REPORT",
        help="add the accuracy figures of a 'dstore bench --report REPORT.json' run on the "
        "source (default: none)",
    )
    p.add_argument(
        "--hf",
        action="store_true",
        help="also write the Hugging Face Hub's README.md card of a Parquet folder "
        "(default: only when one dstore wrote is there)",
    )
    from_argument(p, "input format: %(formats)s (default: from PATH's extension or contents)")
    p.set_defaults(func=_cmd_card)
