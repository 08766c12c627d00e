"""Issue #36: the package in floors is not slower. Two checkouts, side by side, one run.

    python benchmarks/bench_layers.py --before /path/to/old/checkout [--tiles 2000] [--rounds 3]

Each round runs, for the checkout under test (this one) and for ``--before``
(e.g. ``git worktree add --detach ../before 016fe08``), alternating which goes
first, each way in a fresh process with that checkout first on ``sys.path``:

* ``convert``: ``dstore.convert`` of a label-maker ``data.npz`` (real-photo tiles
  256x256x3) to TFRecord with PNG images (what ``bench_convert_cpu.py`` times);
* ``torch``: one epoch of ``dstore.to_torch`` over that TFRecord output under a
  ``DataLoader(num_workers=2, batch_size=64)`` (what ``bench_read.py`` times);
* ``open``: ``dstore.open(...)`` batches of 64 of the zarr form of the same tiles.

It prints each way's seconds (wall and CPU) per checkout and the ratio
after / before per round (median and range): a ratio near 1.00 is "not slower".
The machine is shared: CPU seconds are the steadier figure under load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import label_maker_npz, load_average, machine, median_range, run_way

WAYS = {
    "convert": """
        import os, shutil, sys, time, resource
        sys.path.insert(0, {tree!r})
        import dstore
        dst = {out!r} + "/c.tfrecords"
        shutil.rmtree(dst, ignore_errors=True)
        t0, c0 = time.perf_counter(), time.process_time()
        dstore.convert({src!r}, dst)
        cpu = time.process_time() - c0 + sum(
            getattr(resource.getrusage(resource.RUSAGE_CHILDREN), k) for k in ("ru_utime", "ru_stime"))
        print("RESULT", __import__("json").dumps({{"seconds": time.perf_counter() - t0, "cpu": cpu,
              "file": dstore.__file__}}))
    """,
    "torch": """
        import sys, time, resource
        sys.path.insert(0, {tree!r})
        import dstore, torch
        ds = dstore.to_torch({tfr!r}, split="train")
        loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2,
                                             collate_fn=dstore.readers.torch.collate)
        t0, c0 = time.perf_counter(), time.process_time()
        n = sum(len(b["y"]) for b in loader)
        cpu = time.process_time() - c0 + sum(
            getattr(resource.getrusage(resource.RUSAGE_CHILDREN), k) for k in ("ru_utime", "ru_stime"))
        print("RESULT", __import__("json").dumps({{"seconds": time.perf_counter() - t0, "cpu": cpu,
              "records": n, "file": dstore.__file__}}))
    """,
    "open": """
        import sys, time
        sys.path.insert(0, {tree!r})
        import dstore
        split = dstore.open({zarr!r})["train"]
        t0, c0 = time.perf_counter(), time.process_time()
        n = 0
        for start in range(0, len(split), 64):
            n += len(split["x"][start:start + 64])
        print("RESULT", __import__("json").dumps({{"seconds": time.perf_counter() - t0,
              "cpu": time.process_time() - c0, "records": n, "file": dstore.__file__}}))
    """,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the other checkout (its root folder)")
    ap.add_argument("--tiles", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    after = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"after": after, "before": os.path.abspath(args.before)}
    src = label_maker_npz(args.tiles)
    load0 = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, after)
        import dstore

        tfr, zarr = os.path.join(tmp, "r.tfrecords"), os.path.join(tmp, "r.zarr")
        dstore.convert(src, tfr)
        dstore.convert(src, zarr)
        results: dict[tuple[str, str], list[dict]] = {}
        for r in range(args.rounds):
            order = ["after", "before"] if r % 2 == 0 else ["before", "after"]
            for way, code in WAYS.items():
                for name in order:
                    out = os.path.join(tmp, f"{name}-{way}")
                    os.makedirs(out, exist_ok=True)
                    text = textwrap.dedent(code).format(
                        tree=trees[name], out=out, src=src, tfr=tfr, zarr=zarr
                    )
                    # from the output folder: `python -m` children put their cwd first on sys.path
                    res = run_way(text, env_extra={"PYTHONPATH": trees[name]}, cwd=out)
                    assert res["file"].startswith(trees[name]), (res["file"], trees[name])
                    results.setdefault((way, name), []).append(res)
    print(f"# the floors against {args.before}: {args.tiles} tiles, {args.rounds} rounds")
    print(f"{machine()}; load average {load0} before, {load_average()} after\n")
    print("| way | after s (wall / CPU) | before s (wall / CPU) | after/before wall | CPU |")
    print("|---|---|---|---|---|")
    for way in WAYS:
        a, b = results[(way, "after")], results[(way, "before")]
        wall = [x["seconds"] / y["seconds"] for x, y in zip(a, b, strict=True)]
        cpu = [x["cpu"] / y["cpu"] for x, y in zip(a, b, strict=True)]

        def med(rs: list[dict], k: str) -> float:
            return statistics.median(x[k] for x in rs)

        print(
            f"| {way} | {med(a, 'seconds'):.2f} / {med(a, 'cpu'):.2f} | "
            f"{med(b, 'seconds'):.2f} / {med(b, 'cpu'):.2f} | "
            f"{median_range(wall)} | {median_range(cpu)} |"
        )


if __name__ == "__main__":
    main()
