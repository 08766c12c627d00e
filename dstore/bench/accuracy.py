"""Accuracy impact: a probe classifier trained on round-tripped data, against the original.

The probe is what pyspacer trains on CoralNet's features: scikit-learn's
``SGDClassifier(loss="log_loss", average=True)`` (seeded, so deterministic; a
little more regularised, see :data:`PROBE_ALPHA`) on standardised features. It trains on the dtype the data is stored in: float32
stays float32 (float16/bfloat16, which scikit-learn cannot take, widen to
float32, never to float64), and the report says which.

Image fields (uint8/uint16 ``(H, W[, C])`` records) are described by
:func:`image_features`: coarse colour histograms plus histograms of gradient
orientation, gradient magnitude and Laplacian magnitude. The last two see the
fine texture that JPEG removes, which average-pooling to 8x8 averaged away.

A lossless round trip gives exactly the baseline accuracy. The noise band of
a difference is twice its standard error: paired over the same test examples
when both sides give per-example correctness (the probe does; so may a user's
``evaluate``), else the binomial one from ``(score, n)``; a bare score has no
band and its differences cannot be judged.

Three probes, one per label-maker task (:data:`PROBES`), told apart by the
label field's record shape (:func:`task_kind`) or named by ``--layout``:

* classification: class ids ``()`` or one-hot ``(C,)``: the classifier above,
  scored by accuracy;
* object detection: boxes ``(max_boxes, 5)`` ``[xmin, ymin, xmax, ymax, class]``
  (all-zero or all -1 rows are padding): which classes have a box in each
  tile, one such classifier per class on the image features, scored per tile
  by the Jaccard index of the predicted and true class sets (1 when both are
  empty), averaged over the test tiles;
* segmentation: masks ``(H, W[, 1])`` of class ids the tiles' size: the class
  of a fixed, seeded sample of pixels per tile from the pixel's colour, its
  5x5 neighbourhood's mean colour and grey spread, and its position, scored by
  pixel accuracy (each tile's share of its sampled pixels right, averaged).

Each score is per test tile, so the noise bands stay paired over tiles (the
independent units; pixels and classes of one tile are not). Each probe also
gives the score of a constant guess (the training split's commonest class,
class set or pixel class), the chance level the original's score is read against.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import LabelError, MissingDependencyError, SchemaError, UsageError
from ..model import Column, Tensor
from ..model.labels import LABEL_NAMES
from ..model.schema import FieldSpec, Schema

__all__ = [
    "PROBES",
    "ProbeResult",
    "Score",
    "Task",
    "band_points",
    "check_labels",
    "class_presence",
    "find_task",
    "image_features",
    "layout_kind",
    "load_evaluate",
    "probe_matrix",
    "require_sklearn",
    "run_probe",
    "task_kind",
    "to_score",
]

#: The probe's L2 penalty: ten times scikit-learn's default, so that it converges
#: to nearly the same model on nearly the same data (a lossless-looking cast must
#: not move the accuracy by training noise alone; measured on photo tiles).
PROBE_ALPHA = 1e-3

FEATURE_NAMES = (
    "features",
    "feature",
    "x",
    "image",
    "images",
    "embedding",
    "embeddings",
    "data",
    "inputs",
)

#: What the report calls each probe (``Task.kind``).
PROBES = {
    "classification": "classification",
    "detection": "object detection (classes present)",
    "segmentation": "segmentation (pixel accuracy)",
}

#: ``--layout`` names (dstore's label-maker layouts, and label-maker's own ``ml_type``
#: names) -> the probe that reads their labels.
LAYOUT_KINDS = {
    "tf-classification": "classification",
    "classification": "classification",
    "tf-object-detection": "detection",
    "object-detection": "detection",
    "tf-segmentation": "segmentation",
    "segmentation": "segmentation",
}

#: Pixels sampled per tile by the segmentation probe: about this many training pixels
#: in all, between the two bounds per tile.
SEG_PIXELS, SEG_PIXELS_MIN, SEG_PIXELS_MAX = 65536, 16, 256

#: ``evaluate(data)`` returns a score, ``(score, n)`` or per-example correctness.
#: Fixed-size fields are arrays; strings and ragged fields are VarColumns.
Evaluate = Callable[[Mapping[str, Mapping[str, Column]]], object]


@dataclass(frozen=True)
class Task:
    """Which split trains, which tests, which fields are features and labels, which probe."""

    train: str
    test: str | None  # None: a seeded hold-out of ``train``
    features: str
    labels: str
    kind: str = "classification"  # a key of PROBES

    @property
    def probe(self) -> str:
        """The probe's name in reports: ``object detection (classes present)``, ..."""
        return PROBES[self.kind]


