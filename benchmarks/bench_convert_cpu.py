"""Issue #24 §2: CPU utilisation and the critical path of npz -> TFRecord (PNG).

    python benchmarks/bench_convert_cpu.py [--tiles 3000] [--rounds 3] [--profile]
        [--before /path/to/other/checkout]

Converts a label-maker ``data.npz`` (``np.savez``, real-photo tiles 256x256x3)
with ``dstore.convert`` in a fresh process per run and prints, per round:
wall seconds, tiles/s, CPU utilisation = (user + sys) / wall / cores, and the
output's size. With ``--before DIR`` every round also runs the same conversion
with ``DIR`` first on ``sys.path`` (e.g. the main checkout), alternating, so
the two are compared as ratios measured side by side on a shared machine.

``--profile`` runs one more conversion of each under cProfile and prints the
main thread's breakdown (the thread that reads the npz, hashes and writes the
shards and waits for the encoder threads): seconds in PNG encoding, sha256,
CRC-32 of the zip members, CRC-32C of the records, npz reading, waiting on
encoder threads, and the rest. cProfile sees the main thread only, which is
the critical path here (PNG encoding of other chunks runs on pool threads).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

RUN = textwrap.dedent(
    """
    import json, os, resource, sys, time
    sys.path.insert(0, sys.argv[3])
    import dstore
    src, dst = sys.argv[1:3]
    profile = sys.argv[4] == "1"
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if profile:
        import cProfile, pstats
        prof = cProfile.Profile()
        prof.enable()
    dstore.convert(src, dst)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    out = {"wall": wall, "cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
           "dstore": os.path.dirname(dstore.__file__)}
    if profile:
        prof.disable()
        stats = pstats.Stats(prof).stats
        out["funcs"] = [[f"{k[0]}:{k[2]}", v[2], v[3]] for k, v in stats.items()]
    print("RESULT " + json.dumps(out))
    """
)

#: (category, substrings of "file:function" whose own time counts there), first match wins
CATEGORIES = [
    ("PNG encode", ("encode_ndarray", "deflate_encode", "_png.py")),
    ("sha256", ("sha256", "'update' of '_hashlib", "hexdigest")),
    ("zip CRC-32 (npz read)", ("crc32", "_update_crc")),
    ("CRC-32C (records)", ("crc32c", "google_crc32c", "masked_crc")),
    ("npz read", ("zipfile", "npyio", "format.py", "readinto", "'read' of")),
    ("waiting on encoder threads", ("acquire", "wait", "result")),
    ("file write", ("'write' of",)),
]


def breakdown(funcs: list[list], wall: float) -> dict[str, float]:
    out = dict.fromkeys([c for c, _ in CATEGORIES] + ["other"], 0.0)
    for name, tottime, _ in funcs:
        cat = next((c for c, keys in CATEGORIES if any(k in name for k in keys)), "other")
        out[cat] += tottime
    return {k: v / wall for k, v in out.items()}


def convert(src: str, path: str, profile: bool = False) -> dict:
    work = tempfile.mkdtemp(prefix="bench-cpu-")
    try:
        dst = os.path.join(work, "out.tfrecords")
        env = dict(os.environ, PYTHONPATH=path)
        proc = subprocess.run(
            [sys.executable, "-c", RUN, src, dst, path, "1" if profile else "0"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if proc.returncode:
            raise RuntimeError(proc.stderr[-3000:])
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
        res = json.loads(line[len("RESULT ") :])
        from _harness import dir_size

        res["bytes"] = dir_size(dst)
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiles", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--before",
        action="append",
        default=[],
        help="another checkout to compare with, as PATH or NAME=PATH (repeatable)",
    )
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    from _harness import label_maker_npz, machine

    src = label_maker_npz(args.tiles)
    cores = os.cpu_count() or 1
    ways = {}
    for i, b in enumerate(args.before):
        name, _, path = b.rpartition("=")
        ways[name or ("before" if i == 0 else f"before {i + 1}")] = path
    ways["this checkout"] = os.path.dirname(HERE)
    print(f"{machine()}; npz -> TFRecord PNG, {args.tiles} tiles, {args.rounds} rounds")
    runs: dict[str, list[dict]] = {w: [] for w in ways}
    for r in range(args.rounds):
        for way, path in ways.items():
            res = convert(src, path)
            runs[way].append(res)
            print(
                f"round {r + 1} {way}: {res['wall']:.2f} s, {args.tiles / res['wall']:,.0f} "
                f"tiles/s, CPU {res['cpu'] / res['wall'] / cores:.0%} of {cores} cores, "
                f"{res['bytes'] / 1e6:.1f} MB",
                flush=True,
            )
    print("\n| way | wall s (median, range) | tiles/s | CPU utilisation | output MB |")
    print("|---|---|---|---|---|")
    for way, rs in runs.items():
        walls = [r["wall"] for r in rs]
        util = statistics.median(r["cpu"] / r["wall"] / cores for r in rs)
        print(
            f"| {way} | {statistics.median(walls):.2f} ({min(walls):.2f}-{max(walls):.2f}) | "
            f"{args.tiles / statistics.median(walls):,.0f} | {util:.0%} | "
            f"{rs[0]['bytes'] / 1e6:.1f} |"
        )
    base = next(iter(ways))
    for way in list(ways)[1:]:
        ratios = [b["wall"] / a["wall"] for a, b in zip(runs[way], runs[base], strict=True)]
        print(
            f"\nspeed-up of {way} over {base}: {statistics.median(ratios):.2f}x "
            f"(rounds {min(ratios):.2f}-{max(ratios):.2f})"
        )
    if args.profile:
        print("\nMain thread's time by category (share of wall, cProfile):")
        cats = {
            way: breakdown(r["funcs"], r["wall"])
            for way, p in ways.items()
            for r in (convert(src, p, True),)
        }
        print("| category | " + " | ".join(cats) + " |")
        print("|---|" + "---|" * len(cats))
        for c in next(iter(cats.values())):
            print(f"| {c} | " + " | ".join(f"{cats[w][c]:.0%}" for w in cats) + " |")


if __name__ == "__main__":
    main()
