"""npz -> TFRecord with JPEG images (``-o image_codec=jpeg -o quality=90``), in one run.

    python benchmarks/bench_jpeg.py [--tiles 7000] [--repeats 1] [--quality 90]

Ways (each in its own process, peak RSS from /usr/bin/time -v, i.e. the child's VmHWM):
  TensorFlow eager loop (arrays loaded once, tf.io.encode_jpeg(quality=Q), TFRecordWriter),
  dstore convert with the PNG default, dstore convert -o image_codec=jpeg -o quality=Q;
then the error of dstore's JPEG output against the source (``dstore.verify``'s numbers).
Ratios are against the TF eager JPEG loop and dstore's PNG default of the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, TF_WRITE_EXAMPLE, label_maker_npz, machine, run_way, table, write_report


def ways(src: str, out: str, quality: int) -> dict[str, str]:
    return {
        f"TF eager loop (tf.io.encode_jpeg, quality={quality})": f"""
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
                            w.write(example(tf.io.encode_jpeg(x[i], quality={quality}).numpy(), y[i]))
            s = time.perf_counter() - t
            size = sum(os.path.getsize(os.path.join({out!r}, f)) for f in os.listdir({out!r}))
            print("RESULT", json.dumps({{"seconds": s, "bytes": size}}))
        """,
        "dstore convert (default: PNG fast)": f"""
            import json, time, dstore
            t = time.perf_counter()
            dstore.convert({src!r}, {out!r}, overwrite=True)
            s = time.perf_counter() - t
            print("RESULT", json.dumps({{"seconds": s, "bytes": dstore.output.path_size({out!r})}}))
        """,
        f"dstore convert -o image_codec=jpeg -o quality={quality}": f"""
            import json, time, dstore
            t = time.perf_counter()
            dstore.convert({src!r}, {out!r}, overwrite=True,
                           options={{"image_codec": "jpeg", "quality": {quality}}})
            s = time.perf_counter() - t
            print("RESULT", json.dumps({{"seconds": s, "bytes": dstore.output.path_size({out!r})}}))
        """,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", type=int, default=7000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quality", type=int, default=90)
    args = ap.parse_args()
    src = label_maker_npz(args.tiles)
    raw = os.path.getsize(src)
    out = os.path.join(OUT, "jpeg-out.tfrecords")
    rows = []
    for name, code in ways(src, out, args.quality).items():
        shutil.rmtree(out, ignore_errors=True)
        r = run_way(code, args.repeats)
        rows.append(
            {
                "way": name,
                "tiles/s": args.tiles / r["seconds"],
                "s": r["seconds"],
                "output MB": r["bytes"] / 1e6,
                "bytes": r["bytes"],
                "peak RSS MB": r["rss_mb"],
                "runs": r["runs"],
            }
        )
        print(
            f"{name}: {args.tiles / r['seconds']:.1f} tiles/s, {r['rss_mb']:.0f} MB",
            file=sys.stderr,
        )
    tf_jpeg, png = rows[0], rows[1]
    for row in rows:
        row["vs TF"] = row["tiles/s"] / tf_jpeg["tiles/s"]
        row["vs PNG"] = row["tiles/s"] / png["tiles/s"]
        row["size vs PNG"] = row["bytes"] / png["bytes"]
    # the last way's output is dstore's JPEG: its error against the source
    check = run_way(
        f"""
        import json, time, dstore
        t = time.perf_counter()
        lines = dstore.verify({src!r}, {out!r}).lines()
        print("\\n".join(lines))
        print("RESULT", json.dumps({{"seconds": time.perf_counter() - t, "lines": lines}}))
        """
    )
    cols = [
        ("way", "way"),
        ("tiles/s", "tiles/s"),
        ("vs TF", "speed vs TF eager JPEG"),
        ("vs PNG", "speed vs dstore PNG"),
        ("s", "seconds"),
        ("output MB", "output MB"),
        ("size vs PNG", "size vs dstore PNG"),
        ("peak RSS MB", "peak RSS MB"),
        ("runs", "runs (s)"),
    ]
    text = (
        f"npz -> TFRecord, JPEG quality {args.quality} vs PNG, {args.tiles} real-photo tiles "
        f"256x256x3 ({raw / 1e9:.2f} GB npz), median of {args.repeats}\n"
        f"Machine: {machine()}\n\n"
        + table(rows, cols)
        + "\n\ndstore verify of the JPEG output against the source:\n\n"
        + "\n".join(f"    {ln}" for ln in check["lines"])
    )
    print(text)
    write_report("bench_jpeg", text)


if __name__ == "__main__":
    main()
