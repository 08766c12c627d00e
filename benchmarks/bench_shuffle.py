"""Shuffled training reads against storage order, per format, in one run.

``--records`` photo tiles (256x256x3 uint8, cropped from scikit-image's photos)
with their position ``k`` are converted to each random-access format with
dstore's defaults, then read by a PyTorch ``DataLoader`` (``--workers`` worker
processes, batches of ``--batch``) five ways:

* ``ordered``: ``to_torch(path)``, storage order (the baseline of each ratio);
* ``global``: ``to_torch(path, shuffle="global")``;
* ``block``: ``to_torch(path, shuffle="block")``;
* ``map``: ``to_torch(path, map_style=True)`` under ``DataLoader(shuffle=True)``;
* ``buffer``: ``to_torch(path, shuffle=1000)`` (range order and a 1,000-record buffer).

Each way runs once per round, the order of the ways reversed every other round;
the table gives the median images/s, each shuffled way's ratio to the ordered
epoch of the same round (median and range), the time to the first batch, and
the CPU seconds of the loader's worker processes (user + system, and the system
part: page faults show there; 0 for Grain, whose workers outlive the epoch's
loop), and the shuffle quality of the order the loader delivered (the ``k`` of each record):
MosaicML's metric (streaming's ``simulation/core/shuffle_quality.py``), the
harmonic mean of the entropies of the absolute differences of consecutive sample
positions and of consecutive shard numbers, with shards of ``--shard-records``
consecutive records (500 of 4,000: a uniform permutation scores about 4.49,
storage order 0).

The peers' shuffled readers run in the same rounds, interleaved with dstore's
ways, one epoch per process (``_shuffle_peers.py``, imports outside the clock),
each decoding the same PNG bytes with dstore's PNG decoder (``--peers-decoder
pil``: PIL) through ``DataLoader(num_workers=--workers, batch_size=--batch)``:

* ``mds``: MosaicML streaming's ``MDSWriter`` then ``StreamingDataset(shuffle=True,
  shuffle_algo="py1e")``;
* ``litdata``: ``litdata.optimize`` then ``StreamingDataset(shuffle=True)``;
* ``grain``: Grain's own ``DataLoader`` (``IndexSampler(shuffle=True)``, ``--workers``
  workers) over dstore's ArrayRecord shards;
* ``webdataset``: ``wds.WebDataset(shardshuffle=...).shuffle(1000)`` over dstore's tars;
* ``hf``: ``datasets.load_dataset("parquet", ...)`` of dstore's Parquet files, ``.shuffle(seed)``.

MDS and litdata get the PNG bytes, label and ``k`` of dstore's WebDataset tars,
written by their own writers. They import torchvision, which needs torch's
default (CUDA) build here: ``--peers-python`` names the Python of the
environment that has them (see docs/benchmarks.md); a peer that does not import
there is left out, and the report says so. Each dstore way's ``x best peer`` is
its images/s over the fastest peer's in the same round (median and range).

    python benchmarks/bench_shuffle.py [--records 4000] [--rounds 3] [--formats tfrecord,zarr]
        [--peers mds,litdata,grain,webdataset,hf] [--peers-python /path/to/venv-peers/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import load_average, machine, median_range, table, write_report
from _shuffle_peers import timed_epoch

FORMATS = ("tfrecord", "webdataset", "parquet", "arrayrecord", "zarr", "hdf5")
WAYS = ("ordered", "global", "block", "map", "buffer")
PEERS = ("mds", "litdata", "grain", "webdataset", "hf")
#: what each peer reads: the dstore format it reads, or the peer's own copy of dstore's tars
PEER_SOURCE = {"grain": "arrayrecord", "webdataset": "webdataset", "hf": "parquet"}
#: the module each peer needs, checked in the Python that runs it
PEER_MODULE = {
    "mds": "streaming",
    "litdata": "litdata",
    "grain": "grain",
    "webdataset": "webdataset",
    "hf": "datasets",
}
PEER_NAMES = {
    "mds": "MDS (py1e)",
    "litdata": "litdata",
    "grain": "Grain (ArrayRecord)",
    "webdataset": "webdataset (1,000 buffer)",
    "hf": "HF datasets",
}
#: the peers that import torchvision (``--peers-python``)
TORCHVISION_PEERS = ("mds", "litdata")
HERE = os.path.dirname(os.path.abspath(__file__))
HELPER = os.path.join(HERE, "_shuffle_peers.py")
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

    t0 = time.perf_counter()
    if way == "map":
        ds = dstore.to_torch(path, "train", map_style=True)
        loader = data_loader(ds, batch_size=batch, num_workers=workers, shuffle=True)
    else:
        shuffle: int | str = {"ordered": 0, "buffer": 1000}.get(way, way)
        ds = dstore.to_torch(path, "train", shuffle=shuffle, seed=1)
        loader = data_loader(ds, batch_size=batch, num_workers=workers, collate_fn=ds.collate_fn())
    return timed_epoch(loader, t0)


def peer_python(peer: str, args: argparse.Namespace) -> str:
    return args.peers_python if peer in TORCHVISION_PEERS else sys.executable


def _peer_env() -> dict[str, str]:
    """The repository on the path: the peers decode with dstore's PNG decoder."""
    root = os.path.dirname(HERE)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


