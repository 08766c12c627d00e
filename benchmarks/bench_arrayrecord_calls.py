"""How to ask array_record for records: CPU per record of each way of calling its reader.

dstore's ArrayRecord reader asks the library for records one at a time
(``reader.read([i])``), not for a list of positions (``reader.read(positions)``)
nor a range (``reader.read(lo, hi)``). This measures why, on dstore's own
shards of photo tiles (256x256x3 PNG, one ``tf.train.Example`` each):

* ``list``: 64 random positions a call (what a shuffled window asks), the
  library's parallel read with ``max_parallelism:0``;
* ``each (random)``: the same positions, one call per record;
* ``range``: consecutive records, 256 a call (storage order);
* ``each (in order)``: the same records, one call per record.

The reader is opened with dstore's options (``readahead_buffer_size:0``:
random access). The CPU seconds are the process's (user + system, all its
threads), per record read; rounds alternate the ways' order, and the table
gives the medians and each way's ratio to its baseline in the same round
(``list`` for random positions, ``range`` for storage order; above 1, the
per-record calls take less CPU).

    python benchmarks/bench_arrayrecord_calls.py [--records 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import load_average, machine, table, write_report

#: what dstore's reader opens files with (dstore/codecs/arrayrecord/reader.py)
READ_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"
WINDOW = 64
BLOCK = 256


def write_shards(root: str, n: int) -> list[str]:
    import dstore
    from dstore.demo import photo_tiles

    x, y = photo_tiles(n, 256, seed=42)
    src = os.path.join(root, "tiles.npz")
    np.savez(src, x_train=x, y_train=y)
    out = os.path.join(root, "tiles.arrayrecord")
    dstore.convert(src, out, to="arrayrecord")
    return sorted(glob.glob(os.path.join(out, "*array_record*")))


def ways(reader, order: np.ndarray) -> dict[str, Callable[[], int]]:
    n = reader.num_records()
    windows = [np.sort(order[s : s + WINDOW]).tolist() for s in range(0, n, WINDOW)]

    def listed() -> int:
        return sum(len(reader.read(w)) for w in windows)

    def each_random() -> int:
        return sum(len([reader.read([p])[0] for p in w]) for w in windows)

    def ranged() -> int:
        return sum(len(reader.read(a, min(n, a + BLOCK))) for a in range(0, n, BLOCK))

    def each_in_order() -> int:
        return len([reader.read([i])[0] for i in range(n)])

    return {
        "list": listed,
        "each (random)": each_random,
        "range": ranged,
        "each (in order)": each_in_order,
    }


BASELINE = {"each (random)": "list", "each (in order)": "range"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from array_record.python.array_record_module import ArrayRecordReader

    with tempfile.TemporaryDirectory() as root:
        shards = write_shards(root, args.records)
        readers = [ArrayRecordReader(p, READ_OPTIONS) for p in shards]
        rng = np.random.default_rng(0)
        per_shard = [ways(r, rng.permutation(r.num_records())) for r in readers]
        names = list(per_shard[0])
        cpu: dict[str, list[float]] = {name: [] for name in names}
        for k in range(args.rounds):
            for name in names if k % 2 == 0 else names[::-1]:
                c0 = time.process_time()
                count = sum(w[name]() for w in per_shard)
                cpu[name].append((time.process_time() - c0) / count * 1e3)
        for r in readers:
            r.close()
    rows = []
    for name in names:
        row = {"way": name, "cpu": f"{statistics.median(cpu[name]):.3f}"}
        if name in BASELINE:
            ratios = [b / o for o, b in zip(cpu[name], cpu[BASELINE[name]], strict=True)]
            row["ratio"] = (
                f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
                f" vs {BASELINE[name]}"
            )
        rows.append(row)
    text = (
        f"{machine()}, load average {load_average()}; {args.records:,} photo tiles, "
        f"{len(shards)} shards, {args.rounds} rounds (medians)\n\n"
        + table(
            rows, [("way", "way"), ("cpu", "CPU ms/record"), ("ratio", "baseline's CPU / this")]
        )
    )
    print(text)
    write_report("arrayrecord_calls", text)


if __name__ == "__main__":
    main()
