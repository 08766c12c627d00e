"""Sample data from real photographs, and the ``dstore demo`` run.

Tiles are crops of photographs that ship inside scikit-image (nothing is
downloaded); each tile's label is the photograph it came from, one-hot, so a
classifier has a real task. Random noise would compress unlike real tiles.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np

from .errors import MissingDependencyError

__all__ = ["PHOTOS", "make_label_maker_npz", "photo_tiles", "run_demo"]

#: RGB photographs bundled in scikit-image's package data (no network).
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "retina", "immunohistochemistry", "hubble_deep_field")


def _photos() -> list[np.ndarray]:
    try:
        import skimage.data
    except ImportError as e:
        raise MissingDependencyError("demo", "demo", "scikit-image") from e
    return [np.ascontiguousarray(getattr(skimage.data, name)()[..., :3]) for name in PHOTOS]


def photo_tiles(
    n: int, size: int = 256, seed: int = 0, classes: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` uint8 tiles ``(n, size, size, 3)`` cropped from real photos, and one-hot labels.

    Crops are at random positions with random flips, so tiles differ while
    keeping the statistics of real imagery.
    """
    photos = _photos()[: classes or len(PHOTOS)]
    rng = np.random.default_rng(seed)
    x = np.empty((n, size, size, 3), np.uint8)
    label = rng.integers(0, len(photos), n)
    for i, c in enumerate(label):
        img = photos[c]
        h, w = img.shape[:2]
        if h < size or w < size:
            reps = (-(-size // h), -(-size // w), 1)
            img = np.tile(img, reps)
            h, w = img.shape[:2]
        y0, x0 = rng.integers(0, h - size + 1), rng.integers(0, w - size + 1)
        tile = img[y0 : y0 + size, x0 : x0 + size]
        if rng.random() < 0.5:
            tile = tile[:, ::-1]
        x[i] = tile
    y = np.eye(len(photos), dtype=np.uint8)[label]
    return x, y


def make_label_maker_npz(path: str, n: int = 300, size: int = 256, seed: int = 0) -> str:
    """A label-maker style ``data.npz`` (``x_train, y_train, x_test, y_test, x_val, y_val``),
    uncompressed as label-maker writes it."""
    x, y = photo_tiles(n, size, seed)
    a, b = int(n * 0.7), int(n * 0.9)
    np.savez(path, x_train=x[:a], y_train=y[:a], x_test=x[a:b], y_test=y[a:b], x_val=x[b:], y_val=y[b:])
    return path


def run_demo(directory: str = "dstore-demo", records: int = 300) -> Iterator[str]:
    """Build sample data in ``directory``, convert it to every usable format, verify each."""
    from . import api
    from .registry import available_codecs, registry

    os.makedirs(directory, exist_ok=True)
    src = os.path.join(directory, "data.npz")
    t0 = time.perf_counter()
    if os.path.exists(src):
        os.remove(src)
    make_label_maker_npz(src, records)
    yield f"sample: {src} ({records} tiles 256x256x3 cropped from scikit-image photos, {time.perf_counter() - t0:.1f} s)"
    outputs = {
        "npz": "data-compressed.npz",
        "tfrecord": "data.tfrecords",
        "zarr": "data.zarr",
        "hdf5": "data.h5",
    }
    for name, hint in available_codecs().items():
        if hint is not None:
            yield f"{name}: skipped ({hint})"
            continue
        dst = os.path.join(directory, outputs.get(name, f"data{registry[name].extensions[0]}"))
        try:
            report = api.convert(src, dst, to=name, overwrite=True)
        except MissingDependencyError as e:
            yield f"{name}: skipped ({e})"
            continue
        check = api.verify(src, dst)
        yield report.summary()
        yield f"  verify: {'all fields bit-exact' if check.ok else 'MISMATCH'}"
        if not check.ok:
            yield from ("    " + line for line in check.lines())
    f16 = os.path.join(directory, "features-f16.npz")
    feats = os.path.join(directory, "features.npz")
    x, y = photo_tiles(records, 32, seed=1)
    # Mean-pooled colour statistics stand in for CNN features in this small demo.
    np.savez(feats, features=x.reshape(records, -1, 3).astype(np.float32).mean(1) / 255, labels=y.argmax(1))
    report = api.convert(feats, f16, dtype="float16", overwrite=True)
    yield report.summary()
    yield f"outputs are in {os.path.abspath(directory)}"
