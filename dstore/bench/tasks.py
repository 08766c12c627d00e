"""What the accuracy probe learns: the task (train/test splits, feature and label
fields, which of label-maker's three probes), told from the schema, and the label
checks that refuse, before any work, labels no probe can learn from.

Three probes, one per label-maker task (:data:`PROBES`), told apart by the
label field's record shape (:func:`task_kind`) or named by ``--layout``:

* classification: class ids ``()`` or one-hot ``(C,)``, scored by accuracy;
* object detection: boxes ``(max_boxes, 5)`` ``[xmin, ymin, xmax, ymax, class]``
  (all-zero or all -1 rows are padding): which classes have a box in each
  tile, scored per tile by the Jaccard index of the predicted and true class sets;
* segmentation: masks ``(H, W[, 1])`` of class ids the tiles' size, scored by
  pixel accuracy over a seeded sample of pixels per tile.

How each probe learns and scores is :mod:`.probe`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import LabelError, MissingDependencyError, SchemaError, UsageError
from ..model import Tensor
from ..model.labels import LABEL_NAMES
from ..model.schema import FieldSpec, Schema

__all__ = [
    "LAYOUT_KINDS",
    "PROBES",
    "Task",
    "check_labels",
    "class_ids",
    "class_presence",
    "find_task",
    "labels_1d",
    "layout_kind",
    "require_sklearn",
    "task_kind",
]

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


def labels_1d(y: np.ndarray) -> np.ndarray:
    """Class per record: one-hot vectors by their largest entry, ids as they are."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] > 1:  # one-hot
        return y.argmax(axis=1)
    return y.reshape(len(y))


def class_ids(y: np.ndarray) -> np.ndarray:
    """Integer class ids from integer, boolean or integral float values (checked before)."""
    return np.rint(y).astype(np.int64) if y.dtype.kind == "f" else y.astype(np.int64)


def _box_rows(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(n, max_boxes, 5)`` -> the class column and which rows are boxes.

    Padding is an all-zero row (label-maker pads so) or an all -1 row (other tools);
    a negative class is no object either.
    """
    rows = np.asarray(y).reshape(len(y), -1, 5)
    cls = class_ids(rows[..., 4]) if rows.size else np.zeros(rows.shape[:2], np.int64)
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
            self.classes.update(np.unique(class_ids(values)).tolist())
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
