"""``dstore check``: throughput on tiles, memory on a million feature vectors, and the
measurement behind the default ``--near``.

    python benchmarks/bench_check.py [--tiles 6000] [--vectors 1000000] [--skip tiles,vectors,near]

* tiles: a label-maker ``data.npz`` of N 256x256x3 photo tiles (``_harness``), and
  dstore's TFRecord of it (PNG); for each, one child process reads every record
  (``iter_batches``: the baseline) and another runs the full check
  (``dstore.check``: SHA-256, pHash, near pairs). Printed: tiles/s, CPU seconds,
  peak RSS, and the ratio check/read of the same input in this run.
* vectors: N 1280-d float16 vectors from a low-rank mixture (40 components in a
  32-d subspace, ReLU, like CNN features), 1,000 exact and 1,000 near copies
  (cosine 0.985-0.9995 to their original) of training vectors planted in ``test``;
  written to an npz, then checked in a child: seconds, peak RSS, copies found,
  and the error of the estimated cosine.
* near: on the labelled set of ``dstore.check.labelled`` (distinct textured tiles of
  scikit-image's images, exact / JPEG q75 / brightness +-24 copies), for each
  ``--near`` radius, the copies found and the pairs of distinct tiles within it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, label_maker_npz, machine, run_way

READ = """
import time, resource, dstore
from dstore.api import open_reader
t = time.perf_counter(); c = time.process_time(); n = 0
with open_reader({path!r}) as r:
    for s in r.schema.splits:
        for b in r.iter_batches(s):
            n += len(next(iter(b.values())))
print("RESULT", json.dumps({{"seconds": time.perf_counter() - t, "cpu": time.process_time() - c, "n": n}}))
"""
CHECK = """
import time, dstore
t = time.perf_counter(); c = time.process_time()
rep = dstore.check({path!r})
print("RESULT", json.dumps({{"seconds": time.perf_counter() - t, "cpu": time.process_time() - c,
      "n": sum(rep.records.values()), "line": rep.summary_line()}}))
"""


def bench_tiles(n: int) -> list[str]:
    import dstore

    npz = label_maker_npz(n)
    tfr = os.path.join(OUT, f"data-{n}.tfrecords")
    if not os.path.exists(tfr):
        dstore.convert(npz, tfr)
    out = [f"### {n} tiles 256x256x3 (check vs read of the same input)", ""]
    out.append("| input | way | seconds | tiles/s | CPU s | peak RSS MB | check/read |")
    out.append("|---|---|---|---|---|---|---|")
    for name, path in (("npz", npz), ("TFRecord (PNG)", tfr)):
        read = run_way("import json\n" + READ.format(path=path))
        check = run_way("import json\n" + CHECK.format(path=path))
        for way, r in (("read", read), ("check", check)):
            ratio = f"{r['seconds'] / read['seconds']:.2f}" if way == "check" else "1"
            out.append(
                f"| {name} | {way} | {r['seconds']:.1f} | {r['n'] / r['seconds']:.0f} | "
                f"{r['cpu']:.1f} | {r['rss_mb']:.0f} | {ratio} |"
            )
        out.append(f"<!-- {check['line']} -->")
    return out


def make_vectors(path: str, n: int, seed: int = 0) -> dict:
    """The vectors file, and which test records are copies of which training records."""
    rng = np.random.default_rng(seed)
    d, k, r = 1280, 40, 32
    basis = rng.standard_normal((r, d)).astype(np.float32)
    centres = 2 * rng.standard_normal((k, r)).astype(np.float32)
    x = np.empty((n, d), np.float16)
    for lo in range(0, n, 1 << 15):
        m = min(1 << 15, n - lo)
        z = centres[rng.integers(0, k, m)] + rng.standard_normal((m, r)).astype(np.float32)
        noise = 0.5 * rng.standard_normal((m, d)).astype(np.float32)
        x[lo : lo + m] = np.maximum(z @ basis + noise, 0)
    cut = int(n * 0.8)
    originals = rng.choice(cut, 2000, replace=False)
    copies = rng.choice(np.arange(cut, n), 2000, replace=False)
    x[copies[:1000]] = x[originals[:1000]]
    src = x[originals[1000:]].astype(np.float32)
    eps = rng.uniform(0.03, 0.17, (1000, 1)).astype(np.float32)
    scale = np.linalg.norm(src, axis=1, keepdims=True) / np.sqrt(d)
    x[copies[1000:]] = src + eps * scale * rng.standard_normal(src.shape).astype(np.float32)
    np.savez(path, features_train=x[:cut], features_test=x[cut:])
    pairs = [(int(o), int(c - cut)) for o, c in zip(originals, copies, strict=True)]
    a = x[originals[1000:]].astype(np.float32)
    b = x[copies[1000:]].astype(np.float32)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return {"exact": pairs[:1000], "near": pairs[1000:], "near_cos": cos.tolist()}


VECTORS = """
import time, json, dstore
t = time.perf_counter(); c = time.process_time()
rep = dstore.check({path!r})
found = [[p["kind"], p["a"]["index"], p["b"]["index"], p["distance"]] for p in rep.duplicates
         if p["a"]["split"] == "train" and p["b"]["split"] == "test"]
