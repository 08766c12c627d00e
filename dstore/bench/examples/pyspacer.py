"""``dstore bench --evaluate dstore.bench.examples.pyspacer:evaluate``: pyspacer's classifier.

CoralNet's pyspacer trains scikit-learn's ``SGDClassifier(loss="log_loss",
average=True)`` on per-point CNN features, a few epochs of ``partial_fit`` over
mini-batches. This function does the same on the data dstore hands it (each
split's fields after the round trip), in the dtype the data is stored in
(float16 widens to float32: scikit-learn takes no float16; nothing widens to
float64), and returns per-example correctness, so the bench reports a paired
noise band for every difference. pyspacer's final probability calibration is
left out: it rescales the scores and is not what a storage choice changes.

Copy it to adapt the field names, the epochs or the classifier: the bench only
needs ``evaluate(data) -> score | (score, n) | per-example correctness``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["evaluate"]

FEATURES = ("features", "feature", "x", "data", "embedding", "embeddings")
LABELS = ("labels", "label", "y", "target", "class")
EPOCHS = 10
BATCH = 1024


def _field(fields: Mapping[str, np.ndarray], names: tuple[str, ...], what: str) -> np.ndarray:
    for name in names:
        if name in fields:
            return np.asarray(fields[name])
    raise KeyError(
        f"pyspacer evaluate: no {what} field (one of {', '.join(names)}) in {list(fields)}"
    )


def _xy(fields: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    x = _field(fields, FEATURES, "features")
    x = x.reshape(len(x), -1)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float32)  # float16, bfloat16, integers: scikit-learn takes float32
    y = _field(fields, LABELS, "labels")
    y = y.argmax(axis=1) if y.ndim == 2 and y.shape[1] > 1 else y.reshape(len(y))
    return x, y


def evaluate(data: Mapping[str, Mapping[str, np.ndarray]]) -> np.ndarray:
    """Train on ``train`` (or the first split), test on ``test``/``val`` (or a seeded 25%)."""
    from sklearn.linear_model import SGDClassifier

    splits = list(data)
    train = "train" if "train" in data else splits[0]
    test = next((s for s in ("test", "val", "validation") if s in data and s != train), None)
    x_tr, y_tr = _xy(data[train])
    if test is None:
        order = np.random.default_rng(0).permutation(len(x_tr))
        cut = int(len(order) * 0.75)
        x_te, y_te = x_tr[order[cut:]], y_tr[order[cut:]]
        x_tr, y_tr = x_tr[order[:cut]], y_tr[order[:cut]]
    else:
        x_te, y_te = _xy(data[test])
    classes = np.unique(y_tr)
    clf = SGDClassifier(loss="log_loss", average=True, random_state=0)
    rng = np.random.default_rng(0)
    for _ in range(EPOCHS):  # pyspacer: epochs of mini-batches, shuffled
        order = rng.permutation(len(x_tr))
        for start in range(0, len(order), BATCH):
            idx = order[start : start + BATCH]
            clf.partial_fit(x_tr[idx], y_tr[idx], classes=classes)
    return clf.predict(x_te) == y_te
