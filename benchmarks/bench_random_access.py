"""Random access into a TFRecord file TensorFlow wrote, before and after ``dstore index``.

A file of ``--records`` records (TensorFlow's ``TFRecordWriter``, or dstore's
own framing when TensorFlow is missing), each a 64x64x3 photo crop as PNG and
a label, is read three ways in each round:

* ``pass``: one sequential pass of every record (``iter_batches``);
* ``random-noindex``: ``--reads`` random single records through
  ``dstore.open(...)[split][field][i]`` with no index (each read walks the
  frames before it);
* ``random-indexed``: the same reads after ``dstore index`` (one seek each).

It also times single reads of the first, middle and last record with the
index, to show a read of record ``i`` costs the same for every ``i``. Rounds
alternate the order; medians and ranges are printed.

    python benchmarks/bench_random_access.py [--records 20000] [--reads 300] [--rounds 3]
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


def _write_file(path: str, n: int) -> str:
    from dstore.demo import photo_tiles
    from dstore.images import png as _png

    tiles, _labels = photo_tiles(256, 64)
    pngs = [_png.png_encoder("fast")(t) for t in tiles]
    try:
        import tensorflow as tf
    except ImportError:
        tf = None
    if tf is None:
        from dstore.codecs.example import wire as _example
        from dstore.codecs.tfrecord import io as _tfrecord_io

        with open(path, "wb") as f:
            for i in range(n):
                rec = _example.encode_example(
                    {
                        "image": _example.encode_feature(_example.BYTES, [pngs[i % len(pngs)]]),
                        "label": _example.encode_feature(_example.INT64, np.array([i])),
                    }
                )
                f.write(_tfrecord_io.frame(rec))
        return "dstore framing (TensorFlow not installed)"
    with tf.io.TFRecordWriter(path) as w:
        for i in range(n):
            feats = {
                "image": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[pngs[i % len(pngs)]])
                ),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    return f"tensorflow {tf.__version__} TFRecordWriter"


def _pass(path: str) -> float:
    import dstore

    t = time.perf_counter()
    with dstore.api.open_reader(path) as r:
        for _ in r.iter_batches("data", fields=["label"]):
            pass
    return time.perf_counter() - t


def _random(path: str, picks: np.ndarray) -> float:
    import dstore

    with dstore.open(path) as ds:
        field = ds["data"]["label"]
        t = time.perf_counter()
        for i in picks:
            assert int(np.asarray(field[int(i)]).reshape(-1)[0]) == i
        return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--reads", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from dstore import api

    work = tempfile.mkdtemp(prefix="bench-random-")
    plain = os.path.join(work, "noindex", "tf.tfrecord")
    indexed = os.path.join(work, "indexed", "tf.tfrecord")
    os.makedirs(os.path.dirname(plain))
    os.makedirs(os.path.dirname(indexed))
    writer = _write_file(plain, args.records)
    with open(plain, "rb") as f, open(indexed, "wb") as g:
        g.write(f.read())
    t = time.perf_counter()
    api.index([indexed])
    index_s = time.perf_counter() - t
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {"pass": [], "random-noindex": [], "random-indexed": []}
    single: dict[str, list[float]] = {"first": [], "middle": [], "last": []}
    for r in range(args.rounds):
        picks = rng.integers(0, args.records, args.reads)
        ways = [
            ("pass", lambda: _pass(plain)),
            ("random-noindex", lambda p=picks: _random(plain, p)),
            ("random-indexed", lambda p=picks: _random(indexed, p)),
        ]
        for name, run in ways if r % 2 == 0 else ways[::-1]:
            times[name].append(run())
        for name, i in (("first", 0), ("middle", args.records // 2), ("last", args.records - 1)):
            reps = np.full(50, i)
            single[name].append(_random(indexed, reps) / len(reps))
    lines = [
        f"# Random access into a {args.records}-record TFRecord file ({writer})",
        "",
        machine(),
        "",
        f"`python benchmarks/bench_random_access.py --records {args.records} --reads {args.reads} "
        f"--rounds {args.rounds}`; `dstore index` took {index_s:.2f} s",
        "",
        "| way | median s | range s | vs one sequential pass |",
        "|---|---|---|---|",
    ]
    base = statistics.median(times["pass"])
    for name, ts in times.items():
        what = f"{args.reads} random reads" if name != "pass" else "one pass"
        lines.append(
            f"| {name} ({what}) | {statistics.median(ts):.3f} | {min(ts):.3f}-{max(ts):.3f} "
            f"| {statistics.median(ts) / base:.2f}x |"
        )
    lines += ["", "| one indexed read of record | median ms | range ms |", "|---|---|---|"]
    for name, ts in single.items():
        lines.append(
            f"| {name} | {1000 * statistics.median(ts):.2f} | "
            f"{1000 * min(ts):.2f}-{1000 * max(ts):.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    write_report("random_access", text)


if __name__ == "__main__":
    main()