@dataclass(frozen=True)
class Score:
    """An accuracy-like score and what is known about its noise.

    ``n`` is the number of test examples behind it (None: unknown), ``correct``
    the per-example correctness (None: not given). Without either, a difference
    between two scores cannot be told from noise.
    """

    value: float
    n: int | None = None
    correct: np.ndarray | None = None


@dataclass
class ProbeResult:
    accuracy: float
    seconds: float
    n_test: int
    # per test example (tile): 1 right, 0 wrong; a detection tile's Jaccard index and a
    # segmentation tile's pixel accuracy lie between (paired noise bands over tiles)
    correct: np.ndarray
    dtype: str  # the dtype the probe trained on
    chance: float = float("nan")  # the score of a constant guess learnt from the train split
    detail: str = ""  # what the probe learnt from, for the report (classes, pixels per tile)

    @property
    def stderr_points(self) -> float:
        p = self.accuracy
        return 100 * math.sqrt(max(p * (1 - p), 1e-12) / max(self.n_test, 1))

    @property
    def score(self) -> Score:
        return Score(self.accuracy, self.n_test, self.correct)


def to_score(result: object, name: str = "evaluate") -> Score:
    """What a user's ``evaluate`` returned -> a :class:`Score`, or one UsageError line.

    A number is a bare score; ``(score, n)`` a proportion of ``n`` examples; a 1-d
    array of booleans or 0/1 values the per-example correctness (its mean is the score).
    """
    if isinstance(result, (bool, np.bool_)):
        raise UsageError(f"{name} returned {result!r}; return a score, (score, n) or an array")
    if isinstance(result, (int, float, np.integer, np.floating)):
        return Score(float(result))
    if isinstance(result, tuple) and len(result) == 2:
        value, n = result
        if (
            isinstance(value, (int, float, np.integer, np.floating))
            and isinstance(n, (int, np.integer))
            and n > 0
            and 0 <= float(value) <= 1
        ):
            return Score(float(value), int(n))
        raise UsageError(
            f"{name} returned {result!r}; (score, n) needs a proportion 0..1 and a count n >= 1"
        )
    arr = np.asarray(result) if isinstance(result, (list, np.ndarray)) else None
    if arr is not None and arr.ndim == 1 and len(arr) and arr.dtype.kind in "biuf":
        correct = arr.astype(np.float64)
        if np.isin(correct, (0.0, 1.0)).all():
            return Score(float(correct.mean()), len(correct), correct)
    raise UsageError(
        f"{name} returned {type(result).__name__}; return a score, (score, n) or a 1-d array "
        "of per-example correctness (booleans or 0/1)"
    )


def band_points(base: Score, cell: Score) -> float:
    """Twice the standard error (accuracy points) of ``cell - base``; NaN: cannot be judged.

    Paired when both give per-example correctness over the same examples (a
    lossless cell then has a band of 0 and a delta of 0); else binomial from the
    counts; else NaN.
    """
    if (
        base.correct is not None
        and cell.correct is not None
        and len(base.correct) == len(cell.correct)
    ):
        n = len(base.correct)
        if n < 2:
            return float("nan")
        d = cell.correct - base.correct
        return 200 * float(d.std(ddof=1)) / math.sqrt(n)
    if base.n and cell.n:
        var = sum(p * (1 - p) / n for p, n in ((base.value, base.n), (cell.value, cell.n)))
        return 200 * math.sqrt(max(var, 0.0))
    return float("nan")


