"""``dstore convert``: its arguments and its command."""

from __future__ import annotations

import argparse
from typing import Any

from .check import add_convert_check, convert_check, finish_convert
from .common import (
    add_drop,
    add_follow_links,
    bars,
    codec_names,
    codecs_where,
    drop_options,
    fill_help,
    from_argument,
    key_values,
    layout_names,
    print_lines,
    with_lazy_epilog,
)
from .formats import formats_text
from .versions import add_convert_flags, convert_keywords

__all__ = ["add_convert", "cmd_convert"]


def add_convert(sub: Any) -> None:
    """Add ``dstore convert`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "convert",
        help="convert a dataset to another format or dtype",
        description="Convert SRC to DST, streaming, into a temporary name renamed at the end.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "src",
        help="input dataset: a path or an fsspec URL; many files as one dataset: a quoted "
        'glob ("features/*.json"), a folder of files, or @LIST (a file of paths, one a line)',
    )
    p.add_argument("dst", help="output path; its extension picks the format unless --to is given")
    fill_help(
        p.add_argument(
            "--to",
            metavar="FORMAT",
            help="output format: %(formats)s (default: from DST's extension)",
        ),
        formats=codec_names,
    )
    from_argument(p, "input format: %(formats)s (default: from SRC's extension)")
    p.add_argument(
        "--dtype",
        action="append",
        metavar="POLICY",
        help="floating fields: keep, float32, float16, float64, bfloat16, round:N (N mantissa "
        "bits kept in float32), int8 or uint8 (codes with a scale and offset; int8:channel "
        "for one per channel), or per field x=int8; repeatable (default: keep)",
    )
    p.add_argument(
        "--on-overflow",
        choices=["error", "clip"],
        default="error",
        help="a downcast that overflows (|x| > 65504 for float16) is an error or is clipped "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing DST, only if it is a dataset of the target format that "
        "holds nothing but files that format wrote (default: refuse)",
    )
    p.add_argument(
        "--overwrite-foreign",
        action="store_true",
        help="like --overwrite, and also delete files inside the DST dataset that its format "
        "did not write (a README, notes) instead of refusing (default: refuse)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="finish an interrupted conversion to a sharded format (%(sharded)s) started "
        "with the same options, keeping its finished shards (default: start afresh)",
    )
    fill_help(p._actions[-1], sharded=lambda: codecs_where("sharded"))
    p.add_argument(
        "--keep-encoded",
        action="store_true",
        help="keep encoded images (PNG/JPEG bytes) encoded in every format (default: "
        "decode them to pixels, except in %(keeping)s, which keep them byte for byte)",
    )
    fill_help(p._actions[-1], keeping=lambda: codecs_where("keeps_encoded_images"))
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="write each shard (zarr: each block of chunks) as a task on this Dask "
        "distributed scheduler, e.g. "
        "tcp://host:8786 (default: this machine)",
    )
    p.add_argument(
        "-o",
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="output codec option, repeatable; the keys of each format are listed below "
        "and by 'dstore formats' (default: the format's defaults)",
    )
    add_drop(p)
    add_follow_links(p)
    p.add_argument(
        "--per-source",
        action="store_true",
        help="write one file per source (the 'source' field of a dataset read from many "
        "files) into the new folder DST, in --to's format (default: the sources' format)",
    )
    p.add_argument(
        "--layout",
        metavar="NAME",
        help="map label-maker arrays to a training layout (%(layouts)s), or back from one "
        "(listed by 'dstore formats'; default: none, the fields as they are)",
    )
    fill_help(p._actions[-1], layouts=layout_names)
    p.add_argument(
        "--shuffle-seed",
        type=_seed,
        metavar="S",
        help="write each split's records in a random order fixed by the seed S (a shuffle "
        "at conversion time: reads in storage order or with a cheap block or buffer shuffle "
        "are then well mixed); with --append, the appended records among themselves "
        "(default: the source's order)",
    )
    add_convert_check(p)
    add_convert_flags(p)
    p.set_defaults(func=cmd_convert)
    with_lazy_epilog(
        p, lambda: "-o options of each format (KEY=DEFAULT  meaning):\n" + formats_text()
    )


def _seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if seed < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return seed


def cmd_convert(args: argparse.Namespace) -> int:
    observer = convert_check(args)  # --check (dstore.cli.check): sees each batch written
    if args.per_source and args.layout:
        from ..errors import UsageError

        raise UsageError("--per-source and --layout do not go together: convert, then split")
    if args.per_source and args.shuffle_seed is not None:
        from ..errors import UsageError

        raise UsageError("--per-source and --shuffle-seed do not go together: convert, then split")
    if args.per_source and args.append:
        from ..errors import UsageError

        raise UsageError("--per-source and --append do not go together: append to each file")
    if args.per_source:
        from ..api.per_source import write_per_source

        done = write_per_source(
            args.src,
            args.dst,
            to=args.to,
            from_format=args.from_format,
            dtype=args.dtype,
            on_overflow=args.on_overflow,
            options=key_values(args.option),
            overwrite="foreign" if args.overwrite_foreign else args.overwrite,
            follow_links=args.follow_links,
            src_options=drop_options(args),
            resume=args.resume,
            client=args.scheduler,
            keep_encoded=args.keep_encoded,
        )
        print_lines(done.summary().splitlines())
        return 0
    from .. import api

    with bars(("scan", "file"), ("convert", "rec")) as (scan, bar):
        report = api.convert(
            args.src,
            args.dst,
            to=args.to,
            from_format=args.from_format,
            dtype=args.dtype,
            on_overflow=args.on_overflow,
            overwrite="foreign" if args.overwrite_foreign else args.overwrite,
            options=key_values(args.option),
            src_options=drop_options(args),
            progress=bar,
            resume=args.resume,
            client=args.scheduler,
            layout=args.layout,
            keep_encoded=args.keep_encoded,
            follow_links=args.follow_links,
            scan_progress=scan,
            observe=observer,
            shuffle_seed=args.shuffle_seed,
            **convert_keywords(args),
        )
    print_lines(report.summary().splitlines())
    return finish_convert(observer)
