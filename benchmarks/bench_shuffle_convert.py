"""A shuffle at conversion time (``dstore convert --shuffle-seed S``) against the plain
conversion and against shuffling when reading, in one run.

``--records`` photo tiles (256x256x3 uint8, ``dstore.demo.photo_tiles``, the tiles of
``bench_shuffle.py``) with their position ``k`` in an npz (members stored, as
label-maker writes it; ``--deflated`` adds a deflated copy, which a shuffle reads
through a temporary random-access copy) are converted to each format:

* conversion: ``plain`` and ``shuffled`` (``shuffle_seed=1``), each in a child process
  (peak RSS from ``/usr/bin/time -v``), once per round, the order reversed every other
  round; the ratio is the shuffled conversion's time over the plain one's, per round;
* reads (``bench_shuffle.read_epoch``: ``to_torch`` under a ``DataLoader`` of
  ``--workers`` workers, batches of ``--batch``): the plain output in storage order
  (the baseline) and with ``shuffle="global"``; the shuffled output in storage order,
  with ``shuffle="block"`` and with ``shuffle=1000``. Quality is MosaicML's metric of
  the source positions ``k`` as delivered (``bench_shuffle.shuffle_quality``, shards of
  ``--shard-records``): a uniform permutation scores about 4.49, storage order 0.

    python benchmarks/bench_shuffle_convert.py [--records 4000] [--rounds 2] \\
        [--formats tfrecord,parquet,zarr] [--deflated]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import alternating_rounds, load_average, machine, median_range, table, write_report
from bench_shuffle import NAMES, read_epoch, shuffle_quality

SEED = 1
#: (output, read): the reads of each format, the plain output's storage order first
READS = (
    ("plain", "ordered"),
    ("plain", "global"),
    ("shuffled", "ordered"),
    ("shuffled", "block"),
    ("shuffled", "buffer"),
)

CONVERT = """
import time, dstore
t = time.perf_counter()
dstore.convert({src!r}, {out!r}, to={fmt!r}, shuffle_seed={seed!r})
print("RESULT", '{{"seconds": %f}}' % (time.perf_counter() - t))
"""


def write_source(root: str, n: int, deflated: bool) -> dict[str, str]:
    from dstore.demo import photo_tiles

    x, y = photo_tiles(n, 256, seed=42)
    arrays = {"x_train": x, "y_train": y, "k_train": np.arange(n, dtype=np.int64)}
    sources = {"stored": os.path.join(root, "tiles.npz")}
    np.savez(sources["stored"], **arrays)
    if deflated:
        sources["deflated"] = os.path.join(root, "tiles-z.npz")
        np.savez_compressed(sources["deflated"], **arrays)
    return sources


def convert_all(root: str, sources: dict[str, str], formats: list[str], rounds: int) -> dict:
    """Each (source, format, plain/shuffled) conversion per round; the stored source's
    outputs stay for the reads."""
    ways, outs = [], {}
    for kind, src in sources.items():
        for fmt in formats if kind == "stored" else formats[:1]:
            for variant, seed in (("plain", None), ("shuffled", SEED)):
                name = f"{kind}/{fmt}/{variant}"
                out = os.path.join(root, f"{kind}-{variant}-{NAMES.get(fmt, fmt)}")
                outs[name] = out
                ways.append((name, CONVERT.format(src=src, out=out, fmt=fmt, seed=seed)))

    def remove(name: str) -> None:
        shutil.rmtree(outs[name], ignore_errors=True)
        if os.path.isfile(outs[name]):
            os.remove(outs[name])

    return {"results": alternating_rounds(ways, rounds, remove), "outs": outs}


def read_all(outs: dict, formats: list[str], args: argparse.Namespace) -> dict:
    runs: dict[tuple[str, str, str], list[dict]] = {}
    plan = [(fmt, out, way) for fmt in formats for out, way in READS]
    for r in range(args.rounds):
        for fmt, out, way in plan if r % 2 == 0 else plan[::-1]:
            path = outs[f"stored/{fmt}/{out}"]
            res = read_epoch(path, fmt, way, args.workers, args.batch)
            if not np.array_equal(np.sort(res["order"]), np.arange(args.records)):
                raise SystemExit(f"{fmt} {out} {way}: an epoch did not deliver each record once")
            res["quality"] = shuffle_quality(res["order"], args.shard_records)
            runs.setdefault((fmt, out, way), []).append(res)
            print(
                f"round {r + 1}: {fmt} {out} {way}: {args.records / res['seconds']:.0f} img/s, "
                f"quality {res['quality']:.2f}",
                file=sys.stderr,
            )
    return runs


def report(conv: dict, runs: dict, formats: list[str], args: argparse.Namespace) -> str:
    res = conv["results"]
    crows = []
    for name, rs in res.items():
        kind, fmt, variant = name.split("/")
        row = {
            "source": f"{kind} npz",
            "format": fmt,
            "conversion": variant,
            "seconds": statistics.median(r["seconds"] for r in rs),
            "rss": max(r["rss_mb"] for r in rs),
        }
        if variant == "shuffled":
            plain = res[f"{kind}/{fmt}/plain"]
            row["ratio"] = median_range(
                [o["seconds"] / b["seconds"] for o, b in zip(rs, plain, strict=True)]
            )
        crows.append(row)
    rrows = []
    for fmt in formats:
        base = runs[(fmt, "plain", "ordered")]
        for out, way in READS:
            rs = runs[(fmt, out, way)]
            rrows.append(
                {
                    "format": fmt,
                    "output": out,
                    "read": way if way != "buffer" else "shuffle=1000",
                    "img_s": statistics.median(args.records / x["seconds"] for x in rs),
                    "ratio": median_range(
                        [b["seconds"] / x["seconds"] for x, b in zip(rs, base, strict=True)]
                    ),
                    "quality": statistics.median(x["quality"] for x in rs),
                }
            )
    return "\n".join(
        [
            f"# Shuffle at conversion time: {args.records} photo tiles, {args.rounds} rounds "
            f"(medians), reads with {args.workers} DataLoader workers, batches of {args.batch}",
            "",
            machine() + f"; load average {load_average()}",
            "",
            table(
                crows,
                [
                    ("source", "source"),
                    ("format", "format"),
                    ("conversion", "conversion"),
                    ("seconds", "s"),
                    ("ratio", "x plain (range)"),
                    ("rss", "peak RSS MB"),
                ],
            ),
            "",
            table(
                rrows,
                [
                    ("format", "format"),
                    ("output", "output"),
                    ("read", "read"),
                    ("img_s", "images/s"),
                    ("ratio", "x plain ordered (range)"),
                    ("quality", "quality"),
                ],
            ),
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--shard-records", type=int, default=500)
    ap.add_argument("--formats", default="tfrecord,parquet,zarr")
    ap.add_argument("--deflated", action="store_true", help="also convert a deflated npz")
    args = ap.parse_args()
    formats = args.formats.split(",")
    root = tempfile.mkdtemp(prefix="bench-shuffle-convert-")
    try:
        conv = convert_all(
            root, write_source(root, args.records, args.deflated), formats, args.rounds
        )
        runs = read_all(conv["outs"], formats, args)
        text = report(conv, runs, formats, args)
        print("report:", write_report("bench_shuffle_convert", text), file=sys.stderr)
        print(text)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
