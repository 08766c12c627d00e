"""Object Detection API records: dstore's TFRecord pass-through against TensorFlow, and via zarr.

    python benchmarks/bench_od.py [--records 10000]

The input is ``--records`` tf.train.Examples in the Object Detection API
layout, written by TensorFlow: a 256-px JPEG tile cropped from a real photo
(``dstore.demo.photo_tiles``, as the other benchmarks), its format, file
name and source id, 0-20 boxes (``image/object/bbox/*`` float lists), class
labels (int64 list) and class text (a bytes list of 0-20 strings). Cached in
``benchmarks/out/``.

Ways, each in its own Python process (imports before the clock; peak RSS is
the process's VmHWM from ``/proc/self/status``):

(a) ``dstore convert in.tfrecord out.tfrecords`` (the JPEGs pass through byte
    for byte) against TensorFlow parsing every record with ``VarLenFeature``
    and re-serialising it as a ``tf.train.Example`` in a Python loop (what a
    user writes to copy or re-shard the records);
(b) the same records -> zarr -> TFRecord with dstore, timed per step: by
    default zarr gets decoded pixels (and TFRecord PNGs from them), with
    ``--keep-encoded`` the JPEG bytes.

Ratios are to the TensorFlow loop measured in the same run (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, dir_size, machine, run_result, table, write_report

_RSS = """
def _vmhwm_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")
"""

WRITE = """
import numpy as np, tensorflow as tf
from dstore.demo import photo_tiles
CLASSES = [b"cat", b"dog", b"bird", b"car", b"bicycle", b"person"]
rng = np.random.default_rng(0)
with tf.io.TFRecordWriter({path!r}) as w:
    for start in range(0, {n}, 500):  # tiles made 500 at a time: memory stays small
        x, _ = photo_tiles(min(500, {n} - start), 256, seed=start)
        for j, tile in enumerate(x):
            i = start + j
            k = int(rng.integers(0, 21))
            lo = np.sort(rng.random((2, k)), axis=0).astype(np.float32)
            cls = rng.integers(0, len(CLASSES), k)
            f = lambda **kw: tf.train.Feature(**kw)
            feats = {{
                "image/encoded": f(bytes_list=tf.train.BytesList(value=[tf.io.encode_jpeg(tile, quality=90).numpy()])),
                "image/format": f(bytes_list=tf.train.BytesList(value=[b"jpeg"])),
                "image/filename": f(bytes_list=tf.train.BytesList(value=[b"tile_%06d.jpg" % i])),
                "image/source_id": f(bytes_list=tf.train.BytesList(value=[b"%d" % i])),
                "image/height": f(int64_list=tf.train.Int64List(value=[256])),
                "image/width": f(int64_list=tf.train.Int64List(value=[256])),
                "image/object/bbox/xmin": f(float_list=tf.train.FloatList(value=lo[0])),
                "image/object/bbox/xmax": f(float_list=tf.train.FloatList(value=lo[1])),
                "image/object/bbox/ymin": f(float_list=tf.train.FloatList(value=lo[0] / 2)),
                "image/object/bbox/ymax": f(float_list=tf.train.FloatList(value=lo[1] / 2)),
                "image/object/class/label": f(int64_list=tf.train.Int64List(value=cls + 1)),
                "image/object/class/text": f(bytes_list=tf.train.BytesList(value=[CLASSES[c] for c in cls])),
            }}
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
"""

TF_LOOP = (
    _RSS
    + """
