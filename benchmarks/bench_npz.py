"""npz -> compressed npz: dstore (streaming) against ``np.savez_compressed`` (all in memory).

    python benchmarks/bench_npz.py [--tiles 7000] [--repeats 3]

Prints a Markdown table: seconds (median), MB/s of raw data, speed ratio to
``np.savez_compressed`` on the same arrays, output size, peak RSS.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, label_maker_npz, machine, run_way, table, write_report


def _dstore_way(src: str, out: str) -> str:
    return f"""
        import json, os, time, dstore
        t = time.perf_counter()
        dstore.convert({src!r}, {out!r}, overwrite=True)
        s = time.perf_counter() - t
        print("RESULT", json.dumps({{"seconds": s, "bytes": os.path.getsize({out!r})}}))
        os.remove({out!r})
    """


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", type=int, default=7000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    src = label_maker_npz(args.tiles)
    src_z = label_maker_npz(args.tiles, compressed=True)
    raw = os.path.getsize(src)
    out = os.path.join(OUT, "npz-out.npz")

    ways = {
        "np.savez_compressed (arrays already in memory)": f"""
            import json, os, time, numpy as np
            with np.load({src!r}) as z:
                arrays = {{k: z[k] for k in z.files}}
            t = time.perf_counter()
            np.savez_compressed({out!r}, **arrays)
            s = time.perf_counter() - t
            print("RESULT", json.dumps({{"seconds": s, "bytes": os.path.getsize({out!r})}}))
            os.remove({out!r})
        """,
        "dstore convert data.npz out.npz": _dstore_way(src, out),
        "dstore convert data-compressed.npz out.npz": _dstore_way(src_z, out),
    }
    rows = []
    base = None
    for name, code in ways.items():
        r = run_way(code, args.repeats)
        base = base or r["seconds"]
        rows.append(
            {
                "way": name,
                "s": r["seconds"],
                "MB/s": raw / 1e6 / r["seconds"],
                "speed vs savez_compressed": base / r["seconds"],
                "output MB": r["bytes"] / 1e6,
                "raw/out": raw / r["bytes"],
                "peak RSS MB": r["rss_mb"],
                "runs": r["runs"],
            }
        )
        print(f"{name}: {r['seconds']:.1f} s, {r['rss_mb']:.0f} MB RSS", file=sys.stderr)
    text = (
        f"npz -> compressed npz, {args.tiles} tiles 256x256x3 ({raw / 1e9:.2f} GB uncompressed; "
        f"compressed input {os.path.getsize(src_z) / 1e9:.2f} GB), median of {args.repeats}\n"
        f"Machine: {machine()}\n\n"
        + table(
            rows,
            [
                ("way", "way"),
                ("s", "seconds"),
                ("MB/s", "MB/s"),
                ("speed vs savez_compressed", "speed x"),
                ("output MB", "output MB"),
                ("raw/out", "raw/out"),
                ("peak RSS MB", "peak RSS MB"),
                ("runs", "runs (s)"),
            ],
        )
    )
    print(text)
    write_report("bench_npz", text)


if __name__ == "__main__":
    main()
