"""npz -> ArrayRecord: dstore against a TensorFlow loop, and random access, in one run.

    python benchmarks/bench_arrayrecord.py [--tiles 1000] [--rounds 3]

Ways (each in its own process, rounds alternating so load on the machine hits
all alike; timings start after imports):
  dstore convert (PNG fast, array_record group_size:1 zstd:3),
  a Python loop: tf.io.encode_png per tile, tf.train.Example, ArrayRecordWriter
  with the same array_record options (what TFDS users write by hand),
  reading dstore's output: 300 random single records through
  ``dstore.open(out)["train"]["x"][i]`` vs one sequential pass over the split.
Ratios are per round (same round, same load), then median and range.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, TF_WRITE_EXAMPLE, dir_size, machine, run_way, write_report

from dstore.demo import make_label_maker_npz

AR_OPTIONS = "group_size:1,zstd:3,transpose:false,pad_to_block_boundary:false"


def ways(src: str, out: str, tf_out: str) -> dict[str, str]:
    return {
        "dstore": f"""
            import json, time
            import dstore
            t = time.perf_counter()
            dstore.convert({src!r}, {out!r}, overwrite=True)
            print("RESULT", json.dumps({{"seconds": time.perf_counter() - t}}))
        """,
        "tf loop": f"""
            import json, os, shutil, time, numpy as np
            import tensorflow as tf
            from array_record.python.array_record_module import ArrayRecordWriter
            {TF_WRITE_EXAMPLE}
            shutil.rmtree({tf_out!r}, ignore_errors=True)
            os.makedirs({tf_out!r})
            t = time.perf_counter()
            with np.load({src!r}) as npz:
                for split in ("train", "test", "val"):
                    x, y = npz["x_" + split], npz["y_" + split]
                    path = os.path.join({tf_out!r}, f"data-{{split}}.array_record-00000-of-00001")
                    w = ArrayRecordWriter(path, {AR_OPTIONS!r})
                    for i in range(len(x)):
                        w.write(example(tf.io.encode_png(x[i]).numpy(), y[i]))
                    w.close()
            print("RESULT", json.dumps({{"seconds": time.perf_counter() - t}}))
        """,
        "random access": f"""
            import json, time, numpy as np
            import dstore
            ds = dstore.open({out!r})
            n = len(ds["train"]["x"])
            idx = np.random.default_rng(0).integers(0, n, 300)
            t = time.perf_counter()
            for i in idx:
                ds["train"]["x"][int(i)]
            rand = (time.perf_counter() - t) / len(idx)
            t = time.perf_counter()
            seen = sum(len(b["x"]) for b in ds.reader.iter_batches("train", fields=["x"]))
            seq = (time.perf_counter() - t) / seen
            assert seen == n
            print("RESULT", json.dumps({{"seconds": rand * len(idx), "rand_ms": rand * 1e3,
                                         "seq_ms": seq * 1e3}}))
        """,
    }


def _stats(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tiles", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    src = os.path.join(OUT, f"label-maker-{args.tiles}.npz")
    if not os.path.exists(src):
        make_label_maker_npz(src, n=args.tiles, size=256, seed=42)
    out = os.path.join(OUT, "bench.arrayrecord")
    tf_out = os.path.join(OUT, "bench-tf.arrayrecord")
    code = ways(src, out, tf_out)
    rounds: list[dict[str, dict]] = []
    for _ in range(args.rounds):
        rounds.append({name: run_way(c) for name, c in code.items()})
    speed = [r["tf loop"]["seconds"] / r["dstore"]["seconds"] for r in rounds]
    dstore_s = [r["dstore"]["seconds"] for r in rounds]
    tf_s = [r["tf loop"]["seconds"] for r in rounds]
    size_ratio = dir_size(out) / dir_size(tf_out)
    rand = [r["random access"]["rand_ms"] for r in rounds]
    seq = [r["random access"]["seq_ms"] for r in rounds]
    ra_ratio = [a / b for a, b in zip(rand, seq, strict=True)]
    rows = [
        ("write: dstore convert (s)", _stats(dstore_s)),
        ("write: TF loop encode_png + ArrayRecordWriter (s)", _stats(tf_s)),
        ("write speed, dstore vs TF loop (x faster)", _stats(speed)),
        (
            "size, dstore / TF loop",
            f"{size_ratio:.3f} ({dir_size(out) / 1e6:.1f} MB / {dir_size(tf_out) / 1e6:.1f} MB)",
        ),
        ("read: one random record, ds['train']['x'][i] (ms)", _stats(rand)),
        ("read: per record in one sequential pass (ms)", _stats(seq)),
        ("random / sequential per record (x)", _stats(ra_ratio)),
    ]
    text = (
        f"npz ({args.tiles} label-maker tiles 256x256x3, real photos) -> ArrayRecord, "
        f"{args.rounds} alternating rounds, median (range). {machine()}\n\n"
        "| measure | median (range) |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)
    )
    print(text)
    write_report("bench_arrayrecord", text)
    shutil.rmtree(tf_out, ignore_errors=True)


if __name__ == "__main__":
    main()
