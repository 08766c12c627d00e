"""Sharded TFRecord conversion on a Dask LocalCluster against the local default (issue #7).

    python benchmarks/bench_distributed.py [--tiles 7000] [--shard-mb 64] [--overhead-shards 200]

Ways, each in its own process, in one run:

* ``local``: ``dstore.convert(src, dst)`` (one process, PNG encoding on every core)
* ``dask``:  the same call with ``client=`` a LocalCluster of 2 worker processes
  (1 thread each; each shard still encodes on a thread pool)

Both outputs are compared file by file (sha256): they must be identical.
The per-task overhead is measured separately: a conversion of small tiles
planned as ``--overhead-shards`` one-record shards, on the cluster, minus the
same records written as one shard, divided by the number of shards. The
cluster's start-up (about 2 s) is excluded from every timing: it is paid once
per cluster, not per conversion.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

from _harness import OUT, label_maker_npz, machine, run_way

from dstore.testing import file_digests

CLUSTER = """
import distributed
cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
client = distributed.Client(cluster)
client.run(lambda: __import__("dstore.codecs.tfrecord"))  # warm the workers' imports
"""


def convert_way(src: str, dst: str, shard_mb: float | str, dask: bool) -> str:
    return f"""
import json, shutil, time, os
import dstore
{CLUSTER if dask else "client = None"}
shutil.rmtree({dst!r}, ignore_errors=True)
t = time.perf_counter()
report = dstore.convert({src!r}, {dst!r}, options={{"shard_mb": "{shard_mb}"}}, client=client)
seconds = time.perf_counter() - t
print("RESULT " + json.dumps({{"seconds": seconds, "shards": report.shards.shards,
                              "records": report.records, "bytes": report.bytes_out}}))
"""


def overhead_way(src: str, dst: str, dask: bool, one_record: bool) -> str:
    # shard_mb tiny -> one record per shard; huge -> the whole split in one shard
    return convert_way(src, dst, "0.000001" if one_record else "100000", dask)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", type=int, default=7000)
    ap.add_argument("--shard-mb", type=float, default=64.0)
    ap.add_argument("--overhead-shards", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    print(machine())
    src = label_maker_npz(args.tiles)
    raw_mb = os.path.getsize(src) / 1e6
    local_dst, dask_dst = (
        os.path.join(OUT, "dist-local.tfrecords"),
        os.path.join(OUT, "dist-dask.tfrecords"),
    )
    local = run_way(convert_way(src, local_dst, args.shard_mb, False), args.repeats)
    dask = run_way(convert_way(src, dask_dst, args.shard_mb, True), args.repeats)
    same = file_digests(local_dst) == file_digests(dask_dst)
    print(
        f"\n{args.tiles} tiles 256x256x3 ({raw_mb:.0f} MB npz, stored) -> TFRecord, "
        f"shard_mb={args.shard_mb:g}: {local['shards']} shards"
    )
    print("| way | seconds | tiles/s | vs local | peak RSS (client) |")
    print("|---|---|---|---|---|")
    for name, r in (("local default", local), ("Dask LocalCluster, 2 workers", dask)):
        print(
            f"| {name} | {r['seconds']:.1f} | {r['records'] / r['seconds']:,.0f} | "
            f"{local['seconds'] / r['seconds']:.2f}x | {r['rss_mb']:,.0f} MB |"
        )
    print(f"outputs byte-identical: {'yes' if same else 'NO'}")

    # Per-task overhead: tiny tiles, one record per shard vs one shard for all.
    import numpy as np

    from dstore.demo import photo_tiles

    small = os.path.join(OUT, f"overhead-{args.overhead_shards}.npz")
    x, y = photo_tiles(args.overhead_shards, 32, seed=1)
    np.savez(small, x_train=x, y_train=y)
    results = {}
    for dask_on in (False, True):
        for one in (False, True):
            dst = os.path.join(OUT, f"overhead-{int(dask_on)}{int(one)}.tfrecords")
            results[(dask_on, one)] = run_way(overhead_way(small, dst, dask_on, one), args.repeats)
            shutil.rmtree(dst, ignore_errors=True)
    print(
        f"\nPer-shard overhead ({args.overhead_shards} one-record shards of a 32x32x3 tile, "
        "minus the same records in one shard, per shard):"
    )
    for dask_on, label in ((False, "local"), (True, "Dask task")):
        many, one = results[(dask_on, True)], results[(dask_on, False)]
        per = (many["seconds"] - one["seconds"]) / (many["shards"] - one["shards"])
        print(
            f"  {label}: {per * 1000:.1f} ms per shard "
            f"({many['shards']} shards {many['seconds']:.2f} s, 1 shard {one['seconds']:.2f} s)"
        )
    print(json.dumps({"local_s": local["seconds"], "dask_s": dask["seconds"], "same": same}))
    shutil.rmtree(local_dst, ignore_errors=True)
    shutil.rmtree(dask_dst, ignore_errors=True)


if __name__ == "__main__":
    main()
