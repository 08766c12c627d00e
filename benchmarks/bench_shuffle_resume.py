"""The cost of ``shuffle="global"`` against the range shuffle, and resume time at 10% and
90% of an epoch (issue #25).

A split of ``--records`` real-photo tiles (64x64x3, from scikit-image's sample images)
is written as TFRecord (with its ``.idx``) and zarr. For each, in alternating rounds:

* one epoch through ``DataLoader(num_workers=2, batch_size=64)`` with ``shuffle=0``,
  ``shuffle=1000`` (a buffer over shuffled ranges) and ``shuffle="global"``;
* the time from ``load_state_dict`` of a state taken at 10% and at 90% of a
  ``shuffle="global"`` epoch (one process) to the first record after it: resuming
  reads nothing already taken, so it should not grow with how far in the state is.

    python benchmarks/bench_shuffle_resume.py [--records 6000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import machine, write_report


def _epoch(path: str, shuffle: int | str) -> float:
    import torch.utils.data as tud

    import dstore

    ds = dstore.to_torch(path, "train", shuffle=shuffle, seed=1)
    t = time.perf_counter()
    n = sum(len(b["k"]) for b in tud.DataLoader(ds, batch_size=64, num_workers=2))
    assert n == ds.count, (n, ds.count)
    return time.perf_counter() - t


def _resume(path: str, fraction: float) -> float:
    import dstore

    ds = dstore.to_torch(path, "train", shuffle="global", seed=1)
    it = iter(ds)
    for _ in range(int(ds.count * fraction)):
        next(it)
    state = ds.state_dict()
    fresh = dstore.to_torch(path, "train", shuffle="global", seed=1)
    t = time.perf_counter()
    fresh.load_state_dict(state)
    next(iter(fresh))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import dstore
    from dstore.demo import photo_tiles

    tiles, _ = photo_tiles(600, 64)
    x = np.concatenate([tiles] * (-(-args.records // len(tiles))))[: args.records]
    data = {"train": {"x": x, "k": np.arange(args.records)}}
    work = tempfile.mkdtemp(prefix="bench-shuffle-")
    paths = {
        "tfrecord": os.path.join(work, "d.tfrecords"),
        "zarr": os.path.join(work, "d.zarr"),
    }
    dstore.save(data, paths["tfrecord"], shard_mb="8")
    dstore.save(data, paths["zarr"])
    ways = [("shuffle=0", 0), ("shuffle=1000", 1000), ('shuffle="global"', "global")]
    epochs: dict[tuple[str, str], list[float]] = {}
    resumes: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for fmt, path in paths.items():
            for name, shuffle in ways if r % 2 == 0 else ways[::-1]:
                epochs.setdefault((fmt, name), []).append(_epoch(path, shuffle))
            for frac in (0.1, 0.9):
                resumes.setdefault((fmt, f"{int(frac * 100)}%"), []).append(_resume(path, frac))
    lines = [
        f"# Global shuffle and resume, {args.records} tiles 64x64x3",
        "",
        machine(),
        "",
        f"`python benchmarks/bench_shuffle_resume.py --records {args.records} --rounds "
        f"{args.rounds}`; DataLoader(num_workers=2, batch_size=64)",
        "",
        "| format | way | epoch s, median (range) | vs shuffle=0 |",
        "|---|---|---|---|",
    ]
    for (fmt, name), ts in epochs.items():
        base = statistics.median(epochs[(fmt, "shuffle=0")])
        lines.append(
            f"| {fmt} | {name} | {statistics.median(ts):.2f} ({min(ts):.2f}-{max(ts):.2f}) "
            f"| {statistics.median(ts) / base:.2f}x |"
        )
    lines += ["", "| format | state taken at | resume to first record, ms |", "|---|---|---|"]
    for (fmt, at), ts in resumes.items():
        lines.append(
            f"| {fmt} | {at} of the epoch | {1000 * statistics.median(ts):.1f} "
            f"({1000 * min(ts):.1f}-{1000 * max(ts):.1f}) |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    write_report("shuffle_resume", text)


if __name__ == "__main__":
    main()
