"""npz -> TFRecord with JPEG images (``-o image_codec=jpeg -o quality=90``), in one run.

    python benchmarks/bench_jpeg.py [--tiles 7000] [--rounds 3] [--quality 90] [--no-png]

Ways (each in its own process, peak RSS from /usr/bin/time -v, i.e. the child's VmHWM):
  TensorFlow eager loop (arrays loaded once, tf.io.encode_jpeg(quality=Q), TFRecordWriter),
  dstore convert with the PNG default, the JPEG encoder alone on every core (libjpeg-turbo
  through imagecodecs, the tiles already in memory, nothing written: the ceiling of any
  conversion with that encoder), dstore convert -o image_codec=jpeg -o quality=Q;
then the error of dstore's JPEG output against the source (``dstore.verify``'s numbers).
The ways run in alternating rounds (the order reversed every other round); each
ratio is taken within a round, and the table prints the median and range of the rounds'.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import (
    OUT,
    TF_WRITE_EXAMPLE,
    alternating_rounds,
    label_maker_npz,
    load_average,
    machine,
    median_range,
    round_ratios,
    run_way,
    table,
    write_report,
)

#: CPU seconds (user + system, all threads) since ``os.times()`` ``c``
_CPU = "cpu = lambda c: sum(os.times()[:2]) - sum(c[:2])"


def ways(src: str, out: str, quality: int) -> dict[str, str]:
    return {
        f"TF eager loop (tf.io.encode_jpeg, quality={quality})": f"""
            import json, os, time, numpy as np
            import tensorflow as tf
            {TF_WRITE_EXAMPLE}
            os.makedirs({out!r}, exist_ok=True)
            t = time.perf_counter(); c = os.times()
            with np.load({src!r}) as npz:
                for split in ("train", "test", "val"):
                    x, y = npz["x_" + split], npz["y_" + split]
                    with tf.io.TFRecordWriter(os.path.join({out!r}, split + ".tfrecord")) as w:
                        for i in range(len(x)):
                            w.write(example(tf.io.encode_jpeg(x[i], quality={quality}).numpy(), y[i]))
            s = time.perf_counter() - t
            {_CPU}
            size = sum(os.path.getsize(os.path.join({out!r}, f)) for f in os.listdir({out!r}))
            print("RESULT", json.dumps({{"seconds": s, "bytes": size, "cpu_s": cpu(c)}}))
        """,
        "dstore convert (default: PNG fast)": f"""
            import json, os, time, dstore
            t = time.perf_counter(); c = os.times()
            dstore.convert({src!r}, {out!r}, overwrite=True)
            s = time.perf_counter() - t
            {_CPU}
            print("RESULT", json.dumps({{"seconds": s, "bytes": dstore.output.path_size({out!r}), "cpu_s": cpu(c)}}))
        """,
        f"JPEG encoder alone (imagecodecs.jpeg8_encode, {os.cpu_count()} threads, tiles in "
        "memory, nothing written)": f"""
            import json, os, time, numpy as np, imagecodecs
            from concurrent.futures import ThreadPoolExecutor
            with np.load({src!r}) as npz:
                tiles = [t for split in ("train", "test", "val") for t in npz["x_" + split]]
            encode = lambda part: sum(len(imagecodecs.jpeg8_encode(a, level={quality})) for a in part)
            encode(tiles[:4])
            n = os.cpu_count() or 1
            parts = [tiles[i::n] for i in range(n)]  # one slice per thread: no task overhead
            t = time.perf_counter(); c = os.times()
            with ThreadPoolExecutor(n) as pool:
                size = sum(pool.map(encode, parts))
            s = time.perf_counter() - t
            {_CPU}
            print("RESULT", json.dumps({{"seconds": s, "bytes": size, "cpu_s": cpu(c)}}))
        """,
        f"dstore convert -o image_codec=jpeg -o quality={quality}": f"""
            import json, os, time, dstore
            t = time.perf_counter(); c = os.times()
            dstore.convert({src!r}, {out!r}, overwrite=True,
                           options={{"image_codec": "jpeg", "quality": {quality}}})
            s = time.perf_counter() - t
            {_CPU}
            print("RESULT", json.dumps({{"seconds": s, "bytes": dstore.output.path_size({out!r}), "cpu_s": cpu(c)}}))
        """,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", type=int, default=7000)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (>= 3)")
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--no-png", action="store_true", help="skip dstore's PNG default")
    args = ap.parse_args()
    src = label_maker_npz(args.tiles)
    raw = os.path.getsize(src)
    out = os.path.join(OUT, "jpeg-out.tfrecords")
    picked = [
        (name, code)
        for name, code in ways(src, out, args.quality).items()
        if not (args.no_png and "PNG" in name)
    ]
    load0 = load_average()
    results = alternating_rounds(
        picked, args.rounds, before_each=lambda _: shutil.rmtree(out, ignore_errors=True)
    )
    load1 = load_average()
    tf_name, ours_name = picked[0][0], picked[-1][0]
    png_name = next((n for n, _ in picked if "PNG" in n), None)
    rows = []
    for name, _ in picked:
        res = results[name]
        s = statistics.median(r["seconds"] for r in res)
        row = {
            "way": name,
            "tiles/s": args.tiles / s,
            "s": s,
            "output MB": res[-1]["bytes"] / 1e6,
            "peak RSS MB": max(r["rss_mb"] for r in res),
            "runs": [round(r["seconds"], 2) for r in res],
            "vs TF": median_range(round_ratios(res, results[tf_name])),
            "cpu s": statistics.median(r["cpu_s"] for r in res),
            "cpu vs TF": median_range(round_ratios(res, results[tf_name], key="cpu_s")),
            "util": f"{statistics.median(r['cpu_s'] / r['seconds'] for r in res) / (os.cpu_count() or 1):.0%}",
        }
        if png_name:
            row["vs PNG"] = median_range(round_ratios(res, results[png_name]))
            row["size vs PNG"] = res[-1]["bytes"] / results[png_name][-1]["bytes"]
        rows.append(row)
    # the JPEG output of the last round is checked: its error against the source
    shutil.rmtree(out, ignore_errors=True)
    run_way(dict(picked)[ours_name])
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
        ("tiles/s", "tiles/s (median)"),
        ("vs TF", "speed vs TF eager JPEG, median (range) of rounds"),
        ("vs PNG", "speed vs dstore PNG"),
        ("s", "seconds"),
        ("cpu s", "CPU s (median)"),
        ("cpu vs TF", "TF's CPU s / this way's"),
        ("util", "CPU utilisation (CPU s / wall / cores)"),
        ("output MB", "output MB"),
        ("size vs PNG", "size vs dstore PNG"),
        ("peak RSS MB", "peak RSS MB"),
        ("runs", "runs (s)"),
    ]
    text = (
        f"npz -> TFRecord, JPEG quality {args.quality}, {args.tiles} real-photo tiles "
        f"256x256x3 ({raw / 1e9:.2f} GB npz), {args.rounds} alternating rounds "
        f"(order reversed every other round); ratios within each round\n"
        f"Machine: {machine()}; load average {load0} before, {load1} after\n\n"
        + table(rows, cols)
        + "\n\ndstore verify of the JPEG output against the source:\n\n"
        + "\n".join(f"    {ln}" for ln in check["lines"])
    )
    print(text)
    write_report("bench_jpeg", text)


if __name__ == "__main__":
    main()
