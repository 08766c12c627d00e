"""npz -> zarr / HDF5: dstore (streaming from the npz) against the libraries called directly.

    python benchmarks/bench_containers.py [--tiles 7000] [--rounds 3] [--only zarr]

The direct calls get the arrays already in memory (not timed) and write them
with one call, chunk per image, as a user would; dstore's time includes
reading the npz. Each side's time starts before it imports its library (zarr or
h5py; dstore, which imports zarr or h5py when it writes): a user waits for both.
Same settings on both sides, so sizes must match. The ways of a group run in
alternating rounds; each ratio is taken within a round (median, range).
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
    alternating_rounds,
    dir_size,
    label_maker_npz,
    load_average,
    machine,
    median_range,
    round_ratios,
    run_way,
    table,
    write_report,
)

_LOAD = """
import json, os, time, numpy as np
with np.load({src!r}) as z:
    arrays = {{k: z[k] for k in z.files}}
"""
TILE_MB = 256 * 256 * 3 / 2**20  # one tile per chunk, as the direct calls use


def ways(src: str, out_zarr: str, out_h5: str) -> list[tuple[str, str, str, str]]:
    """(group, name, code, output path)."""
    load = _LOAD.format(src=src).replace("{", "{{").replace("}", "}}")
    zarr_direct = (
        load
        + """
t = time.perf_counter(); c = os.times()
import zarr
from zarr.codecs import BloscCodec
g = zarr.open_group({out!r}, mode="w", zarr_format=3)
for k, a in arrays.items():
    g.create_array(k, data=a, chunks=(1, *a.shape[1:]), compressors=BloscCodec(cname={cname!r}, clevel=3, shuffle="shuffle"))
s = time.perf_counter() - t
print("RESULT", json.dumps({{"seconds": s, "cpu_s": sum(os.times()[:2]) - sum(c[:2])}}))
"""
    )
    h5_direct = (
        load
        + """
t = time.perf_counter(); c = os.times()
import h5py
with h5py.File({out!r}, "w") as f:
    for k, a in arrays.items():
        f.create_dataset(k, data=a, chunks=(1, *a.shape[1:]), {comp})
s = time.perf_counter() - t
print("RESULT", json.dumps({{"seconds": s, "cpu_s": sum(os.times()[:2]) - sum(c[:2])}}))
"""
    )
    dstore_way = """
import json, os, time
t = time.perf_counter(); c = os.times()
import dstore
dstore.convert({src!r}, {out!r}, overwrite=True, options={opts!r})
s = time.perf_counter() - t
print("RESULT", json.dumps({{"seconds": s, "cpu_s": sum(os.times()[:2]) - sum(c[:2])}}))
"""
    return [
        (
            "zarr zstd",
            "zarr direct (blosc zstd 3 + shuffle, chunk per tile)",
            zarr_direct.format(out=out_zarr, cname="zstd"),
            out_zarr,
        ),
        (
            "zarr zstd",
            "dstore convert out.zarr (same settings)",
            dstore_way.format(src=src, out=out_zarr, opts={"chunk_mb": TILE_MB}),
            out_zarr,
        ),
        (
            "zarr zstd",
            "dstore convert out.zarr (default 1 MiB chunks)",
            dstore_way.format(src=src, out=out_zarr, opts={}),
            out_zarr,
        ),
        (
            "zarr lz4",
            "zarr direct (blosc lz4)",
            zarr_direct.format(out=out_zarr, cname="lz4"),
            out_zarr,
        ),
        (
            "zarr lz4",
            "dstore convert out.zarr -o cname=lz4",
            dstore_way.format(src=src, out=out_zarr, opts={"chunk_mb": TILE_MB, "cname": "lz4"}),
            out_zarr,
        ),
        (
            "hdf5 gzip",
            "h5py direct (gzip 4, chunk per tile)",
            h5_direct.format(out=out_h5, comp='compression="gzip", compression_opts=4'),
            out_h5,
        ),
        (
            "hdf5 gzip",
            "dstore convert out.h5 (same settings, chunks deflated on all cores)",
            dstore_way.format(src=src, out=out_h5, opts={"chunk_mb": TILE_MB, "level": 4}),
            out_h5,
        ),
        (
            "hdf5 lzf",
            "h5py direct (lzf)",
            h5_direct.format(out=out_h5, comp='compression="lzf"'),
            out_h5,
        ),
        (
            "hdf5 lzf",
            "dstore convert out.h5 -o compression=lzf",
            dstore_way.format(
                src=src, out=out_h5, opts={"chunk_mb": TILE_MB, "compression": "lzf"}
            ),
            out_h5,
        ),
    ]


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", type=int, default=7000)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per group (>= 3)")
    ap.add_argument("--only", help="run only the groups containing this text (e.g. zarr)")
    args = ap.parse_args()
    src = label_maker_npz(args.tiles)
    raw = os.path.getsize(src)
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for group, name, code, out in ways(src, os.path.join(OUT, "c.zarr"), os.path.join(OUT, "c.h5")):
        if not args.only or args.only in group:
            groups.setdefault(group, []).append((name, code, out))
    rows = []
    loads = [load_average()]
    for group, members in groups.items():
        outs = {name: out for name, _, out in members}
        # the ways of a group alternate, round by round; each ratio is taken within a round
        results = alternating_rounds(
            [(name, code) for name, code, _ in members],
            args.rounds,
            before_each=lambda name, outs=outs: _remove(outs[name]),
        )
        sizes = {}
        for name, code, out in members:  # each way's output, written once more for its size
            _remove(out)
            run_way(code)
            sizes[name] = dir_size(out)
        direct = members[0][0]
        for name, _, _ in members:
            res = results[name]
            s = statistics.median(r["seconds"] for r in res)
            rows.append(
                {
                    "group": group,
                    "way": name,
                    "MB/s": raw / 1e6 / s,
                    "speed x": median_range(round_ratios(res, results[direct])),
                    "output MB": sizes[name] / 1e6,
                    "size x": sizes[name] / sizes[direct],
                    "cpu s": statistics.median(r["cpu_s"] for r in res),
                    "cpu x": median_range(round_ratios(res, results[direct], key="cpu_s")),
                    "peak RSS MB": max(r["rss_mb"] for r in res),
                    "runs": [round(r["seconds"], 2) for r in res],
                }
            )
        loads.append(load_average())
    text = (
        f"npz -> zarr / HDF5, {args.tiles} real-photo tiles 256x256x3 ({raw / 1e9:.2f} GB), "
        f"{args.rounds} alternating rounds per group (order reversed every other round); "
        "speed vs direct: median (range) of the rounds' ratios against the direct call\n"
        f"Machine: {machine()}; load average before and after each group: {' | '.join(loads)}\n\n"
        + table(
            rows,
            [
                ("way", "way"),
                ("MB/s", "MB/s (median)"),
                ("speed x", "speed vs direct"),
                ("output MB", "output MB"),
                ("size x", "size vs direct"),
                ("cpu s", "CPU s (median)"),
                ("cpu x", "direct's CPU s / this way's"),
                ("peak RSS MB", "peak RSS MB"),
                ("runs", "runs (s)"),
            ],
        )
    )
    print(text)
    write_report("bench_containers", text)


if __name__ == "__main__":
    main()
