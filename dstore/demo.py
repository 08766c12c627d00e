"""Sample data from real photographs, and the ``dstore demo`` run.

Tiles are crops of photographs that ship inside scikit-image (nothing is
downloaded); each tile's label is the photograph it came from, one-hot, so a
classifier has a real task. Random noise would compress unlike real tiles.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Iterator

import numpy as np

from .errors import MissingDependencyError

__all__ = [
    "LABEL_MAKER_TASKS",
    "PHOTOS",
    "label_maker_arrays",
    "make_label_maker_npz",
    "photo_tiles",
    "run_demo",
]

#: RGB photographs bundled in scikit-image's package data (no network).
PHOTOS = (
    "astronaut",
    "coffee",
    "chelsea",
    "rocket",
    "retina",
    "immunohistochemistry",
    "hubble_deep_field",
)


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


def hog_features(n: int, seed: int = 0, size: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Real-image feature vectors: HOG descriptors (float32, 324-d for 64x64) of photo tiles,
    labelled by the photograph they come from -- a stand-in for CNN features."""
    from skimage.feature import hog

    x, y = photo_tiles(n, size, seed=seed)
    gray = x.astype(np.float32).mean(axis=3)
    feats = np.stack(
        [hog(g, orientations=9, pixels_per_cell=(16, 16), cells_per_block=(2, 2)) for g in gray]
    )
    return feats.astype(np.float32), y.argmax(1).astype(np.int64)


def make_features_npz(path: str, n: int = 2000, seed: int = 0) -> str:
    """A CoralNet-style features file: train/test splits of HOG vectors and labels."""
    feats, labels = hog_features(n, seed)
    cut = int(n * 0.75)
    np.savez(
        path,
        features_train=feats[:cut],
        labels_train=labels[:cut],
        features_test=feats[cut:],
        labels_test=labels[cut:],
    )
    return path


#: label-maker's ``ml_type`` values, as ``make_label_maker_npz(task=...)`` takes them
LABEL_MAKER_TASKS = ("classification", "object-detection", "segmentation")


def _regions(x: np.ndarray) -> np.ndarray:
    """Per pixel of each tile: 0 dark, 1 mid, 2 bright, from a 9x9 box blur of its grey.

    Blurred, so the regions are blobs (as buildings and fields are), not single pixels;
    the thresholds split photo tiles about 34% / 56% / 10%.
    """
    from scipy import ndimage  # a dependency of scikit-image (the demo extra)

    grey = ndimage.uniform_filter(x.astype(np.float32).mean(axis=3), size=(1, 9, 9))
    return np.digitize(grey, (70.0, 180.0)).astype(np.uint8)


def _boxes(regions: np.ndarray, max_boxes: int) -> np.ndarray:
    """label-maker object-detection labels ``(n, max_boxes, 5)`` uint8 from ``_regions``.

    Each dark (class 1) or bright (class 2) connected region covering at least 3% of
    its tile becomes a box ``[xmin, ymin, xmax, ymax, class]`` in pixels, largest first;
    the rest of the rows are zeros, as label-maker pads them.
    """
    from scipy import ndimage

    n, h, w = regions.shape
    y = np.zeros((n, max_boxes, 5), np.uint8)
    for i in range(n):
        found: list[tuple[int, list[int]]] = []
        for cls, value in ((1, 0), (2, 2)):
            lab, _ = ndimage.label(regions[i] == value)
            for k, where in enumerate(ndimage.find_objects(lab), start=1):
                area = int((lab[where] == k).sum())
                if area >= 0.03 * h * w:
                    ys, xs = where
                    found.append((area, [xs.start, ys.start, xs.stop - 1, ys.stop - 1, cls]))
        for j, (_, row) in enumerate(sorted(found, key=lambda t: -t[0])[:max_boxes]):
            y[i, j] = row
    return y


