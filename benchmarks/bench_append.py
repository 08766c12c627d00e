"""Issue #37: what an append costs, many small appends then compact, and a kill sweep.

    python benchmarks/bench_append.py [--tiles 6000] [--appends 1000] [--kills 30]
                                      [--parts cost,compact,kills]

1. cost: a label-maker npz of ``--tiles`` real-photo tiles (256x256x3, PNG in every
   format) converted to TFRecord, WebDataset, Parquet, ArrayRecord and zarr; then 1%
   more tiles appended to each (``append=True``, median of 3 appends, the 2nd and 3rd
   with ``append_again=True``). Prints the append's seconds as a ratio to the full
   conversion's in the same run, and how many files that existed before the append
   changed or went (must be 0; zarr: chunk files changed per array, at most 1, the
   last partial chunk; metadata and manifests are the commit and are not counted).
2. compact: ``--appends`` appends of 10 records each (32x32 tiles with a key) to a
   TFRecord dataset, then ``dstore.compact``; compared with one conversion of all the
   records: the same records in the same order (element by element), and
   ``dstore.to_torch`` records/s of each, interleaved, best of 5, as a ratio.
3. kills: ``--kills`` SIGKILLs spread over the five formats, each at a random moment
   of an append in a child process (uniform over the time one uninterrupted append of
   the same size took, counted from when the child has imported dstore); after each kill the dataset must read
   as the version before or the new one and ``verify`` pass (else: a damaged version),
   then the same append is run again (refused by the history when the killed one had
   committed: the retry is safe) and must leave nothing behind (leftovers).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from _harness import label_maker_npz, machine, table, write_report

import dstore
from dstore.errors import AppendError
from dstore.testing import append_leftovers, file_digests

EXT = {
    "tfrecord": ".tfrecords",
    "webdataset": ".wds",
    "parquet": ".parquet",
    "arrayrecord": ".arrayrecord",
    "zarr": ".zarr",
}
#: what an append rewrites by design: the manifests (its commit), zarr's metadata, and
#: the cards that describe the dataset (Croissant, the Hub's README.md)
COMMIT_FILES = (
    "dstore.json",
    ".dstore-versions",
    "zarr.json",
    ".zattrs",
    ".zarray",
    ".zgroup",
    "croissant.json",
    "README.md",
)


def _timed(fn, *args, **kwargs) -> float:
    t = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t


def _changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Files of ``before`` that ``after`` lacks or holds other bytes of, commit files aside."""
    return [
        name
        for name, digest in before.items()
        if not any(part in COMMIT_FILES for part in name.split(os.sep))
        and after.get(name) != digest
    ]


def _per_array(names: list[str]) -> int:
    """The most changed chunk files of any one zarr array (``train/x/c/3/0/0/0``: ``train/x``)."""
    arrays: dict[str, int] = {}
    for name in names:
        head = name.split(f"{os.sep}c{os.sep}")[0]
        arrays[head] = arrays.get(head, 0) + 1
    return max(arrays.values(), default=0)


