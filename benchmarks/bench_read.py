"""Reading for training: dstore.to_torch / to_tf_dataset against the readers people use.

On the train split of the label-maker tiles (256x256x3: real photos, or with
``--imagery satellite`` tiles cut from NASA's Blue Marble, see
``_harness.satellite_tiles``), each way runs in its own process and reads every
record once in batches of 64:

* ``dstore.to_torch`` + ``DataLoader(num_workers=2, batch_size=64)`` from
  TFRecord (PNG), zarr (blosc), HDF5 (gzip) and npz (stored, and deflated);
* webdataset: a tar of the same PNG bytes, decoded with PIL;
* Hugging Face ``datasets``: Arrow (uncompressed) ``with_format("torch")``;
* a plain ``Dataset`` over ``np.load(mmap_mode="r")`` of uncompressed .npy;
* the hand-written ``Dataset`` users write over zarr and HDF5: ``x[i]`` of the
  zarr array / h5py dataset per record (h5py opened in each worker);
* ``dstore.to_tf_dataset(batch_size=64)`` and ``dstore.open(...)`` numpy
  batches of 64 against the hand-written tf.data pipeline over the same shards.

Ratios are against the peer reading an equally compressed format (PNG:
webdataset; uncompressed: the best of mmap npy and Hugging Face), for zarr and
HDF5 also against the hand-written ``x[i]`` Dataset, and for TensorFlow the
hand-written pipeline, all measured in the same run. Peak RSS of each
DataLoader worker is sampled from the parent after every batch (psutil, in the
`test` extra). The tf.data ways and ``dstore.open`` run in ``--tf-rounds``
alternating rounds; ratios are taken within a round (median and range printed).

    python benchmarks/bench_read.py [--tiles 7000] [--repeats 3] [--tf-rounds 3] [--only WAYS]
                                    [--imagery photo|satellite]

``--repeats N`` runs N rounds (each way once per round, the order reversed every
other round); ``--only zarr,hdf5`` runs (and writes the files of) only the ways
whose names contain one of the words.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tarfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import (
    IMAGERY,
    OUT,
    alternating_rounds,
    dir_size,
    label_maker_npz,
    load_average,
    machine,
    median_range,
    round_ratios,
    run_way,
    table,
    write_report,
)

BATCH = 64
WORKERS = 2

#: Runs a DataLoader over ``ds`` (defined by the way's setup) and prints the result line.
_LOADER = """
import json, resource, time, psutil, torch
from torch.utils.data import DataLoader
{imports}
me = psutil.Process()
cpu0 = resource.getrusage(resource.RUSAGE_SELF)
t = time.perf_counter()  # imports excluded: opening the data and reading it are timed
{setup}
loader = DataLoader(ds, batch_size={batch}, num_workers={workers}{extra})
n = 0
peak = {{}}
for batch in loader:
    n += len(batch[{key!r}])
    for child in me.children():
        try:
            peak[child.pid] = max(peak.get(child.pid, 0), child.memory_info().rss)
        except psutil.NoSuchProcess:
            pass
s = time.perf_counter() - t
del loader  # the workers have exited (and been waited for) when the loop ended
me_ru, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (me_ru.ru_utime + me_ru.ru_stime - cpu0.ru_utime - cpu0.ru_stime
       + kids.ru_utime + kids.ru_stime)
print("RESULT", json.dumps({{"seconds": s, "records": n, "cpu_s": cpu,
                            "worker_mb": max(peak.values(), default=0) / 2**20}}))