import json, time
import numpy as np
import tensorflow as tf
spec = {{
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/format": tf.io.FixedLenFeature([], tf.string),
    "image/filename": tf.io.FixedLenFeature([], tf.string),
    "image/source_id": tf.io.FixedLenFeature([], tf.string),
    "image/height": tf.io.FixedLenFeature([], tf.int64),
    "image/width": tf.io.FixedLenFeature([], tf.int64),
    "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/class/text": tf.io.VarLenFeature(tf.string),
}}
t0 = time.perf_counter()
n = 0
ds = tf.data.TFRecordDataset({src!r}).map(
    lambda r: tf.io.parse_single_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE
).prefetch(tf.data.AUTOTUNE)
with tf.io.TFRecordWriter({dst!r}) as w:
    for ex in ds:
        feats = {{}}
        for k, v in ex.items():
            v = v.values.numpy() if isinstance(v, tf.SparseTensor) else v.numpy()
            if isinstance(v, bytes):
                feats[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
                continue
            v = np.atleast_1d(v)
            if v.dtype == object:
                feats[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=list(v)))
            elif v.dtype.kind == "f":
                feats[k] = tf.train.Feature(float_list=tf.train.FloatList(value=v))
            else:
                feats[k] = tf.train.Feature(int64_list=tf.train.Int64List(value=v))
        w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
        n += 1
print("RESULT " + json.dumps({{"seconds": time.perf_counter() - t0, "records": n, "rss_mb": _vmhwm_mb()}}))
"""
)

DSTORE = (
    _RSS
    + """
import json, time
import dstore
import dstore.codecs.tfrecord, dstore.codecs.zarr  # imports before the clock
t0 = time.perf_counter()
report = dstore.convert({src!r}, {dst!r}, keep_encoded={keep})
print("RESULT " + json.dumps({{"seconds": time.perf_counter() - t0, "records": report.records, "rss_mb": _vmhwm_mb()}}))
"""
)


def run(code: str) -> dict:
    return run_result(["-c", textwrap.dedent(code)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=10_000)
    args = ap.parse_args()
    n = args.records
    folder = os.path.join(OUT, f"od-{n}")
    src = os.path.join(folder, "train.tfrecord")
    if not os.path.exists(src):
        os.makedirs(folder, exist_ok=True)
        run(WRITE.format(path=src + ".tmp", n=n) + '\nprint("RESULT {}")')
        os.replace(src + ".tmp", src)
    work = os.path.join(folder, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    def out(name: str) -> str:
        return os.path.join(work, name)

    rows = []
    tf_loop = run(TF_LOOP.format(src=src, dst=out("tf.tfrecord")))
    base = tf_loop["seconds"]
    rows.append({"way": "(a) TensorFlow: parse (VarLenFeature) + re-serialise loop", **tf_loop})
    ways = [
        ("(a) dstore TFRecord -> TFRecord (pass-through)", src, out("pass.tfrecords"), False),
        ("(b) dstore TFRecord -> zarr (JPEG decoded)", src, out("px.zarr"), False),
        ("(b) dstore zarr (pixels) -> TFRecord (PNG)", out("px.zarr"), out("px.tfrecords"), False),
        ("(b) dstore TFRecord -> zarr --keep-encoded", src, out("jpg.zarr"), True),
        ("(b) dstore zarr (JPEG) -> TFRecord", out("jpg.zarr"), out("jpg.tfrecords"), True),
    ]
    for name, a, b, keep in ways:
        res = run(DSTORE.format(src=a, dst=b, keep=keep))
        rows.append({"way": name, **res, "bytes": dir_size(b)})
    rows[0]["bytes"] = os.path.getsize(out("tf.tfrecord"))
    for r in rows:
        r["rec_s"] = r["records"] / r["seconds"]
        r["speedup"] = base / r["seconds"]
        r["mb"] = r["bytes"] / 2**20
    text = "\n".join(
        [
            f"# Object Detection API records ({n} records, {os.path.getsize(src) / 2**20:.0f} MB in)",
            "",
            machine(),
            "",
            table(
                rows,
                [
                    ("way", "way"),
                    ("seconds", "seconds"),
                    ("rec_s", "records/s"),
                    ("speedup", "x TF loop"),
                    ("rss_mb", "peak RSS MB"),
                    ("mb", "output MB"),
                ],
            ),
        ]
    )
    print(text)
    print(f"\n(report: {write_report(f'bench_od-{n}', text)})")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
