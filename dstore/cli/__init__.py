"""The ``dstore`` command: argument parsing and printing only; the work is in the library.

Errors are one line on stderr (``TypeName: message``) and a non-zero exit
code; ``--debug`` shows the traceback instead. Ctrl-C exits 130, SIGTERM
(systemd, ``timeout``, Kubernetes) is handled the same way and exits 143; a
reader that goes away (``dstore info x.npz | head -1``) ends the command
quietly with 141.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from collections.abc import Sequence

from ..errors import DstoreError
from .check import add_check_command, leakage_line
from .common import EXIT_BROKEN_PIPE, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED, fill_help
from .convert import add_convert
from .demo import add_demo
from .descriptions import describe_commands
from .exits import SigtermAsInterrupt, error_line, memory_error_line, warning_line
from .formats import add_formats
from .globs import expanded_glob
from .index import add_index
from .info import add_info
from .verify import add_verify
from .version import VersionAction
from .words import cli_words

# The library (numpy and up) is imported by the commands that use it, not here: `dstore
# --help` and `--version` then start in the time Python itself takes (see docs/benchmarks.md, Start-up).

__all__ = ["main"]


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


def _bench_layouts() -> list[str]:
    """The names ``bench --layout`` reads: dstore's layouts and label-maker's ``ml_type``s."""
    from ..bench.accuracy import LAYOUT_KINDS

    return list(LAYOUT_KINDS)


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

    add_convert(sub)

    add_info(sub)

    add_index(sub)

    add_verify(sub)

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
    fill_help(p._actions[-1], layouts=_bench_layouts)
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

    add_formats(sub)

    add_demo(sub)

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
        print(memory_error_line(args, e), file=sys.stderr)
        return EXIT_ERROR
    except (DstoreError, ValueError, OSError, argparse.ArgumentTypeError) as e:
        if args.debug:
            raise
        print(error_line(args, e), file=sys.stderr)
        return EXIT_ERROR


_sigterm = SigtermAsInterrupt()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            with _sigterm, warnings.catch_warnings():
                warnings.showwarning = warning_line
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
