"""Run every benchmark against its baselines and print the ratio tables.

    python benchmarks/run_all.py [--tiles 7000]

Writes each table to benchmarks/out/<name>.md as well. Takes about 15 minutes
for 7000 tiles on 2 cores (the TensorFlow and Pillow baselines dominate).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiles", type=int, default=7000)
    args = ap.parse_args()
    runs = [
        ["bench_tfrecord.py", "--tiles", str(args.tiles)],
        ["bench_jpeg.py", "--tiles", str(args.tiles)],
        ["bench_npz.py", "--tiles", str(args.tiles)],
        ["bench_containers.py", "--tiles", str(args.tiles)],
        ["bench_example_encoding.py"],
        ["bench_distributed.py", "--tiles", str(args.tiles)],
        ["fuzz_counts.py"],
    ]
    for script, *rest in runs:
        print(f"\n## {script}\n", flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, script), *rest], check=True)


if __name__ == "__main__":
    main()