def find_task(
    schema: Schema,
    features: str | None = None,
    labels: str | None = None,
    layout: str | None = None,
) -> Task:
    """Guess the feature and label fields by name and dtype, the train/test splits, and
    the probe (from the labels' record shape, or ``layout``: see :func:`task_kind`).

    A field named by the caller that does not exist is an error listing the fields
    that do; nothing named and nothing recognisable is a SchemaError too (the harness
    then measures no accuracy and says so). Labels found whose shape no probe reads
    are a :class:`~dstore.errors.LabelError`.
    """
    kind_wanted = layout_kind(layout) if layout is not None else None
    train, test = _probe_splits(list(schema.splits))
    fields = schema.splits[train].fields
    for role, name in (("labels", labels), ("features", features)):
        if name is not None and name not in fields:
            raise SchemaError(
                f"{role} field {name!r} is not in split {train!r}; its fields: {', '.join(fields)}"
            )
    if labels is None:
        labels = next((n for n in LABEL_NAMES if n in fields), None)
    if features is None:
        features = _guess_features(fields, labels)
    if labels is None or features is None:
        raise SchemaError(
            f"cannot tell features and labels apart in fields {list(fields)}; "
            "name them with --features and --labels"
        )
    for role, name in (("labels", labels), ("features", features)):
        kind = fields[name].kind
        if not isinstance(kind, Tensor):  # strings, ragged lists, images of varying size
            raise SchemaError(
                f"{role} field {name!r} of split {train!r} is {kind.describe()}: the probe needs "
                f"one fixed-size numeric array per record (name another with --{role}, or "
                "measure with --evaluate)"
            )
    probe = task_kind(fields[features], fields[labels], kind_wanted, f"split {train!r}")
    return Task(train, test, features, labels, probe)


def _probe_splits(splits: list[str]) -> tuple[str, str | None]:
    """The split the probe trains on (``train``, else the first) and the one it tests on."""
    train = next((s for s in splits if s in ("train", "training")), splits[0])
    test = next(
        (
            s
            for s in splits
            if s in ("test", "testing", "val", "valid", "validation", "eval") and s != train
        ),
        None,
    )
    return train, test


def _guess_features(fields: Mapping[str, FieldSpec], labels: str | None) -> str | None:
    """The features field by name, else the largest numeric tensor field other than the labels."""
    features = next((n for n in FEATURE_NAMES if n in fields and n != labels), None)
    if features is not None:
        return features
    candidates = [
        f
        for f in fields.values()
        if f.name != labels and f.dtype.kind in "fiu" and isinstance(f.kind, Tensor)
    ]
    return max(candidates, key=lambda f: f.record_bytes).name if candidates else None


def layout_kind(layout: str) -> str:
    """``--layout NAME`` -> the probe for its labels; an unknown name is one UsageError line."""
    kind = LAYOUT_KINDS.get(layout.strip().lower())
    if kind is None:
        raise UsageError(
            f"--layout {layout!r}: the accuracy probe reads the labels of {', '.join(LAYOUT_KINDS)}"
        )
    return kind


def _fits(kind: str, shape: tuple[int, ...], image: tuple[int, ...]) -> bool:
    """Whether label records of ``shape`` fit probe ``kind`` (``image``: the features')."""
    if kind == "classification":
        return len(shape) <= 1
    if kind == "detection":
        return len(shape) == 2 and shape[1] == 5
    return (  # segmentation: one class id per pixel of the features' (H, W)
        len(image) >= 2
        and len(shape) in (2, 3)
        and shape[:2] == image[:2]
        and (len(shape) == 2 or shape[2] == 1)
    )


