"""The ``dstore`` command: argument parsing and printing only; the work is in the library.

Errors are one line on stderr (``TypeName: message``) and a non-zero exit
code; ``--debug`` shows the traceback instead. Ctrl-C exits 130, SIGTERM
(systemd, ``timeout``, Kubernetes) is handled the same way and exits 143; a
reader that goes away (``dstore info x.npz | head -1``) ends the command
quietly with 141.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..errors import DstoreError, Terminated
from . import card
from .check import add_check_command, add_convert_check, convert_check, finish_convert, leakage_line
from .descriptions import describe_commands
from .globs import expanded_glob
from .index import index_command
from .version import VersionAction
from .words import cli_words

# The library (numpy and up) is imported by the commands that use it, not here: `dstore
# --help` and `--version` then start in the time Python itself takes (see docs/benchmarks.md, Start-up).

__all__ = ["main"]

EXIT_ERROR = 2
EXIT_MISMATCH = 1
EXIT_INTERRUPTED = 130
#: 128 + SIGTERM, as a shell reports a process that SIGTERM ended.
EXIT_TERMINATED = 143
#: 128 + SIGPIPE, as coreutils exit when the reader of their output goes away (``| head``).
EXIT_BROKEN_PIPE = 141


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

    def __init__(self, desc: str, unit: str = "rec") -> None:
        self.desc = desc
        self.unit = unit
        self.bar: Any = None

    def __call__(self, n: int, total: int) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, desc=self.desc, unit=self.unit, unit_scale=True, leave=False
            )
        self.bar.update(n)
        if self.bar.n >= total:  # done: off the terminal before the next bar (scan, convert)
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


@contextlib.contextmanager
def _bars(*specs: tuple[str, str]) -> Iterator[list[_ProgressBar | None]]:
    """One :class:`_ProgressBar` per ``(desc, unit)`` when stderr is a terminal (else None:
    a log file gets no bar), all closed at the end, error or not."""
    bars = [_ProgressBar(desc, unit) if sys.stderr.isatty() else None for desc, unit in specs]
    try:
        yield bars
    finally:
        for bar in bars:
            if bar is not None:
                bar.close()


def _drop_options(args: argparse.Namespace) -> dict[str, str]:
    """``--drop KEY``: the reading codec leaves those keys out (npz's ``drop`` option)."""
    return {"drop": ",".join(args.drop)} if getattr(args, "drop", None) else {}


def _add_drop(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--drop",
        action="append",
        metavar="KEY",
        help="leave key KEY of the input out, repeatable: a member whose record count does not "
        "line up with the others (pyspacer's npz 'meta'), a 0-d member; other formats: a "
        "field name, or SPLIT/FIELD (default: keep all)",
    )


def _add_follow_links(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--follow-links",
        action="store_true",
        help="read what links lead to outside the input: HDF5 external links and virtual "
        "datasets, files or folders symlinked out of a zarr store or a folder of shards, "
        "files linked out of a glob's or folder's own folder, folder links in a glob or folder "
        "of sources (default: refuse them, naming the link)",
    )


def _cmd_convert(args: argparse.Namespace) -> int:
    observer = convert_check(args)  # --check (dstore.cli.check): sees each batch written
    if args.per_source and args.layout:
        from ..errors import UsageError

        raise UsageError("--per-source and --layout do not go together: convert, then split")
    if args.per_source:
        from ..api.per_source import write_per_source

        done = write_per_source(
            args.src,
            args.dst,
            to=args.to,
            from_format=args.from_format,
            dtype=args.dtype,
            on_overflow=args.on_overflow,
            options=_key_values(args.option),
            overwrite="foreign" if args.overwrite_foreign else args.overwrite,
            follow_links=args.follow_links,
            src_options=_drop_options(args),
            resume=args.resume,
            client=args.scheduler,
            keep_encoded=args.keep_encoded,
        )
        _print_lines(done.summary().splitlines())
        return 0
    from .. import api

    with _bars(("scan", "file"), ("convert", "rec")) as (scan, bar):
        report = api.convert(
            args.src,
            args.dst,
            to=args.to,
            from_format=args.from_format,
            dtype=args.dtype,
            on_overflow=args.on_overflow,
            overwrite="foreign" if args.overwrite_foreign else args.overwrite,
            options=_key_values(args.option),
            src_options=_drop_options(args),
            progress=bar,
            resume=args.resume,
            client=args.scheduler,
            layout=args.layout,
            keep_encoded=args.keep_encoded,
            follow_links=args.follow_links,
            scan_progress=scan,
            observe=observer,
        )
    _print_lines(report.summary().splitlines())
    return finish_convert(observer)


def _print_lines(lines: Sequence[str]) -> None:
    """Report lines, each printed as one line with nothing a terminal acts on: names
    are quoted where the reports print them, and this catches any a codec's own
    details (``describe()``) print raw."""
    from ..model.names import printable

    print("\n".join(printable(line) for line in lines))


def _cmd_info(args: argparse.Namespace) -> int:
    from .. import api

    report = api.info(
        args.path,
        format=args.from_format,
        follow_links=args.follow_links,
        **_drop_options(args),
    )
    _print_lines(report.lines())
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from .. import api

    if args.b_format and not args.b:
        raise argparse.ArgumentTypeError("--from-b needs a second dataset B")
    with _bars(("scan", "file"), ("verify", "rec")) as (scan, bar):
        if args.b:
            b_format = args.b_format or args.from_format
            report = api.verify(
                args.a,
                args.b,
                a_format=args.from_format,
                b_format=b_format,
                follow_links=args.follow_links,
                progress=bar,
                scan_progress=scan,
            )
        else:
            report = api.check(
                args.a,
                format=args.from_format,
                follow_links=args.follow_links,
                progress=bar,
                scan_progress=scan,
            )
    _print_lines(report.lines())
    return 0 if report.ok else EXIT_MISMATCH


def _option_lines(name: str) -> list[str]:
    """The ``-o KEY=VALUE`` options of codec ``name``: key, default and what it does."""
    from ..registry import get_codec_class

    try:
        options = get_codec_class(name).Options
    except (
        DstoreError,
        ImportError,
    ) as e:  # a codec whose extra is missing: say so instead of its keys
        return [f"    (options unknown: {str(e).splitlines()[0]})"]
    return _dataclass_option_lines(options)


def _dataclass_option_lines(options: Any) -> list[str]:
    import dataclasses

    from ..options import option_help

    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        return ["    (no -o options)"]
    # the keys, their defaults and help come from the codec's option dataclass
    keys = [(f"-o {key}={shown}", text) for key, shown, text in option_help(options)]
    width = max((len(k) for k, _ in keys), default=0)
    return [f"    {k:<{width}}  {h}".rstrip() for k, h in keys]


def _formats_text() -> str:
    from ..registry import available_codecs, get_codec_class, registry

    out = []
    codecs = available_codecs()
    width = max(10, *map(len, codecs))  # names line up whatever a codec is called
    for name, hint in codecs.items():
        exts = " ".join(registry[name].extensions)
        state = "usable" if hint is None else f"not installed: {hint}"
        if hint is None and get_codec_class(name).sharded:
            state += ", sharded (--resume, Dask)"
        elif hint is None and get_codec_class(name).region_writes:
            state += ", Dask (chunk regions)"
        out.append(f"{name:<{width}} {exts:<32} {state}")
        out.extend(_option_lines(name))
    out.extend(_layout_lines())
    return "\n".join(out)


def _layout_lines() -> list[str]:
    """``--layout`` names with what they write, and their ``-o`` options."""
    from ..layouts import get_layout_class, layout_names

    out = ["layouts (convert --layout NAME; the same NAME maps such files back):"]
    for name in layout_names():
        try:
            cls = get_layout_class(name)
        except (DstoreError, ImportError) as e:
            out.append(f"  {name:<22} (cannot load: {str(e).splitlines()[0]})")
            continue
        out.append(f"  {name:<22} {cls.help}")
        out.extend(_dataclass_option_lines(cls.Options))
    return out


def _cmd_formats(args: argparse.Namespace) -> int:
    print(_formats_text())
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from ..bench import bench, save_plot, save_report, to_text
    from ..errors import UsageError

    # Checked before the measuring starts, not after it (the library checks the rest).
    if args.report and os.path.splitext(args.report)[1].lower() not in (
        ".json",
        ".csv",
        ".md",
        ".markdown",
    ):
        raise UsageError(f"--report must end in .json, .csv or .md. Got {args.report!r}.")
    if args.plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            from ..errors import MissingDependencyError

            raise MissingDependencyError("bench", "bench", "matplotlib", what="dstore bench --plot")

    def progress(line: str) -> None:
        # on stderr, terminal or not (a log file too), each line as it comes: stdout keeps
        # only the report
        print(line, file=sys.stderr, flush=True)

    report = bench(
        args.src,
        formats=args.formats.split(",") if args.formats else None,
        dtypes=[d.strip() for d in args.dtypes.split(",") if d.strip()],
        images=args.images.split(","),
        grid=args.grid,
        evaluate=args.evaluate,
        features=args.features,
        labels=args.labels,
        sample=args.sample,
        repeats=args.repeats,
        objective=args.objective,
        max_accuracy_drop=args.max_accuracy_drop,
        progress=progress,
        layout=args.layout,
        probe=not args.no_probe,
        loader=args.read,
        loader_workers=args.workers,
    )
    print(to_text(report, wide=args.wide))
    print(leakage_line(args.src))  # dstore check's: leaks change what the probe measures
    if args.report:
        save_report(report, args.report)
        print(f"report: {args.report}")
    if args.plot:
        save_plot(report, args.plot)
        print(f"plot: {args.plot}")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    for line in run_demo(args.dir, records=args.records):
        print(line)
    return 0


class _HelpList:
    """A list of names put into a help string by argparse's ``%(name)s`` when help is
    printed, not when the parser is built: the registries load entry points (and, for
    what a format can do, its codec module), which ``dstore info x.npz`` never needs."""

    def __init__(self, make: Callable[[], list[str]]) -> None:
        self.make = make

    def __str__(self) -> str:
        return ", ".join(self.make())


def _codec_names() -> list[str]:
    from ..registry import codec_names

    return codec_names()


def _codecs_where(flag: str) -> list[str]:
    """The formats whose codec class sets ``flag`` (``sharded``, ``keeps_encoded_images``);
    a format whose extra is missing cannot say, and is left out."""
    from ..registry import get_codec_class

    out = []
    for name in _codec_names():
        try:
            if getattr(get_codec_class(name), flag, False):
                out.append(name)
        except (DstoreError, ImportError):
            continue
    return out


def _layout_names() -> list[str]:
    from ..layouts import layout_names

    return layout_names()


def _bench_layouts() -> list[str]:
    """The names ``bench --layout`` reads: dstore's layouts and label-maker's ``ml_type``s."""
    from ..bench.accuracy import LAYOUT_KINDS

    return list(LAYOUT_KINDS)


def _fill_help(action: argparse.Action, **lists: Callable[[], list[str]]) -> argparse.Action:
    """Give ``action`` the attributes its help's ``%(name)s`` placeholders name (argparse
    fills them from the action's own attributes)."""
    for key, make in lists.items():
        setattr(action, key, _HelpList(make))
    return action


def _with_lazy_epilog(parser: argparse.ArgumentParser, make: Callable[[], str]) -> None:
    """Build ``parser``'s epilog only when help is printed (it imports every codec)."""
    plain = parser.format_help

    def format_help() -> str:
        parser.epilog = make()
        return plain()

    # argparse has no hook for a lazy epilog: the instance's bound method is replaced
    parser.format_help = format_help  # type: ignore[method-assign]


def _from_argument(p: argparse.ArgumentParser, help: str, *aliases: str) -> None:
    """``--from FORMAT`` (and ``aliases``), its help listing the registered formats."""
    action = p.add_argument("--from", *aliases, dest="from_format", metavar="FORMAT", help=help)
    _fill_help(action, formats=_codec_names)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dstore",
        description="Move ML datasets between formats ('dstore formats' lists them); "
        "measure the cost.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (default: one line)"
    )
    parser.add_argument(
        "--version",
        action=VersionAction,
        help="print the versions of dstore, Python and each format's library (with its extra)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

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
    _fill_help(
        p.add_argument(
            "--to",
            metavar="FORMAT",
            help="output format: %(formats)s (default: from DST's extension)",
        ),
        formats=_codec_names,
    )
    _from_argument(p, "input format: %(formats)s (default: from SRC's extension)")
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
    _fill_help(p._actions[-1], sharded=lambda: _codecs_where("sharded"))
    p.add_argument(
        "--keep-encoded",
        action="store_true",
        help="keep encoded images (PNG/JPEG bytes) encoded in every format (default: "
        "decode them to pixels, except in %(keeping)s, which keep them byte for byte)",
    )
    _fill_help(p._actions[-1], keeping=lambda: _codecs_where("keeps_encoded_images"))
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="write each shard (zarr: each block of chunks) as a task on this Dask "
        "distributed scheduler, e.g. tcp://host:8786 (default: this machine)",
    )
    p.add_argument(
        "-o",
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="output codec option, repeatable; the keys of each format are listed below "
        "and by 'dstore formats' (default: the format's defaults)",
    )
    _add_drop(p)
    _add_follow_links(p)
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
    _fill_help(p._actions[-1], layouts=_layout_names)
    add_convert_check(p)
    p.set_defaults(func=_cmd_convert)
    _with_lazy_epilog(
        p, lambda: "-o options of each format (KEY=DEFAULT  meaning):\n" + _formats_text()
    )

    p = sub.add_parser("info", help="splits, fields, shapes, dtypes, sizes, codec details")
    p.add_argument("path", help="dataset to describe")
    _add_drop(p)
    _add_follow_links(p)
    # --from names an input's format in every subcommand; --format is the older spelling
    _from_argument(
        p, "input format: %(formats)s (default: from PATH's extension or contents)", "--format"
    )
    p.set_defaults(func=_cmd_info)
    card.add_card_parser(sub, _from_argument)

    index_command(sub, _add_follow_links, _from_argument, _fill_help, _codecs_where)

    p = sub.add_parser(
        "verify",
        help="compare two datasets record by record, or check one alone (exit 1 on any problem)",
    )
    p.add_argument("a", help="the reference dataset")
    p.add_argument(
        "b",
        nargs="?",
        help="the dataset compared with A (default: none: check A alone, checksums, "
        "then every record decoded)",
    )
    _from_argument(
        p,
        "input format of A, and of B unless --from-b is given: %(formats)s "
        "(default: from the paths)",
        "--format",
    )
    p.add_argument(
        "--from-b",
        dest="b_format",
        metavar="FORMAT",
        help="input format of B (default: --from, else from B's path)",
    )
    _add_follow_links(p)
    p.set_defaults(func=_cmd_verify)

    add_check_command(sub)

    p = sub.add_parser(
        "bench",
        help="measure size, speed and accuracy impact of each format on SRC",
        description="Measure every format x image encoding x dtype policy on SRC. Progress "
        "(the records, then one line per cell as it finishes) goes to stderr; the report "
        "to stdout. The accuracy probe is classification, object detection (classes "
        "present) or segmentation (pixel accuracy), from the labels' shape or --layout.",
    )
    p.add_argument("src", help="your dataset")
    p.add_argument(
        "--formats", help="comma-separated formats to measure (default: every usable format)"
    )
    p.add_argument(
        "--dtypes",
        default="keep,float32,float16",
        help="comma-separated dtype policies: keep, float32, float16, float64, bfloat16, "
        "round:N, int8, uint8; one this dstore cannot write is reported as not supported "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--images",
        default="png",
        help="comma-separated image encodings crossed with the formats and dtypes: png "
        "(each format's lossless default), jpeg:Q, webp:Q, jxl:Q with quality Q 1..100 "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--grid",
        action="store_true",
        help="also measure compressor/level variants of each format (default: defaults only)",
    )
    p.add_argument(
        "--features",
        help="feature field of the accuracy probe (default: guessed by name: x, features, ...)",
    )
    p.add_argument(
        "--labels",
        help="label field of the accuracy probe (default: guessed by name: y, labels, ...; "
        "none found: no accuracy is measured)",
    )
    p.add_argument(
        "--evaluate",
        metavar="MODULE:FUNCTION",
        help="your function(data) -> score, (score, n) or per-example correctness replaces "
        "the probe (the last two give a noise band); MODULE is imported from the working "
        "directory or sys.path (default: an SGD log-loss probe, as pyspacer trains)",
    )
    p.add_argument(
        "--layout",
        metavar="NAME",
        help="what the labels are, for the probe: %(layouts)s "
        "(default: told from the labels' shape: class ids or one-hot, (max_boxes, 5) boxes, "
        "masks the tiles' size)",
    )
    _fill_help(p._actions[-1], layouts=_bench_layouts)
    p.add_argument(
        "--no-probe",
        action="store_true",
        help="measure no accuracy: sizes, times and errors only, no scikit-learn needed "
        "(default: the probe runs when labels are found)",
    )
    p.add_argument(
        "--sample",
        type=int,
        metavar="N",
        help="measure the first N records of each split only (default: all records)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed writes and reads per cell, after one untimed warm-up; "
        "times are medians (default: %(default)s)",
    )
    p.add_argument(
        "--goal",
        "--objective",
        dest="objective",
        choices=["size", "write", "read", "balanced"],
        default="size",
        help="what the recommendation favours: size, write time, read speed (the training "
        "loader's with --read), or a balance of the three; --objective is the old name "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--read",
        choices=["torch", "tf"],
        default=None,
        help="also measure each cell's training loader: records/s and MB/s of a PyTorch "
        "DataLoader over dstore.to_torch (or tf.data over dstore.to_tf_dataset), warm and cold "
        "page cache (default: not measured)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=2,
        metavar="N",
        help="DataLoader workers for --read torch (default: %(default)s)",
    )
    p.add_argument(
        "--max-accuracy-drop",
        type=float,
        default=0.1,
        metavar="POINTS",
        help="accuracy points a recommended cell may lose (default: %(default)s)",
    )
    p.add_argument(
        "--report",
        metavar="FILE",
        help="also write the results as .json, .csv or .md (default: terminal only)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also write a size vs accuracy plot, Pareto front marked (size vs write time "
        "when no accuracy is measured) (default: none)",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="print every column and each note in its row (default: a table 120 columns wide, "
        "long notes as footnotes)",
    )
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser(
        "formats", help="registered formats, whether each is usable, and their -o options"
    )
    p.set_defaults(func=_cmd_formats)

    p = sub.add_parser("demo", help="build sample data from real photos and convert it")
    p.add_argument(
        "dir",
        nargs="?",
        default="dstore-demo",
        help="folder for the sample data and outputs (default: %(default)s)",
    )
    p.add_argument(
        "--records", type=int, default=300, help="sample records to build (default: %(default)s)"
    )
    p.set_defaults(func=_cmd_demo)
    describe_commands(sub.choices)
    for command in sub.choices.values():
        # after the command as well as before it: `dstore convert a b --debug` is how the
        # flag is typed when re-running a failed command
        command.add_argument(
            "--debug",
            dest="debug_after",
            action="store_true",
            help="show the traceback of an error, as --debug before the command does "
            "(default: one line)",
        )
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, with one line of advice for an unquoted glob."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        message = expanded_glob(parser, args, extra)
        if message is not None:
            parser.exit(EXIT_ERROR, message + "\n")
        parser.error(f"unrecognized arguments: {' '.join(extra)}")  # as parse_args says it
    args.debug = args.debug or getattr(args, "debug_after", False)
    return args


