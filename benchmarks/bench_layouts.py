"""label-maker object detection npz -> Object Detection API TFRecords, in one run.

    python benchmarks/bench_layouts.py [--tiles 7000]

Ways (each in its own process, peak RSS from /usr/bin/time -v):
  a TensorFlow loop building the same Examples by hand (arrays loaded once,
  tf.io.encode_png, tf.train.Example with the OD API keys, tf.io.TFRecordWriter);
  dstore convert --layout tf-object-detection -o class_names=building,road.
The data: real-photo tiles 256x256x3 (dstore.demo.photo_tiles) with 0-12
boxes each, label-maker's y (N, 12, 5) uint8 zero-padded; splits 70/20/10.
The ratio is against the TensorFlow loop measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, machine, run_way, table, write_report

MAX_BOXES = 12
CLASSES = "building,road"


def od_npz(n: int) -> str:
    """A label-maker object-detection data.npz of ``n`` real-photo tiles (cached in out/)."""
    from dstore.demo import photo_tiles

    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"od-{n}.npz")
    if os.path.exists(path):
        return path
    x, _ = photo_tiles(n, 256, seed=42)
    rng = np.random.default_rng(42)
    y = np.zeros((n, MAX_BOXES, 5), np.uint8)
    counts = rng.integers(0, MAX_BOXES + 1, n)
    for i, k in enumerate(counts):
        x0 = rng.integers(0, 250, k)
        y0 = rng.integers(0, 250, k)
        w = rng.integers(4, 60, k)
        h = rng.integers(4, 60, k)
        # label-maker clamps its pixel boxes to 0..255
        y[i, :k] = np.stack(
            [x0, y0, np.minimum(x0 + w, 255), np.minimum(y0 + h, 255), rng.integers(1, 3, k)], 1
        )
    a, b = int(n * 0.7), int(n * 0.9)
    tmp = path + ".tmp.npz"
    np.savez(
        tmp, x_train=x[:a], y_train=y[:a], x_test=x[a:b], y_test=y[a:b], x_val=x[b:], y_val=y[b:]
    )
    os.replace(tmp, path)
    return path


def ways(src: str, out: str) -> dict[str, str]:
    return {
        "TF loop (encode_png + tf.train.Example + TFRecordWriter)": f"""
            import json, os, time, numpy as np
            import tensorflow as tf
            names = [c.encode() for c in {CLASSES!r}.split(",")]
            def b(v): return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
            def f(v): return tf.train.Feature(float_list=tf.train.FloatList(value=v))
            def i64(v): return tf.train.Feature(int64_list=tf.train.Int64List(value=v))
            os.makedirs({out!r}, exist_ok=True)
            t = time.perf_counter()
            with np.load({src!r}) as npz:
                for split in ("train", "test", "val"):
                    x, y = npz["x_" + split], npz["y_" + split]
                    h, w = x.shape[1:3]
                    with tf.io.TFRecordWriter(os.path.join({out!r}, split + ".tfrecord")) as wr:
                        for i in range(len(x)):
                            boxes = y[i][y[i].any(axis=1)]
                            norm = np.clip(boxes[:, :4] / [w, h, w, h], 0, 1)
                            name = str(i).encode()
                            ex = tf.train.Example(features=tf.train.Features(feature={{
                                "image/encoded": b([tf.io.encode_png(x[i]).numpy()]),
                                "image/format": b([b"png"]),
                                "image/height": i64([h]),
                                "image/width": i64([w]),
                                "image/filename": b([name]),
                                "image/source_id": b([name]),
                                "image/object/bbox/xmin": f(norm[:, 0].tolist()),
                                "image/object/bbox/ymin": f(norm[:, 1].tolist()),
                                "image/object/bbox/xmax": f(norm[:, 2].tolist()),
                                "image/object/bbox/ymax": f(norm[:, 3].tolist()),
                                "image/object/class/label": i64(boxes[:, 4].tolist()),
                                "image/object/class/text": b([names[c - 1] for c in boxes[:, 4]]),
                            }}))
                            wr.write(ex.SerializeToString())
            s = time.perf_counter() - t
            size = sum(os.path.getsize(os.path.join({out!r}, p)) for p in os.listdir({out!r}))
            print("RESULT", json.dumps({{"seconds": s, "bytes": size}}))
        """,
        "dstore convert --layout tf-object-detection": f"""
            import json, time, dstore
            from dstore.output import path_size
            t = time.perf_counter()
            dstore.convert({src!r}, {out!r}, overwrite=True, layout="tf-object-detection",
                           options={{"class_names": {CLASSES!r}}})
            s = time.perf_counter() - t
            print("RESULT", json.dumps({{"seconds": s, "bytes": path_size({out!r})}}))
        """,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", type=int, default=7000)
    args = ap.parse_args()
    src = od_npz(args.tiles)
    out = os.path.join(OUT, "layout-out.tfrecords")
    rows = []
    base = None
    for name, code in ways(src, out).items():
        shutil.rmtree(out, ignore_errors=True)
        r = run_way(code)
        row = {
            "way": name,
            "tiles/s": args.tiles / r["seconds"],
            "s": r["seconds"],
            "output MB": r["bytes"] / 1e6,
            "peak RSS MB": r["rss_mb"],
        }
        if base is None:
            base = r
        row["speed x"] = base["seconds"] / r["seconds"]
        row["size vs TF"] = r["bytes"] / base["bytes"]
        rows.append(row)
        print(f"{name}: {row['tiles/s']:.1f} tiles/s, {r['rss_mb']:.0f} MB", file=sys.stderr)
    shutil.rmtree(out, ignore_errors=True)
    title = (
        f"label-maker OD npz ({args.tiles} tiles 256x256x3, {os.path.getsize(src) / 1e6:.0f} MB,"
        f" y {MAX_BOXES} boxes max) -> OD API TFRecords; {machine()}"
    )
    text = "\n".join(
        [
            title,
            "",
            table(
                rows,
                [
                    ("way", "way"),
                    ("tiles/s", "tiles/s"),
                    ("speed x", "speed vs TF"),
                    ("s", "seconds"),
                    ("output MB", "output MB"),
                    ("size vs TF", "size vs TF"),
                    ("peak RSS MB", "peak RSS MB"),
                ],
            ),
        ]
    )
    print(text)
    print(f"report: {write_report('bench_layouts', text)}", file=sys.stderr)


if __name__ == "__main__":
    main()