def task_kind(features: FieldSpec, labels: FieldSpec, wanted: str | None, where: str) -> str:
    """The probe for these fields: ``wanted`` (from ``--layout``) if the labels fit it,
    else the first that fits of classification ``()``/``(C,)``, segmentation ``(H, W[, 1])``
    (the features' height and width), object detection ``(max_boxes, 5)``.

    Labels that fit none (or not the one asked for), or are not numbers, are one
    LabelError line naming the shapes each probe reads.
    """
    shape, image = labels.shape, features.shape
    if labels.dtype.kind not in "biuf":
        raise LabelError(
            f"labels field {labels.name!r} of {where} holds {labels.dtype} values: the probe "
            "needs numbers (class ids, one-hot vectors, boxes or masks)"
        )
    order = [wanted] if wanted else ["classification", "segmentation", "detection"]
    for kind in order:
        if kind is not None and _fits(kind, shape, image):
            return kind
    asked = f"--layout asks for {PROBES[wanted]}, whose labels are " if wanted else ""
    readable = {
        "classification": "class ids () or one-hot vectors (C,)",
        "detection": "boxes (max_boxes, 5) [xmin, ymin, xmax, ymax, class]",
        "segmentation": f"masks {image[:2]} or {(*image[:2], 1)} of class ids",
    }
    wants = readable[wanted] if wanted else "; ".join(readable.values())
    raise LabelError(
        f"labels field {labels.name!r} of {where} has records of shape {shape}, features "
        f"{features.name!r} {image}: {asked or 'the probe reads '}{wants} "
        f"({'' if wanted else 'name the task with --layout, '}measure with --evaluate, "
        "or skip it with --no-probe)"
    )


def require_sklearn() -> None:
    """The probe's dependency, checked before any work rather than after it."""
    try:
        # All the probe uses, imported here: the baseline's timed fit must not pay for it.
        import sklearn.linear_model
        import sklearn.pipeline
        import sklearn.preprocessing  # noqa: F401
    except ImportError as e:
        raise MissingDependencyError(
            "bench", "bench", "scikit-learn", what="the accuracy probe of dstore bench"
        ) from e


def load_evaluate(spec: str) -> Evaluate:
    """``MODULE:FUNCTION`` -> the function, MODULE imported from the working directory first.

    ``python -m`` puts the working directory on ``sys.path`` but console scripts
    (``dstore``) do not, so a user's ``my_eval.py`` beside their data would not be found.
    """
    module_name, sep, fn_name = spec.partition(":")
    if not sep or not module_name.strip() or not fn_name.strip():
        raise UsageError(f"evaluate must be MODULE:FUNCTION (e.g. my_eval:score). Got {spec!r}.")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            raise UsageError(
                f"evaluate {spec!r}: no module {e.name!r} in the working directory {cwd} "
                "or on the Python path"
            ) from None
        raise UsageError(f"evaluate {spec!r}: importing {module_name!r} failed: {e}") from e
    except Exception as e:  # the user's module failed while importing: name it in one line
        raise UsageError(
            f"evaluate {spec!r}: importing {module_name!r} failed: {type(e).__name__}: {e}"
        ) from e
    finally:
        if added:
            sys.path.remove(cwd)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise UsageError(
            f"evaluate {spec!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) "
            f"has no function {fn_name!r}"
        )
    return fn


def is_image_batch(x: object) -> bool:
    """uint8/uint16 records shaped ``(H, W)`` or ``(H, W, 1|3|4)``, at least 8 pixels a side."""
    if not isinstance(x, np.ndarray):  # strings and ragged fields are columns, not images
        return False
    if x.dtype.kind != "u" or x.dtype.itemsize > 2 or x.ndim not in (3, 4):
        return False
    return min(x.shape[1:3]) >= 8 and (x.ndim == 3 or x.shape[3] in (1, 3, 4))


def _hist(values: np.ndarray, bins: int) -> np.ndarray:
    """Per-record normalised histogram of integer bin indices ``(n, ...)`` in ``[0, bins)``."""
    n = len(values)
    flat = values.reshape(n, -1)
    offsets = (np.arange(n) * bins)[:, None]
    counts = np.bincount((flat + offsets).ravel(), minlength=n * bins).reshape(n, bins)
    return counts.astype(np.float32) / flat.shape[1]


