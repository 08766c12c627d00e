"""Shuffled training reads against storage order, per format, in one run.

``--records`` photo tiles (256x256x3 uint8, cropped from scikit-image's photos)
with their position ``k`` are converted to each random-access format with
dstore's defaults, then read by a PyTorch ``DataLoader`` (``--workers`` worker
processes, batches of ``--batch``) five ways:

* ``ordered``: ``to_torch(path)``, storage order (the baseline of each ratio);
* ``global``: ``to_torch(path, shuffle="global")``;
* ``block``: ``to_torch(path, shuffle="block")``;
* ``map``: ``to_torch(path, map_style=True)`` under ``DataLoader(shuffle=True)``;
* ``buffer``: ``to_torch(path, shuffle=1000)`` (range order and a 1,000-record buffer);
* ``grain`` (ArrayRecord only, not by default): Grain's own global shuffle on dstore's
  files, ``grain.python.DataLoader`` (``--workers`` worker processes, batches of
  ``--batch``) over ``ArrayRecordDataSource`` with ``IndexSampler(shuffle=True)``, each
  record decoded by dstore's Example decoder (the same code dstore's reader runs), so
  the two differ in how they read, not in what decodes.

Each way runs once per round, the order of the ways reversed every other round;
the table gives the median images/s, each shuffled way's ratio to the ordered
epoch of the same round (median and range), the time to the first batch, and
the shuffle quality of the order the loader delivered (the ``k`` of each record):
MosaicML's metric (streaming's ``simulation/core/shuffle_quality.py``), the
harmonic mean of the entropies of the absolute differences of consecutive sample
positions and of consecutive shard numbers, with shards of ``--shard-records``
consecutive records (500 of 4,000: a uniform permutation scores about 4.49,
storage order 0).

The peers' loaders (MosaicML streaming, litdata) import torchvision, which needs
torch's CUDA build here; they are left out when they do not import (the report
says so).

    python benchmarks/bench_shuffle.py [--records 4000] [--rounds 3] [--formats tfrecord,zarr]
        [--ways ordered,global,map,grain]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import load_average, machine, median_range, table, write_report

FORMATS = ("tfrecord", "webdataset", "parquet", "arrayrecord", "zarr", "hdf5")
WAYS = ("ordered", "global", "block", "map", "buffer")
#: ways that are another library's reader, and the formats they read
PEER_WAYS = {"grain": ("arrayrecord",)}
PEERS = ("streaming", "litdata")
#: where each format is written (zarr and HDF5 are told by their extension)
NAMES = {"zarr": "tiles.zarr", "hdf5": "tiles.h5"}


def shuffle_quality(order: np.ndarray, shard_records: int) -> float:
    """MosaicML's shuffle quality of ``order`` (record positions as delivered)."""

    def entropy(seq: np.ndarray) -> float:
        counts = np.bincount(np.abs(np.diff(seq)))
        p = counts[counts > 0] / (len(seq) - 1)
        return float(-(p * np.log2(p)).sum())

    a, b = entropy(order), entropy(order // shard_records)
    return 0.0 if a + b == 0 else 2 * a * b / (a + b)


def write_stores(root: str, n: int, formats: list[str]) -> dict[str, str]:
    import dstore
    from dstore.demo import photo_tiles

    x, y = photo_tiles(n, 256, seed=42)
    src = os.path.join(root, "tiles.npz")
    np.savez(src, x_train=x, y_train=y, k_train=np.arange(n, dtype=np.int64))
    stores = {}
    for fmt in formats:
        out = os.path.join(root, NAMES.get(fmt, fmt))
        t = time.perf_counter()
        dstore.convert(src, out, to=fmt)
        print(f"converted {fmt} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        stores[fmt] = out
    return stores


def read_epoch(path: str, fmt: str, way: str, workers: int, batch: int) -> dict:
    """One epoch of ``way``: seconds, seconds to the first batch, the order delivered."""
    import dstore
    from dstore.readers.torch import data_loader

    if way == "grain":
        return grain_epoch(path, workers, batch)
    t0 = time.perf_counter()
    if way == "map":
        ds = dstore.to_torch(path, "train", map_style=True)
        loader = data_loader(ds, batch_size=batch, num_workers=workers, shuffle=True)
    else:
        shuffle: int | str = {"ordered": 0, "buffer": 1000}.get(way, way)
        ds = dstore.to_torch(path, "train", shuffle=shuffle, seed=1)
        loader = data_loader(ds, batch_size=batch, num_workers=workers, collate_fn=ds.collate_fn())
    keys, first = [], None
    for b in loader:
        if first is None:
            first = time.perf_counter() - t0
        keys.append(np.asarray(b["k"]).reshape(-1))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "first": first, "order": np.concatenate(keys)}


def grain_epoch(path: str, workers: int, batch: int) -> dict:
    """The grain way in a process of its own (``_grain_way.py`` says why)."""
    import json
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        order = os.path.join(tmp, "order.npy")
        argv = [sys.executable, os.path.join(here, "_grain_way.py"), path, str(workers)]
        done = subprocess.run(
            [*argv, str(batch), order], check=False, capture_output=True, text=True
        )
        if done.returncode:
            raise SystemExit(f"grain way failed: {done.stderr.strip().splitlines()[-1:]}")
        res = json.loads(done.stdout.strip().splitlines()[-1])
        res["order"] = np.load(order)
    return res


def peers_available() -> list[str]:
    found = []
    for name in PEERS:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - any failure to import leaves the peer out
            continue
        found.append(name)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--shard-records", type=int, default=500)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--ways", default=",".join(WAYS))
    args = ap.parse_args()
    formats, ways = args.formats.split(","), args.ways.split(",")
    root = tempfile.mkdtemp(prefix="bench-shuffle-")
    try:
        stores = write_stores(root, args.records, formats)
        runs: dict[tuple[str, str], list[dict]] = {
            (f, w): [] for f in formats for w in ways if f in PEER_WAYS.get(w, (f,))
        }
        for r in range(args.rounds):
            plan = [(f, w) for f in formats for w in ways if f in PEER_WAYS.get(w, (f,))]
            for fmt, way in plan if r % 2 == 0 else plan[::-1]:
                res = read_epoch(stores[fmt], fmt, way, args.workers, args.batch)
                got = np.sort(res["order"])
                if not np.array_equal(got, np.arange(args.records)):
                    raise SystemExit(f"{fmt} {way}: an epoch did not deliver each record once")
                res["quality"] = shuffle_quality(res["order"], args.shard_records)
                runs[(fmt, way)].append(res)
                print(
                    f"round {r + 1}: {fmt} {way}: {args.records / res['seconds']:.0f} img/s, "
                    f"first batch {res['first']:.2f} s, quality {res['quality']:.2f}",
                    file=sys.stderr,
                )
        print(report(runs, formats, ways, args))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(runs: dict, formats: list[str], ways: list[str], args: argparse.Namespace) -> str:
    rows = []
    for fmt in formats:
        base = runs.get((fmt, "ordered"))
        for way in ways:
            rs = runs.get((fmt, way))
            if not rs:
                continue
            row = {
                "format": fmt,
                "way": way,
                "img_s": statistics.median(args.records / x["seconds"] for x in rs),
                "first": statistics.median(x["first"] for x in rs),
                "quality": statistics.median(x["quality"] for x in rs),
            }
            if base and way != "ordered":
                ratios = [b["seconds"] / x["seconds"] for x, b in zip(rs, base, strict=True)]
                row["ratio"] = median_range(ratios)
            rows.append(row)
    peers = peers_available()
    cols = [
        ("format", "format"),
        ("way", "read"),
        ("img_s", "images/s"),
        ("ratio", "x ordered (range)"),
        ("first", "first batch s"),
        ("quality", "quality"),
    ]
    text = "\n".join(
        [
            f"# Shuffled reads: {args.records} photo tiles, {args.workers} DataLoader workers, "
            f"batches of {args.batch}, {args.rounds} rounds (medians)",
            "",
            machine() + f"; load average {load_average()}",
            "",
            table(rows, cols),
            "",
            "Peers: "
            + (
                ", ".join(peers) if peers else "none importable here (torchvision needs CUDA torch)"
            ),
        ]
    )
    print("report:", write_report("bench_shuffle", text), file=sys.stderr)
    return text


if __name__ == "__main__":
    main()