def part_cost(tmp: str, tiles: int) -> str:
    src = label_maker_npz(tiles)
    more = label_maker_npz(max(1, tiles // 100))
    warm = label_maker_npz(20)
    rows = []
    for fmt, ext in EXT.items():
        dst = os.path.join(tmp, f"cost{ext}")
        # untimed warm-up: the format's libraries imported, its first append run
        dstore.convert(warm, dst, overwrite=True)
        dstore.convert(warm, dst, append=True, append_again=True)
        full = _timed(dstore.convert, src, dst, overwrite=True)
        before = file_digests(dst)
        appends = [
            _timed(dstore.convert, more, dst, append=True, append_again=i > 0) for i in range(3)
        ]
        changed = _changed(before, file_digests(dst))
        zarr = fmt == "zarr"
        with dstore.open(dst) as ds:
            counts = {s: len(ds[s]["y"][:]) for s in ds}
        rows.append(
            {
                "format": fmt,
                "full": full,
                "append": statistics.median(appends),
                "ratio": f"{statistics.median(appends) / full:.3f}",
                "changed": f"{_per_array(changed)} per array (max)" if zarr else len(changed),
                "records": sum(counts.values()),
            }
        )
        print(fmt, rows[-1], flush=True)
        shutil.rmtree(dst)
    cols = [
        ("format", "format"),
        ("full", f"convert {tiles} tiles (s)"),
        ("append", f"append {max(1, tiles // 100)} (s, median of 3)"),
        ("ratio", "append / convert"),
        ("changed", "existing files changed"),
        ("records", "records after"),
    ]
    return table(rows, cols)


def _small(tmp: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    from dstore.demo import photo_tiles

    x, _ = photo_tiles(n, 32, seed=7)
    return x, np.arange(n, dtype=np.int64)


def _torch_rate(path: str) -> float:
    """Records/s of one pass of ``dstore.to_torch`` over ``path``'s train split."""
    ds = dstore.to_torch(path, "train")
    t = time.perf_counter()
    n = sum(1 for _ in ds)
    return n / (time.perf_counter() - t)


def part_compact(tmp: str, appends: int) -> str:
    x, keys = _small(tmp, 10 * (appends + 1))
    folder = os.path.join(tmp, "many")
    os.makedirs(folder)
    grown, whole = os.path.join(tmp, "grown.tfrecords"), os.path.join(tmp, "whole.tfrecords")
    everything = os.path.join(folder, "all.npz")
    dstore.save({"train": {"x": x, "key": keys}}, everything)
    dstore.convert(everything, whole)
    seconds = []
    for i in range(appends + 1):
        part = os.path.join(folder, f"s{i}.npz")
        rows = slice(10 * i, 10 * (i + 1))
        dstore.save({"train": {"x": x[rows], "key": keys[rows]}}, part)
        if i == 0:
            dstore.convert(part, grown)
        else:
            seconds.append(_timed(dstore.convert, part, grown, append=True))
        os.remove(part)
        if i and i % 100 == 0:
            print(f"{i} appends, last {seconds[-1]:.2f} s", flush=True)
    shards_before = sum(1 for n in os.listdir(grown) if n.endswith(".tfrecord"))
    compacting = _timed(dstore.compact, grown)
    with dstore.open(grown) as a, dstore.open(whole) as b:
        same = all(
            np.array_equal(a["train"][f][:], b["train"][f][:]) for f in ("x", "key")
        ) and len(a["train"]) == len(b["train"])
    shards_after = sum(1 for n in os.listdir(grown) if n.endswith(".tfrecord"))
    rates: dict[str, list[float]] = {"compacted": [], "one conversion": []}
    for r in range(5):  # interleaved, the order swapped each round
        order = [("compacted", grown), ("one conversion", whole)]
        for name, path in order if r % 2 == 0 else order[::-1]:
            rates[name].append(_torch_rate(path))
    best = {k: max(v) for k, v in rates.items()}
    log = dstore.log(grown).to_json()
    manifest = os.path.getsize(os.path.join(grown, "dstore.json"))
    rows = [
        {"what": "appends of 10 records", "value": appends},
        {"what": "append seconds: first 10 (median)", "value": statistics.median(seconds[:10])},
        {"what": "append seconds: last 10 (median)", "value": statistics.median(seconds[-10:])},
        {"what": "shards before compact", "value": shards_before},
        {"what": "compact seconds", "value": compacting},
        {"what": "shards after compact", "value": shards_after},
        {"what": "versions in dstore log", "value": len(log)},
        {"what": "manifest bytes after", "value": manifest},
        {"what": "same records, same order as one conversion", "value": str(same)},
        {"what": "to_torch rec/s compacted (best of 5)", "value": best["compacted"]},
        {"what": "to_torch rec/s one conversion (best of 5)", "value": best["one conversion"]},
        {
            "what": "to_torch compacted / one conversion",
            "value": f"{best['compacted'] / best['one conversion']:.3f}",
        },
    ]
    return table(rows, [("what", "measure"), ("value", "value")])


def _keys(dst: str) -> list[int]:
    with dstore.open(dst) as ds:
        return [int(k) for k in ds["train"]["key"][:]]


#: an append in a child process: "READY" once imported, then the append's own seconds
CHILD = """
import sys, time
import dstore
src, dst = sys.argv[1:]
print("READY", flush=True)
t = time.perf_counter()
dstore.convert(src, dst, append=True)
print("SECONDS", time.perf_counter() - t, flush=True)
"""


def _append(src: str, dst: str) -> subprocess.Popen:
    """The append in a child, returned once it has imported dstore (the kill window
    is the append's work, not Python's start)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, src, dst],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    return proc


def _retry(src: str, dst: str) -> None:
    """The same append again: refused by the history if the killed one committed."""
    try:
        dstore.convert(src, dst, append=True)
    except AppendError as e:
        if "already in it" not in str(e):
            raise


def _sweep(tmp: str, fmt: str, kills: int, rng: random.Random) -> dict:
    x, _ = _small(tmp, 400)
    dst = os.path.join(tmp, f"k{EXT[fmt]}")
    options = {"chunk_mb": "0.1"} if fmt == "zarr" else {"shard_mb": "0.2"}
    base = os.path.join(tmp, f"{fmt}-base.npz")
    dstore.save({"train": {"x": x[:100], "key": np.arange(100, dtype=np.int64)}}, base)
    dstore.convert(base, dst, to=fmt, options=options)
    expected = list(range(100))
    out = {"format": fmt, "kills": 0, "landed": 0, "damaged": 0, "leftovers": 0}
    for attempt in range(kills + 1):
        src = os.path.join(tmp, f"{fmt}-more{attempt}.npz")
        keys = np.arange(400, dtype=np.int64) + 1000 * (attempt + 1)
        dstore.save({"train": {"x": x, "key": keys}}, src)
        proc = _append(src, dst)
        if attempt == 0:  # uninterrupted: how long an append of this size takes
            stdout, stderr = proc.communicate()
            assert proc.returncode == 0, stderr
            out["seconds"] = duration = float(stdout.split()[-1])
            expected += keys.tolist()
            continue
        time.sleep(rng.uniform(0, duration))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        out["kills"] += 1
        got = _keys(dst)
        landed = got == expected + keys.tolist()
        out["landed"] += landed
        out["damaged"] += not (landed or got == expected) or not dstore.api.check(dst).ok
        _retry(src, dst)
        expected += keys.tolist()
        out["damaged"] += _keys(dst) != expected
        out["leftovers"] += len(append_leftovers(dst))
    shutil.rmtree(dst)
    return out


def part_kills(tmp: str, kills: int) -> str:
    rng = random.Random(37)
    rows = []
    for i, fmt in enumerate(EXT):
        share = kills // len(EXT) + (i < kills % len(EXT))
        rows.append(_sweep(tmp, fmt, share, rng))
        print(rows[-1], flush=True)
    total = {k: sum(r[k] for r in rows) for k in ("kills", "landed", "damaged", "leftovers")}
    rows.append({"format": "all", **total})
    cols = [
        ("format", "format"),
        ("seconds", "one append (s)"),
        ("kills", "SIGKILLs"),
        ("landed", "killed after the commit"),
        ("damaged", "damaged versions"),
        ("leftovers", "leftovers after the retry"),
    ]
    return table(rows, cols)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", type=int, default=6000)
    ap.add_argument("--appends", type=int, default=1000)
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--parts", default="cost,compact,kills")
    args = ap.parse_args()
    parts = args.parts.split(",")
    out = [f"# bench_append ({machine()})"]
    with tempfile.TemporaryDirectory(prefix="bench-append-") as tmp:
        if "cost" in parts:
            out += ["", "## Append 1% vs convert", "", part_cost(tmp, args.tiles)]
        if "compact" in parts:
            out += ["", "## Many small appends, then compact", "", part_compact(tmp, args.appends)]
        if "kills" in parts:
            out += ["", "## Kill sweep", "", part_kills(tmp, args.kills)]
    text = "\n".join(out)
    print(text)
    print("report:", write_report("bench_append", text))


if __name__ == "__main__":
    main()
