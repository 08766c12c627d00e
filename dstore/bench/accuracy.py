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
from ..model import Column, Tensor
from ..schema import Schema

__all__ = [
    "ProbeResult",
    "Score",
    "Task",
    "band_points",
    "find_task",
    "image_features",
    "load_evaluate",
    "probe_matrix",
    "require_sklearn",
    "run_probe",
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
LABEL_NAMES = ("labels", "label", "y", "target", "targets", "class", "classes")

#: ``evaluate(data)`` returns a score, ``(score, n)`` or per-example correctness.
#: Fixed-size fields are arrays; strings and ragged fields are VarColumns.
Evaluate = Callable[[Mapping[str, Mapping[str, Column]]], object]


@dataclass(frozen=True)
class Task:
    """Which split trains, which tests, which fields are features and labels."""

    train: str
    test: str | None  # None: a seeded hold-out of ``train``
    features: str
    labels: str


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
    correct: np.ndarray  # per test example: 1 right, 0 wrong (paired noise bands)
    dtype: str  # the dtype the probe trained on

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
            candidates = [
                f
                for f in fields.values()
                if f.name != labels and f.dtype.kind in "fiu" and isinstance(f.kind, Tensor)
            ]
            features = max(candidates, key=lambda f: f.record_bytes).name if candidates else None
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
    return Task(train, test, features, labels)


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
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] > 1:  # one-hot
        return y.argmax(axis=1)
    return y.reshape(len(y))


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


def run_probe(data: Mapping[str, Mapping[str, Column]], task: Task) -> ProbeResult:
    """Train the probe on the task's train part and score it on its test part.

    The timed part is the fit alone (scaling included), on the stored dtype.
    """
    require_sklearn()
    from sklearn.linear_model import SGDClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x_tr, y_tr, x_te, y_te = split_data(data, task)
    x_tr, x_te = probe_matrix(x_tr), probe_matrix(x_te)
    # Infinities (a float16 overflow that was kept) would break the scaler; the stand-in
    # stays finite when squared in the stored dtype.
    big = 1e15 if x_tr.dtype == np.float32 else 1e30
    x_tr, x_te = (np.nan_to_num(a, nan=0.0, posinf=big, neginf=-big) for a in (x_tr, x_te))
    y_tr, y_te = labels_1d(y_tr), labels_1d(y_te)
    t = time.perf_counter()
    model = make_pipeline(
        StandardScaler(),
        SGDClassifier(loss="log_loss", average=True, alpha=PROBE_ALPHA, random_state=0),
    )
    model.fit(x_tr, y_tr)
    seconds = time.perf_counter() - t
    correct = (model.predict(x_te) == y_te).astype(np.float64)
    accuracy = float(correct.mean()) if len(y_te) else float("nan")
    return ProbeResult(accuracy, seconds, len(y_te), correct, str(x_tr.dtype))
