"""npz -> WebDataset: dstore against the usual Python loop, and reading for training, in one run.

    python benchmarks/bench_webdataset.py [--tiles 800] [--rounds 3] [--workers 2]

Writing (label-maker ``data.npz`` of real-photo tiles 256x256x3 -> tar shards of ~32 MB):
  usual  -- a Python loop: ``PIL.Image.save(format="PNG")`` per tile and
            ``webdataset.ShardWriter`` (``x.png`` + ``y.npy`` members);
  dstore -- ``dstore.convert(npz, out.wds, shard_mb=32)`` (PNG ``fast`` on every core).
Reading the train split of dstore's output, the same DataLoader (batch 64, ``--workers``):
  webdataset -- ``WebDataset(shards).decode("rgb8").to_tuple("x.png", "y.npy")``;
  dstore     -- ``dstore.to_torch(out.wds, split="train")``.
The ways alternate for ``--rounds`` rounds (shared, noisy machines); the table gives
the median and range of the seconds and the ratios of the medians.
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dstore
from dstore.demo import make_label_maker_npz

SHARD_MB = 32


def usual_write(src: str, out: str) -> None:
    import webdataset as wds
    from PIL import Image

    os.makedirs(out)
    with np.load(src) as npz:
        for split in ("train", "test", "val"):
            x, y = npz["x_" + split], npz["y_" + split]
            pattern = os.path.join(out, split + "-%06d.tar")
            with wds.ShardWriter(pattern, maxsize=SHARD_MB * 2**20, verbose=0) as sink:
                for i in range(len(x)):
                    buf = io.BytesIO()
                    Image.fromarray(x[i]).save(buf, format="PNG")
                    sink.write({"__key__": f"{i:06d}", "x.png": buf.getvalue(), "y.npy": y[i]})


def dstore_write(src: str, out: str) -> None:
    dstore.convert(src, out, options={"shard_mb": str(SHARD_MB)})


def wds_read(out: str, workers: int) -> int:
    import torch
    import webdataset as wds

    shards = sorted(glob.glob(os.path.join(out, "train-*.tar")))
    ds = (
        wds.WebDataset(shards, shardshuffle=False, empty_check=False)
        .decode("rgb8")
        .to_tuple("x.png", "y.npy")
    )
    n = 0
    for x, _ in torch.utils.data.DataLoader(ds, batch_size=64, num_workers=workers):
        n += len(x)
    return n


def dstore_read(out: str, workers: int) -> int:
    import torch

    ds = dstore.to_torch(out, split="train")
    n = 0
    for batch in torch.utils.data.DataLoader(ds, batch_size=64, num_workers=workers):
        n += len(batch["x"])
    return n


def size(path: str) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "*")))


def timed(fn, *args) -> tuple[float, object]:
    t = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t, result


def line(name: str, times: list[float]) -> str:
    med = statistics.median(times)
    return f"| {name} | {med:.2f} | {min(times):.2f}-{max(times):.2f} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=800)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    warnings.simplefilter("ignore", ResourceWarning)  # webdataset leaves its tars to the GC
    tmp = tempfile.mkdtemp(prefix="bench-wds-")
    try:
        src = make_label_maker_npz(os.path.join(tmp, "data.npz"), n=args.tiles)
        times: dict[str, list[float]] = {k: [] for k in ("usual", "dstore", "wds", "dstore_r")}
        sizes = {}
        for r in range(args.rounds):
            for way, fn in (("usual", usual_write), ("dstore", dstore_write))[
                :: 1 if r % 2 == 0 else -1
            ]:
                out = os.path.join(tmp, f"{way}.wds")
                shutil.rmtree(out, ignore_errors=True)
                times[way].append(timed(fn, src, out)[0])
                sizes[way] = size(out)
            out = os.path.join(tmp, "dstore.wds")
            reads = (("wds", wds_read), ("dstore_r", dstore_read))[:: 1 if r % 2 == 0 else -1]
            counts = set()
            for way, fn in reads:
                s, n = timed(fn, out, args.workers)
                times[way].append(s)
                counts.add(n)
            assert len(counts) == 1, counts  # both read every train record
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"{args.tiles} tiles 256x256x3 (train {counts.pop()}), {args.rounds} rounds, "
            f"{os.cpu_count()} cores, DataLoader workers {args.workers}, shards ~{SHARD_MB} MB"
        )
        print("| way | median s | range s |\n|---|---|---|")
        print(line("write: PIL PNG loop + webdataset.ShardWriter", times["usual"]))
        print(line("write: dstore.convert npz -> .wds", times["dstore"]))
        print(line('read: WebDataset.decode("rgb8") DataLoader', times["wds"]))
        print(line("read: dstore.to_torch DataLoader", times["dstore_r"]))
        print(
            f"\nwrite speed ratio (usual / dstore): {med['usual'] / med['dstore']:.2f}x (target >= 5)"
        )
        print(
            f"output size ratio (dstore / usual): {sizes['dstore'] / sizes['usual']:.3f}x "
            f"({sizes['dstore'] / 2**20:.1f} vs {sizes['usual'] / 2**20:.1f} MiB; target <= 1.1)"
        )
        print(
            f"read speed ratio (webdataset / dstore): {med['wds'] / med['dstore_r']:.2f}x "
            "(target >= 1.0)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