def label_maker_arrays(
    n: int, size: int = 256, seed: int = 0, task: str = "classification", max_boxes: int = 8
) -> tuple[np.ndarray, np.ndarray]:
    """Tiles cropped from real photos and label-maker labels for ``task`` (its ``ml_type``).

    * ``classification``: one-hot uint8 ``(n, classes)``, the photograph each tile is from;
    * ``object-detection``: uint8 ``(n, max_boxes, 5)`` boxes around the tile's large dark
      (class 1) and bright (class 2) regions, zero-padded;
    * ``segmentation``: uint8 masks ``(n, size, size, 1)``: 0 dark, 1 mid, 2 bright.

    Dark and bright regions are where the photograph is, so a probe has something
    real to learn (and JPEG something real to damage).
    """
    if task not in LABEL_MAKER_TASKS:
        raise ValueError(f"task must be one of {', '.join(LABEL_MAKER_TASKS)}. Got {task!r}.")
    x, y = photo_tiles(n, size, seed)
    if task == "classification":
        return x, y
    regions = _regions(x)
    if task == "segmentation":
        return x, regions[..., None]
    return x, _boxes(regions, max_boxes)


def make_label_maker_npz(
    path: str, n: int = 300, size: int = 256, seed: int = 0, task: str = "classification"
) -> str:
    """A label-maker style ``data.npz`` (``x_train, y_train, x_test, y_test, x_val, y_val``),
    uncompressed as label-maker writes it; ``task`` as in :func:`label_maker_arrays`."""
    x, y = label_maker_arrays(n, size, seed, task)
    a, b = int(n * 0.7), int(n * 0.9)
    np.savez(
        path, x_train=x[:a], y_train=y[:a], x_test=x[a:b], y_test=y[a:b], x_val=x[b:], y_val=y[b:]
    )
    return path


def run_demo(directory: str = "dstore-demo", records: int = 300) -> Iterator[str]:
    """Build sample data in ``directory``, convert it to every usable format, verify each."""
    from . import api
    from .registry import available_codecs, default_extension, get_codec_class

    os.makedirs(directory, exist_ok=True)
    src = os.path.join(directory, "data.npz")
    t0 = time.perf_counter()
    if os.path.exists(src):
        os.remove(src)
    make_label_maker_npz(src, records)
    yield f"sample: {src} ({records} tiles 256x256x3 cropped from scikit-image photos, {time.perf_counter() - t0:.1f} s)"
    for name, hint in available_codecs().items():
        if get_codec_class(name).stores_text:  # records of numbers and text, not 256x256x3 tiles
            continue
        if hint is not None:
            yield f"{name}: skipped ({hint})"
            continue
        dst = os.path.join(directory, "data" + default_extension(name))
        if dst == src:  # data.npz is the source
            dst = os.path.join(directory, "data-compressed" + default_extension(name))
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
    od = os.path.join(directory, "od.npz")
    od_records = max(1, min(records, 60))
    make_label_maker_npz(od, od_records, task="object-detection")
    yield (
        f"sample: {od} ({od_records} tiles with label-maker object-detection boxes (N, 8, 5); "
        "try: dstore convert od.npz od.tfrecords --layout tf-object-detection "
        "-o class_names=dark,bright)"
    )
    feats = make_features_npz(os.path.join(directory, "features.npz"), n=1200)
    yield f"sample: {feats} (1200 HOG feature vectors of photo tiles, CoralNet-style)"
    try:
        from .bench import bench as run_bench
        from .bench import save_plot, save_report, to_text
    except ImportError as e:  # pragma: no cover - bench extra missing
        yield f"bench: skipped ({e})"
    else:
        bench_report = run_bench(feats, dtypes=["keep", "float16"], repeats=1)
        yield to_text(bench_report)
        report_md = os.path.join(directory, "bench.md")
        save_report(bench_report, report_md)
        wrote = f"{report_md} (the table above)"
        try:
            save_plot(bench_report, os.path.join(directory, "bench.png"))
            wrote += f" and {os.path.join(directory, 'bench.png')} (its plot)"
        except MissingDependencyError as e:
            yield f"plot: skipped ({e})"
        yield f"bench: wrote {wrote}"
    yield f"outputs are in {os.path.abspath(directory)}"
    tfrecords = os.path.join(directory, "data" + default_extension("tfrecord"))
    yield from next_commands(directory, tfrecords if os.path.exists(tfrecords) else src)


def next_commands(directory: str, example: str) -> list[str]:
    """What to try after the demo, as commands that run as printed (``example``: a dataset
    the demo wrote in ``directory``)."""
    name = shlex.quote(os.path.relpath(example, directory))
    return [
        f"next: cd {shlex.quote(directory)} && dstore info {name}",
        "then, on your own data: dstore bench YOUR.npz --report bench.md --plot bench.png",
    ]
