"""npz -> Parquet: dstore vs the Hugging Face path; reading it for training: dstore vs datasets.

    python benchmarks/bench_parquet.py [--tiles 1000] [--rounds 3]

Ways (each in its own child process; its peak RSS read by a wrapper process with
``resource.getrusage(RUSAGE_CHILDREN)``, so the figure is that child's alone):

- write dstore: ``dstore.convert(data.npz, out.parquet)`` (all splits, PNG, 2 threads);
- write HF: per split, ``datasets.Dataset.from_dict({"image": [PIL images], "label": ...})
  .cast_column("image", Image()).to_parquet()`` -- the split held in memory, as
  ``from_dict`` needs it (PIL images, not arrays: arrays would make HF slower still);
- read dstore: ``dstore.to_torch(out.parquet, "train")`` in a DataLoader;
- read HF: ``load_dataset("parquet", data_files=<the same shard>)["train"]
  .with_format("torch")`` in a DataLoader with the same workers (a fresh cache
  each round, so its Arrow conversion is timed: what a first epoch costs), and
  its iteration alone.

Rounds alternate the ways; each ratio is taken within a round (the machine is
shared and noisy), the table shows the median and range over rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, dir_size, label_maker_npz, machine, run_result, table, write_report

WORKERS = 2
BATCH = 64

_WRAPPER = """
import json, resource, subprocess, sys
p = subprocess.run([sys.executable, "-c", sys.argv[1]], capture_output=True, text=True)
if p.returncode:
    sys.exit(p.stderr[-3000:])
line = next(ln for ln in p.stdout.splitlines()[::-1] if ln.startswith("RESULT "))
res = json.loads(line[7:])
res["rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print("RESULT", json.dumps(res))
"""

_ENV_HF = """
import os
os.environ.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME={home!r})
"""


def run(code: str) -> dict:
    return run_result(["-c", _WRAPPER, textwrap.dedent(code)])


def write_dstore(src: str, dst: str) -> str:
    return f"""
import json, time, dstore, dstore.codecs.npz, dstore.codecs.parquet.writer
dstore.available_codecs()
t = time.perf_counter()  # imports excluded, as for HF (datasets imports pyarrow and pandas)
dstore.convert({src!r}, {dst!r}, overwrite=True)
print("RESULT", json.dumps({{"seconds": time.perf_counter() - t}}))
"""


def write_hf(src: str, dst: str, home: str) -> str:
    return (
        _ENV_HF.format(home=home)
        + f"""
import json, os, time, numpy as np, datasets
from PIL import Image as PILImage
datasets.disable_progress_bars()
t = time.perf_counter()
os.makedirs({dst!r}, exist_ok=True)
with np.load({src!r}) as z:
    for split in ("train", "test", "val"):
        x, y = z["x_" + split], z["y_" + split]
        ds = datasets.Dataset.from_dict(
            {{"image": [PILImage.fromarray(t) for t in x], "label": [list(v) for v in y]}}
        ).cast_column("image", datasets.Image())
        ds.to_parquet(os.path.join({dst!r}, split + "-00000-of-00001.parquet"))
print("RESULT", json.dumps({{"seconds": time.perf_counter() - t}}))
"""
    )


_LOOP = f"""
loader = DataLoader(ds, batch_size={BATCH}, num_workers={WORKERS})
n = 0
for batch in loader:
    n += len(batch[KEY])
"""


def read_dstore(path: str) -> str:
    return f"""
import json, time, torch, dstore, dstore.readers.torch, dstore.codecs.parquet.reader
dstore.available_codecs()
from torch.utils.data import DataLoader
KEY = "x"
t = time.perf_counter()
ds = dstore.to_torch({path!r}, "train")
{_LOOP}
s = time.perf_counter() - t
print("RESULT", json.dumps({{"seconds": s, "records": n}}))
"""


def read_hf(files: list[str], home: str) -> str:
    return (
        _ENV_HF.format(home=home)
        + f"""
