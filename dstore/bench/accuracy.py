"""Accuracy impact: a probe classifier trained on round-tripped data, against the original.

The probe is scikit-learn's logistic regression (C=0.1) on standardised features
(images average-pooled to at most 8x8 per channel first). It is
deterministic, so a lossless round trip must give exactly the baseline
accuracy; a difference smaller than twice the binomial standard error of the
test accuracy is reported as within noise.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import MissingDependencyError, SchemaError, UsageError
from ..schema import Schema

__all__ = [
    "ProbeResult",
    "Task",
    "find_task",
    "load_evaluate",
    "pool_features",
    "require_sklearn",
    "run_probe",
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
LABEL_NAMES = ("labels", "label", "y", "target", "targets", "class", "classes")

Evaluate = Callable[[Mapping[str, Mapping[str, np.ndarray]]], float]


@dataclass(frozen=True)
class Task:
    """Which split trains, which tests, which fields are features and labels."""

    train: str
    test: str | None  # None: a seeded hold-out of ``train``
    features: str
    labels: str


@dataclass
class ProbeResult:
    accuracy: float
    seconds: float
    n_test: int

    @property
    def stderr_points(self) -> float:
        p = self.accuracy
        return 100 * math.sqrt(max(p * (1 - p), 1e-12) / max(self.n_test, 1))


def find_task(schema: Schema, features: str | None = None, labels: str | None = None) -> Task:
    """Guess the feature and label fields by name and dtype, and the train/test splits.

    A field named by the caller that does not exist is an error listing the fields
    that do; nothing named and nothing recognisable is a SchemaError too (the harness
    then measures no accuracy and says so).
    """
    splits = list(schema.splits)
    train = next((s for s in splits if s in ("train", "training")), splits[0])
    test = next(
        (
            s
            for s in splits
            if s in ("test", "testing", "val", "valid", "validation", "eval") and s != train
        ),
        None,
    )
    fields = schema.splits[train].fields
    for role, name in (("labels", labels), ("features", features)):
        if name is not None and name not in fields:
            raise SchemaError(
                f"{role} field {name!r} is not in split {train!r}; its fields: {', '.join(fields)}"
            )
    if labels is None:
        labels = next((n for n in LABEL_NAMES if n in fields), None)
    if features is None:
        features = next((n for n in FEATURE_NAMES if n in fields and n != labels), None)
        if features is None:
            candidates = [f for f in fields.values() if f.name != labels and f.dtype.kind in "fiu"]
            features = max(candidates, key=lambda f: f.record_bytes).name if candidates else None
    if labels is None or features is None:
        raise SchemaError(
            f"cannot tell features and labels apart in fields {list(fields)}; "
            "name them with --features and --labels"
        )
    return Task(train, test, features, labels)


def require_sklearn() -> None:
    """The probe's dependency, checked before any work rather than after it."""
    try:
        import sklearn.linear_model  # noqa: F401
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


def pool_features(x: np.ndarray, max_side: int = 8) -> np.ndarray:
    """Flatten per-record features; images are average-pooled to at most ``max_side``."""
    x = np.asarray(x)
    if x.ndim >= 3 and min(x.shape[1:3]) > max_side:
        n, h, w = x.shape[:3]
        fh, fw = -(-h // max_side), -(-w // max_side)
        hh, ww = (h // fh) * fh, (w // fw) * fw
        x = x[:, :hh, :ww].astype(np.float32)
        x = x.reshape(n, hh // fh, fh, ww // fw, fw, *x.shape[3:]).mean(axis=(2, 4))
    return x.reshape(len(x), -1).astype(np.float64)


def labels_1d(y: np.ndarray) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] > 1:  # one-hot
        return y.argmax(axis=1)
    return y.reshape(len(y))


def split_data(
    data: Mapping[str, Mapping[str, np.ndarray]], task: Task, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x_train, y_train = data[task.train][task.features], data[task.train][task.labels]
    if task.test is not None:
        return x_train, y_train, data[task.test][task.features], data[task.test][task.labels]
    order = np.random.default_rng(seed).permutation(len(x_train))
    cut = int(len(order) * 0.75)
    tr, te = order[:cut], order[cut:]
    return x_train[tr], y_train[tr], x_train[te], y_train[te]


def run_probe(data: Mapping[str, Mapping[str, np.ndarray]], task: Task) -> ProbeResult:
    """Train the probe on the task's train part and score it on its test part."""
    require_sklearn()
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x_tr, y_tr, x_te, y_te = split_data(data, task)
    x_tr, x_te = pool_features(x_tr), pool_features(x_te)
    # Infinities (a float16 overflow that was clipped or kept) would break the scaler.
    x_tr, x_te = (np.nan_to_num(a, nan=0.0, posinf=1e30, neginf=-1e30) for a in (x_tr, x_te))
    y_tr, y_te = labels_1d(y_tr), labels_1d(y_te)
    t = time.perf_counter()
    model = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=1000))
    model.fit(x_tr, y_tr)
    seconds = time.perf_counter() - t
    accuracy = float((model.predict(x_te) == y_te).mean()) if len(y_te) else float("nan")
    return ProbeResult(accuracy, seconds, len(y_te))
