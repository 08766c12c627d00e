"""npz -> TFRecord with PNG images: dstore against what users do today, in one run.

    python benchmarks/bench_tfrecord.py [--tiles 7000] [--repeats 1] [--skip-slow]

Ways (each in its own process, peak RSS from /usr/bin/time -v):
  label-maker's loop (npz[key][i] per record; a few records only: it is quadratic),
  TensorFlow eager loop (arrays loaded once, tf.io.encode_png, TFRecordWriter),
  tf.data map(encode_png, AUTOTUNE), the `tfrecord` package + Pillow,
  dstore default (PNG fast) and dstore -o png_level=6 (TensorFlow's sizes);
then reading back: dstore to numpy vs tf.data + parallel decode_png.
Ratios are against the TF eager loop measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, TF_WRITE_EXAMPLE, label_maker_npz, machine, run_way, table, write_report


def ways(src: str, out: str, n_labelmaker: int) -> dict[str, str]:
    return {
        "label-maker loop (npz[key][i] per record)": f"""
            import json, os, time, io, numpy as np
            from PIL import Image
            t = time.perf_counter()
            with np.load({src!r}) as npz:
                for i in range({n_labelmaker}):
                    img = npz["x_train"][i]          # re-reads the whole member each time
                    buf = io.BytesIO(); Image.fromarray(img).save(buf, format="PNG")
            s = time.perf_counter() - t
            print("RESULT", json.dumps({{"seconds": s, "records": {n_labelmaker}}}))
        """,
        "TF eager loop (arrays loaded once)": f"""
            import json, os, time, numpy as np
            import tensorflow as tf
            {TF_WRITE_EXAMPLE}
            os.makedirs({out!r}, exist_ok=True)
            t = time.perf_counter()
            with np.load({src!r}) as npz:
                for split in ("train", "test", "val"):
                    x, y = npz["x_" + split], npz["y_" + split]
                    with tf.io.TFRecordWriter(os.path.join({out!r}, split + ".tfrecord")) as w:
                        for i in range(len(x)):
                            w.write(example(tf.io.encode_png(x[i]).numpy(), y[i]))
            s = time.perf_counter() - t
            size = sum(os.path.getsize(os.path.join({out!r}, f)) for f in os.listdir({out!r}))
            print("RESULT", json.dumps({{"seconds": s, "bytes": size}}))
        """,
        "tf.data map(encode_png, AUTOTUNE)": f"""
            import json, os, time, numpy as np
            import tensorflow as tf
            {TF_WRITE_EXAMPLE}
            os.makedirs({out!r}, exist_ok=True)
            t = time.perf_counter()
            with np.load({src!r}) as npz:
                for split in ("train", "test", "val"):
                    x, y = npz["x_" + split], npz["y_" + split]
                    ds = tf.data.Dataset.from_tensor_slices((x, y)).map(
                        lambda a, b: (tf.io.encode_png(a), b), num_parallel_calls=tf.data.AUTOTUNE)
                    with tf.io.TFRecordWriter(os.path.join({out!r}, split + ".tfrecord")) as w:
                        for png, label in ds.as_numpy_iterator():
                            w.write(example(png, label))
            s = time.perf_counter() - t
            size = sum(os.path.getsize(os.path.join({out!r}, f)) for f in os.listdir({out!r}))
            print("RESULT", json.dumps({{"seconds": s, "bytes": size}}))
        """,
        "tfrecord package + Pillow (no TF)": f"""
            import json, os, time, io, numpy as np
            from PIL import Image
            import tfrecord
            os.makedirs({out!r}, exist_ok=True)
            t = time.perf_counter()
            with np.load({src!r}) as npz:
                for split in ("train", "test", "val"):
                    x, y = npz["x_" + split], npz["y_" + split]
                    w = tfrecord.TFRecordWriter(os.path.join({out!r}, split + ".tfrecord"))
                    for i in range(len(x)):
                        buf = io.BytesIO(); Image.fromarray(x[i]).save(buf, format="PNG")
                        w.write({{"x": (buf.getvalue(), "byte"), "y": (y[i].tolist(), "int")}})
                    w.close()
            s = time.perf_counter() - t
            size = sum(os.path.getsize(os.path.join({out!r}, f)) for f in os.listdir({out!r}))
            print("RESULT", json.dumps({{"seconds": s, "bytes": size}}))
        """,
        "dstore convert (default: PNG fast)": f"""
            import json, os, time, dstore
            t = time.perf_counter()
            dstore.convert({src!r}, {out!r}, overwrite=True)
            s = time.perf_counter() - t
            print("RESULT", json.dumps({{"seconds": s, "bytes": dstore.output.path_size({out!r})}}))
        """,
        "dstore convert -o png_level=6": f"""
            import json, os, time, dstore
            t = time.perf_counter()
            dstore.convert({src!r}, {out!r}, overwrite=True, options={{"png_level": "6"}})
            s = time.perf_counter() - t
            print("RESULT", json.dumps({{"seconds": s, "bytes": dstore.output.path_size({out!r})}}))
        """,
    }


def read_ways(path: str) -> dict[str, str]:
    return {
        "tf.data + decode_png (AUTOTUNE)": f"""
            import json, os, time, glob, numpy as np
            import tensorflow as tf
            desc = {{"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([7], tf.int64)}}
            def parse(r):
                ex = tf.io.parse_single_example(r, desc)
                return tf.io.decode_png(ex["x"], channels=3), ex["y"]
            files = sorted(glob.glob(os.path.join({path!r}, "*.tfrecord")))
            t = time.perf_counter(); n = 0
            ds = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(64).prefetch(tf.data.AUTOTUNE)
            for x, y in ds.as_numpy_iterator():
                n += len(x)
            s = time.perf_counter() - t
            print("RESULT", json.dumps({{"seconds": s, "records": n}}))
        """,
        "dstore.to_tf_dataset (tf.data, dstore's decode spec)": f"""
            import json, time, dstore
            import tensorflow as tf
            t = time.perf_counter(); n = 0
            for split in ("train", "test", "val"):
                for ex in dstore.to_tf_dataset({path!r}, split=split).batch(64).as_numpy_iterator():
                    n += len(ex["x"])
            s = time.perf_counter() - t
            print("RESULT", json.dumps({{"seconds": s, "records": n}}))
        """,
        "dstore.open(...) -> numpy batches": f"""
            import json, time, dstore
            t = time.perf_counter(); n = 0
            with dstore.open({path!r}) as ds:
                for split in ds:
                    for b in ds[split].iter_batches():
                        n += len(b["x"])
            s = time.perf_counter() - t
            print("RESULT", json.dumps({{"seconds": s, "records": n}}))
        """,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", type=int, default=7000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--labelmaker-records", type=int, default=3)
    ap.add_argument(
        "--skip-slow", action="store_true", help="skip tf.data and the tfrecord package"
    )
    ap.add_argument("--read-only", action="store_true", help="only the reading comparison")
    args = ap.parse_args()
    src = label_maker_npz(args.tiles)
    raw = os.path.getsize(src)
    rows = []
    base = None
    for name, code in ways(
        src, os.path.join(OUT, "tfr-out.tfrecords"), args.labelmaker_records
    ).items():
        if args.read_only:
            break
        if args.skip_slow and name.startswith(("tf.data", "tfrecord package")):
            continue
        shutil.rmtree(os.path.join(OUT, "tfr-out.tfrecords"), ignore_errors=True)
        r = run_way(code, 1 if name.startswith("label-maker") else args.repeats)
        records = r.get("records", args.tiles)
        tps = records / r["seconds"]
        row = {
            "way": name,
            "tiles/s": tps,
            "s": r["seconds"] * args.tiles / records,
            "peak RSS MB": r["rss_mb"],
            "runs": r["runs"],
        }
        if name.startswith("TF eager"):
            base = r
        if base is not None and "bytes" in r:
            row["speed x"] = (args.tiles / r["seconds"]) / (args.tiles / base["seconds"])
            row["output MB"] = r["bytes"] / 1e6
            row["size vs TF"] = r["bytes"] / base["bytes"]
        if name.startswith("label-maker"):
            row["s"] = f"~{r['seconds'] / records * args.tiles:,.0f} (est.)"
        rows.append(row)
        print(f"{name}: {tps:.1f} tiles/s, {r['rss_mb']:.0f} MB", file=sys.stderr)
    # reading back what dstore wrote (default settings)
    dst = os.path.join(OUT, "tfr-read.tfrecords")
    run_way(
        f"import dstore, json; dstore.convert({src!r}, {dst!r}, overwrite=True); print('RESULT', json.dumps({{'seconds': 0}}))"
    )
    read_rows = []
    for name, code in read_ways(dst).items():
        r = run_way(code, args.repeats)
        read_rows.append(
            {
                "way": name,
                "tiles/s": r["records"] / r["seconds"],
                "s": r["seconds"],
                "peak RSS MB": r["rss_mb"],
                "runs": r["runs"],
            }
        )
        print(f"read {name}: {r['records'] / r['seconds']:.0f} tiles/s", file=sys.stderr)
    tf_read = read_rows[0]["tiles/s"]
    for row in read_rows:
        row["speed x"] = row["tiles/s"] / tf_read
    if args.read_only:
        rows = []
    cols = [
        ("way", "way"),
        ("tiles/s", "tiles/s"),
        ("speed x", "speed vs TF eager"),
        ("s", "seconds"),
        ("output MB", "output MB"),
        ("size vs TF", "size vs TF"),
        ("peak RSS MB", "peak RSS MB"),
        ("runs", "runs (s)"),
    ]
    text = (
        f"npz -> TFRecord (PNG), {args.tiles} real-photo tiles 256x256x3 ({raw / 1e9:.2f} GB npz), "
        f"median of {args.repeats}\nMachine: {machine()}\n\n"
        + table(rows, cols)
        + "\n\nReading back dstore's output (all splits, to numpy):\n\n"
        + table(
            read_rows,
            [
                ("way", "way"),
                ("tiles/s", "tiles/s"),
                ("speed x", "speed vs tf.data"),
                ("s", "seconds"),
                ("peak RSS MB", "peak RSS MB"),
                ("runs", "runs (s)"),
            ],
        )
    )
    print(text)
    write_report("bench_tfrecord", text)


if __name__ == "__main__":
    main()
