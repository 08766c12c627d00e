"""The accuracy probe: a classifier trained on round-tripped data, against the original.

The probe is what pyspacer trains on CoralNet's features: scikit-learn's
``SGDClassifier(loss="log_loss", average=True)`` (seeded, so deterministic; a
little more regularised, see :data:`PROBE_ALPHA`) on standardised features. It
trains on the dtype the data is stored in: float32 stays float32 (float16/bfloat16,
which scikit-learn cannot take, widen to float32, never to float64), and the
report says which.

The probe never holds the data: :class:`ProbeData` takes the probe's records a
batch at a time and keeps their features (:mod:`.features`) and labels only; the
records it sees are bounded by the harness (a seeded sample of the train and
test splits). A lossless round trip gives exactly the baseline accuracy.

Each score is per test tile, so the noise bands stay paired over tiles (the
independent units; pixels and classes of one tile are not). Each probe also
gives the score of a constant guess (the training split's commonest class,
class set or pixel class), the chance level the original's score is read against.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..model import Column
from .features import (
    SEG_PIXELS,
    SEG_PIXELS_MAX,
    SEG_PIXELS_MIN,
    pixel_features,
    pixel_positions,
    probe_matrix,
)
from .scores import ProbeResult
from .tasks import Task, class_ids, class_presence, labels_1d, require_sklearn

__all__ = ["PROBE_ALPHA", "TEST", "TRAIN", "ProbeData", "run_probe", "split_data"]

#: The probe's L2 penalty: ten times scikit-learn's default, so that it converges
#: to nearly the same model on nearly the same data (a lossless-looking cast must
#: not move the accuracy by training noise alone; measured on photo tiles).
PROBE_ALPHA = 1e-3
#: The roles a probe record plays (0: not a probe record).
TRAIN, TEST = 1, 2
#: Records the probe turns into features at once (the in-memory path).
_CHUNK = 256


class ProbeData:
    """The probe's inputs, gathered batch by batch: feature rows and labels per role.

    ``counts`` are the records each role will get (the segmentation probe seeds its
    pixel positions by them, so the original and every round trip are scored on the
    very same pixels).
    """

    def __init__(self, task: Task, counts: Mapping[int, int]) -> None:
        self.task = task
        self.counts = dict(counts)
        self.features: dict[int, list[np.ndarray]] = {TRAIN: [], TEST: []}
        self.labels: dict[int, list[np.ndarray]] = {TRAIN: [], TEST: []}
        self._seen = {TRAIN: 0, TEST: 0}
        self._positions: dict[int, np.ndarray] = {}
        self.per_tile = int(
            np.clip(SEG_PIXELS // max(self.counts.get(TRAIN, 1), 1), SEG_PIXELS_MIN, SEG_PIXELS_MAX)
        )

    def add(self, role: int, x: np.ndarray, y: np.ndarray) -> None:
        """The next records of ``role``: their feature field ``x`` and label field ``y``."""
        x, y = np.asarray(x), np.asarray(y)
        if not len(x):
            return
        if self.task.kind == "segmentation":
            h, w = x.shape[1:3]
            if role not in self._positions:
                seed = 0 if role == TRAIN else 1
                self._positions[role] = pixel_positions(
                    self.counts.get(role, len(x)), h, w, self.per_tile, seed
                )
            lo = self._seen[role]
            pos = self._positions[role][lo : lo + len(x)]
            masks = y.reshape(len(y), h, w)
            picked = masks[np.arange(len(y))[:, None], pos[..., 0], pos[..., 1]]
            self.features[role].append(pixel_features(x, pos))
            self.labels[role].append(class_ids(picked))
        elif self.task.kind == "detection":
            self.features[role].append(probe_matrix(x))
            self.labels[role].append(y.reshape(len(y), -1, 5))
        else:
            self.features[role].append(probe_matrix(x))
            self.labels[role].append(labels_1d(y))
        self._seen[role] += len(x)

    def _gathered(self, role: int) -> tuple[np.ndarray, np.ndarray]:
        feats, labels = self.features[role], self.labels[role]
        if not feats:
            return np.zeros((0, 0), np.float32), np.zeros(0, np.int64)
        return np.concatenate(feats), np.concatenate(labels)

    def result(self) -> ProbeResult:
        """Train on the train role, score on the test role (the fit alone is timed)."""
        require_sklearn()
        f_tr, y_tr = self._gathered(TRAIN)
        f_te, y_te = self._gathered(TEST)
        f_tr, f_te = _finite(f_tr), _finite(f_te)
        if self.task.kind == "detection":
            return _detection_probe(f_tr, y_tr, f_te, y_te)
        if self.task.kind == "segmentation":
            res = _fit_classes(f_tr, y_tr.ravel(), f_te, y_te.ravel())
            right = (res.pop("pred").reshape(y_te.shape) == y_te) if len(y_te) else np.zeros((0, 1))
            correct = right.mean(axis=1) if len(y_te) else np.zeros(0)
            detail = f"{self.per_tile} seeded pixels per tile, {res['classes']} classes"
            return _result(correct, res, str(f_tr.dtype), detail)
        res = _fit_classes(f_tr, y_tr, f_te, y_te)
        correct = (res.pop("pred") == y_te).astype(np.float64)
        return _result(correct, res, str(f_tr.dtype), "")


def _result(correct: np.ndarray, res: dict[str, Any], dtype: str, detail: str) -> ProbeResult:
    accuracy = float(correct.mean()) if len(correct) else float("nan")
    return ProbeResult(
        accuracy, res["seconds"], len(correct), correct, dtype, res["chance"], detail
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
    """Train and test arrays of in-memory data (a seeded 25% hold-out without a test split)."""
    x_train = _probe_array(data, task.train, task.features)
    y_train = _probe_array(data, task.train, task.labels)
    if task.test is not None:
        x_test = _probe_array(data, task.test, task.features)
        return x_train, y_train, x_test, _probe_array(data, task.test, task.labels)
    order = np.random.default_rng(seed).permutation(len(x_train))
    cut = int(len(order) * 0.75)
    tr, te = order[:cut], order[cut:]
    return x_train[tr], y_train[tr], x_train[te], y_train[te]


def run_probe(data: Mapping[str, Mapping[str, Column]], task: Task) -> ProbeResult:
    """Train the task's probe on in-memory data's train part and score it on its test part."""
    require_sklearn()
    x_tr, y_tr, x_te, y_te = split_data(data, task)
    probe = ProbeData(task, {TRAIN: len(x_tr), TEST: len(x_te)})
    for role, x, y in ((TRAIN, x_tr, y_tr), (TEST, x_te, y_te)):
        for i in range(0, len(x), _CHUNK):
            probe.add(role, x[i : i + _CHUNK], y[i : i + _CHUNK])
    return probe.result()


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


def _fit_classes(
    f_tr: np.ndarray, c_tr: np.ndarray, f_te: np.ndarray, c_te: np.ndarray
) -> dict[str, Any]:
    """Fit on ``(f_tr, c_tr)``, predict ``f_te``: predictions, fit seconds, the constant
    guess's score and the number of classes."""
    t = time.perf_counter()
    model = _model().fit(f_tr, c_tr)
    seconds = time.perf_counter() - t
    pred = model.predict(f_te) if len(f_te) else np.zeros(0, c_tr.dtype)
    values, counts = np.unique(c_tr, return_counts=True)
    chance = float(np.mean(c_te == values[counts.argmax()])) if len(c_te) else float("nan")
    return {"pred": pred, "seconds": seconds, "chance": chance, "classes": len(values)}


def _jaccard(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Per record: |pred & true| / |pred | true| of two ``(n, classes)`` bool matrices;
    1 when both are empty (rightly saying "nothing here")."""
    union = (pred | true).sum(axis=1)
    inter = (pred & true).sum(axis=1)
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def _detection_probe(
    f_tr: np.ndarray, y_tr: np.ndarray, f_te: np.ndarray, y_te: np.ndarray
) -> ProbeResult:
    """Which classes have a box in each tile: one classifier per class on image features."""
    classes = np.union1d(class_presence(y_tr)[0], class_presence(y_te)[0])
    _, p_tr = class_presence(y_tr, classes)
    _, p_te = class_presence(y_te, classes)
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
    # the constant guess: each class present when it is in most training tiles
    guess = np.broadcast_to(p_tr.mean(axis=0) > 0.5, p_te.shape) if len(p_tr) else p_te
    chance = float(_jaccard(guess, p_te).mean()) if len(p_te) else float("nan")
    detail = f"{len(classes)} classes ({', '.join(map(str, classes.tolist()))})"
    res = {"seconds": seconds, "chance": chance}
    return _result(correct, res, str(f_tr.dtype), detail)