print("RESULT", json.dumps({{"seconds": time.perf_counter() - t, "cpu": time.process_time() - c,
      "found": found, "pairs": len(rep.duplicates), "line": rep.summary_line()}}))
"""


def bench_vectors(n: int) -> list[str]:
    path = os.path.join(OUT, f"vectors-{n}.npz")
    truth = make_vectors(path, n)
    read = run_way("import json\n" + READ.format(path=path))
    r = run_way(VECTORS.format(path=path))
    got = {(a, b): (kind, dist) for kind, a, b, dist in r["found"]}
    exact = sum(got.get((a, b), ("",))[0] == "exact" for a, b in truth["exact"])
    cos = np.array(truth["near_cos"])
    near_ok = np.array([(a, b) in got for a, b in truth["near"]])
    est = np.array([1 - got[p][1] for p in map(tuple, truth["near"]) if p in got])
    err = np.abs(est - cos[near_ok])
    os.remove(path)
    return [
        f"### {n:,} feature vectors, 1280-d float16 ({n * 1280 * 2 / 1e9:.2f} GB raw)",
        "",
        "| way | seconds | CPU s | peak RSS MB | exact copies found | near copies found "
        "(cosine >= 0.985) | cosine estimate error (mean / max) | pairs reported |",
        "|---|---|---|---|---|---|---|---|",
        f"| read | {read['seconds']:.0f} | {read['cpu']:.0f} | {read['rss_mb']:.0f} | | | | |",
        f"| check | {r['seconds']:.0f} | {r['cpu']:.0f} | {r['rss_mb']:.0f} | {exact} / 1000 | "
        f"{int(near_ok.sum())} / 1000 | {err.mean():.4f} / {err.max():.4f} | {r['pairs']} |",
        f"<!-- {r['line']} -->",
    ]


def bench_near(sizes: tuple[int, ...] = (64, 128), radii: range = range(0, 11)) -> list[str]:
    from dstore.check.labelled import labelled_set
    from dstore.check.perceptual import hamming, phash

    out = []
    for size in sizes:
        ls = labelled_set(size, copies=20)
        hashes = {s: phash(d["x"]) for s, d in ls.splits.items()}
        dist: dict[str, list[int]] = {}
        for kind, (s1, i1), (s2, i2) in ls.truth:
            dist.setdefault(kind, []).append(int(hamming(hashes[s1][i1], hashes[s2][i2])))
        copies = {b for _, _, b in ls.truth}
        keep = [hashes[s][i] for s in hashes for i in range(len(hashes[s])) if (s, i) not in copies]
        h = np.array(keep, np.uint64)
        d = hamming(h[:, None], h[None, :])[np.triu_indices(len(h), 1)]
        out += [
            f"### --near on {size}x{size} tiles: {len(h)} distinct, "
            f"{len(ls.truth)} copies ({len(d):,} distinct pairs)",
            "",
            "| --near | exact | JPEG q75 | brighter +24 | darker -24 | near recall "
            "| false pairs among distinct |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in radii:
            found = {k: sum(x <= r for x in v) for k, v in dist.items()}
            near = found["jpeg"] + found["brighter"] + found["darker"]
            total = sum(len(dist[k]) for k in ("jpeg", "brighter", "darker"))
            out.append(
                f"| {r} | {found['exact']}/{len(dist['exact'])} | {found['jpeg']}/20 | "
                f"{found['brighter']}/20 | {found['darker']}/20 | {100 * near / total:.0f}% | "
                f"{int((d <= r).sum())} |"
            )
        out.append("")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tiles", type=int, default=6000)
    p.add_argument("--vectors", type=int, default=1_000_000)
    p.add_argument("--skip", default="", help="comma-separated parts to skip: tiles,vectors,near")
    args = p.parse_args()
    os.makedirs(OUT, exist_ok=True)
    skip = set(args.skip.split(","))
    lines = [f"machine: {machine()}", ""]
    if "near" not in skip:
        lines += bench_near()
    if "tiles" not in skip:
        lines += [*bench_tiles(args.tiles), ""]
    if "vectors" not in skip:
        lines += bench_vectors(args.vectors)
    print(textwrap.dedent("\n".join(lines)))
    print(json.dumps({"argv": sys.argv[1:]}))


if __name__ == "__main__":
    main()