def _run(argv: Sequence[str] | None) -> int:
    args = _parse(build_parser(), argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING, format="%(message)s"
    )
    try:
        return int(args.func(args))
    except KeyboardInterrupt as e:
        print(cli_words(str(e)) or "interrupted: no output was left behind", file=sys.stderr)
        return EXIT_TERMINATED if _sigterm.received else EXIT_INTERRUPTED
    except BrokenPipeError:
        raise  # the reader of our output went away: main() ends quietly
    except MemoryError as e:  # numpy's _ArrayMemoryError among them: one line, not a traceback
        if args.debug:
            raise
        print(_memory_error_line(args, e), file=sys.stderr)
        return EXIT_ERROR
    except (DstoreError, ValueError, OSError, argparse.ArgumentTypeError) as e:
        if args.debug:
            raise
        print(_error_line(args, e), file=sys.stderr)
        return EXIT_ERROR


def _memory_error_line(args: argparse.Namespace, e: MemoryError) -> str:
    """``MemoryError: SRC: out of memory (...)``."""
    from ..model.names import printable

    where = getattr(args, "src", None) or getattr(args, "path", None)
    detail = str(e).splitlines()[0] if str(e) else ""
    return f"MemoryError: {f'{where}: ' if where else ''}out of memory" + (
        f" ({printable(detail)})" if detail else ""
    )


