"""Count the outcomes of mutated inputs for every format (the figure issue #6 asks for).

    python benchmarks/fuzz_counts.py [--n 2000] [--kinds npz,zarr,hdf5,...] [--timeout 20]

Each mutation (bit flip, byte set, truncation at a random offset) of a valid
dataset is read completely. The reads run in a child process, so that a
crash of a C library (HDF5, blosc) or a hang is counted, not fatal: the
child is replaced and the run goes on. Outcomes: "same data", "DstoreError",
or a bug ("BUG <exception>", "BUG different data", "CRASH signal N", "HANG").
Seeded, so the counts are reproducible.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

KINDS = ("npz", "bare .tfrecord", ".tfrecords dir", "zarr", "hdf5")


def make_valid(kind: str, folder: str) -> tuple[str, list[str]]:
    """A valid dataset for ``kind``: its path and the files that mutations may hit."""
    import dstore
    from dstore.demo import photo_tiles

    x, y = photo_tiles(6, 16, seed=5)
    # float32 (not float64): a bare TFRecord shard, with no manifest, must be readable by inspection
    data = {"train": {"x": x, "y": y, "f": np.linspace(-1, 1, 12, dtype=np.float32).reshape(6, 2)}}
    ext = {"npz": ".npz", "zarr": ".zarr", "hdf5": ".h5"}.get(kind, ".tfrecords")
    path = os.path.join(folder, "valid" + ext)
    options = {"chunk_mb": "0.001"} if kind == "zarr" else {}
    dstore.save(data, path, **options)
    if kind == "bare .tfrecord":
        shard = os.path.join(folder, "train.tfrecord")
        shutil.copy(os.path.join(path, "train-00000-of-00001.tfrecord"), shard)
        return shard, [shard]
    if os.path.isdir(path):
        files = sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs)
        return path, files
    return path, [path]


def child() -> None:
    """Read datasets named on stdin; answer one outcome line each."""
    import dstore
    from dstore.testing import read_all

    reference = {}
    for line in sys.stdin:
        job = json.loads(line)
        if job["path"] not in reference:
            reference[job["path"]] = read_all(job["valid"])
        ref = reference[job["path"]]
        try:
            got = read_all(job["path"])
        except dstore.DstoreError:
            outcome = "DstoreError"
        except Exception as e:  # noqa: BLE001 - counted as a bug
            outcome = f"BUG {type(e).__name__}: {str(e)[:80]}"
        else:
            label = "same data"
            n = len(got.get("train", {}).get("x", ()))
            if job["kind"] == "bare .tfrecord" and job["truncated"] and n < len(ref["train"]["x"]):
                # a bare TFRecord has no count: cut at a record boundary it is a shorter valid file
                ref = {s: {k: a[:n] for k, a in f.items()} for s, f in ref.items()}
                label = "record prefix (bare file cut at a record boundary)"
            same = got.keys() == ref.keys() and all(
                got[s].keys() == ref[s].keys()
                and all(np.array_equal(got[s][k], ref[s][k]) for k in ref[s])
                for s in ref
            )
            outcome = label if same else "BUG different data"
        print(outcome, flush=True)


class Child:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

    def ask(self, job: dict, timeout: float) -> str:
        import selectors

        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout)
        sel.close()
        if not ready:
            self.proc.kill()
            self.close()
            return "HANG"
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.close()
            return f"CRASH signal {-code}" if code < 0 else f"CRASH exit {code}"
        return line.strip()

    def close(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except BrokenPipeError:
                pass
        self.proc.wait(timeout=30)


def run(
    kinds: list[str], n: int, timeout: float, seed: int = 0
) -> dict[str, collections.Counter[str]]:
    rng = np.random.default_rng(seed)
    results: dict[str, collections.Counter[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            folder = os.path.join(tmp, kind.replace(" ", "_").replace(".", ""))
            os.makedirs(folder)
            valid, files = make_valid(kind, folder)
            blobs = {}
            for f in files:
                with open(f, "rb") as fh:
                    blobs[f] = fh.read()
            counts: collections.Counter[str] = collections.Counter()
            worker = Child()
            for _ in range(n):
                target_file = files[int(rng.integers(len(files)))]
                buf = bytearray(blobs[target_file])
                how = int(rng.integers(3)) if buf else 2
                pos = int(rng.integers(max(1, len(buf))))
                if how == 0 and buf:
                    buf[pos] ^= 1 << int(rng.integers(8))
                elif how == 1 and buf:
                    buf[pos] = int(rng.integers(256))
                else:
                    buf = buf[:pos]
                # same name as the valid one (a bare TFRecord's split comes from its name)
                os.makedirs(os.path.join(folder, "m"), exist_ok=True)
                mutated = os.path.join(folder, "m", os.path.basename(valid))
                if os.path.isdir(valid):
                    shutil.rmtree(mutated, ignore_errors=True)
                    shutil.copytree(valid, mutated)
                    target = os.path.join(mutated, os.path.relpath(target_file, valid))
                else:
                    target = mutated
                with open(target, "wb") as f:
                    f.write(buf)
                job = {"path": mutated, "valid": valid, "kind": kind, "truncated": how == 2}
                outcome = worker.ask(job, timeout)
                counts[outcome] += 1
                if outcome.startswith(("CRASH", "HANG")):
                    worker = Child()
            worker.close()
            results[kind] = counts
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument(
        "--timeout", type=float, default=20.0, help="seconds before a read counts as a hang"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child()
        return
    t0 = time.perf_counter()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    for kind, counts in run(kinds, args.n, args.timeout).items():
        print(
            f"{kind}: {args.n} mutated inputs: "
            + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        )
    print(f"wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
