"""What checking shards against their manifest costs (issue #34).

A shard read whole (``convert``, ``verify``, a training epoch of whole shards) is
hashed (sha256) and compared with its manifest entry before its records are
read; a record index is walked against the shard's frame headers once per
reader. This measures both against the same work without them, in one process,
rounds alternating which way goes first (the machine is shared and noisy):

* per sharded format: ``convert`` of a dstore folder (``--records`` 256x256 photo
  tiles, PNG, shards of ``--shard-mb``) to an uncompressed npz, and one full read
  (``iter_batches`` of every field), each with and without the sha256 check;
* TFRecord: the first indexed read of a record (index parsed and walked against
  the frames) with and without the walk.

The ratio column is checked / unchecked, medians over ``--rounds``.

    python benchmarks/bench_shard_checks.py [--records 2000] [--shard-mb 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine, write_report


@contextmanager
def _unchecked() -> Iterator[None]:
    """Shards read without their sha256 (the size is still compared) and indexes used
    without the walk: the reader as it was before the checks."""
    from dstore.sharding.checked import CheckedShards as C

    check_shard, walk = C.check_shard, C.check_index_frames
    C.check_shard = lambda self, shard, whole: check_shard(self, shard, False)  # type: ignore[method-assign]
    C.check_index_frames = lambda self, shard, offsets: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        C.check_shard, C.check_index_frames = check_shard, walk  # type: ignore[method-assign]


def _timed(run: Callable[[], object]) -> float:
    t = time.perf_counter()
    run()
    return time.perf_counter() - t


def _convert(src: str, work: str) -> Callable[[], object]:
    import dstore

    dst = os.path.join(work, "o.npz")

    def run() -> object:
        if os.path.exists(dst):
            os.remove(dst)
        return dstore.convert(src, dst, options={"compress": "false"})

    return run


def _read(src: str) -> Callable[[], object]:
    import dstore

    def run() -> object:
        n = 0
        with dstore.api.open_reader(src) as r:
            for split in r.schema.splits:
                for batch in r.iter_batches(split):
                    n += len(next(iter(batch.values())))
        return n

    return run


def _hash_all(src: str) -> Callable[[], object]:
    import json

    from dstore import fs

    with open(os.path.join(src, "dstore.json")) as f:
        names = [s["file"] for i in json.load(f)["splits"].values() for s in i["shards"]]
    return lambda: [fs.sha256_file(os.path.join(src, n)) for n in names]


def _first_indexed_read(src: str) -> Callable[[], object]:
    import dstore

    def run() -> object:
        with dstore.open(src) as ds:
            split = next(iter(ds))
            field = ds[split]["y"]
            return [
                field[len(field) - 1 - i] for i in range(0, len(field), max(1, len(field) // 8))
            ]

    return run


def _median_pair(rounds: int, way: Callable[[], object]) -> tuple[float, float, list[float]]:
    """Median seconds checked and unchecked, and the per-round ratios."""
    checked_s, unchecked_s = [], []
    for r in range(rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        for with_checks in order:
            if with_checks:
                checked_s.append(_timed(way))
            else:
                with _unchecked():
                    unchecked_s.append(_timed(way))
    ratios = [a / b for a, b in zip(checked_s, unchecked_s, strict=True)]
    return statistics.median(checked_s), statistics.median(unchecked_s), ratios


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--shard-mb", type=float, default=64.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--formats", default="")
    args = ap.parse_args()
    import numpy as np

    import dstore
    from dstore.demo import photo_tiles
    from dstore.output import path_size
    from dstore.registry import codecs_with, default_extension

    formats = args.formats.split(",") if args.formats else codecs_with(lambda c: c.sharded)
    tiles, onehot = photo_tiles(args.records, 256)
    data = {"train": {"x": tiles, "y": onehot.argmax(axis=1).astype(np.int64)}}
    work = tempfile.mkdtemp(prefix="bench-shard-checks-")
    rows = []
    hashing: list[tuple[str, float, float, float]] = []
    try:
        for fmt in formats:
            src = os.path.join(work, f"d{default_extension(fmt)}")
            dstore.save(data, src, shard_mb=str(args.shard_mb))
            mb = path_size(src) / 2**20
            for what, way in (("convert to npz", _convert(src, work)), ("full read", _read(src))):
                on, off, ratios = _median_pair(args.rounds, way)
                rows.append((fmt, f"{what} ({mb:.0f} MB)", on, off, ratios))
            hashed = [_timed(_hash_all(src)) for _ in range(args.rounds)]
            hashing.append((fmt, mb, statistics.median(hashed), rows[-2][3]))
            if fmt == "tfrecord":
                on, off, ratios = _median_pair(args.rounds, _first_indexed_read(src))
                rows.append((fmt, "first indexed reads (index walked)", on, off, ratios))
            shutil.rmtree(src)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        f"# Checking shards against their manifest: {args.records} tiles 256x256x3 "
        f"(PNG), shards of {args.shard_mb:g} MiB",
        "",
        machine(),
        "",
        f"`python benchmarks/bench_shard_checks.py --records {args.records} --shard-mb "
        f"{args.shard_mb:g} --rounds {args.rounds}`",
        "",
        "| format | work | checked s | unchecked s | ratio (median) | ratio range |",
        "|---|---|---|---|---|---|",
    ]
    for fmt, what, on, off, ratios in rows:
        lines.append(
            f"| {fmt} | {what} | {on:.3f} | {off:.3f} | {statistics.median(ratios):.3f}x "
            f"| {min(ratios):.3f}-{max(ratios):.3f} |"
        )
    lines += [
        "",
        "The sha256 alone (every shard hashed once, from the page cache), against the "
        "unchecked convert:",
        "",
        "| format | MB | sha256 s | MB/s | share of the unchecked convert |",
        "|---|---|---|---|---|",
    ]
    for fmt, mb, s, convert_s in hashing:
        lines.append(f"| {fmt} | {mb:.0f} | {s:.3f} | {mb / s:.0f} | {100 * s / convert_s:.1f}% |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_report("shard_checks", text)


if __name__ == "__main__":
    main()