def _log_bins(magnitude: np.ndarray, bins: int = 16) -> np.ndarray:
    """Half-octave bins of a non-negative magnitude (0..255 scale): fine texture to edges."""
    return np.clip((np.log2(magnitude + 1) * 2).astype(np.int64), 0, bins - 1)


def image_features(x: np.ndarray, chunk: int = 64) -> np.ndarray:
    """Per image: colour (4 bins per channel) and texture histograms, float32.

    Texture: gradient orientation (9 bins, magnitude-weighted), gradient and
    Laplacian magnitude (16 half-octave bins each) of the grey image. JPEG's
    loss is mostly fine texture, which these see; colour alone does not.
    Works ``chunk`` images at a time, so memory stays bounded on big tiles.
    """
    out = []
    for i in range(0, len(x), chunk):
        block = x[i : i + chunk].astype(np.float32)
        if x.dtype.itemsize == 2:
            block /= 257.0  # uint16 -> the 0..255 scale the bins assume
        if block.ndim == 3:
            block = block[..., None]
        n = len(block)
        colour = np.clip((block // 64).astype(np.int64), 0, 3)
        feats = [_hist(colour[..., c], 4) for c in range(block.shape[3])]
        grey = block[..., :3].mean(axis=3)
        gy = np.diff(grey, axis=1)[:, :, :-1]
        gx = np.diff(grey, axis=2)[:, :-1, :]
        magnitude = np.hypot(gx, gy)
        angle = np.mod(np.arctan2(gy, gx), np.pi)
        orient = np.minimum((angle * (9 / np.pi)).astype(np.int64), 8)
        offsets = (np.arange(n) * 9)[:, None]
        weighted = np.bincount(
            (orient.reshape(n, -1) + offsets).ravel(),
            weights=magnitude.reshape(n, -1).ravel(),
            minlength=n * 9,
        ).reshape(n, 9)
        feats.append((weighted / (weighted.sum(axis=1, keepdims=True) + 1e-6)).astype(np.float32))
        feats.append(_hist(_log_bins(magnitude), 16))
        laplace = np.abs(
            4 * grey[:, 1:-1, 1:-1]
            - grey[:, :-2, 1:-1]
            - grey[:, 2:, 1:-1]
            - grey[:, 1:-1, :-2]
            - grey[:, 1:-1, 2:]
        )
        feats.append(_hist(_log_bins(laplace), 16))
        out.append(np.concatenate(feats, axis=1))
    return np.concatenate(out) if out else np.empty((0, 0), np.float32)


def _pool(x: np.ndarray, max_side: int = 8) -> np.ndarray:
    """Average-pool non-image grids (float ``(N, H, W, ...)`` arrays) to at most ``max_side``."""
    n, h, w = x.shape[:3]
    fh, fw = -(-h // max_side), -(-w // max_side)
    hh, ww = (h // fh) * fh, (w // fw) * fw
    x = x[:, :hh, :ww].astype(np.float32)
    return x.reshape(n, hh // fh, fh, ww // fw, fw, *x.shape[3:]).mean(axis=(2, 4))


def probe_matrix(x: np.ndarray) -> np.ndarray:
    """The probe's input: one row per record, in the stored dtype where scikit-learn takes it.

    float64 stays float64 and float32 float32; anything narrower (float16,
    bfloat16, integers) widens to float32 only, so a float16 cell's training time
    is not that of a silent float64 copy.
    """
    x = np.asarray(x)
    if is_image_batch(x):
        return image_features(x)
    if x.ndim >= 3 and min(x.shape[1:3]) > 8:
        x = _pool(x)
    x = x.reshape(len(x), -1)
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)


def labels_1d(y: np.ndarray) -> np.ndarray:
    """Class per record: one-hot vectors by their largest entry, ids as they are."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] > 1:  # one-hot
        return y.argmax(axis=1)
    return y.reshape(len(y))


def _class_ids(y: np.ndarray) -> np.ndarray:
    """Integer class ids from integer, boolean or integral float values (checked before)."""
    return np.rint(y).astype(np.int64) if y.dtype.kind == "f" else y.astype(np.int64)


def _box_rows(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(n, max_boxes, 5)`` -> the class column and which rows are boxes.

    Padding is an all-zero row (label-maker pads so) or an all -1 row (other tools);
    a negative class is no object either.
    """
    rows = np.asarray(y).reshape(len(y), -1, 5)
    cls = _class_ids(rows[..., 4]) if rows.size else np.zeros(rows.shape[:2], np.int64)
    pad = (rows == 0).all(axis=2) | (rows == -1).all(axis=2) | (cls < 0)
    return cls, ~pad


def class_presence(
    y: np.ndarray, classes: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Boxes ``(n, max_boxes, 5)`` -> the class ids and which of them each record holds.

    ``classes`` defaults to every class id with a box; the matrix is ``(n, classes)`` bool.
    """
    cls, real = _box_rows(y)
    if classes is None:
        classes = np.unique(cls[real])
    present = np.stack([((cls == c) & real).any(axis=1) for c in classes], axis=1)
    return classes, present.reshape(len(cls), len(classes))


def _label_values(y: np.ndarray, kind: str) -> np.ndarray:
    """The values that must be class ids: a box's class column, every other label value.

    One-hot vectors are read by their largest entry, so any number does there.
    """
    if kind == "detection":
        cls_col = np.asarray(y).reshape(len(y), -1, 5)[..., 4]
        return cls_col.ravel()
    if kind == "classification" and y.ndim == 2 and y.shape[1] > 1:
        return np.zeros(0, y.dtype)
    return np.asarray(y).ravel()


class _LabelCheck:
    """What :func:`check_labels` learns chunk by chunk: the classes seen, bad values."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.classes: set[int] = set()
        self.boxes = 0

    def add(self, y: np.ndarray) -> str | None:
        """Take one chunk of label records; a problem with them, else None."""
        y = np.asarray(y)
        values = _label_values(y, self.kind)
        if values.dtype.kind == "f":
            bad = ~np.isfinite(values) | (values != np.rint(values))
            if bad.any():
                return f"holds {float(values[bad][0]):g}, not a class id (the probe classifies)"
        if self.kind == "detection":
            cls, real = _box_rows(y)
            self.boxes += int(real.sum())
            self.classes.update(np.unique(cls[real]).tolist())
        elif self.kind == "classification":
            self.classes.update(np.unique(labels_1d(y)).tolist())
        else:
            self.classes.update(np.unique(_class_ids(values)).tolist())
        return None

    def verdict(self) -> str | None:
        """A problem with the training labels as a whole, else None."""
        if self.kind == "detection":
            return None if self.boxes else "holds no box: there is no class to find"
        if len(self.classes) < 2:
            one = ", ".join(map(str, sorted(self.classes))) or "none"
            return f"holds one class only ({one}): the probe needs two or more to tell apart"
        return None


def check_labels(task: Task, split: str, chunks: Iterable[np.ndarray], where: str) -> None:
    """Refuse, before any work, labels of ``split`` the probe cannot learn from.

    Values must be class ids (integral, finite); the training split needs two classes
    (classification, segmentation) or one box (detection). ``chunks`` are batches of
    label records, so masks need not be held all at once. One LabelError line.
    """
    check = _LabelCheck(task.kind)
    problem = None
    for chunk in chunks:
        problem = check.add(chunk)
        if problem:
            break
    if problem is None and split == task.train:
        problem = check.verdict()
    if problem:
        raise LabelError(
            f"{where}: labels field {task.labels!r} of split {split!r} {problem} "
            f"({PROBES[task.kind]} probe; measure with --evaluate, or skip it with --no-probe)"
        )


def _probe_array(data: Mapping[str, Mapping[str, Column]], split: str, name: str) -> np.ndarray:
    col = data[split][name]
    if not isinstance(col, np.ndarray):
        raise TypeError(
            f"the probe needs a fixed-size field; {name!r} of split {split!r} varies in size"
        )
    return col


def split_data(
    data: Mapping[str, Mapping[str, Column]], task: Task, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x_train = _probe_array(data, task.train, task.features)
    y_train = _probe_array(data, task.train, task.labels)
    if task.test is not None:
        x_test = _probe_array(data, task.test, task.features)
        return x_train, y_train, x_test, _probe_array(data, task.test, task.labels)
    order = np.random.default_rng(seed).permutation(len(x_train))
    cut = int(len(order) * 0.75)
    tr, te = order[:cut], order[cut:]
    return x_train[tr], y_train[tr], x_train[te], y_train[te]


def _model() -> Any:
    """The probe's classifier: pyspacer's, on standardised features (seeded: deterministic)."""
    from sklearn.linear_model import SGDClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(
        StandardScaler(),
        SGDClassifier(loss="log_loss", average=True, alpha=PROBE_ALPHA, random_state=0),
    )


def _finite(x: np.ndarray) -> np.ndarray:
    """Infinities (a float16 overflow that was kept) would break the scaler; the stand-in
    stays finite when squared in the stored dtype."""
    big = 1e15 if x.dtype == np.float32 else 1e30
    return np.nan_to_num(x, nan=0.0, posinf=big, neginf=-big)


def run_probe(data: Mapping[str, Mapping[str, Column]], task: Task) -> ProbeResult:
    """Train the task's probe on its train part and score it on its test part.

    The timed part is the fit alone (scaling included), on the stored dtype.
    """
    require_sklearn()
    x_tr, y_tr, x_te, y_te = split_data(data, task)
    if task.kind == "detection":
        return _detection_probe(x_tr, y_tr, x_te, y_te)
    if task.kind == "segmentation":
        return _segmentation_probe(x_tr, y_tr, x_te, y_te)
    return _classification_probe(x_tr, y_tr, x_te, y_te)


def _classification_probe(
    x_tr: np.ndarray, y_tr: np.ndarray, x_te: np.ndarray, y_te: np.ndarray
) -> ProbeResult:
    f_tr, f_te = _finite(probe_matrix(x_tr)), _finite(probe_matrix(x_te))
    c_tr, c_te = labels_1d(y_tr), labels_1d(y_te)
    t = time.perf_counter()
    model = _model().fit(f_tr, c_tr)
    seconds = time.perf_counter() - t
    correct = (model.predict(f_te) == c_te).astype(np.float64)
    accuracy = float(correct.mean()) if len(c_te) else float("nan")
    values, counts = np.unique(c_tr, return_counts=True)
    chance = float(np.mean(c_te == values[counts.argmax()])) if len(c_te) else float("nan")
    return ProbeResult(accuracy, seconds, len(c_te), correct, str(f_tr.dtype), chance)


def _jaccard(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Per record: |pred & true| / |pred | true| of two ``(n, classes)`` bool matrices;
    1 when both are empty (rightly saying "nothing here")."""
    union = (pred | true).sum(axis=1)
    inter = (pred & true).sum(axis=1)
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def _detection_probe(
    x_tr: np.ndarray, y_tr: np.ndarray, x_te: np.ndarray, y_te: np.ndarray
) -> ProbeResult:
    """Which classes have a box in each tile: one classifier per class on image features."""
    classes = np.union1d(class_presence(y_tr)[0], class_presence(y_te)[0])
    _, p_tr = class_presence(y_tr, classes)
    _, p_te = class_presence(y_te, classes)
    f_tr, f_te = _finite(probe_matrix(x_tr)), _finite(probe_matrix(x_te))
    pred = np.zeros_like(p_te)
    t = time.perf_counter()
    for k in range(len(classes)):
        column = p_tr[:, k]
        if column.all() or not column.any():  # one value in training: nothing to fit
            pred[:, k] = bool(column.any())
        else:
            pred[:, k] = _model().fit(f_tr, column).predict(f_te)
    seconds = time.perf_counter() - t
    correct = _jaccard(pred, p_te)
    accuracy = float(correct.mean()) if len(p_te) else float("nan")
    # the constant guess: each class present when it is in most training tiles
    guess = np.broadcast_to(p_tr.mean(axis=0) > 0.5, p_te.shape) if len(p_tr) else p_te
    chance = float(_jaccard(guess, p_te).mean()) if len(p_te) else float("nan")
    detail = f"{len(classes)} classes ({', '.join(map(str, classes.tolist()))})"
    return ProbeResult(accuracy, seconds, len(p_te), correct, str(f_tr.dtype), chance, detail)


def _pixel_positions(n: int, h: int, w: int, per_tile: int, seed: int) -> np.ndarray:
    """``(n, per_tile, 2)`` seeded (row, column) positions: the same for the same shapes,
    so the original and every round trip are scored on the very same pixels."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, h, (n, per_tile)), rng.integers(0, w, (n, per_tile))], -1)


def pixel_features(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Per sampled pixel: its channels, its 5x5 neighbourhood's mean channels and grey
    standard deviation, and its position (row / H, column / W).

    Gathered at the sampled positions only (clipped at the tile's edge), so memory
    is the sample's, not a padded float copy of every tile. float64 data stays
    float64, anything else becomes float32 (as :func:`probe_matrix`).
    """
    n, h, w = x.shape[:3]
    tiles = x.reshape(n, h, w, -1)
    idx = np.arange(n)[:, None]
    rows, cols = pos[..., 0], pos[..., 1]
    centre = tiles[idx, rows, cols].astype(np.float64)
    total = np.zeros_like(centre)
    grey_sum = np.zeros(rows.shape)
    grey_sq = np.zeros(rows.shape)
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            r, c = np.clip(rows + dy, 0, h - 1), np.clip(cols + dx, 0, w - 1)
            v = tiles[idx, r, c].astype(np.float64)
            total += v
            grey = v.mean(axis=-1)
            grey_sum += grey
            grey_sq += grey * grey
    spread = np.sqrt(np.maximum(grey_sq / 25 - (grey_sum / 25) ** 2, 0.0))
    feats = np.concatenate(
        [centre, total / 25, spread[..., None], (rows / h)[..., None], (cols / w)[..., None]],
        axis=-1,
    )
    out = feats.reshape(n * pos.shape[1], -1)
    return out if x.dtype == np.float64 else out.astype(np.float32)


def _segmentation_probe(
    x_tr: np.ndarray, y_tr: np.ndarray, x_te: np.ndarray, y_te: np.ndarray
) -> ProbeResult:
    """The class of seeded sample pixels per tile, from colour, neighbourhood and position."""
    h, w = x_tr.shape[1:3]
    per_tile = int(np.clip(SEG_PIXELS // max(len(x_tr), 1), SEG_PIXELS_MIN, SEG_PIXELS_MAX))
    pos_tr = _pixel_positions(len(x_tr), h, w, per_tile, seed=0)
    pos_te = _pixel_positions(len(x_te), h, w, per_tile, seed=1)

    def classes_at(y: np.ndarray, pos: np.ndarray) -> np.ndarray:
        masks = np.asarray(y).reshape(len(y), h, w)
        return _class_ids(masks[np.arange(len(y))[:, None], pos[..., 0], pos[..., 1]])

    c_tr, c_te = classes_at(y_tr, pos_tr), classes_at(y_te, pos_te)
    f_tr, f_te = _finite(pixel_features(x_tr, pos_tr)), _finite(pixel_features(x_te, pos_te))
    t = time.perf_counter()
    model = _model().fit(f_tr, c_tr.ravel())
    seconds = time.perf_counter() - t
    right = model.predict(f_te).reshape(c_te.shape) == c_te
    correct = right.mean(axis=1) if len(c_te) else np.zeros(0)
    accuracy = float(correct.mean()) if len(c_te) else float("nan")
    values, counts = np.unique(c_tr, return_counts=True)
    chance = float(np.mean(c_te == values[counts.argmax()])) if c_te.size else float("nan")
    detail = f"{per_tile} seeded pixels per tile, {len(values)} classes"
    return ProbeResult(accuracy, seconds, len(c_te), correct, str(f_tr.dtype), chance, detail)
