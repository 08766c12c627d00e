"""Count the outcomes of mutated npz and TFRecord inputs (the figure issue #6 asks for).

    python benchmarks/fuzz_counts.py [--n 2000]

Each mutation (bit flip, byte set, truncation at a random offset) of a valid
file is read completely; the outcome is "same data", "DstoreError", or
anything else (a bug). Seeded, so the counts are reproducible.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import tempfile

import numpy as np

import dstore
from dstore.demo import photo_tiles
from dstore.testing import read_all


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x, y = photo_tiles(6, 16, seed=5)
    data = {"train": {"x": x, "y": y, "f": np.linspace(-1, 1, 12, dtype=np.float32).reshape(6, 2)}}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in (".npz", "bare .tfrecord", ".tfrecords dir"):
            ext = ".npz" if kind == ".npz" else ".tfrecords"
            valid = os.path.join(tmp, "valid" + ext)
            if not os.path.exists(valid):
                dstore.save(data, valid)
            path = valid if ext == ".npz" else os.path.join(valid, "train-00000-of-00001.tfrecord")
            with open(path, "rb") as f:
                blob = f.read()
            reference = read_all(path)
            counts: collections.Counter[str] = collections.Counter()
            for _ in range(args.n):
                buf = bytearray(blob)
                pos = int(rng.integers(len(buf)))
                how = rng.integers(3)
                if how == 0:
                    buf[pos] ^= 1 << int(rng.integers(8))
                elif how == 1:
                    buf[pos] = int(rng.integers(256))
                else:
                    buf = buf[:pos]
                if kind == ".tfrecords dir":
                    mutated = os.path.join(tmp, "m.tfrecords")
                    shutil.rmtree(mutated, ignore_errors=True)
                    shutil.copytree(valid, mutated)
                    target = os.path.join(mutated, "train-00000-of-00001.tfrecord")
                else:
                    mutated = target = os.path.join(tmp, "m.npz" if kind == ".npz" else "train.tfrecord")
                with open(target, "wb") as f:
                    f.write(buf)
                try:
                    got = read_all(mutated)
                except dstore.DstoreError:
                    counts["DstoreError"] += 1
                    continue
                except Exception as e:  # noqa: BLE001 - counted as a bug
                    counts[f"BUG {type(e).__name__}"] += 1
                    continue
                n = len(got.get("train", {}).get("x", ()))
                ref = reference
                label = "same data"
                if kind == "bare .tfrecord" and how == 2 and n < len(reference["train"]["x"]):
                    ref = {s: {k: a[:n] for k, a in f.items()} for s, f in reference.items()}
                    label = "record prefix (bare file cut at a record boundary)"
                same = got.keys() == ref.keys() and all(
                    got[s].keys() == ref[s].keys() and all(np.array_equal(got[s][k], ref[s][k]) for k in ref[s])
                    for s in ref
                )
                counts[label if same else "BUG different data"] += 1
            print(f"{kind}: {args.n} mutated inputs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