def usable_peers(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The asked peers whose module imports in their Python, and a note for each one left out."""
    found, notes = [], []
    for peer in [p for p in args.peers.split(",") if p]:
        if peer not in PEERS:
            raise SystemExit(f"--peers: unknown peer {peer!r} (known: {', '.join(PEERS)})")
        python, module = peer_python(peer, args), PEER_MODULE[peer]
        run = subprocess.run(
            [python, "-c", f"import {module}"], check=False, capture_output=True, text=True
        )
        if run.returncode:
            last = (run.stderr.strip().splitlines() or ["?"])[-1]
            notes.append(f"{peer} left out: `import {module}` failed in {python}: {last}")
            continue
        found.append(peer)
    return found, notes


def write_peers(root: str, stores: dict[str, str], peers: list[str], args) -> dict[str, str]:
    """Each peer's input: dstore's own files, or the peer's copy of dstore's tars."""
    paths = {}
    for peer in peers:
        if peer in PEER_SOURCE:
            paths[peer] = stores[PEER_SOURCE[peer]]
        else:
            paths[peer] = os.path.join(root, peer)
        if peer in ("mds", "litdata", "hf"):  # the peer's writer, or HF's Arrow cache
            t = time.perf_counter()
            cmd = [
                peer_python(peer, args),
                HELPER,
                "write",
                peer,
                stores[PEER_SOURCE.get(peer, "webdataset")],
                paths[peer],
            ]
            _run_helper(cmd)
            print(f"wrote {peer} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return paths


def _run_helper(cmd: list[str]) -> str:
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, env=_peer_env())
    if run.returncode:
        raise SystemExit(f"{' '.join(cmd[2:4])} failed:\n{run.stderr[-3000:]}")
    return run.stdout


def peer_epoch(peer: str, path: str, args: argparse.Namespace) -> dict:
    """One epoch of ``peer``'s shuffled reader, in its own process."""
    cmd = [peer_python(peer, args), HELPER, "read", peer, path, "--workers", str(args.workers)]
    cmd += ["--batch", str(args.batch), "--decoder", args.peers_decoder]
    out = _run_helper(cmd)
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    res = json.loads(line[len("RESULT ") :])
    res["order"] = np.asarray(res["order"], dtype=np.int64)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--shard-records", type=int, default=500)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--ways", default=",".join(WAYS))
    ap.add_argument("--peers", default=",".join(PEERS), help="comma list; '' for none")
    ap.add_argument(
        "--peers-python",
        default=sys.executable,
        help="the Python that runs mds and litdata (an environment with torchvision)",
    )
    ap.add_argument("--peers-decoder", choices=("dstore", "pil"), default="dstore")
    args = ap.parse_args()
    formats, ways = args.formats.split(","), args.ways.split(",")
    peers, notes = usable_peers(args)
    root = tempfile.mkdtemp(prefix="bench-shuffle-")
    try:
        needed = [PEER_SOURCE.get(p, "webdataset") for p in peers]
        stores = write_stores(root, args.records, list(dict.fromkeys(formats + needed)))
        peer_paths = write_peers(root, stores, peers, args)
        plan = [(f, w) for f in formats for w in ways] + [(f"peer:{p}", "shuffled") for p in peers]
        runs: dict[tuple[str, str], list[dict]] = {key: [] for key in plan}
        for r in range(args.rounds):
            for fmt, way in plan if r % 2 == 0 else plan[::-1]:
                if fmt.startswith("peer:"):
                    res = peer_epoch(fmt[5:], peer_paths[fmt[5:]], args)
                else:
                    res = read_epoch(stores[fmt], fmt, way, args.workers, args.batch)
                order = res["order"]
                res["once"] = len(order) == args.records and np.array_equal(
                    np.sort(order), np.arange(args.records)
                )
                if not res["once"] and not fmt.startswith("peer:"):
                    raise SystemExit(f"{fmt} {way}: an epoch did not deliver each record once")
                res["quality"] = shuffle_quality(order, args.shard_records)
                runs[(fmt, way)].append(res)
                print(
                    f"round {r + 1}: {fmt} {way}: {args.records / res['seconds']:.0f} img/s, "
                    f"first batch {res['first']:.2f} s, quality {res['quality']:.2f}",
                    file=sys.stderr,
                )
        print(report(runs, formats, ways, peers, notes, args))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _best_peer_per_round(runs: dict, peers: list[str], rounds: int) -> list[float]:
    """The fastest peer's seconds in each round."""
    return [
        min(runs[(f"peer:{p}", "shuffled")][r]["seconds"] for p in peers) for r in range(rounds)
    ]


