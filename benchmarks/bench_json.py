"""pyspacer JSON feature files -> one float16 npz: dstore against a hand-written loop.

    python benchmarks/bench_json.py [--files 1000] [--more 4000] [--parsers]

Generates ``--files`` (and ``--more``) pyspacer feature files of 30 points x
1,280 floats each (cached in benchmarks/out/), then runs each way in its own
process (peak RSS is that process's VmHWM, from ``/usr/bin/time -v``):

* ``json.load + np.concatenate + np.savez_compressed``: the loop CoralNet
  would write, holding every file's features until the one save;
* ``dstore.convert("features/*.json", "feats.npz", dtype="float16")``.

Then the same two on ``--more`` files: the loop's RSS grows with the file
count, dstore's stays flat. ``--parsers`` also times the parsers on one file
(orjson, msgspec, pysimdjson where installed, against the standard library).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, machine, run_way, table, write_report

POINTS, DIM = 30, 1280


def _dumps(doc: object) -> bytes:
    try:  # the same text as json.dumps, 10x faster: 4,000 files take minutes otherwise
        import orjson

        return orjson.dumps(doc)
    except ImportError:
        return json.dumps(doc).encode()


def pyspacer_files(n: int) -> str:
    """A folder of ``n`` pyspacer feature files (float32 features written as JSON floats,
    as pyspacer's ``features.tolist()`` does)."""
    folder = os.path.join(OUT, f"pyspacer-{n}")
    done = os.path.join(folder, ".complete")
    if os.path.exists(done):
        return folder
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        feats = np.abs(rng.standard_normal((POINTS, DIM))).astype(np.float32)
        rows = rng.integers(0, 4000, (POINTS, 2))
        doc = {
            "point_features": [
                {"row": int(r), "col": int(c), "data": f.tolist()}
                for (r, c), f in zip(rows, feats, strict=True)
            ],
            "valid_rowcol": True,
            "feature_dim": DIM,
            "npoints": POINTS,
        }
        with open(os.path.join(folder, f"img{i:06d}.json"), "wb") as f:
            f.write(_dumps(doc))
    open(done, "w").close()
    return folder


def _loop_way(folder: str, out: str) -> str:
    return f"""
        import glob, json, os, time, numpy as np
        t = time.perf_counter()
        feats, rows, cols = [], [], []
        for path in sorted(glob.glob(os.path.join({folder!r}, "*.json"))):
            with open(path) as f:
                doc = json.load(f)
            points = doc["point_features"]
            feats.append(np.array([p["data"] for p in points], dtype=np.float16))
            rows.append(np.array([p["row"] for p in points]))
            cols.append(np.array([p["col"] for p in points]))
        np.savez_compressed({out!r}, data=np.concatenate(feats), row=np.concatenate(rows),
                            col=np.concatenate(cols))
        s = time.perf_counter() - t
        print("RESULT", json.dumps({{"seconds": s, "bytes": os.path.getsize({out!r})}}))
        os.remove({out!r})
    """


def _dstore_way(folder: str, out: str) -> str:
    return f"""
        import json, os, time, dstore
        t = time.perf_counter()
        r = dstore.convert(os.path.join({folder!r}, "*.json"), {out!r}, dtype="float16")
        s = time.perf_counter() - t
        print("RESULT", json.dumps({{"seconds": s, "bytes": os.path.getsize({out!r}),
                                     "records": r.records}}))
        os.remove({out!r})
    """


def parsers(folder: str) -> str:
    """Seconds of CPU to parse one file and make its feature array, per parser."""
    path = os.path.join(folder, "img000000.json")
    with open(path, "rb") as f:
        text = f.read()
    candidates = {"json (standard library)": json.loads}
    try:
        import orjson

        candidates[f"orjson {orjson.__version__}"] = orjson.loads
    except ImportError:
        pass
    try:
        import msgspec

        candidates[f"msgspec {msgspec.__version__}"] = msgspec.json.decode
    except ImportError:
        pass
    try:
        import simdjson

        parser = simdjson.Parser()
        candidates["pysimdjson (as Python objects)"] = lambda b: parser.parse(b, True)
    except ImportError:
        pass
    rows = []
    base = None
    for name, loads in candidates.items():

        def work(loads=loads) -> None:
            doc = loads(text)
            np.array([p["data"] for p in doc["point_features"]], np.float64)

        best = float("inf")
        for _ in range(5):
            t = time.process_time()
            for _ in range(20):
                work()
            best = min(best, (time.process_time() - t) / 20)
        base = base or best
        rows.append({"parser": name, "ms": best * 1000, "x": base / best})
    return (
        f"Parsing one pyspacer file ({len(text) / 1e6:.2f} MB) into a float64 array, "
        "best of 5 x 20, CPU ms\n\n"
        + table(rows, [("parser", "parser"), ("ms", "ms per file"), ("x", "speed x")])
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--more", type=int, default=4000, help="second file count, for peak RSS")
    ap.add_argument("--parsers", action="store_true")
    args = ap.parse_args()
    out = os.path.join(OUT, "pyspacer-out.npz")
    rows = []
    for n in (args.files, args.more):
        if not n:
            continue
        folder = pyspacer_files(n)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        base = None
        for name, code in {
            "json.load + np.concatenate + np.savez_compressed": _loop_way(folder, out),
            'dstore.convert("*.json", "feats.npz", dtype="float16")': _dstore_way(folder, out),
        }.items():
            r = run_way(code)
            base = base or r["seconds"]
            rows.append(
                {
                    "files": n,
                    "way": name,
                    "s": r["seconds"],
                    "files/s": n / r["seconds"],
                    "x": base / r["seconds"],
                    "MB": r["bytes"] / 1e6,
                    "in": size / 1e6,
                    "rss": r["rss_mb"],
                }
            )
            print(f"{n} files, {name}: {r['seconds']:.1f} s, {r['rss_mb']:.0f} MB", file=sys.stderr)
    text = (
        f"pyspacer JSON -> one float16 npz ({POINTS} points x {DIM} floats per file), one run\n"
        f"Machine: {machine()}\n\n"
        + table(
            rows,
            [
                ("files", "files"),
                ("way", "way"),
                ("in", "JSON MB"),
                ("s", "seconds"),
                ("files/s", "files/s"),
                ("x", "speed x"),
                ("MB", "npz MB"),
                ("rss", "peak RSS MB"),
            ],
        )
    )
    if args.parsers:
        text += "\n\n" + parsers(pyspacer_files(args.files or 1))
    print(text)
    write_report("bench_json", text)


if __name__ == "__main__":
    main()
