"""A labelled set of duplicates, built from images that ship with scikit-image: what
the tests, ``benchmarks/bench_check.py`` and the choice of ``--near`` measure on.

Distinct tiles are cut side by side (no overlap) from photographs and textures,
keeping the textured ones (grey standard deviation of at least 20: a tile of
empty sky or of a black border is not "distinct"), and shared out between
``train``, ``test`` and ``val``. Then copies of some training tiles are added
to ``test`` and ``val``: exact copies, JPEG re-encodings (quality 75) and
brightness shifts (+-24 grey levels, clipped), each of a different tile.
``truth`` lists each copy with its original: ``(kind, (split, index), (split, index))``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import MissingDependencyError

__all__ = ["LabelledSet", "labelled_set"]

SOURCES = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "immunohistochemistry",
    "hubble_deep_field",
    "retina",
    "brick",
    "grass",
    "gravel",
    "camera",
    "moon",
    "coins",
    "cell",
)
COPY_KINDS = ("exact", "jpeg", "brighter", "darker")


@dataclass
class LabelledSet:
    splits: dict[str, dict[str, np.ndarray]]  # split -> {"x": tiles, "y": labels}
    truth: list[tuple[str, tuple[str, int], tuple[str, int]]]


def distinct_tiles(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Textured tiles ``(n, size, size, 3)`` cut without overlap, and their source image."""
    try:
        import skimage.data
    except ImportError as e:
        raise MissingDependencyError("demo", "demo", "scikit-image") from e
    tiles, labels = [], []
    for label, name in enumerate(SOURCES):
        img = np.asarray(getattr(skimage.data, name)())
        if img.ndim == 2:
            img = np.repeat(img[..., None], 3, axis=2)
        img = np.ascontiguousarray(img[..., :3])
        for y in range(0, img.shape[0] - size + 1, size):
            for x in range(0, img.shape[1] - size + 1, size):
                tile = img[y : y + size, x : x + size]
                if tile.mean(axis=2).std() >= 20:
                    tiles.append(tile)
                    labels.append(label)
    return np.stack(tiles), np.array(labels, np.int64)


def _copy(tile: np.ndarray, kind: str) -> np.ndarray:
    if kind == "exact":
        return tile.copy()
    if kind == "jpeg":
        import imagecodecs

        return np.asarray(imagecodecs.jpeg8_decode(imagecodecs.jpeg8_encode(tile, level=75)))
    shift = 24 if kind == "brighter" else -24
    return np.clip(tile.astype(np.int16) + shift, 0, 255).astype(np.uint8)


def labelled_set(size: int = 64, copies: int = 40, seed: int = 0) -> LabelledSet:
    """Distinct tiles in three splits (70/20/10), plus ``copies`` copies of each kind of
    :data:`COPY_KINDS`, each of another training tile, put in ``test`` or ``val``."""
    x, y = distinct_tiles(size)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    x, y = x[order], y[order]
    a, b = int(len(x) * 0.7), int(len(x) * 0.9)
    splits = {"train": [x[:a], y[:a]], "test": [x[a:b], y[a:b]], "val": [x[b:], y[b:]]}
    originals = rng.choice(a, copies * len(COPY_KINDS), replace=False)
    truth = []
    added: dict[str, list[tuple[np.ndarray, int]]] = {"test": [], "val": []}
    for k, i in enumerate(originals):
        kind = COPY_KINDS[k // copies]
        where = "test" if k % 3 else "val"
        index = len(splits[where][0]) + len(added[where])
        added[where].append((_copy(x[i], kind), int(y[i])))
        truth.append((kind, ("train", int(i)), (where, index)))
    for where, extra in added.items():
        tiles, labels = splits[where]
        splits[where] = [
            np.concatenate([tiles, np.stack([t for t, _ in extra])]),
            np.concatenate([labels, np.array([lab for _, lab in extra], np.int64)]),
        ]
    return LabelledSet({s: {"x": t, "y": lab} for s, (t, lab) in splits.items()}, truth)