def report(
    runs: dict,
    formats: list[str],
    ways: list[str],
    peers: list[str],
    notes: list[str],
    args: argparse.Namespace,
) -> str:
    best = _best_peer_per_round(runs, peers, args.rounds) if peers else None
    rows = []
    for fmt, way in runs:
        rs = runs[(fmt, way)]
        row = {
            "format": PEER_NAMES[fmt[5:]] if fmt.startswith("peer:") else fmt,
            "way": way,
            "img_s": statistics.median(args.records / x["seconds"] for x in rs),
            "first": statistics.median(x["first"] for x in rs),
            "quality": statistics.median(x["quality"] for x in rs),
            "cpu": statistics.median(x["worker_user"] + x["worker_sys"] for x in rs),
            "sys": statistics.median(x["worker_sys"] for x in rs),
        }
        base = runs.get((fmt, "ordered"))
        if base and way != "ordered":
            ratios = [b["seconds"] / x["seconds"] for x, b in zip(rs, base, strict=True)]
            row["ratio"] = median_range(ratios)
        if best and way not in ("ordered", "shuffled"):
            row["peer"] = median_range([b / x["seconds"] for x, b in zip(rs, best, strict=True)])
        if not all(x["once"] for x in rs):
            n = [len(x["order"]) for x in rs]
            notes.append(
                f"{row['format']}: an epoch did not deliver each record once ({n} records)"
            )
        rows.append(row)
    cols = [
        ("format", "format"),
        ("way", "read"),
        ("img_s", "images/s"),
        ("ratio", "x ordered (range)"),
        ("peer", "x best peer (range)"),
        ("first", "first batch s"),
        ("quality", "quality"),
        ("cpu", "workers' CPU s"),
        ("sys", "of it system"),
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
            f"Peers ({args.peers_decoder} PNG decoder; mds, litdata in {args.peers_python}): "
            + (", ".join(PEER_NAMES[p] for p in peers) or "none"),
            *notes,
        ]
    )
    print("report:", write_report("bench_shuffle", text), file=sys.stderr)
    return text


if __name__ == "__main__":
    main()