"""


#: dstore's imports (codec modules, entry points) happen before the clock, as the peers' do
_DSTORE_IMPORTS = (
    "import dstore, dstore.readers.torch, dstore.codecs.npz, dstore.codecs.zarr, "
    "dstore.codecs.hdf5, dstore.codecs.tfrecord\ndstore.available_codecs()"
)


def loader_way(setup: str, key: str, imports: str = _DSTORE_IMPORTS, extra: str = "") -> str:
    return _LOADER.format(
        imports=imports, setup=setup, batch=BATCH, workers=WORKERS, key=key, extra=extra
    )


def prepare(tiles: int, need: set[str] | None = None, imagery: str = "photo") -> dict[str, str]:
    """Every stored form of the same tiles (cached in benchmarks/out/); with ``need``,
    only those forms are written (the others' paths are still named)."""
    import dstore

    src = label_maker_npz(tiles, imagery=imagery)
    paths = {"npz-stored": src}
    kind = "" if imagery == "photo" else f"-{imagery}"
    base = os.path.join(OUT, f"read-{tiles}{kind}")
    os.makedirs(base, exist_ok=True)
    for key, name, opts in [
        ("tfrecord", "d.tfrecords", {}),
        ("zarr", "d.zarr", {}),
        ("hdf5", "d.h5", {}),
        ("npz-deflated", "z.npz", {"compress": "true"}),
    ]:
        path = os.path.join(base, name)
        wanted = need is None or key in need or (key == "tfrecord" and need & {"wds", "tf"})
        if wanted and not os.path.exists(path):
            print(f"writing {path}", file=sys.stderr)
            dstore.convert(src, path, options=opts)
        paths[key] = path
    with dstore.open(src) as ds:
        x, y = ds["train"]["x"][:], ds["train"]["y"][:]
    npy = os.path.join(base, "x_train.npy")
    if not os.path.exists(npy):
        np.save(npy + ".tmp.npy", x)
        os.replace(npy + ".tmp.npy", npy)
        np.save(os.path.join(base, "y_train.npy"), y)
    paths["npy"] = npy
    paths["wds"] = _webdataset_tar(base, paths["tfrecord"]) if need is None or "wds" in need else ""
    paths["hf"] = _hf_dataset(base, x, y) if need is None or "hf" in need else ""
    return paths


def _webdataset_tar(base: str, tfrecords: str, shards: int = 8) -> str:
    """The TFRecord's own PNG bytes in webdataset tar shards (equally compressed);
    several shards, since webdataset splits work between DataLoader workers by shard."""
    pattern = os.path.join(base, "wds", "train-{i:05d}.tar")
    done = os.path.join(base, "wds", "done")
    urls = os.path.join(base, "wds", f"train-{{00000..{shards - 1:05d}}}.tar")
    if os.path.exists(done):
        return urls
    from dstore.codecs.example.wire import decode_example
    from dstore.codecs.tfrecord import TFRecordReader

    os.makedirs(os.path.dirname(pattern), exist_ok=True)
    reader = TFRecordReader(tfrecords)
    count = reader.schema.splits["train"].count
    raw = (
        rec
        for shard, lo, hi in reader.shard_slices("train", 0, count)
        for rec in reader.shard_records(shard, lo, hi)
    )
    for k in range(shards):
        lo, hi = count * k // shards, count * (k + 1) // shards
        with tarfile.open(pattern.format(i=k), "w") as tar:
            for i in range(lo, hi):
                rec, where = next(raw)
                feats = decode_example(rec, where)
                members = {
                    "png": feats["x"][1][0],
                    "cls": np.asarray(feats["y"][1]).astype(np.uint8).tobytes(),
                }
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{i:08d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    open(done, "w").close()
    return urls


def _hf_dataset(base: str, x: np.ndarray, y: np.ndarray) -> str:
    path = os.path.join(base, "hf")
    if os.path.exists(path):
        return path
    try:
        import datasets
    except ImportError:
        return ""
    features = datasets.Features(
        {
            "x": datasets.Array3D(shape=x.shape[1:], dtype="uint8"),
            "y": datasets.Sequence(datasets.Value("uint8"), length=y.shape[1]),
        }
    )

    def gen():
        for i in range(len(x)):
            yield {"x": x[i], "y": y[i]}

    ds = datasets.Dataset.from_generator(
        gen, features=features, cache_dir=os.path.join(base, "hf-cache")
    )
    ds.save_to_disk(path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def label_classes(p: dict[str, str]) -> int:
    """The width of the one-hot labels (7 photo classes, 4 satellite ones)."""
    return int(np.load(os.path.join(os.path.dirname(p["npy"]), "y_train.npy")).shape[1])


def ways(p: dict[str, str]) -> list[tuple[str, str, str]]:
    """(name, storage group, code) for every way."""
    classes = label_classes(p)
    out = []
    for fmt, group in [
        ("tfrecord", "PNG"),
        ("zarr", "blosc"),
        ("hdf5", "gzip"),
        ("npz-stored", "none"),
        ("npz-deflated", "deflate"),
    ]:
        out.append(
            (
                f"dstore.to_torch {fmt}",
                group,
                loader_way(f"ds = dstore.to_torch({p[fmt]!r}, 'train')", "x"),
            )
        )
    out.append(
        (
            "webdataset tar + PIL",
            "PNG",
            loader_way(
                f"""
def dec(sample):
    img = np.asarray(Image.open(io.BytesIO(sample["png"])).convert("RGB"))
    return {{"x": torch.from_numpy(img), "y": torch.from_numpy(np.frombuffer(sample["cls"], np.uint8).copy())}}
ds = wds.WebDataset({p["wds"]!r}, shardshuffle=False).map(dec)
""",
                "x",
                "import io, numpy as np, webdataset as wds\nfrom PIL import Image",
            ),
        )
    )
    if p.get("hf"):
        out.append(
            (
                "HF datasets with_format('torch')",
                "none",
                loader_way(
                    f"ds = datasets.load_from_disk({p['hf']!r}).with_format('torch')",
                    "x",
                    "import datasets",
                ),
            )
        )
    out.append(
        (
            "Dataset over np.load(mmap_mode='r')",
            "none",
            loader_way(
                f"""
class Mm(torch.utils.data.Dataset):
    def __init__(self):
        self.x = np.load({p["npy"]!r}, mmap_mode="r")
        self.y = np.load({os.path.join(os.path.dirname(p["npy"]), "y_train.npy")!r}, mmap_mode="r")
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return {{"x": torch.from_numpy(np.array(self.x[i])), "y": torch.from_numpy(np.array(self.y[i]))}}
ds = Mm()
""",
                "x",
                "import numpy as np",
            ),
        )
    )
    for fmt, opener in [
        (
            "zarr",
            f"""
class PerRecord(torch.utils.data.Dataset):
    def __init__(self):
        g = zarr.open_group({p["zarr"]!r}, mode="r")
        self.x, self.y = g["train/x"], g["train/y"]
    def __len__(self):
        return self.x.shape[0]
    def __getitem__(self, i):
        return {{"x": torch.from_numpy(self.x[i]), "y": torch.from_numpy(self.y[i])}}
ds = PerRecord()
""",
        ),
        (
            "hdf5",
            f"""
class PerRecord(torch.utils.data.Dataset):
    def __init__(self):
        with h5py.File({p["hdf5"]!r}, "r") as f:
            self.n = len(f["train/x"])
        self.f = None  # opened in each worker: an h5py handle does not survive a fork
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        if self.f is None:
            self.f = h5py.File({p["hdf5"]!r}, "r")
        return {{"x": torch.from_numpy(self.f["train/x"][i]), "y": torch.from_numpy(self.f["train/y"][i])}}
ds = PerRecord()
""",
        ),
    ]:
        lib = "zarr" if fmt == "zarr" else "h5py"
        out.append(
            (
                f"Dataset over {fmt} ({lib}) x[i] per record",
                {"zarr": "blosc", "hdf5": "gzip"}[fmt],
                loader_way(opener, "x", f"import {lib}"),
            )
        )
    tf_common = """
import json, os, time, glob
import tensorflow as tf
import dstore, dstore.readers.tf, dstore.codecs.tfrecord
dstore.available_codecs()
t = time.perf_counter(); n = 0
"""
    out.append(
        (
            "hand-written tf.data (parse_single_example + decode_png)",
            "tf",
            tf_common
            + f"""
desc = {{"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([{classes}], tf.int64)}}
def parse(r):
    ex = tf.io.parse_single_example(r, desc)
    return {{"x": tf.io.decode_png(ex["x"], channels=3), "y": ex["y"]}}
files = sorted(glob.glob(os.path.join({p["tfrecord"]!r}, "train-*.tfrecord")))
ds = (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE)
      .map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch({BATCH}).prefetch(tf.data.AUTOTUNE))
for b in ds:
    n += len(b["x"])
s = time.perf_counter() - t
print("RESULT", json.dumps({{"seconds": s, "records": n}}))
""",
        )
    )
    out.append(
        (
            "dstore.to_tf_dataset(batch_size=64)",
            "tf",
            tf_common
            + f"""
for b in dstore.to_tf_dataset({p["tfrecord"]!r}, split="train", batch_size={BATCH}):
    n += len(b["x"])
s = time.perf_counter() - t
print("RESULT", json.dumps({{"seconds": s, "records": n}}))
""",
        )
    )
    out.append(
        (
            "dstore.open(...) numpy batches of 64",
            "tf",
            tf_common
            + f"""
with dstore.open({p["tfrecord"]!r}) as d:
    for b in d["train"].iter_batches(batch_rows={BATCH}):
        n += len(b["x"])
s = time.perf_counter() - t
print("RESULT", json.dumps({{"seconds": s, "records": n}}))
""",
        )
    )
    return out


def _row(name: str, group: str, r: dict, paths: dict[str, str]) -> dict:
    row = {
        "way": name,
        "storage": group,
        "tiles/s": r["records"] / r["seconds"],
        "s": r["seconds"],
        "records": r["records"],
        "worker MB": r.get("worker_mb", ""),
        "main MB": r["rss_mb"],
        "runs": r["runs"],
        "cpu s": r.get("cpu_s", ""),
    }
    if name.startswith("dstore.to_torch"):
        path = paths[name.split()[-1]]
        row["stored MB"] = (dir_size(path) if os.path.isdir(path) else os.path.getsize(path)) / 1e6
    return row


def _merge_runs(runs: list[dict]) -> dict:
    """Single runs of one way as one result: median seconds, the largest peak RSS."""
    merged = dict(runs[-1])
    merged["seconds"] = statistics.median(r["seconds"] for r in runs)
    merged["rss_mb"] = max(r["rss_mb"] for r in runs)
    merged["worker_mb"] = max(r.get("worker_mb", 0) for r in runs) or merged.get("worker_mb", "")
    merged["runs"] = [r["runs"][0] for r in runs]
    if all("cpu_s" in r for r in runs):
        merged["cpu_s"] = statistics.median(r["cpu_s"] for r in runs)
    return merged


def _round_ratios(results: dict[str, list[dict]], way: str, group: str) -> list[float]:
    """``way``'s speed over its peer's in each round (the two ran minutes, not hours, apart)."""
    peers = ("webdataset",) if group == "PNG" else ("HF datasets", "np.load")
    out = []
    for r, res in enumerate(results[way]):
        ref = max(
            (
                runs[r]["records"] / runs[r]["seconds"]
                for name, runs in results.items()
                if any(p in name for p in peers)
            ),
            default=None,
        )
        if ref:
            out.append(round(res["records"] / res["seconds"] / ref, 2))
    return out


def _warm(paths: dict[str, str], need: set[str] | None) -> None:
    """Read the files the chosen ways read once before any is timed: every way then starts
    from a warm page cache (the stored forms were just written, or cached from a former run)."""
    keys = [k for k in paths if paths[k] and (need is None or k in need or k == "npy")]
    for key in keys:
        path = paths[key]
        path = os.path.dirname(path) if "{" in path else path  # webdataset's shard pattern
        files = (
            [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
            if os.path.isdir(path)
            else [path, os.path.join(os.path.dirname(path), "y_train.npy")]
            if key == "npy"
            else [path]
        )
        for name in files:
            with open(name, "rb") as f:
                while f.read(1 << 24):
                    pass


def _tf_rounds(
    tf_ways: list[tuple[str, str, str]], rounds: int, paths: dict[str, str]
) -> list[dict]:
    """The hand-written pipeline and dstore's tf.data / numpy readers run in alternating
    rounds: on a shared machine the load drifts, and a ratio of runs side by side drifts
    less than two medians taken minutes apart. Each ratio is taken within a round; the
    table prints their median and range."""
    results = alternating_rounds([(name, code) for name, _, code in tf_ways], rounds)
    hand = results[tf_ways[0][0]]
    rows = []
    for name, group, _ in tf_ways:
        row = _row(name, group, _merge_runs(results[name]), paths)
        ratios = round_ratios(results[name], hand)
        row["vs peer"] = statistics.median(ratios)
        if name != tf_ways[0][0]:
            row["pair ratios"] = median_range(ratios)
        rows.append(row)
    return rows


#: the hand-written torch Dataset each to_torch way is compared with, round by round
_HAND_WRITTEN = {
    "dstore.to_torch zarr": "Dataset over zarr (zarr) x[i] per record",
    "dstore.to_torch hdf5": "Dataset over hdf5 (h5py) x[i] per record",
}

#: the stored form each way reads, by a part of the way's name
_FORMS = {
    "tfrecord": "tfrecord",
    "zarr": "zarr",
    "hdf5": "hdf5",
    "npz-stored": "npz-stored",
    "npz-deflated": "npz-deflated",
    "webdataset": "wds",
    "HF datasets": "hf",
    "tf.data": "tf",
    "to_tf_dataset": "tf",
    "dstore.open": "tf",
}


def _needed(only: str) -> set[str] | None:
    """The stored forms the ways picked by ``--only`` read (None: all of them)."""
    if not only:
        return None
    parts = only.split(",")
    return {
        form for needle, form in _FORMS.items() if any(p in needle or needle in p for p in parts)
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=7000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--tf-rounds",
        "--tf-pairs",
        dest="tf_rounds",
        type=int,
        default=3,
        help="alternating rounds of the tf.data ways and dstore.open",
    )
    ap.add_argument("--only", default="", help="comma-separated: run ways whose name contains one")
    ap.add_argument("--imagery", choices=IMAGERY, default="photo", help="the tiles' kind")
    args = ap.parse_args()
    need = _needed(args.only)
    paths = prepare(args.tiles, need, args.imagery)
    tf_ways = []
    picked = []
    for name, group, code in ways(paths):
        if args.only and not any(part in name for part in args.only.split(",")):
            continue
        (tf_ways if group == "tf" else picked).append((name, group, code))
    _warm(paths, need)
    load0 = load_average()
    # Rounds: every way once per round, the order reversed every other round, so
    # no way always runs first (or right after another way's files) on a machine
    # whose load drifts.
    results: dict[str, list[dict]] = {name: [] for name, _, _ in picked}
    for r in range(args.repeats):
        for name, _, code in picked if r % 2 == 0 else picked[::-1]:
            res = run_way(code)
            results[name].append(res)
            print(
                f"round {r + 1}: {name}: {res['records'] / res['seconds']:.0f} tiles/s, "
                f"CPU {res.get('cpu_s', 0):.2f} s, worker {res.get('worker_mb', 0):.0f} MB",
                file=sys.stderr,
            )
    rows = [_row(name, group, _merge_runs(results[name]), paths) for name, group, _ in picked]
    if len(tf_ways) >= 2 and tf_ways[0][0].startswith("hand-written"):
        rows += _tf_rounds(tf_ways, args.tf_rounds, paths)
    else:
        rows += [_row(n, g, run_way(c, args.repeats), paths) for n, g, c in tf_ways]
    # to_torch over zarr / HDF5 against the hand-written Dataset indexing the same array
    for r in rows:
        hand = _HAND_WRITTEN.get(r["way"])
        if hand in results and r["way"] in results:
            ratios = round_ratios(results[r["way"]], results[hand])
            r["vs hand"] = median_range(ratios)

    def speed(needle: str) -> float | None:
        hits = [r["tiles/s"] for r in rows if needle in r["way"]]
        return max(hits) if hits else None

    peers = {
        "PNG": speed("webdataset"),
        "none": max(filter(None, [speed("HF datasets"), speed("np.load")]), default=None),
    }
    for r in rows:
        group = r["storage"]
        ref = peers.get(group) or peers["none"]
        if ref and group != "tf" and not r["way"].startswith(("webdataset", "HF", "Dataset over")):
            r["vs peer"] = r["tiles/s"] / ref
            if args.repeats > 1:
                r["round ratios"] = _round_ratios(results, r["way"], group)
    cols = [
        ("way", "way"),
        ("storage", "compression"),
        ("tiles/s", "tiles/s"),
        ("vs peer", "vs peer"),
        ("worker MB", "peak RSS / worker MB"),
        ("main MB", "peak RSS main MB"),
        ("stored MB", "stored MB"),
        ("runs", "runs (s)"),
        ("cpu s", "CPU s, all processes"),
        ("vs hand", "vs hand-written x[i] Dataset, median (range) of rounds"),
        ("round ratios", "ratios in each round"),
        ("pair ratios", "vs hand-written tf.data, median (range) of rounds"),
    ]
    text = (
        f"Reading the train split ({rows[0]['records'] if rows else 0} of {args.tiles} "
        f"{'real-photo' if args.imagery == 'photo' else args.imagery} tiles "
        f"256x256x3) in batches of {BATCH}, DataLoader num_workers={WORKERS}; "
        f"median of {args.repeats} round(s), each way once per round, the order reversed every "
        f"other round, page cache warmed first; the tf.data ways and dstore.open in "
        f"{args.tf_rounds} alternating rounds; load average {load0} before, {load_average()} after.\n"
        "vs peer: PNG ways against webdataset (same PNG bytes in a tar, "
        "PIL), uncompressed and other ways against the best of mmap npy and HF datasets, "
        "zarr and HDF5 also against the hand-written Dataset indexing x[i] per record, "
        "to_tf_dataset and dstore.open against the hand-written tf.data pipeline "
        "(median and range of the rounds' ratios).\n"
        f"Machine: {machine()}\n\n" + table(rows, cols)
    )
    print(text)
    write_report("bench_read", text)


if __name__ == "__main__":
    main()