import json, time, torch, datasets
from torch.utils.data import DataLoader
datasets.disable_progress_bars()
KEY = "x"
t = time.perf_counter()
ds = datasets.load_dataset("parquet", data_files={{"train": {files!r}}}, cache_dir={home!r})
ds = ds["train"].with_format("torch")
t1 = time.perf_counter()
{_LOOP}
s = time.perf_counter() - t
print("RESULT", json.dumps({{"seconds": s, "iterate": time.perf_counter() - t1, "records": n}}))
"""
    )


def main() -> None:
    from dstore.images.png import encoder_id  # what the sizes line names

    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    src = label_maker_npz(args.tiles)
    work = tempfile.mkdtemp(prefix="bench-parquet-", dir=OUT)
    ours, theirs = os.path.join(work, "d.parquet"), os.path.join(work, "hf")
    rounds: list[dict[str, dict]] = []
    try:
        for r in range(args.rounds):
            home = os.path.join(work, f"hf-home-{r}")
            got: dict[str, dict] = {}
            order = ["dstore", "hf"] if r % 2 == 0 else ["hf", "dstore"]
            for way in order:  # alternate who goes first
                if way == "dstore":
                    got["write dstore"] = run(write_dstore(src, ours))
                else:
                    shutil.rmtree(theirs, ignore_errors=True)
                    got["write HF"] = run(write_hf(src, theirs, home))
            train = sorted(f for f in os.listdir(ours) if f.startswith("train-"))
            files = [os.path.join(ours, f) for f in train]
            for way in order:
                if way == "dstore":
                    got["read dstore"] = run(read_dstore(ours))
                else:
                    shutil.rmtree(home, ignore_errors=True)
                    got["read HF"] = run(read_hf(files, home))
            rounds.append(got)
            print(
                f"round {r + 1}: " + ", ".join(f"{k} {v['seconds']:.1f}s" for k, v in got.items()),
                flush=True,
            )
        sizes = {"dstore": dir_size(ours), "HF": dir_size(theirs)}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def stat(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    rows = []
    for way in ("write dstore", "write HF", "read dstore", "read HF"):
        rows.append(
            {
                "way": way,
                "s": stat([g[way]["seconds"] for g in rounds]),
                "rss": f"{max(g[way]['rss_mb'] for g in rounds):.0f}",
            }
        )
    rows[3]["s"] += f"; iterating alone {stat([g['read HF']['iterate'] for g in rounds])}"
    ratios = {
        "write: HF s / dstore s": [
            g["write HF"]["seconds"] / g["write dstore"]["seconds"] for g in rounds
        ],
        "read: HF s / dstore s (load + epoch)": [
            g["read HF"]["seconds"] / g["read dstore"]["seconds"] for g in rounds
        ],
        "read: HF s / dstore s (epoch only)": [
            g["read HF"]["iterate"] / g["read dstore"]["seconds"] for g in rounds
        ],
    }
    text = "\n".join(
        [
            f"# Parquet: npz of {args.tiles} tiles 256x256x3 -> Parquet, and reading 'train' for torch",
            "",
            machine(),
            f"{args.rounds} alternating rounds; median (range); DataLoader batch {BATCH}, {WORKERS} workers",
            "",
            table(rows, [("way", "way"), ("s", "seconds"), ("rss", "peak RSS MB (max)")]),
            "",
            table(
                [{"ratio": k, "value": stat(v)} for k, v in ratios.items()],
                [("ratio", "ratio (per round)"), ("value", "median (range)")],
            ),
            "",
            f"sizes: dstore {sizes['dstore'] / 2**20:.1f} MiB (PNG: {encoder_id('fast')}), "
            f"HF {sizes['HF'] / 2**20:.1f} MiB (PIL PNG, zlib 6)",
        ]
    )
    print(text)
    print("report:", write_report("bench_parquet", text))


if __name__ == "__main__":
    main()
