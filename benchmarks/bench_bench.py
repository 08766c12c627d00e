"""``dstore bench`` itself on label-maker's size: wall time, peak memory, cells, and how
close a sample's extrapolation comes to measuring every record.

    python benchmarks/bench_bench.py [--tiles 9000] [--check-tiles 2000] [--skip-check]

1. Builds a label-maker ``data.npz`` of ``--tiles`` distinct 256x256x3 uint8 tiles
   (cached in benchmarks/out/): random crops of scikit-image's photographs, each
   flipped, turned by a multiple of 90 degrees and given its own brightness and
   contrast, one-hot labels (the photograph), keys ``x_train, y_train, x_test,
   y_test, x_val, y_val`` (70/20/10), written uncompressed as label-maker does.
2. Runs the default ``dstore bench data.npz --report r.json`` under
   ``/usr/bin/time -v``: wall time, peak RSS (the largest of the bench and its
   children), cells measured and left out, the load average before and after.
   The baseline, before and after it in the same run: ``dstore convert data.npz
   out.npz`` of the whole file (wall, CPU, RSS); the bench's ratios to it hold when
   the machine's load makes wall times alone meaningless.
3. On ``--check-tiles`` tiles: the default bench with ``--sample`` set to the
   share the 9,000-tile run measured, and again with ``--sample off``; for each cell
   the sample's extrapolated size, write and read times (wall and CPU) against the
   full run's, and whether the full figure lies inside the stated 95% interval.

Prints Markdown tables; writes them to benchmarks/out/bench_bench.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, TIME, load_average, machine, table, write_report


def distinct_tiles(n: int, seed: int = 42, size: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """``n`` distinct photo tiles and one-hot labels: crops, flips, quarter turns and a
    brightness/contrast change of their own (no two tiles are equal; checked)."""
    from dstore.demo import PHOTOS, photo_tiles

    x, y = photo_tiles(n, size, seed=seed)
    rng = np.random.default_rng(seed + 1)
    for i in range(n):
        tile = np.rot90(x[i], int(rng.integers(4)))
        if rng.random() < 0.5:
            tile = tile[::-1]
        gain, offset = rng.uniform(0.8, 1.2), rng.uniform(-20, 20)
        x[i] = np.clip(tile.astype(np.float32) * gain + offset, 0, 255).astype(np.uint8)
    keys = {x[i].tobytes()[::97] for i in range(n)}
    assert len(keys) == n, "two tiles came out equal"
    assert y.shape[1] == len(PHOTOS)
    return x, y


def label_maker_file(n: int) -> str:
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"bench-bench-{n}.npz")
    if os.path.exists(path):
        return path
    x, y = distinct_tiles(n)
    a, b = int(n * 0.7), int(n * 0.9)
    tmp = path + ".tmp.npz"
    np.savez(
        tmp, x_train=x[:a], y_train=y[:a], x_test=x[a:b], y_test=y[a:b], x_val=x[b:], y_val=y[b:]
    )
    os.replace(tmp, path)
    return path


def run_bench(src: str, report: str, extra: list[str]) -> dict:
    """``dstore bench src --report report *extra`` under /usr/bin/time -v."""
    argv = [sys.executable, "-m", "dstore.cli", "bench", src, "--report", report, *extra]
    wall, cpu, rss, load, proc = _timed(argv)
    with open(report) as f:
        data = json.load(f)
    first = next(ln for ln in proc.stderr.splitlines() if ln.startswith("dstore bench"))
    return {
        "wall_s": wall,
        "rss_mb": rss,
        "cpu_s": cpu,  # user + system of the bench and every child it waited for
        "cells": len(data["cells"]),
        "skipped": data["skipped"],
        "first_line": first,
        "load": load,
        "data": data,
        "stdout": proc.stdout,
    }


def _timed(argv: list[str]) -> tuple[float, float, float, str, subprocess.CompletedProcess]:
    """Wall s, CPU s (user + system of the process and its children), peak RSS MB,
    the load average before -> after of ``argv`` under /usr/bin/time -v, and its output."""
    if os.path.exists(TIME):
        argv = [TIME, "-v", *argv]
    load_before = load_average()
    t = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    cpu = sum(
        float(v) for v in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", proc.stderr)
    )
    rss = int(m.group(1)) / 1024 if m else float("nan")
    return wall, cpu, rss, f"{load_before} -> {load_average()}", proc


def run_baseline(src: str) -> dict:
    """The baseline measured beside the bench, in the same run: one ``dstore convert
    src out.npz`` of the whole input (dstore's default format, deflated): what the bench
    costs is then a number of such conversions, whatever the machine's load."""
    out = os.path.join(OUT, "bench-bench-baseline.npz")
    if os.path.exists(out):
        os.remove(out)
    argv = [sys.executable, "-m", "dstore.cli", "convert", src, out]
    try:
        wall, cpu, rss, load, _ = _timed(argv)
    finally:
        if os.path.exists(out):
            os.remove(out)
    return {"wall_s": wall, "cpu_s": cpu, "rss_mb": rss, "load": load}


def _baseline_rows(big: dict, before: dict, after: dict) -> list[dict]:
    rows = []
    for name, run in (
        ("convert to npz (before)", before),
        ("dstore bench (defaults)", big),
        ("convert to npz (after)", after),
    ):
        rows.append(
            {
                "run": name,
                "wall": f"{run['wall_s'] / 60:.2f} min",
                "cpu": f"{run['cpu_s'] / 60:.2f} min",
                "rss": f"{run['rss_mb']:,.0f} MB",
                "load": run["load"],
            }
        )
    wall = (before["wall_s"] + after["wall_s"]) / 2
    cpu = (before["cpu_s"] + after["cpu_s"]) / 2
    rows.append(
        {
            "run": "bench / mean convert",
            "wall": f"{big['wall_s'] / wall:.2f}x",
            "cpu": f"{big['cpu_s'] / cpu:.2f}x",
            "rss": "",
            "load": "",
        }
    )
    return rows


def _check_rows(sampled: dict, full: dict) -> list[dict]:
    rows = []
    full_cells = {c["label"] + c["images"] + c["dtype"]: c for c in full["data"]["cells"]}
    for c in sampled["data"]["cells"]:
        f = full_cells.get(c["label"] + c["images"] + c["dtype"])
        if f is None or not c["bytes"] or not f["bytes"]:
            continue
        row = {"cell": f"{c['format']} {c['images']}"}
        for key in ("bytes", "write_s", "write_cpu_s", "read_s", "read_cpu_s"):
            est, true = c[key], f[key]
            lo, hi = c["intervals"].get(key) or [None, None]
            row[key] = f"{100 * (est - true) / true:+.1f}%" + (
                "" if lo is None or lo <= true <= hi else " (outside)"
            )
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiles", type=int, default=9000)
    parser.add_argument("--check-tiles", type=int, default=2000)
    parser.add_argument("--skip-check", action="store_true")
    args = parser.parse_args()
    src = label_maker_file(args.tiles)
    size_gb = os.path.getsize(src) / 1e9
    print(f"data: {src} ({args.tiles} tiles, {size_gb:.2f} GB); {machine()}", flush=True)
    before = run_baseline(src)
    big = run_bench(src, os.path.join(OUT, "bench-bench-default.json"), [])
    after = run_baseline(src)
    lines = [
        f"## `dstore bench` on {args.tiles:,} label-maker tiles ({size_gb:.2f} GB)",
        "",
        f"{machine()}",
        "",
        f"`dstore bench {os.path.basename(src)} --report r.json` (defaults):",
        "",
        table(
            [
                {
                    "wall": f"{big['wall_s'] / 60:.1f} min",
                    "cpu": f"{big['cpu_s'] / 60:.1f} min",
                    "rss": f"{big['rss_mb']:,.0f} MB",
                    "cells": big["cells"],
                    "load": big["load"],
                }
            ],
            [
                ("wall", "wall time"),
                ("cpu", "CPU time (user + system)"),
                ("rss", "peak RSS"),
                ("cells", "cells measured"),
                ("load", "load average before -> after"),
            ],
        ),
        "",
        "The baseline, in the same run: `dstore convert` of the whole input to npz, "
        "before and after the bench (ratios: the bench over their mean).",
        "",
        table(
            _baseline_rows(big, before, after),
            [
                ("run", "run"),
                ("wall", "wall time"),
                ("cpu", "CPU time"),
                ("rss", "peak RSS"),
                ("load", "load average before -> after"),
            ],
        ),
        "",
        f"first line: `{big['first_line']}`",
        "",
        "left out: " + "; ".join(big["skipped"]),
        "",
        "```",
        big["stdout"].strip(),
        "```",
    ]
    if not args.skip_check:
        share = big["data"]["settings"]["sample"] or args.check_tiles
        n = max(60, round(share * args.check_tiles / args.tiles))
        small = label_maker_file(args.check_tiles)
        sampled = run_bench(
            small, os.path.join(OUT, "bench-bench-sampled.json"), ["--sample", str(n)]
        )
        full = run_bench(
            small, os.path.join(OUT, "bench-bench-full.json"), ["--sample", "off", "--repeats", "1"]
        )
        lines += [
            "",
            f"### Extrapolation on {args.check_tiles:,} tiles: a sample of {n} against every record",
            "",
            f"sampled: {sampled['wall_s'] / 60:.1f} min, {sampled['rss_mb']:,.0f} MB (load {sampled['load']}); "
            f"full: {full['wall_s'] / 60:.1f} min, {full['rss_mb']:,.0f} MB (load {full['load']})",
            "",
            table(
                _check_rows(sampled, full),
                [
                    ("cell", "cell"),
                    ("bytes", "size"),
                    ("write_s", "write (wall)"),
                    ("write_cpu_s", "write (CPU)"),
                    ("read_s", "read (wall)"),
                    ("read_cpu_s", "read (CPU)"),
                ],
            ),
        ]
    text = "\n".join(lines)
    print(text)
    print(f"\nwritten to {write_report('bench_bench', text)}")


if __name__ == "__main__":
    main()
