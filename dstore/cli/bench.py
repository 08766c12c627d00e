"""``dstore bench``: its arguments and its command (size, speed and accuracy of each
format on the user's data; the work is in :mod:`dstore.bench`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .check import leakage_line
from .common import fill_help

__all__ = ["add_bench"]


def add_bench(sub: Any) -> None:
    """Add ``dstore bench`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "bench",
        help="measure size, speed and accuracy impact of each format on SRC",
        description="Measure every format x image choice x dtype policy that changes what is "
        "stored, on SRC (a seeded sample of large data, extrapolated with intervals). "
        "Progress (the plan with an estimate of the time, then one line per cell with the "
        "time left) goes to stderr; the report to stdout, and to --report after every cell. "
        "The accuracy probe is classification, object detection (classes present) or "
        "segmentation (pixel accuracy), from the labels' shape or --layout.",
    )
    p.add_argument("src", help="your dataset")
    p.add_argument(
        "--formats",
        help="comma-separated formats to measure (default: every usable format; text "
        "formats only when the data has no image field)",
    )
    p.add_argument(
        "--dtypes",
        default="keep,float32,float16",
        help="comma-separated dtype policies: keep, float32, float16, float64, bfloat16, "
        "round:N, int8, uint8; one that changes no field of the data is not measured (one "
        "line says so) (default: %(default)s)",
    )
    p.add_argument(
        "--images",
        default="auto",
        help="comma-separated image choices for image fields: png (each format's lossless "
        "default: PNG, or raw pixels + its compressor), png:LEVEL (fastest, fast, balanced, small, 0..9), "
        "jpeg:Q, webp:Q, jxl:Q with quality Q 1..100, each where the format has it; auto: "
        "png,jpeg:90 when the data has image fields (default: %(default)s)",
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
        type=_sample_arg,
        default="auto",
        metavar="N|auto|off",
        help="records measured: a seeded random sample of N, stratified by split, whose "
        "sizes and times are extrapolated with 95%% intervals; auto: every record up to "
        "512 MiB of raw data, else about 192 MiB of them; off: every record "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the sample and of the probe's records (default: %(default)s)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed writes and reads per cell measured whole, after one untimed warm-up; "
        "times are medians (a sample's six parts are its repeats) (default: %(default)s)",
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
        help="also measure each cell's training loader: records/s of a PyTorch DataLoader "
        "over dstore.to_torch (or tf.data over dstore.to_tf_dataset) in storage order and "
        "with shuffle='global', and how well shuffled the records came (default: not "
        "measured)",
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
        help="also write the results as .json, .csv or .md, after every cell (an "
        "interrupted run leaves the cells measured so far) (default: terminal only)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the --report FILE.json of an interrupted run: measure only the cells "
        "it lacks (refused for another input or other settings) (default: measure every cell)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also write a plot of size against write time (and loader records/s with "
        "--read), accuracy difference as colour (default: none)",
    )
    p.add_argument(
        "--wide",
        action="store_true",
        help="print every column and each note in its row (default: a table 120 columns wide, "
        "long notes as footnotes)",
    )
    p.set_defaults(func=_cmd_bench)


def _sample_arg(value: str) -> int | str:
    """``--sample``: a number of records, ``auto`` or ``off``."""
    text = value.strip().lower()
    if text in ("auto", "off"):
        return text
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"give a number of records, auto or off (got {value!r})"
        ) from None
    return n if n else "off"


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
    if args.resume and not args.report:
        raise UsageError("--resume continues the report of --report FILE.json; give it")
    if args.plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            from ..errors import MissingDependencyError

            raise MissingDependencyError("bench", "bench", "matplotlib", what="dstore bench --plot")

    def progress(line: str) -> None:
        # on stderr, terminal or not (a log file too), each line as it comes: stdout keeps
        # only the report
        print(line, file=sys.stderr, flush=True)

    try:
        report = bench(
            args.src,
            formats=args.formats.split(",") if args.formats else None,
            dtypes=[d.strip() for d in args.dtypes.split(",") if d.strip()],
            images=None if args.images == "auto" else args.images.split(","),
            grid=args.grid,
            evaluate=args.evaluate,
            features=args.features,
            labels=args.labels,
            sample=args.sample,
            seed=args.seed,
            repeats=args.repeats,
            objective=args.objective,
            max_accuracy_drop=args.max_accuracy_drop,
            progress=progress,
            layout=args.layout,
            probe=not args.no_probe,
            loader=args.read,
            loader_workers=args.workers,
            report=args.report,
            resume=args.resume,
        )
    except KeyboardInterrupt:
        if args.report and os.path.exists(args.report):
            raise KeyboardInterrupt(
                f"interrupted: {args.report} holds the cells measured so far; "
                "run the same command with --resume to measure the rest"
            ) from None
        raise
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
    from ..bench.tasks import LAYOUT_KINDS

    return list(LAYOUT_KINDS)
