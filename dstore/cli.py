"""The ``dstore`` command: argument parsing and printing only; the work is in the library.

Errors are one line on stderr (``TypeName: message``) and a non-zero exit
code; ``--debug`` shows the traceback instead. Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from . import api
from .errors import DstoreError

__all__ = ["main"]

EXIT_ERROR = 2
EXIT_MISMATCH = 1
EXIT_INTERRUPTED = 130


def _key_values(pairs: Sequence[str] | None) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


class _ProgressBar:
    """A tqdm bar on a terminal, created on the first batch (when the total is known)."""

    def __init__(self, desc: str) -> None:
        self.desc = desc
        self.bar: Any = None

    def __call__(self, n: int, total: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=self.desc, unit="rec", unit_scale=True, leave=False)
        self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _cmd_convert(args: argparse.Namespace) -> int:
    bar = _ProgressBar("convert") if sys.stderr.isatty() else None
    try:
        report = api.convert(
            args.src,
            args.dst,
            to=args.to,
            from_format=args.from_format,
            dtype=args.dtype,
            on_overflow=args.on_overflow,
            overwrite=args.overwrite,
            options=_key_values(args.option),
            progress=bar,
            resume=args.resume,
            client=args.scheduler,
        )
    finally:
        if bar is not None:
            bar.close()
    print(report.summary())
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    print("\n".join(api.info(args.path, format=args.format).lines()))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    report = api.verify(args.a, args.b) if args.b else api.check(args.a)
    print("\n".join(report.lines()))
    return 0 if report.ok else EXIT_MISMATCH


def _cmd_formats(args: argparse.Namespace) -> int:
    from .registry import available_codecs, registry

    for name, hint in available_codecs().items():
        exts = " ".join(registry[name].extensions)
        state = "usable" if hint is None else f"not installed: {hint}"
        print(f"{name:<10} {exts:<32} {state}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import bench, save_plot, save_report, to_text

    evaluate = None
    if args.evaluate:
        import importlib

        module, _, fn = args.evaluate.partition(":")
        evaluate = getattr(importlib.import_module(module), fn)
    show = sys.stderr.isatty()
    report = bench(
        args.src,
        formats=args.formats.split(",") if args.formats else None,
        dtypes=args.dtypes.split(","),
        grid=args.grid,
        evaluate=evaluate,
        features=args.features,
        labels=args.labels,
        sample=args.sample,
        repeats=args.repeats,
        objective=args.objective,
        max_accuracy_drop=args.max_accuracy_drop,
        progress=(lambda s: print(f"  measuring {s} ...", file=sys.stderr)) if show else None,
    )
    print(to_text(report))
    if args.report:
        save_report(report, args.report)
        print(f"report: {args.report}")
    if args.plot:
        save_plot(report, args.plot)
        print(f"plot: {args.plot}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    for line in run_demo(args.dir, records=args.records):
        print(line)
    return 0


class _VersionAction(argparse.Action):
    """``--version``: computed only when asked (it reads every installed package's metadata)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from ._dist import version_report

        print("\n".join(version_report()))
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dstore",
        description="Move ML datasets between npz, zarr, HDF5 and TFRecord; measure the cost.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument(
        "--version", action=_VersionAction,
        help="print dstore's distribution and version, Python's, and the backends found",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("convert", help="convert a dataset to another format or dtype")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--to", help="output format (default: from DST's extension)")
    p.add_argument("--from", dest="from_format", help="input format (default: from SRC)")
    p.add_argument(
        "--dtype",
        action="append",
        help="float policy: keep, float32, float16, or per field x=float16 (repeatable)",
    )
    p.add_argument("--on-overflow", choices=["error", "clip"], default="error")
    p.add_argument("--overwrite", action="store_true", help="replace an existing DST")
    p.add_argument(
        "--resume", action="store_true",
        help="finish an interrupted sharded (tfrecord) conversion, keeping its finished shards",
    )
    p.add_argument(
        "--scheduler", metavar="ADDRESS",
        help="write each shard as a task on this Dask distributed scheduler (tcp://host:8786)",
    )
    p.add_argument(
        "-o", "--option", action="append", metavar="KEY=VALUE", help="output codec option"
    )
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser("info", help="splits, fields, shapes, dtypes, sizes, codec details")
    p.add_argument("path")
    p.add_argument("--format")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser(
        "verify",
        help="compare two datasets record by record, or check one alone (exit 1 on any problem)",
    )
    p.add_argument("a")
    p.add_argument("b", nargs="?", help="omit to check A alone: checksums, then every record decoded")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("bench", help="measure size, speed and accuracy impact of each format on SRC")
    p.add_argument("src")
    p.add_argument("--formats", help="comma-separated (default: every usable format)")
    p.add_argument("--dtypes", default="keep,float32,float16", help="comma-separated dtype policies")
    p.add_argument("--grid", action="store_true", help="add compressor/level variants")
    p.add_argument("--features", help="feature field for the accuracy probe")
    p.add_argument("--labels", help="label field for the accuracy probe")
    p.add_argument("--evaluate", metavar="MODULE:FUNCTION", help="your evaluation replaces the probe")
    p.add_argument("--sample", type=int, help="first N records per split only")
    p.add_argument("--repeats", type=int, default=3, help="read-time repeats (median)")
    p.add_argument("--objective", choices=["size", "write", "read"], default="size")
    p.add_argument("--max-accuracy-drop", type=float, default=0.1, help="points")
    p.add_argument("--report", help="write .json, .csv or .md")
    p.add_argument("--plot", help="write a PNG plot")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("formats", help="registered formats and whether each is usable")
    p.set_defaults(func=_cmd_formats)

    p = sub.add_parser("demo", help="build sample data from real photos and convert it")
    p.add_argument("dir", nargs="?", default="dstore-demo")
    p.add_argument("--records", type=int, default=300)
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(message)s")
    try:
        return int(args.func(args))
    except KeyboardInterrupt as e:
        print(str(e) or "interrupted: no output was left behind", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (DstoreError, ValueError, OSError, argparse.ArgumentTypeError) as e:
        if args.debug:
            raise
        message = str(e).splitlines()[0] if str(e) else repr(e)
        print(f"{type(e).__name__}: {message}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