def _error_line(args: argparse.Namespace, e: Exception) -> str:
    """An error as the one line the CLI prints: ``TYPE: message``."""
    from ..model.names import printable

    text = cli_words(str(e))  # --overwrite, not the library's overwrite=True
    # dstore's own messages are one line by construction (a newline is in a name
    # from the data): shown whole, escaped; a library's may run on over many lines
    if text and not isinstance(e, DstoreError):
        text = text.splitlines()[0]
    message = printable(text) if text else repr(e)
    if isinstance(e, OSError) and not isinstance(e, DstoreError) and e.filename is None:
        # a write that ran out of room (errno 28) names no file: name what we wrote
        where = getattr(args, "dst", None) or getattr(args, "path", None)
        if where:
            message = f"{where}: {e.strerror or message} (errno {e.errno})"
    return f"{type(e).__name__}: {message}"


class _SigtermAsInterrupt:
    """SIGTERM raises :class:`~dstore.errors.Terminated`, a KeyboardInterrupt, in the
    main thread: every clean-up that Ctrl-C runs (temporary output, writer lock, a
    sharded run's journal) runs for it too, at once, instead of at the next run.
    A second SIGTERM during that clean-up is ignored, so that it completes."""

    def __init__(self) -> None:
        self.received = False
        self.previous: Any = None

    def handle(self, signum: int, frame: Any) -> None:
        self.received = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated("terminated (SIGTERM): no output was left behind")

    def __enter__(self) -> _SigtermAsInterrupt:
        self.received = False
        if threading.current_thread() is threading.main_thread():  # signal() needs it
            self.previous = signal.signal(signal.SIGTERM, self.handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None


_sigterm = _SigtermAsInterrupt()


def _warning_line(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """A warning from dstore (an old option name...) as one line, not Python's two."""
    print(f"dstore: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            with _sigterm, warnings.catch_warnings():
                warnings.showwarning = _warning_line
                # shown, whatever filters the caller set (pytest's "error", say): an old
                # option name must not fail a conversion
                warnings.filterwarnings("default", category=FutureWarning)
                return _run(argv)
        finally:  # also after --help's SystemExit
            # Flush here so that a reader which left (``| head -1``) shows up now, not as
            # "Exception ignored ... BrokenPipeError" when the interpreter exits.
            sys.stdout.flush()
    except BrokenPipeError:
        # The documented pattern: point stdout at devnull so the flush at exit is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
